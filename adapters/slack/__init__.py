"""Slack: see adapter.py for the data flow; the SDK loads only when the platform starts."""

from botweave.adapter import Adapter, PlatformSpec

from .config import SlackConfig


def _create(config: SlackConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the SDK's import.
    from .adapter import SlackAdapter

    return SlackAdapter(config)


platform = PlatformSpec("slack", SlackConfig, _create)
