"""bot.yaml: environment substitution, validation and precise error messages (SPEC §4).

Validation is pydantic's; what we add is (1) `${VAR}` / `${VAR:-default}` substitution that
remembers which variables fed which field, so a missing token can be named, and (2) error
messages that say the field path and what is allowed, because a user fixing a YAML file needs
the place and the fix, not a traceback.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

log = logging.getLogger(__name__)

PLATFORMS = ("console", "telegram", "discord", "slack")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(ValueError):
    """A bot.yaml that cannot run; each line names a field and what it accepts."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoopProtection(_Strict):
    """Kept loose on purpose: SPEC §5 wants typos to fall back to defaults, not crash."""

    model_config = ConfigDict(extra="allow")


class UserRateLimit(_Strict):
    messages: Annotated[int, Field(ge=1)]
    per_seconds: Annotated[float, Field(gt=0)]


class BotConfig(_Strict):
    """Behaviour shared by all platforms; each platform may override any field."""

    unknown_user_policy: Optional[Literal["deny", "pair", "allow"]] = None  # None: per platform
    allowed_users: list[str] = Field(default_factory=list)
    allowed_chats: list[str] = Field(default_factory=list)
    owner_user_id: Optional[str] = Field(default=None, repr=False)
    group_policy: Literal["respond_all", "mention_only", "command_only", "observe"] = "mention_only"
    streaming: bool = False
    stream_edit_interval_ms: Annotated[int, Field(ge=0)] = 700
    footer: bool = False
    allow_silence: bool = False
    silence_token: Optional[str] = None
    allow_bots: bool = False
    bot_loop_protection: Optional[dict[str, Any]] = None
    user_rate_limit: Optional[UserRateLimit] = None

    @field_validator("allowed_users", "allowed_chats", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [str(v) for v in value]
        return value

    @field_validator("owner_user_id", mode="before")
    @classmethod
    def _owner_as_string(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value

    @property
    def effective_silence_token(self) -> str:
        return self.silence_token or "NO_REPLY"


# Platform sections accept every BotConfig field as an optional override.
_BotOverrides: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "_BotOverrides",
    __config__=ConfigDict(extra="forbid"),
    __validators__={
        "_ids": field_validator("allowed_users", "allowed_chats", mode="before")(
            BotConfig._ids_as_strings.__func__  # type: ignore[attr-defined]
        ),
        "_owner": field_validator("owner_user_id", mode="before")(
            BotConfig._owner_as_string.__func__  # type: ignore[attr-defined]
        ),
    },
    **{
        name: (Optional[info.annotation], Field(default=None, repr=info.repr))  # type: ignore[valid-type]
        for name, info in BotConfig.model_fields.items()
    },
)


class PlatformConfig(_BotOverrides):  # type: ignore[misc,valid-type]
    enabled: bool = True
    api_base_url: Optional[str] = None
    home_chat: Optional[str] = None

    #: Credential fields that must be non-empty for the platform to start.
    required_credentials: ClassVar[tuple[str, ...]] = ()

    def missing_credentials(self) -> list[str]:
        missing = []
        for name in self.required_credentials:
            value = getattr(self, name)
            if value is None or not value.get_secret_value().strip():
                missing.append(name)
        return missing

    def bot_config(self, defaults: BotConfig, platform: str) -> BotConfig:
        """The effective BotConfig: the `bot:` block with this platform's overrides on top."""
        overrides = {
            k: v for k, v in self.model_dump(include=set(BotConfig.model_fields)).items() if v is not None
        }
        merged = defaults.model_copy(update=overrides)
        if merged.unknown_user_policy is None:
            merged = merged.model_copy(
                update={"unknown_user_policy": "allow" if platform == "console" else "pair"}
            )
        return merged


class ConsoleConfig(PlatformConfig):
    user_name: str = "you"


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
    poll_timeout: Annotated[int, Field(ge=0)] = 30
    #: 409 Conflicts (another poller or a webhook on the same token) tolerated before polling stops.
    conflict_retries: Annotated[int, Field(ge=0)] = 2
    #: Outbound pacing to stay inside Telegram's limits; a self-hosted Bot API server (or a
    #: test emulator) may allow more.
    requests_per_second: Annotated[float, Field(gt=0)] = 30.0


class DiscordConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("token",)
    token: Optional[SecretStr] = None
    gateway_url: Optional[str] = None
    member_events: bool = False


class SlackConfig(PlatformConfig):
    required_credentials: ClassVar[tuple[str, ...]] = ("bot_token",)
    bot_token: Optional[SecretStr] = None
    app_token: Optional[SecretStr] = None
    signing_secret: Optional[SecretStr] = None
    mode: Literal["socket", "http"] = "socket"
    http_host: str = "0.0.0.0"
    http_port: Annotated[int, Field(ge=1, le=65535)] = 3000
    http_path: str = "/slack/events"
    reply_in_thread: bool = False

    def missing_credentials(self) -> list[str]:
        missing = super().missing_credentials()
        needed = "app_token" if self.mode == "socket" else "signing_secret"
        value = getattr(self, needed)
        if value is None or not value.get_secret_value().strip():
            missing.append(needed)
        return missing


class PlatformsConfig(_Strict):
    console: Optional[ConsoleConfig] = None
    telegram: Optional[TelegramConfig] = None
    discord: Optional[DiscordConfig] = None
    slack: Optional[SlackConfig] = None


class AgentConfig(_Strict):
    model: str
    instructions: str = "You are a helpful assistant."
    temperature: Optional[Annotated[float, Field(ge=0, le=2)]] = None
    max_tokens: Optional[Annotated[int, Field(ge=1)]] = None
    max_history: Annotated[int, Field(ge=0)] = 50
    api_base: Optional[str] = None
    api_key: Optional[SecretStr] = None
    timeout_seconds: Annotated[float, Field(gt=0)] = 120.0
    # How the agent appears when it posts as itself in a room.
    display_name: Optional[str] = None
    avatar_url: Optional[str] = None
    icon_emoji: Optional[str] = None


class RouteMatch(_Strict):
    platform: Optional[str] = None
    chat_id: Optional[str] = None
    thread_id: Optional[str] = None
    user_id: Optional[str] = None
    chat_type: Optional[Literal["dm", "group", "channel", "thread"]] = None

    @field_validator("chat_id", "thread_id", "user_id", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value


class RouteConfig(_Strict):
    match: RouteMatch = Field(default_factory=RouteMatch)
    agent: Optional[str] = None
    room: Optional[str] = None

    @model_validator(mode="after")
    def _one_target(self) -> RouteConfig:
        if (self.agent is None) == (self.room is None):
            raise ValueError("a route needs exactly one of `agent: NAME` or `room: NAME`")
        return self


class StoreConfig(_Strict):
    url: str = Field(default="memory://", repr=False)  # may carry a Redis password
    dedup_ttl_seconds: Annotated[int, Field(ge=1)] = 24 * 3600
    prefix: str = "botweave:default:"
    # Redis only: how long an unacknowledged inbound item waits before another worker takes
    # it over, and the time-to-live of conversation and leader locks (renewed while held).
    stream_lease_seconds: Annotated[float, Field(gt=0)] = 30.0
    lock_ttl_seconds: Annotated[float, Field(gt=0)] = 15.0

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        if not value.startswith(("memory://", "redis://", "rediss://", "unix://")):
            raise ValueError("must start with memory:// or redis:// (or rediss://, unix://)")
        return value


class AdmissionConfig(_Strict):
    """Global limits on concurrent agent turns (one budget for all platforms)."""

    max_concurrent_turns: Annotated[int, Field(ge=0)] = 0
    max_concurrent_turns_per_scope: Annotated[int, Field(ge=0)] = 0
    overflow: Literal["reject", "queue", "shed_oldest"] = "queue"
    queue_depth: Annotated[int, Field(ge=1)] = 100
    busy_message: str = "I'm busy right now; please try again shortly."


class Config(_Strict):
    bot: BotConfig = Field(default_factory=BotConfig)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    platforms: PlatformsConfig = Field(default_factory=PlatformsConfig)
    routes: list[RouteConfig] = Field(default_factory=list)
    store: StoreConfig = Field(default_factory=StoreConfig)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    # Filled in by the rooms, push and scheduler work; accepted as mappings meanwhile.
    rooms: dict[str, Any] = Field(default_factory=dict)
    push: dict[str, Any] = Field(default_factory=dict)
    schedules: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _references_exist(self) -> Config:
        if not self.agents:
            raise ValueError("at least one agent is required under `agents:`")
        for i, route in enumerate(self.routes):
            if route.agent is not None and route.agent not in self.agents:
                raise ValueError(
                    f"routes.{i}.agent: unknown agent {route.agent!r}; defined agents: "
                    + ", ".join(sorted(self.agents))
                )
            if route.room is not None and route.room not in self.rooms:
                known = ", ".join(sorted(self.rooms)) or "none defined under `rooms:`"
                raise ValueError(f"routes.{i}.room: unknown room {route.room!r}; defined rooms: {known}")
        self._check_rooms()
        return self

    def _check_rooms(self) -> None:
        from rooms.config import RoomConfig

        for name, data in self.rooms.items():
            room = RoomConfig.from_dict(str(name), data)
            missing = [member for member in room.roster if member not in self.agents]
            if missing:
                raise ValueError(
                    f"rooms.{name}.roster: {', '.join(missing)} not defined under `agents:`; "
                    f"defined agents: {', '.join(sorted(self.agents))}"
                )

    def push_config(self) -> Any:
        from push.preferences import parse_push_config

        return parse_push_config(self.push)

    def room_configs(self) -> dict[str, Any]:
        from rooms.config import RoomConfig

        return {str(name): RoomConfig.from_dict(str(name), data) for name, data in self.rooms.items()}

    def platform(self, name: str) -> PlatformConfig | None:
        return getattr(self.platforms, name, None)

    def enabled_platforms(self, only: Iterable[str] | None = None) -> dict[str, PlatformConfig]:
        """Platforms that are switched on and have their credentials; others warn once."""
        enabled = {}
        wanted = PLATFORMS if only is None else [p for p in PLATFORMS if p in set(only)]
        for name in wanted:
            section = self.platform(name)
            if section is None or not section.enabled:
                continue
            missing = section.missing_credentials()
            if missing:
                hints = [_missing_hint(name, field, self._env_refs) for field in missing]
                log.warning("platform %s skipped: %s", name, "; ".join(hints))
                continue
            enabled[name] = section
        return enabled

    def bot_config_for(self, platform: str) -> BotConfig:
        section = self.platform(platform)
        if section is None:
            return PlatformConfig().bot_config(self.bot, platform)
        return section.bot_config(self.bot, platform)

    _env_refs: dict[str, list[str]] = PrivateAttr(default_factory=dict)


def _missing_hint(platform: str, field: str, env_refs: dict[str, list[str]]) -> str:
    variables = env_refs.get(f"platforms.{platform}.{field}", [])
    if variables:
        return f"platforms.{platform}.{field} is empty (set {' or '.join(variables)})"
    return f"platforms.{platform}.{field} is not set"


# --- substitution ---------------------------------------------------------------------------


def substitute_env(
    value: Any, env: Mapping[str, str], path: str = "", refs: dict[str, list[str]] | None = None
) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` in every string of a parsed YAML tree."""
    if refs is None:
        refs = {}
    if isinstance(value, str):
        names = [m.group(1) for m in _VAR.finditer(value)]
        if names:
            refs[path] = names
        return _VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)
    if isinstance(value, dict):
        return {k: substitute_env(v, env, f"{path}.{k}" if path else str(k), refs) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, f"{path}.{i}", refs) for i, v in enumerate(value)]
    return value


# --- error messages -------------------------------------------------------------------------


def _loc(parts: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in parts if not str(p).startswith(("function-", "literal[")))


def _describe(error: Any, model_fields: list[str] | None) -> str:
    kind = error["type"]
    got = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == "literal_error":
        allowed = ctx.get("expected", "").replace("'", "").replace(" or ", ", ")
        return f"must be one of {allowed} (got {got!r})"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        allowed = f"; allowed keys: {', '.join(model_fields)}" if model_fields else ""
        return f"unknown key{allowed}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number (got {got!r})"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number (got {got!r})"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false (got {got!r})"
    if kind in ("string_type",):
        return f"must be text (got {got!r})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys to values (got {type(got).__name__})"
    if kind == "list_type":
        return f"must be a list (got {type(got).__name__})"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        return f"{error['msg'].replace('Input should be', 'must be')} (got {got!r})"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{error['msg']} (got {got!r})"


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str] | None:
    """The keys allowed where an unknown key was found, so the message can list them."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(current, type) and issubclass(current, BaseModel) and part in current.model_fields:
            annotation = current.model_fields[str(part)].annotation
            args = getattr(annotation, "__args__", ())
            models = [a for a in (annotation, *args) if isinstance(a, type) and issubclass(a, BaseModel)]
            current = models[0] if models else None
        else:
            return None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


def format_errors(exc: ValidationError, model: type[BaseModel] = Config) -> list[str]:
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        message = _describe(error, _fields_at(model, loc) if error["type"] == "extra_forbidden" else None)
        where = _loc(loc)
        problems.append(f"{where}: {message}" if where else message)
    return problems


# --- loading --------------------------------------------------------------------------------


def load_config(source: str | os.PathLike[str] | Mapping[str, Any], env: Mapping[str, str] | None = None) -> Config:
    """Read, substitute and validate a configuration from a path or an already-parsed mapping."""
    if isinstance(source, Mapping):
        raw: Any = dict(source)
        origin = "<mapping>"
    else:
        path = Path(source)
        origin = str(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError([f"{origin}: file not found"]) from None
        except yaml.YAMLError as exc:
            raise ConfigError([f"{origin}: not valid YAML: {exc}"]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([f"{origin}: the top level must be a mapping (bot:, agents:, platforms:, …)"])
    refs: dict[str, list[str]] = {}
    data = substitute_env(raw, os.environ if env is None else env, refs=refs)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc)) from None
    config.push_config()  # raises ConfigError naming each push.* problem
    config._env_refs = refs
    return config
