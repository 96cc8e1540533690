"""The gateway's bot.yaml sections: `gateway:` (the server) and `platforms: web:` (the web
platform, the chats people hold through it)."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, ClassVar, Literal, Optional

from botweave.config import BotConfig, PlatformConfig, Section, parse_listen
from botweave.ingress import TrustedProxies
from botweave.methods import SCOPES, Scope
from pydantic import Field, SecretStr, field_validator

#: Token and principal names: what `botweave gateway token list` shows and logs name.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: A token shorter than this is refused (a password someone can guess is not a token).
MIN_TOKEN_CHARS = 16


def scopes_of(values: list[str]) -> list[Scope]:
    """The scopes as given, checked; `read` is held by every token whatever was written."""
    unknown = [v for v in values if v not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(map(repr, unknown))}; scopes: {', '.join(SCOPES)}")
    return sorted({"read", *values})  # type: ignore[arg-type]


def check_user(value: Optional[str]) -> Optional[str]:
    """`platform:user_id`, the platform identity a token speaks for."""
    if value is None:
        return None
    platform, sep, user = str(value).partition(":")
    if not sep or not platform or not user or not platform.isidentifier():
        raise ValueError(f"{value!r} is not PLATFORM:USER_ID (e.g. telegram:123456)")
    return f"{platform}:{user}"


class TokenConfig(Section):
    """One gateway token from bot.yaml: who it stands for (`name`), the secret itself (write
    `${VAR}`, never the token), what it may do (`scopes`), and optionally the platform
    identity it speaks for (`user: telegram:123`: approvals and pairing as that person)."""

    name: str
    """Who the token stands for, as logs and `botweave gateway token list` show it."""
    token: SecretStr = Field(repr=False)
    """The secret itself, at least 16 characters; write `${VAR}`, never the token."""
    scopes: list[str] = Field(default_factory=lambda: ["read"])
    """What its holder may do: `read` (always), `write`, `approvals`, `pairing`, `admin`."""
    user: Optional[str] = None
    """The platform identity the token speaks for (`telegram:123`): its holder answers that
    person's approvals and, as a platform's owner, its pairing requests."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError("letters, digits, '.', '_' and '-' (at most 64), starting with a letter or digit")
        return value

    @field_validator("token")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value().strip()) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"a gateway token needs at least {MIN_TOKEN_CHARS} characters "
                "(make one with `botweave gateway token add NAME`, or `python -c \"import secrets; print(secrets.token_urlsafe(32))\"`)"
            )
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        return list(scopes_of(value))

    @field_validator("user", mode="before")
    @classmethod
    def _user(cls, value: object) -> Optional[str]:
        return check_user(None if value is None else str(value))


def is_loopback(host: str) -> bool:
    """Whether a listen host is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class GatewayConfig(Section):
    """`gateway:` the WebSocket control plane (see docs/gateway.md). Off unless `listen` is
    set here or with `--gateway-listen`."""

    listen: Optional[str] = None
    """`HOST:PORT` of the WebSocket protocol (`/ws`), uploads, files and the browser UI; unset:
    off (or `--gateway-listen`)."""
    tokens: list[TokenConfig] = Field(default_factory=list)
    """Tokens clients sign in with; off loopback at least one (here or made with `botweave
    gateway token add`) is required."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Origins (`https://ops.example.com`) whose pages may use the gateway besides its own."""
    max_buffered: Annotated[int, Field(ge=10, le=1_000_000)] = 1000
    """Events held for one client that does not read them before it is closed as too slow."""
    event_log_size: Annotated[int, Field(ge=10, le=1_000_000)] = 2000
    """Events kept per conversation, for clients that come back (`resume`)."""
    history_messages: Annotated[int, Field(ge=10, le=100_000)] = 500
    """Messages kept per conversation, for `chat.history` and `resync`."""
    heartbeat_seconds: Annotated[float, Field(ge=1, le=3600)] = 30.0
    """How often the server pings each client, to notice a dead connection."""
    max_share_seconds: Annotated[float, Field(gt=0)] = 7 * 24 * 3600.0
    """The longest a share may be valid for."""
    trusted_proxies: TrustedProxies = ()
    """Reverse proxies whose X-Forwarded-For / Forwarded name the client (failed-auth budget)."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            parse_listen(value)
        return value

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if not re.match(r"^https?://[^/\s]+$", origin):
                raise ValueError(f"{origin!r} is not an origin: scheme and host, e.g. https://ops.example.com (no path)")
        return [origin.lower() for origin in value]

    @field_validator("tokens")
    @classmethod
    def _distinct(cls, value: list[TokenConfig]) -> list[TokenConfig]:
        names = [t.name for t in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"token name(s) {', '.join(twice)} appear more than once; one name, one token")
        return value

    @property
    def loopback(self) -> bool:
        return self.listen is not None and is_loopback(parse_listen(self.listen)[0])


class WebConfig(PlatformConfig):
    """`platforms: web:` the chats people hold through the gateway. Everyone who reaches the
    web platform came in with a token, so strangers are admitted by default; replies stream
    (people watch them grow in the browser)."""

    default_unknown_user_policy: ClassVar[Literal["deny", "pair", "allow"]] = "allow"
    bot_name: str = "botweave"
    """The name the bot's messages are shown under."""

    def bot_config(self, defaults: BotConfig) -> BotConfig:
        merged = super().bot_config(defaults)
        if self.streaming is None:
            merged = merged.model_copy(update={"streaming": True})
        return merged
