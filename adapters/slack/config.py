"""Slack's bot.yaml section."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional

from botweave.config import PlatformConfig
from botweave.ingress import TrustedProxies
from pydantic import Field, SecretStr


class SlackConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("bot_token",)
    bot_token: Optional[SecretStr] = None
    """The bot token (`xoxb-…`) from the app's OAuth & Permissions page."""
    app_token: Optional[SecretStr] = None
    """The app-level token (`xapp-…`, scope `connections:write`) Socket Mode connects with."""
    signing_secret: Optional[SecretStr] = None
    """The app's signing secret, which every request of the HTTP Events API is verified with
    (`mode: http`)."""
    mode: Literal["socket", "http"] = "socket"
    """`socket`: the bot connects to Slack (no public address needed); `http`: Slack posts
    events to `http_path`."""
    http_host: str = "0.0.0.0"
    """The address the Events API server listens on (`mode: http`)."""
    http_port: Annotated[int, Field(ge=1, le=65535)] = 3000
    """The port the Events API server listens on (`mode: http`)."""
    http_path: str = "/slack/events"
    """The path Slack's event, interaction and command requests are posted to (`mode: http`)."""
    trusted_proxies: TrustedProxies = ()
    """Reverse proxies in front of the HTTP endpoint (addresses or CIDR ranges): from these,
    X-Forwarded-For / Forwarded name the client that is logged and rate-limited."""
    reply_in_thread: bool = False
    """Answer a channel message in a thread under it instead of in the channel."""

    def missing_credentials(self) -> list[str]:
        """Socket Mode needs the app-level token; the HTTP Events API needs the signing secret."""
        missing = super().missing_credentials()
        needed = "app_token" if self.mode == "socket" else "signing_secret"
        value = getattr(self, needed)
        if value is None or not value.get_secret_value().strip():
            missing.append(needed)
        return missing
