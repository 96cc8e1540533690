"""WhatsApp's bot.yaml section (the Cloud API)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Optional

from botweave.config import PlatformConfig, Section
from botweave.ingress import TrustedProxies
from pydantic import Field, SecretStr, field_validator

DEFAULT_API_BASE = "https://graph.facebook.com/v21.0"


class TemplateConfig(Section):
    """The message template a send outside the 24-hour customer-service window goes out as
    (WhatsApp refuses free text there). Create and get it approved in WhatsApp Manager."""

    name: str
    """The template's name, as WhatsApp Manager shows it."""
    language: str = "en_US"
    """The template's language code."""
    text_parameter: bool = True
    """Fill the template body's one variable (`{{1}}`) with the message's text (on one line,
    cut to the 1024 characters a parameter may hold); false: the template is sent as it is."""


class WhatsAppConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("access_token", "app_secret", "verify_token")
    phone_number_id: str = ""
    """The business phone number's id (WhatsApp Manager > API Setup), which messages are sent from."""
    access_token: Optional[SecretStr] = None
    """A system user's access token with `whatsapp_business_messaging` (write `${WHATSAPP_TOKEN}`)."""
    app_secret: Optional[SecretStr] = None
    """The Meta app's secret (App settings > Basic): every webhook POST is verified with it."""
    verify_token: Optional[SecretStr] = None
    """The token you type into the app's webhook settings; Meta's verification request must carry it."""
    api_base_url: Optional[str] = DEFAULT_API_BASE
    """The Graph API, with its version."""
    listen: str = "0.0.0.0:8443"
    """`host:port` the webhook server listens on (behind your HTTPS reverse proxy)."""
    path: str = "/whatsapp"
    """The path of the webhook: the callback URL in the app's settings ends with it."""
    template: Optional[TemplateConfig] = None
    """The template for proactive sends (schedules, rooms, notifications) to someone who has
    not written in the last 24 hours; unset, such a send fails with an error that says so."""
    read_receipts: bool = True
    """Mark each message read (blue ticks) once the bot has taken it."""
    trusted_proxies: TrustedProxies = ()
    """Reverse proxies in front of the webhook server (addresses or CIDR ranges): from these,
    X-Forwarded-For / Forwarded name the client that is logged and rate-limited."""
    window_hours: Annotated[float, Field(gt=0, le=24)] = 24.0
    """The customer-service window WhatsApp allows free-form messages in after a person's
    last message; lower it to leave a margin for clocks."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{value!r} is not host:port (e.g. 0.0.0.0:8443)")
        return value

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return "/" + value.strip().lstrip("/")

    def missing_credentials(self) -> list[str]:
        missing = super().missing_credentials()
        if not self.phone_number_id.strip():
            missing.insert(0, "phone_number_id")
        return missing

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])
