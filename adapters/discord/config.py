"""Discord's bot.yaml section."""

from __future__ import annotations

from typing import ClassVar, Optional

from botweave.config import PlatformConfig
from pydantic import SecretStr


class DiscordConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("token",)
    token: Optional[SecretStr] = None
    gateway_url: Optional[str] = None
    #: Join/leave events need Discord's privileged Members intent, so they are opt-in.
    member_events: bool = False
