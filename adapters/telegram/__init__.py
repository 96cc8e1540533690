"""Telegram: see adapter.py for the data flow; the SDK loads only when the platform starts."""

from botweave.adapter import Adapter, PlatformSpec

from .config import TelegramConfig


def _create(config: TelegramConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the SDK's import.
    from .adapter import TelegramAdapter

    return TelegramAdapter(config)


platform = PlatformSpec("telegram", TelegramConfig, _create)
