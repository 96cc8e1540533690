"""Discord: see adapter.py for the data flow; the SDK loads only when the platform starts."""

from botweave.adapter import Adapter, PlatformSpec
from botweave.adapters.discord.config import DiscordConfig


def _create(config: DiscordConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the SDK's import.
    from botweave.adapters.discord.adapter import DiscordAdapter

    return DiscordAdapter(config)


platform = PlatformSpec("discord", DiscordConfig, _create)
