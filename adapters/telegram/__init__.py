"""Telegram adapter (python-telegram-bot): `adapters.telegram:TelegramAdapter`."""

from adapters.telegram.adapter import TelegramAdapter

__all__ = ["TelegramAdapter"]
