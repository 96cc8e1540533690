"""Discord: see adapter.py for the data flow; the SDK loads only when the platform starts."""

from botweave.adapter import Adapter, PlatformSpec

from .config import DiscordConfig


def _create(config: DiscordConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the SDK's import.
    from .adapter import DiscordAdapter

    return DiscordAdapter(config)


platform = PlatformSpec("discord", DiscordConfig, _create)
