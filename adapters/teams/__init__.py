"""Microsoft Teams: see adapter.py for the data flow; the SDK loads only when the platform starts."""

from botweave.adapter import Adapter, PlatformSpec

from .config import TeamsConfig


def _create(config: TeamsConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the SDK's import.
    from .adapter import TeamsAdapter

    return TeamsAdapter(config)


platform = PlatformSpec("teams", TeamsConfig, _create)
