"""Microsoft Teams' bot.yaml section."""

from __future__ import annotations

from typing import ClassVar, Optional

from botweave.config import PlatformConfig, parse_listen
from botweave.ingress import TrustedProxies
from pydantic import SecretStr, field_validator

#: Where the Bot Connector publishes the keys it signs inbound requests with.
BOT_FRAMEWORK_OPENID_METADATA = "https://login.botframework.com/v1/.well-known/openidconfiguration"
#: The token endpoint of multi-tenant bots; a single-tenant bot's is its tenant's.
BOT_FRAMEWORK_TOKEN_URL = "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"
TENANT_TOKEN_URL = "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token"


class TeamsConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("app_password",)
    app_id: str = ""
    """The bot's Microsoft App ID (the Azure Bot resource's "Microsoft App ID"); inbound
    requests must be addressed to it."""
    app_password: Optional[SecretStr] = None
    """The client secret of that app registration (write `${TEAMS_APP_PASSWORD}`)."""
    tenant_id: Optional[str] = None
    """The Entra tenant of a single-tenant bot; its token endpoint is then the tenant's.
    Unset: a multi-tenant bot (the `botframework.com` tenant)."""
    listen: str = "0.0.0.0:3978"
    """The address the messaging endpoint listens on (HOST:PORT)."""
    path: str = "/api/messages"
    """The path of the messaging endpoint (the bot's "Messaging endpoint" ends with it)."""
    openid_metadata_url: str = BOT_FRAMEWORK_OPENID_METADATA
    """The OpenID metadata whose keys sign the Bot Connector's requests to the bot."""
    token_url: Optional[str] = None
    """Where the bot gets its tokens for the Bot Connector (client credentials). Unset: the
    tenant's endpoint for a single-tenant bot, else the Bot Framework's."""
    trusted_proxies: TrustedProxies = ()
    """Reverse proxies in front of the messaging endpoint (addresses or CIDR ranges): from
    these, X-Forwarded-For / Forwarded name the client that is logged and rate-limited."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"{value!r} is not a path: it starts with / (e.g. /api/messages)")
        return value

    def missing_credentials(self) -> list[str]:
        """The app id is a plain string (it is not a secret), but the bot cannot run without it."""
        missing = super().missing_credentials()
        if not self.app_id.strip():
            missing.insert(0, "app_id")
        return missing

    @property
    def effective_token_url(self) -> str:
        if self.token_url:
            return self.token_url
        if self.tenant_id:
            return TENANT_TOKEN_URL.format(tenant=self.tenant_id)
        return BOT_FRAMEWORK_TOKEN_URL
