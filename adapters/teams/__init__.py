"""Microsoft Teams: see adapter.py for the data flow; the SDK loads only when the platform starts."""

from botweave.adapter import Adapter, PlatformRejected, PlatformSpec

from .config import TeamsConfig


def _create(config: TeamsConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the SDK's import.
    try:
        from .adapter import TeamsAdapter
    except ImportError as exc:  # the optional extra is not installed
        raise PlatformRejected(
            f"teams: {exc.name or 'a library it needs'} is not installed; pip install 'botweave[teams]'"
        ) from None

    return TeamsAdapter(config)


platform = PlatformSpec("teams", TeamsConfig, _create)
