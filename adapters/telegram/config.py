"""Telegram's bot.yaml section."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional

from botweave.config import PlatformConfig
from botweave.ingress import TrustedProxies
from pydantic import Field, SecretStr


class TelegramConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("token",)
    token: Optional[SecretStr] = None
    file_base_url: Optional[str] = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: Optional[str] = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: Annotated[int, Field(ge=1, le=65535)] = 8443
    webhook_path: str = "/telegram"
    webhook_secret: Optional[SecretStr] = None
    #: Reverse proxies in front of the webhook server (addresses or CIDR ranges): from these,
    #: X-Forwarded-For / Forwarded name the client that is logged and rate-limited.
    trusted_proxies: TrustedProxies = ()
    poll_timeout: Annotated[int, Field(ge=0)] = 30
    #: 409 Conflicts (another poller or a webhook on the same token) tolerated before polling stops.
    conflict_retries: Annotated[int, Field(ge=0)] = 2
    #: Outbound pacing to stay inside Telegram's limits; a self-hosted Bot API server (or a
    #: test emulator) may allow more.
    requests_per_second: Annotated[float, Field(gt=0)] = 30.0
