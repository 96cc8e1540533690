"""Telegram's bot.yaml section."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional

from botweave.config import PlatformConfig
from botweave.ingress import TrustedProxies
from pydantic import Field, SecretStr


class TelegramConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("token",)
    token: Optional[SecretStr] = None
    """The bot's token from @BotFather (write `${TELEGRAM_BOT_TOKEN}`, never the token itself)."""
    file_base_url: Optional[str] = None
    """Where files are downloaded from, for a self-hosted Bot API server; unset: derived from
    `api_base_url`, else Telegram's."""
    mode: Literal["polling", "webhook"] = "polling"
    """`polling`: the bot asks Telegram for updates (no public address needed); `webhook`:
    Telegram posts updates to `webhook_url`."""
    webhook_url: Optional[str] = None
    """The public HTTPS address Telegram posts updates to (`mode: webhook`)."""
    webhook_listen: str = "127.0.0.1"
    """The address the webhook server listens on."""
    webhook_port: Annotated[int, Field(ge=1, le=65535)] = 8443
    """The port the webhook server listens on."""
    webhook_path: str = "/telegram"
    """The path the webhook server answers on."""
    webhook_secret: Optional[SecretStr] = None
    """The secret Telegram sends with every webhook request; requests without it are refused."""
    trusted_proxies: TrustedProxies = ()
    """Reverse proxies in front of the webhook server (addresses or CIDR ranges): from these,
    X-Forwarded-For / Forwarded name the client that is logged and rate-limited."""
    poll_timeout: Annotated[int, Field(ge=0)] = 30
    """Seconds each long poll waits for updates (`mode: polling`)."""
    conflict_retries: Annotated[int, Field(ge=0)] = 2
    """409 Conflicts (another poller or a webhook on the same token) tolerated before polling stops."""
    requests_per_second: Annotated[float, Field(gt=0)] = 30.0
    """Outbound pacing to stay inside Telegram's limits; a self-hosted Bot API server (or a test
    emulator) may allow more."""
