"""bot.yaml: environment substitution, validation and precise error messages .

Validation is pydantic's; what we add is (1) `${VAR}` / `${VAR:-default}` substitution that
remembers which variables fed which field, so a missing token can be named, and (2) error
messages that say the field path and what is allowed, because a user fixing a YAML file needs
the place and the fix, not a traceback.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

log = logging.getLogger(__name__)

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(ValueError):
    """A bot.yaml that cannot run; each line names a field and what it accepts."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


class Section(BaseModel):
    """A bot.yaml section: unknown keys are errors, so a typo is caught, not ignored."""

    model_config = ConfigDict(extra="forbid")


class LoopProtection(Section):
    """Kept loose on purpose: a typo in the loop guard's settings falls back to the defaults
    instead of crashing the inbound path (see docs/architecture.md)."""

    model_config = ConfigDict(extra="allow")


class UserRateLimit(Section):
    messages: Annotated[int, Field(ge=1)]
    per_seconds: Annotated[float, Field(gt=0)]


class BotConfig(Section):
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
        name: (Optional[info.annotation], Field(default=None, repr=info.repr))
        for name, info in BotConfig.model_fields.items()
    },
)


class PlatformConfig(_BotOverrides):  # type: ignore[misc,valid-type]
    enabled: bool = True
    api_base_url: Optional[str] = None
    home_chat: Optional[str] = None

    #: Credential fields that must be non-empty for the platform to start.
    required_credentials: ClassVar[tuple[str, ...]] = ()
    #: What strangers get when neither the `bot:` block nor the platform says.
    default_unknown_user_policy: ClassVar[Literal["deny", "pair", "allow"]] = "pair"

    def missing_credentials(self) -> list[str]:
        missing = []
        for name in self.required_credentials:
            value = getattr(self, name)
            if value is None or not value.get_secret_value().strip():
                missing.append(name)
        return missing

    def bot_config(self, defaults: BotConfig) -> BotConfig:
        """The effective BotConfig: the `bot:` block with this platform's overrides on top."""
        overrides = {
            k: v for k, v in self.model_dump(include=set(BotConfig.model_fields)).items() if v is not None
        }
        merged = defaults.model_copy(update=overrides)
        if merged.unknown_user_policy is None:
            merged = merged.model_copy(
                update={"unknown_user_policy": self.default_unknown_user_policy}
            )
        return merged


class AgentConfig(Section):
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


class RouteMatch(Section):
    platform: Optional[str] = None
    chat_id: Optional[str] = None
    thread_id: Optional[str] = None
    user_id: Optional[str] = None
    chat_type: Optional[Literal["dm", "group", "channel", "thread"]] = None

    @field_validator("chat_id", "thread_id", "user_id", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value


class RouteConfig(Section):
    match: RouteMatch = Field(default_factory=RouteMatch)
    agent: Optional[str] = None
    room: Optional[str] = None

    @model_validator(mode="after")
    def _one_target(self) -> RouteConfig:
        if (self.agent is None) == (self.room is None):
            raise ValueError("a route needs exactly one of `agent: NAME` or `room: NAME`")
        return self


#: The URL schemes a store can have (bots/store/url.py picks the backend).
STORE_SCHEMES = ("sqlite://", "memory://", "redis://", "rediss://", "unix://")


class StoreConfig(Section):
    # None: the default for how botweave runs. `botweave run` / `chat` use a SQLite file per
    # configuration in the user state dir; an App built in code uses memory://.
    url: Optional[str] = Field(default=None, repr=False)  # may carry a Redis password
    dedup_ttl_seconds: Annotated[int, Field(ge=1)] = 24 * 3600
    prefix: str = "botweave:default:"
    # How long an operation inside a turn waits for a store that stopped answering (a
    # failover, a slow fork, a busy file) before the turn fails.
    outage_grace_seconds: Annotated[float, Field(ge=0)] = 60.0
    # Redis only: how long an unacknowledged inbound item waits before another worker takes
    # it over, and the time-to-live of conversation and leader locks (renewed every third of
    # it while held).
    stream_lease_seconds: Annotated[float, Field(gt=0)] = 10.0
    lock_ttl_seconds: Annotated[float, Field(gt=0)] = 10.0

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(STORE_SCHEMES):
            raise ValueError("must start with sqlite://, memory:// or redis:// (or rediss://, unix://)")
        return value


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


def format_errors(exc: ValidationError, model: type[BaseModel]) -> list[str]:
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        message = _describe(error, _fields_at(model, loc) if error["type"] == "extra_forbidden" else None)
        where = _loc(loc)
        problems.append(f"{where}: {message}" if where else message)
    return problems
