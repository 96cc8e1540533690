"""Slack's bot.yaml section."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional

from botweave.config import PlatformConfig
from botweave.ingress import TrustedProxies
from pydantic import Field, SecretStr


class SlackConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("bot_token",)
    bot_token: Optional[SecretStr] = None
    app_token: Optional[SecretStr] = None
    signing_secret: Optional[SecretStr] = None
    mode: Literal["socket", "http"] = "socket"
    http_host: str = "0.0.0.0"
    http_port: Annotated[int, Field(ge=1, le=65535)] = 3000
    http_path: str = "/slack/events"
    #: Reverse proxies in front of the HTTP endpoint (addresses or CIDR ranges): from these,
    #: X-Forwarded-For / Forwarded name the client that is logged and rate-limited.
    trusted_proxies: TrustedProxies = ()
    reply_in_thread: bool = False

    def missing_credentials(self) -> list[str]:
        """Socket Mode needs the app-level token; the HTTP Events API needs the signing secret."""
        missing = super().missing_credentials()
        needed = "app_token" if self.mode == "socket" else "signing_secret"
        value = getattr(self, needed)
        if value is None or not value.get_secret_value().strip():
            missing.append(needed)
        return missing
