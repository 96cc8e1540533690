"""Discord's bot.yaml section."""

from __future__ import annotations

from typing import ClassVar, Optional

from botweave.config import PlatformConfig
from pydantic import SecretStr


class DiscordConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("token",)
    token: Optional[SecretStr] = None
    """The bot's token from the Developer Portal (Bot, Reset Token)."""
    gateway_url: Optional[str] = None
    """Where the gateway WebSocket is reached, for a proxy; unset: the one the API names."""
    member_events: bool = False
    """Join/leave events need Discord's privileged Members intent, so they are opt-in."""
