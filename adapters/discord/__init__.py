"""Discord adapter on discord.py: `adapters.discord:DiscordAdapter`.

- `adapter.py`: `DiscordAdapter` itself: capabilities, configuration, login and the gateway's lifecycle.
- `inbound.py`: gateway messages and raw events turned into `BotMessage`s and `PlatformEvent`s.
- `outbound.py`: send, edit, delete, react, typing, and discord.py errors mapped onto results.
- `webhooks.py`: rooms posting under each agent's name through a channel webhook; whose webhooks are ours.
- `client.py`: the `discord.Client` whose gateway events feed the adapter; intents; malformed dispatches skipped.
- `http.py`: this client's REST and gateway URLs pointed at another server, nothing process-wide.
- `cache.py`: the small bounded mapping the adapter's caches use.
"""

from adapters.discord.adapter import DiscordAdapter, DiscordLoginError

__all__ = ["DiscordAdapter", "DiscordLoginError"]
