"""bot.yaml: environment substitution, validation and precise error messages.

Validation is pydantic's; what we add is (1) `${VAR}` / `${VAR:-default}` substitution that
remembers which variables fed which field, so a missing token can be named, and (2) error
messages that say the field path and what is allowed, because a user fixing a YAML file needs
the place and the fix, not a traceback.

Every section of bot.yaml is a pydantic model owned by the package it configures; a check
that spans several fields reports each problem at its own path with `raise_problems`, so one
run of `botweave check` lists everything there is to fix.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar, Literal, Optional, Union

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

log = logging.getLogger(__name__)

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(ValueError):
    """A bot.yaml that cannot run; each line names a field and what it accepts."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9464` for IPv6) as (host, port); port 0 lets the system choose."""
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9464, or 0.0.0.0:9464 in a container)")
    return host, int(port)


class Section(BaseModel):
    """A bot.yaml section: unknown keys are errors, so a typo is caught, not ignored.

    Each field is described by the docstring written under it (pydantic's attribute
    docstrings): that text is the field's description, which the configuration reference in
    the documentation is generated from, so a field without one fails the docs tests.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


#: The error type of `problem`: its message is already the whole explanation.
PROBLEM = "botweave_config"


def problem(loc: tuple[str | int, ...], message: str, value: Any = None) -> InitErrorDetails:
    """One problem at `loc`, relative to the model being validated; see `raise_problems`."""
    return InitErrorDetails(type=PydanticCustomError(PROBLEM, message), loc=loc, input=value)


def raise_problems(title: str, problems: Iterable[InitErrorDetails]) -> None:
    """Report several problems from one validator, each at its own path.

    A validator that raises ValueError pins its message on the model it checks; raising a
    ValidationError instead keeps every line's own location, which pydantic prefixes with
    where the model sits. So `routes.2.agent: unknown agent` and `rooms.x.roster: ...` come
    out as separate lines at their real paths, all in one run.
    """
    found = list(problems)
    if found:
        raise ValidationError.from_exception_data(title, found)


class BotLoopPolicy(BaseModel):
    """How long two bots may talk to each other: a budget of events per sliding window per
    pair of bots, and a cooldown once it is spent.

    Built tolerantly, unlike every other section: the guard sits on the inbound path, and a
    typo in its settings must not stop the bot from starting or answering. Unknown keys are
    ignored, a value that is not a number falls back to that field's default (with a
    warning naming the field), and a budget below 1 counts as 1. It lives in the kernel
    because `BotConfig.bot_loop_protection` is typed with it and the kernel imports no
    feature; `botweave.policies` hands it on next to the guard that reads it.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, use_attribute_docstrings=True)

    enabled: bool = True
    """Whether messages written by other bots are counted and cut off when two bots keep
    answering each other."""
    max_events_per_window: int = 20
    """Messages one pair of bots may exchange within `window_seconds` before the cooldown
    starts."""
    window_seconds: float = 60.0
    """The sliding window the budget is counted over, in seconds."""
    cooldown_seconds: float = 60.0
    """How long a pair of bots that spent its budget is ignored, in seconds."""

    @model_validator(mode="before")
    @classmethod
    def _mapping_or_defaults(cls, data: Any) -> Any:
        if data is None or isinstance(data, BotLoopPolicy):
            return {} if data is None else data
        if not isinstance(data, Mapping):
            log.warning("bot_loop_protection: expected a mapping, got %r; using the defaults", data)
            return {}
        unknown = sorted(str(key) for key in data if key not in cls.model_fields)
        if unknown:
            log.warning(
                "bot_loop_protection: ignoring unknown key(s) %s; known: %s",
                ", ".join(unknown), ", ".join(cls.model_fields),
            )
        return data

    @field_validator("enabled", mode="plain")
    @classmethod
    def _bool_or_default(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool):
            return value
        return _fall_back(info.field_name, value, "true or false")

    @field_validator("max_events_per_window", "window_seconds", "cooldown_seconds", mode="plain")
    @classmethod
    def _number_or_default(cls, value: Any, info: ValidationInfo) -> Any:
        """Never raises: anything that is not a usable number becomes the field's default."""
        name = info.field_name or ""
        number: float | None = None
        if not isinstance(value, bool):
            try:
                number = float(value)
            except (TypeError, ValueError, OverflowError):
                number = None
        if number is None or not math.isfinite(number):
            return _fall_back(name, value, "a number")
        if name == "max_events_per_window":
            return max(1, int(number))
        if number < 0 or (number == 0 and name == "window_seconds"):
            return _fall_back(name, value, "a positive number of seconds")
        return number


def _fall_back(name: str | None, value: Any, expected: str) -> Any:
    default = BotLoopPolicy.model_fields[str(name)].default
    log.warning("bot_loop_protection.%s: %r is not %s; using the default %r", name, value, expected, default)
    return default


class UserRateLimit(Section):
    messages: Annotated[int, Field(ge=1)]
    """Messages one person may send within `per_seconds`; the next one gets a single notice,
    later ones silence."""
    per_seconds: Annotated[float, Field(gt=0)]
    """The window the messages are counted over, in seconds."""


class TypingConfig(Section):
    """When the typing indicator shows.

    `auto` shows it only for a turn still running after `delay_ms`: a quick answer needs no
    indicator (the answer itself arrives before a person would notice one), and skipping it
    saves a platform call per turn. `instant` shows it as soon as a turn starts; `never`
    never shows it. Either way it is renewed while the turn runs.
    """

    mode: Literal["auto", "instant", "never"] = "auto"
    """`auto`: show the indicator only for a turn still running after `delay_ms`; `instant`: as
    soon as a turn starts; `never`."""
    delay_ms: Annotated[int, Field(ge=0)] = 1000
    """With `mode: auto`, how long a turn runs before the indicator shows, in milliseconds."""


class BotConfig(Section):
    """Behaviour shared by all platforms; each platform may override any field."""

    unknown_user_policy: Optional[Literal["deny", "pair", "allow"]] = None
    """What happens to a person on no allowlist: `deny` drops their messages silently, `allow`
    admits anyone, `pair` gives them a code the owner approves. Unset: `allow` on the console
    and the web, `pair` elsewhere."""
    allowed_users: list[str] = Field(default_factory=list)
    """Platform user ids always admitted."""
    allowed_chats: list[str] = Field(default_factory=list)
    """Chat or channel ids whose members are all admitted."""
    owner_user_id: Optional[str] = Field(default=None, repr=False)
    """The bot's owner on this platform: approves pairing codes and, with `approver: owner`,
    tool calls. Masked in dumps."""
    group_policy: Literal["respond_all", "mention_only", "command_only", "observe"] = "mention_only"
    """When the bot answers in group chats: every message (`respond_all`), only when @-mentioned
    or replied to (`mention_only`), only commands (`command_only`), or never, keeping the
    messages as context (`observe`)."""
    streaming: bool = False
    """Stream each reply by editing one message in place as the model writes it."""
    stream_edit_interval_ms: Annotated[int, Field(ge=0)] = 700
    """The shortest time between two edits of a streamed reply, in milliseconds; raised to the
    platform's own floor."""
    typing: TypingConfig = Field(default_factory=TypingConfig)
    """When the typing indicator shows while a turn runs."""
    footer: bool = False
    """Append `— <model> · <seconds>s · tools: …` to each final reply (tool names only, never
    their arguments)."""
    allow_silence: bool = False
    """Let the agent decline to answer by replying with the silence token."""
    silence_token: Optional[str] = None
    """The reply that means "say nothing" when `allow_silence` is on; unset: `NO_REPLY`."""
    allow_bots: bool = False
    """Accept messages written by other bots (guarded by `bot_loop_protection`)."""
    bot_loop_protection: BotLoopPolicy = Field(default_factory=BotLoopPolicy)
    """The budget two bots get for talking to each other before a cooldown; shared by every
    worker through the store."""
    user_rate_limit: Optional[UserRateLimit] = None
    """A per-person limit on messages answered (`{messages, per_seconds}`); unset: no limit."""
    busy_mode: Literal["queue", "interrupt", "collect"] = "queue"
    """What a message arriving while its conversation's turn runs does: wait its turn (`queue`),
    cancel the running turn (`interrupt`), or join the next turn (`collect`)."""
    rerun_window_seconds: Annotated[float, Field(ge=0)] = 120.0
    """How long after its reply an edited message is answered again (0: only while it runs)."""
    stale_after_seconds: Annotated[float, Field(ge=0)] = 600.0
    """A message this much older than its receipt (the bot was down) gets a notice instead of a late
    answer; 0 answers whatever its age."""

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
    __config__=ConfigDict(extra="forbid", use_attribute_docstrings=True),
    __validators__={
        "_ids": field_validator("allowed_users", "allowed_chats", mode="before")(
            BotConfig._ids_as_strings.__func__  # type: ignore[attr-defined]
        ),
        "_owner": field_validator("owner_user_id", mode="before")(
            BotConfig._owner_as_string.__func__  # type: ignore[attr-defined]
        ),
    },
    **{
        name: (Optional[info.annotation], Field(default=None, repr=info.repr, description=info.description))
        for name, info in BotConfig.model_fields.items()
    },
)


class PlatformConfig(_BotOverrides):  # type: ignore[misc,valid-type]
    enabled: bool = True
    """Whether the platform starts when its credentials are set."""
    api_base_url: Optional[str] = None
    """Where the platform's API is reached, for a self-hosted server or a proxy; unset: the
    platform's own."""
    home_chat: Optional[str] = None
    """The chat the bare target `<platform>` posts to (schedules, rooms, `send_message`)."""

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
        """The effective BotConfig: the `bot:` block with this platform's overrides on top.

        Values are taken as validated, not dumped: a nested section (`user_rate_limit`,
        `bot_loop_protection`) must stay a model, because `model_copy` does not validate.
        """
        overrides = {
            name: value for name in BotConfig.model_fields if (value := getattr(self, name)) is not None
        }
        merged = defaults.model_copy(update=overrides)
        if merged.unknown_user_policy is None:
            merged = merged.model_copy(
                update={"unknown_user_policy": self.default_unknown_user_policy}
            )
        return merged


class ContextConfig(Section):
    """`agents.NAME.context`: how much of a conversation is sent with each request. When a
    request would be larger than `max_tokens`, the oldest turns (never the last `keep_recent`
    messages, never a tool call apart from its result) are folded: into one summary the model
    writes once and history keeps (`summarize`), or dropped (`trim`). No request is ever sent
    over `max_tokens`."""

    max_tokens: Optional[Annotated[int, Field(ge=256)]] = None
    """The most tokens one request may carry (instructions, history and the new message);
    unset: the model's input window as litellm's model information gives it (8000 for a model
    it does not know), less the agent's `max_tokens`."""
    keep_recent: Annotated[int, Field(ge=0)] = 12
    """The newest messages that are always sent word for word, never folded."""
    compaction: Literal["summarize", "trim"] = "summarize"
    """What becomes of the oldest turns when the request would be too large: `summarize` (one
    summary in their place, written once and kept with the history) or `trim` (dropped)."""
    summary_model: Optional[str] = None
    """The model that writes summaries (litellm's name for it); unset: the agent's own model."""


_MODEL_ID = re.compile(r"^[A-Za-z0-9][\w.:@+-]*(/[\w.:@+-]+)*$")


def model_id(value: Any) -> str:
    """A model id as litellm names models (`openai/gpt-4o-mini`), or a ValueError saying so."""
    if not isinstance(value, str) or not _MODEL_ID.match(value.strip()):
        raise ValueError(
            f"{value!r} is not a model id; write one as `model:` takes it (e.g. openai/gpt-4o-mini), "
            "or a mapping {model: ..., api_base: ..., api_key: ...}"
        )
    return value.strip()


class ModelPrice(Section):
    """What a model costs, for models litellm has no public price for (a local server, a
    private deployment): US dollars per million tokens."""

    input_per_mtok: Annotated[float, Field(ge=0)]
    """US dollars per million prompt tokens."""
    output_per_mtok: Annotated[float, Field(ge=0)]
    """US dollars per million completion tokens."""


def _one_kind_of_key(title: str, api_key: Any, api_keys: list[Any]) -> None:
    if api_key is not None and api_keys:
        raise_problems(
            title,
            [
                problem(
                    ("api_keys",),
                    "set together with `api_key`; keep one: `api_keys: [KEY_A, KEY_B]` uses several keys in turn, "
                    "`api_key: KEY` one",
                )
            ],
        )


class FallbackModel(Section):
    """A model tried when the ones before it failed with an error another model may not have
    (rate limited, overloaded, down, timed out, out of context window). Written as a model id,
    or as a mapping when it needs its own server or key. Without `api_base` and keys of its
    own, a fallback of the same provider as the agent's model uses the agent's."""

    model: str
    """The model id, as `model:` takes it."""
    api_base: Optional[str] = None
    """The server this model is asked at, when not its provider's usual one."""
    api_key: Optional[SecretStr] = None
    """The key for this model."""
    api_keys: list[SecretStr] = Field(default_factory=list)
    """Several keys for this model, used in turn."""
    price: Optional[ModelPrice] = None
    """What this model costs, when litellm lists no price for it."""

    @model_validator(mode="before")
    @classmethod
    def _id_or_mapping(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"model": model_id(value)}
        if isinstance(value, Mapping) and "model" not in value:
            raise ValueError("a fallback mapping needs `model:` (e.g. {model: openai/gpt-4o-mini, api_key: ...})")
        if not isinstance(value, (Mapping, FallbackModel)):
            model_id(value)
        return value

    @field_validator("model")
    @classmethod
    def _model(cls, value: str) -> str:
        return model_id(value)

    @model_validator(mode="after")
    def _keys(self) -> FallbackModel:
        _one_kind_of_key(type(self).__name__, self.api_key, self.api_keys)
        return self


class AgentConfig(Section):
    """What the kernel's `Agent` needs of an agent's section: its model, how it is asked and
    how it appears. The parts that configure features (its tools, media and network) belong
    to those features; the runtime composes the whole `agents.NAME` section from them."""

    model: str
    """The model, as litellm names it (`openai/gpt-4o-mini`, `anthropic/claude-sonnet-4-5`,
    `ollama/llama3`), or `offline/echo`, a stand-in that echoes what it was given."""
    instructions: str = "You are a helpful assistant."
    """The system prompt: who the agent is and how it answers."""
    temperature: Optional[Annotated[float, Field(ge=0, le=2)]] = None
    """Sampling temperature from 0 to 2; unset: the provider's default."""
    max_tokens: Optional[Annotated[int, Field(ge=1)]] = None
    """The longest answer the model may write, in tokens; unset: the provider's default."""
    max_history: Annotated[int, Field(ge=0)] = 50
    """Earlier turns of the conversation sent with each request."""
    api_base: Optional[str] = None
    """An OpenAI-compatible server to send this agent's requests to (vLLM, LM Studio, a proxy)."""
    api_key: Optional[SecretStr] = None
    """The key for `api_base` or the provider; unset: the provider's usual environment variable."""
    api_keys: list[SecretStr] = Field(default_factory=list)
    """Several keys for `model`, used in turn (round robin); a key that was rate limited rests
    while the others answer. Instead of `api_key`."""
    fallbacks: list[FallbackModel] = Field(default_factory=list)
    """Models tried in order when `model` fails with an error worth another model (rate limited,
    overloaded, server error, timeout, broken stream, context window too small): model ids, or
    mappings `{model, api_base, api_key}`."""
    price: Optional[ModelPrice] = None
    """What `model` costs, when litellm lists no public price for it (budgets count its cost)."""
    timeout_seconds: Annotated[float, Field(gt=0)] = 120.0
    """How long one model request may take before the turn fails."""
    max_tool_rounds: Annotated[int, Field(ge=1)] = 8
    """Rounds of tool calls in one turn before the model must answer in words."""
    context: ContextConfig = Field(default_factory=ContextConfig)
    """How much of the conversation each request carries, and what happens to the oldest turns
    when it would not fit the model's window."""
    # How the agent appears when it posts as itself in a room.
    display_name: Optional[str] = None
    """The name the agent posts under in rooms (Slack and Discord show it as the author)."""
    avatar_url: Optional[str] = None
    """The picture the agent posts with in rooms, where the platform allows one."""
    icon_emoji: Optional[str] = None
    """The emoji the agent posts with on Slack, e.g. `:memo:`."""
    vision: Union[bool, Literal["auto"]] = "auto"
    """Whether images reach the model as pictures: `auto` asks litellm whether the model has vision;
    without it the agent reads a marker such as `[image image/png 12 KB]`."""

    @field_validator("model")
    @classmethod
    def _model_id(cls, value: str) -> str:
        return model_id(value)

    @model_validator(mode="after")
    def _keys(self) -> AgentConfig:
        _one_kind_of_key(type(self).__name__, self.api_key, self.api_keys)
        return self

    @field_validator("vision", mode="before")
    @classmethod
    def _vision(cls, value: Any) -> Any:
        if isinstance(value, bool) or value == "auto":
            return value
        text = str(value).strip().lower()
        if text in ("auto", "true", "false"):
            return text == "true" if text != "auto" else "auto"
        raise ValueError(f"must be auto, true or false (got {value!r})")


class RouteMatch(Section):
    platform: Optional[str] = None
    """Matches messages from this platform."""
    chat_id: Optional[str] = None
    """Matches messages in this chat or channel."""
    thread_id: Optional[str] = None
    """Matches messages in this thread or forum topic."""
    user_id: Optional[str] = None
    """Matches messages from this person."""
    chat_type: Optional[Literal["dm", "group", "channel", "thread"]] = None
    """Matches direct messages, groups, channels or threads."""

    @field_validator("chat_id", "thread_id", "user_id", mode="before")
    @classmethod
    def _ids_as_strings(cls, value: Any) -> Any:
        return str(value) if isinstance(value, int) else value


class RouteConfig(Section):
    match: RouteMatch = Field(default_factory=RouteMatch)
    """What a message must have for this route to apply; the most specific matching route wins
    (thread > chat > user > chat type > platform), ties to the first listed."""
    agent: Optional[str] = None
    """The agent that answers the messages this route matches."""
    room: Optional[str] = None
    """The room that answers the messages this route matches (instead of one agent)."""

    @model_validator(mode="after")
    def _one_target(self) -> RouteConfig:
        if (self.agent is None) == (self.room is None):
            raise ValueError("a route needs exactly one of `agent: NAME` or `room: NAME`")
        return self


#: The URL schemes a store can have (bots/store/url.py picks the backend).
STORE_SCHEMES = ("sqlite://", "memory://", "redis://", "rediss://", "unix://")


class StoreConfig(Section):
    url: Optional[str] = Field(default=None, repr=False)  # may carry a Redis password
    """Where state is kept: `sqlite:///path`, `memory://` or `redis://…`; unset: a SQLite file
    per configuration in the user state dir (`botweave run`), memory for an App built in code."""
    dedup_ttl_seconds: Annotated[int, Field(ge=1)] = 24 * 3600
    """How long a platform delivery is remembered, so a redelivered one is not answered twice."""
    prefix: str = "botweave:default:"
    """Prefix of every key in the store, so several bots can share one Redis."""
    outage_grace_seconds: Annotated[float, Field(ge=0)] = 60.0
    """How long an operation inside a turn waits for a store that stopped answering (a
    failover, a slow fork, a busy file) before the turn fails."""
    stream_lease_seconds: Annotated[float, Field(gt=0)] = 10.0
    """Redis only: how long an unacknowledged inbound item waits before another worker takes
    it over."""
    lock_ttl_seconds: Annotated[float, Field(gt=0)] = 10.0
    """Redis only: the time-to-live of conversation and leader locks (renewed every third of it
    while held)."""

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(STORE_SCHEMES):
            raise ValueError("must start with sqlite://, memory:// or redis:// (or rediss://, unix://)")
        return value


# --- substitution ---------------------------------------------------------------------------


def substitute_env(
    value: Any,
    env: Mapping[str, str],
    path: str = "",
    refs: dict[str, list[str]] | None = None,
    unset: list[str] | None = None,
) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` in every string of a parsed YAML tree.

    As in a shell, `${VAR:-default}` falls back when VAR is unset or empty. A bare `${VAR}`
    whose variable is not set at all is recorded in `unset` (as "path: ${VAR} ..."), because
    silently turning it into an empty string only moves the failure to the first turn; a
    variable that is set but empty is taken as it is."""
    if refs is None:
        refs = {}
    if isinstance(value, str):
        names = [m.group(1) for m in _VAR.finditer(value)]
        if names:
            refs[path] = names

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if default is not None:
                return env.get(name) or default
            if name not in env and unset is not None:
                unset.append(f"{path}: ${{{name}}} is not set (export {name}=..., or write ${{{name}:-}} to allow it empty)")
            return env.get(name, "")

        return _VAR.sub(replace, value)
    if isinstance(value, dict):
        return {k: substitute_env(v, env, f"{path}.{k}" if path else str(k), refs, unset) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, f"{path}.{i}", refs, unset) for i, v in enumerate(value)]
    return value


# --- error messages -------------------------------------------------------------------------


def _loc(parts: tuple[int | str, ...]) -> str:
    """The YAML path of an error: pydantic's own markers (a union branch, a dict key's
    `[key]` step) are left out, so a bad key reads `push.recipients.fax:42`."""
    return ".".join(
        str(p) for p in parts if not str(p).startswith(("function-", "literal[")) and str(p) != "[key]"
    )


_BOUNDS = {
    "greater_than_equal": ("ge", "must be at least {}"),
    "greater_than": ("gt", "must be greater than {}"),
    "less_than_equal": ("le", "must be at most {}"),
    "less_than": ("lt", "must be less than {}"),
}


def _describe(error: Any, model_fields: list[str] | None) -> str:
    kind = error["type"]
    got = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == PROBLEM:
        return str(error["msg"])
    if kind == "literal_error":
        allowed = ctx.get("expected", "").replace("'", "").replace(" or ", ", ")
        return f"must be one of {allowed} (got {got!r})"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        if not model_fields:
            return "unknown key"
        key = str(error["loc"][-1]) if error.get("loc") else ""
        close = difflib.get_close_matches(key, model_fields, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown key{hint}; allowed keys: {', '.join(model_fields)}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number (got {got!r})"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number (got {got!r})"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false (got {got!r})"
    if kind in ("string_type",):
        return f"must be text (got {got!r})"
    if kind in ("dict_type", "model_type", "model_attributes_type", "dataclass_type"):
        return f"must be a mapping of keys to values (got {type(got).__name__})"
    if kind in ("list_type", "tuple_type", "set_type", "frozen_set_type"):
        return f"must be a list (got {type(got).__name__})"
    if kind in _BOUNDS:
        key, template = _BOUNDS[kind]
        return f"{template.format(ctx.get(key))} (got {got!r})"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return f"{error['msg']} (got {got!r})"


def _branches(annotation: Any) -> list[Any]:
    """The types an annotation may hold: `Optional[X]` and `Annotated[X, ...]` unwrapped."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _branches(typing.get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [b for arg in typing.get_args(annotation) for b in _branches(arg)]
    return [annotation]


def _is_model(candidate: Any) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, BaseModel)


def _keys(model: type[BaseModel]) -> dict[str, str]:
    """YAML key → field name, aliases included. A field excluded from dumps (a room's name,
    which is its key under `rooms:`) is not a key anyone writes, so it is not offered."""
    keys: dict[str, str] = {}
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            for choice in alias.choices:
                if isinstance(choice, str):
                    keys[choice] = name
        else:
            keys[alias if isinstance(alias, str) else info.alias or name] = name
    return keys


def _step(annotation: Any, part: int | str) -> Any:
    """The annotation one path step below `annotation`, or None when the path leaves it."""
    for branch in _branches(annotation):
        if _is_model(branch):
            name = _keys(branch).get(str(part))
            if name is not None:
                return branch.model_fields[name].annotation
            continue
        origin = typing.get_origin(branch)
        args = typing.get_args(branch)
        if origin in (dict, Mapping) and len(args) == 2 and isinstance(part, str):
            return args[1]
        if origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
            return args[0]
    return None


def _fields_at(root: Any, loc: tuple[int | str, ...]) -> list[str] | None:
    """The keys allowed where an unknown key was found, so the message can list them."""
    current: Any = root
    for part in loc[:-1]:
        if str(part) == "[key]" or str(part).startswith(("function-", "literal[")):
            continue
        current = _step(current, part)
        if current is None:
            return None
    models = [branch for branch in _branches(current) if _is_model(branch)]
    return list(_keys(models[0])) if models else None


def format_errors(exc: ValidationError, model: Any, prefix: str = "") -> list[str]:
    """One `path: message` line per problem. `model` is the model or annotation that was
    validated (it tells which keys an unknown key could have been); `prefix` is where that
    sits in bot.yaml when it is validated on its own, e.g. `push`."""
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        message = _describe(error, _fields_at(model, loc) if error["type"] == "extra_forbidden" else None)
        where = ".".join(part for part in (prefix, _loc(loc)) if part)
        problems.append(f"{where}: {message}" if where else message)
    return problems
