"""The whole bot.yaml. Each section's model belongs to the package it configures (platform
sections to their adapters, `admission:` to policies, `rooms:` to rooms, `push:` to push);
this module puts them together, checks what refers to what, and loads the file. Every
section is parsed once, here, into its typed model; the rest of the runtime reads those.

Some checks need to know what the runtime knows and a feature does not (a feature never
imports the runtime): `load_config` passes the installed platform names as the validation
context's `platforms`, which `push.recipients` keys are checked against. The context rather
than a check in `Config`'s own validator, so that a recipient on an unknown platform is
reported together with every other problem instead of after they are fixed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import platformdirs
import yaml
from botweave.budgets import BudgetsConfig
from botweave.config import (
    AgentConfig,
    BotConfig,
    ConfigError,
    PlatformConfig,
    RouteConfig,
    Section,
    StoreConfig,
    format_errors,
    parse_listen,
    problem,
    raise_problems,
    substitute_env,
)
from botweave.gateway.config import GatewayConfig
from botweave.media.config import AgentMedia, MediaConfig, MediaOverrides
from botweave.memory.config import AgentMemory
from botweave.model_clients import ClientChoice, ensure_direct
from botweave.policies.config import AdmissionConfig, AgentNetwork, NetworkConfig
from botweave.policies.egress import EgressPolicy
from botweave.push.config import PushConfig
from botweave.rooms.config import Rooms
from botweave.runtime.platforms import installed_platforms
from botweave.runtime.scheduled_agents import ScheduleConfig
from botweave.tools import BUILTINS, load_python_tools
from botweave.tools.config import AgentTools
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

log = logging.getLogger(__name__)

#: `platforms:` accepts a section for every installed platform, each validated by its own model.
PlatformsConfig = create_model(
    "PlatformsConfig",
    __base__=Section,
    **{  # type: ignore[call-overload]
        name: (Optional[spec.config], Field(None, description=f"The {name} platform's settings; absent: {name} is off."))
        for name, spec in installed_platforms().items()
    },
)


class TracingConfig(Section):
    """`ops.tracing:` one OpenTelemetry trace per turn, exported over OTLP/HTTP (the extra
    `botweave[otel]`). Spans: the intake, each pipeline step that decided something, each
    model call (GenAI attributes), each tool call (never its arguments), each delivery."""

    exporter: Literal["otlp"] = "otlp"
    """How spans leave the process: `otlp` (OTLP over HTTP, protobuf)."""
    endpoint: str = "http://127.0.0.1:4318"
    """The collector's OTLP/HTTP base URL; spans are posted to `<endpoint>/v1/traces`."""
    service_name: str = "botweave"
    """The `service.name` every span carries (one per deployment, or per role)."""
    headers: dict[str, SecretStr] = Field(default_factory=dict)
    """Headers sent with each export (a collector's API key: write `${OTLP_TOKEN}`)."""
    sample_ratio: Annotated[float, Field(ge=0, le=1)] = 1.0
    """The share of turns traced (a turn's spans are all kept or all dropped)."""

    @field_validator("endpoint")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http(s) URL (e.g. http://127.0.0.1:4318)")
        return value.rstrip("/")


class OpsConfig(Section):
    """`ops:` what operators and their tools read: `/metrics`, `/healthz` and `/readyz` on
    `listen` (HOST:PORT), off unless set here or with `--ops-listen`; and the watchdogs of a
    bot process (`botweave run` and `web`, or `App.serve(watchdogs=...)`), which turn a
    wedged process into one that exits, so that its supervisor starts it again:

    - `startup_timeout_seconds`: a process that is not serving this long after it began
      writes every thread's stack to stderr and exits with code 4;
    - `loop_stall_seconds`: an event loop that has not run a callback for this long gets its
      stacks written and `/healthz` answers 503; after twice as long the process exits with
      code 5.

    0 turns a watchdog off."""

    listen: Optional[str] = None
    """`HOST:PORT` serving `/metrics`, `/healthz` and `/readyz` (`0.0.0.0:9464` in a container);
    unset: off."""
    startup_timeout_seconds: Annotated[float, Field(ge=0)] = 60.0
    """Seconds a `botweave run` may take to start serving before it writes its stacks and
    exits (code 4); 0: off."""
    loop_stall_seconds: Annotated[float, Field(ge=0)] = 30.0
    """Seconds the event loop may run no callback before `/healthz` answers 503 and the stacks
    are written (the process exits at twice this, code 5); 0: off."""

    tracing: Optional[TracingConfig] = None
    """OpenTelemetry traces of every turn; unset: off (nothing of OpenTelemetry is imported)."""

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            parse_listen(value)
        return value


class ModelsConfig(Section):
    """`models:` how agents' model calls are made. `client`: who makes them (`auto`:
    botweave's own OpenAI-compatible client for `openai/` models and litellm for the rest;
    `litellm`: litellm for all; `direct`: botweave's own client for all, every agent an
    `openai/` model; see botweave.model_clients). `processes`: in this many helper processes,
    so that preparing requests and reading answers runs on other cores; each imports litellm
    at start (seconds, and about 150 MB); custom litellm providers registered in Python are
    not seen there. 0: in the bot's own process. See docs/performance.md."""

    client: ClientChoice = "auto"
    """Who makes model calls: `auto` (botweave's own client for `openai/` models, litellm for
    the rest), `litellm` for all, or `direct` (botweave's client for all; every agent an
    `openai/` model)."""
    processes: Annotated[int, Field(ge=0, le=32)] = 0
    """Helper processes that prepare requests and read answers on other cores; 0: in the bot's
    own process."""
    max_cooldown_seconds: Annotated[float, Field(gt=0)] = 300.0
    """The longest a model or key rests after a rate limit or an overload (its `Retry-After`,
    else 5 s doubling with each one in a row), in seconds."""
    max_wait_seconds: Annotated[float, Field(ge=0)] = 20.0
    """How long a turn waits for a resting model to come back when every candidate rests;
    longer, and the person is told when to try again."""


class AgentSection(AgentMemory, AgentMedia, AgentNetwork, AgentTools, AgentConfig):
    """An agent's whole section, `agents.NAME`: what the kernel's `Agent` reads of it (its
    model, how it is asked and how it appears) and each feature's part (its tools, media,
    network and memory), each part owned by the package it configures."""


class Config(Section):
    """The whole bot.yaml, every section validated into its typed model; `load_config`
    builds one from a file or a mapping, `${VAR}` substituted from the environment."""

    bot: BotConfig = Field(default_factory=BotConfig)
    """Behaviour shared by every platform; each platform section may override any of it."""
    agents: dict[str, AgentSection] = Field(default_factory=dict)
    """The agents, by name: the model each uses, its instructions and its tools. The first
    answers every message no route claims."""
    platforms: PlatformsConfig = Field(default_factory=PlatformsConfig)  # type: ignore[valid-type]
    """The chat platforms to connect, each with its credentials and overrides of `bot:`."""
    routes: list[RouteConfig] = Field(default_factory=list)
    """Which agent or room answers which messages."""
    store: StoreConfig = Field(default_factory=StoreConfig)
    """Where history, pairing, dedup keys and the inbound journal are kept."""
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    """How many agent turns may run at once, and what happens to the rest."""
    rooms: Rooms = Field(default_factory=dict)
    """Rooms of several agents, by name: who answers, how many rounds, and an optional stand-up
    schedule."""
    push: PushConfig = Field(default_factory=PushConfig)
    """Notifications to people: who gets which, when, and how."""
    media: MediaConfig = Field(default_factory=MediaConfig)
    """What the bot reads of the files people send, and where it may post files from."""
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)
    """Agents that answer a prompt on a cron schedule and post the answer, by name."""
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    """The hosts tools (`fetch_url`, MCP servers over HTTP) may reach."""
    ops: OpsConfig = Field(default_factory=OpsConfig)
    """The operator's endpoints: metrics and health checks."""
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    """How model calls are made."""
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)
    """Daily limits of tokens and cost, per person, agent and chat."""
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    """The WebSocket gateway: the browser UI, the `web` platform and clients of the protocol in
    any language."""
    plugins: list[str] = Field(default_factory=list)
    """Python modules whose `setup(app)` runs at start (`module` or `module:function`), after those
    installed under the `botweave.plugins` entry point."""

    @field_validator("plugins")
    @classmethod
    def _importable_names(cls, value: list[str]) -> list[str]:
        for name in value:
            module, _, attr = name.partition(":")
            if not all(part.isidentifier() for part in module.split(".")) or (attr and not attr.isidentifier()):
                raise ValueError(f"{name!r} is not a module name (package.module or package.module:function)")
        return value

    _env_refs: dict[str, list[str]] = PrivateAttr(default_factory=dict)
    #: The file this configuration was read from (None: a mapping, or the built-in one).
    _source: Optional[Path] = PrivateAttr(default=None)
    _revision: Optional[str] = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def revision(self) -> str:
        """The configuration's revision (see `config_revision`), as it was read: what a
        process changes afterwards for itself (`--ops-listen`, the default store) is not part
        of it, so another process reading the same file gets the same revision."""
        if self._revision is None:
            self._revision = config_revision(self)
        return self._revision

    @property
    def base_dir(self) -> Path | None:
        """The folder relative store paths are taken from: the configuration file's."""
        return self._source.resolve().parent if self._source is not None else None

    @model_validator(mode="after")
    def _references_exist(self) -> Config:
        """Names used in one section must be defined in another; each miss at its own path."""
        if not self.agents:
            raise ValueError("at least one agent is required under `agents:`")
        agents = ", ".join(sorted(self.agents))
        rooms = ", ".join(sorted(self.rooms)) or "none defined under `rooms:`"
        problems = []
        for i, route in enumerate(self.routes):
            if route.agent is not None and route.agent not in self.agents:
                problems.append(
                    problem(("routes", i, "agent"), f"unknown agent {route.agent!r}; defined agents: {agents}")
                )
            if route.room is not None and route.room not in self.rooms:
                problems.append(problem(("routes", i, "room"), f"unknown room {route.room!r}; defined rooms: {rooms}"))
        for name, room in self.rooms.items():
            missing = [member for member in room.roster if member not in self.agents]
            if missing:
                problems.append(
                    problem(
                        ("rooms", name, "roster"),
                        f"{', '.join(missing)} not defined under `agents:`; defined agents: {agents}",
                    )
                )
        for name, schedule in self.schedules.items():
            if schedule.agent not in self.agents:
                problems.append(
                    problem(("schedules", name, "agent"), f"unknown agent {schedule.agent!r}; defined agents: {agents}")
                )
        for name in self.budgets.per_agent:
            if name not in self.agents:
                problems.append(
                    problem(("budgets", "per_agent", name), f"unknown agent {name!r}; defined agents: {agents}")
                )
        problems += self._network_problems()
        problems += self._tool_problems()
        if self.models.client == "direct":
            models = {name: agent.model for name, agent in self.agents.items()}
            problems += [problem(("agents", name, "model"), text) for name, text in ensure_direct(models).items()]
        raise_problems(type(self).__name__, problems)
        return self

    def egress_policy(self, agent: str) -> EgressPolicy:
        """The network policy `agent`'s tools live under: its own `network:`, else the global one."""
        return EgressPolicy.from_config(self.agents[agent].network or self.network)

    def _network_problems(self) -> list[InitErrorDetails]:
        blocks: list[tuple[tuple[str, ...], NetworkConfig]] = [(("network",), self.network)]
        blocks += [(("agents", name, "network"), agent.network) for name, agent in self.agents.items() if agent.network]
        found = []
        for where, block in blocks:
            for field in ("allow_hosts", "deny_hosts"):
                for index, entry in enumerate(getattr(block, field)):
                    try:
                        EgressPolicy([entry])
                    except ValueError as exc:
                        found.append(problem((*where, field, index), str(exc)))
        return found

    def _tool_problems(self) -> list[InitErrorDetails]:
        servers: dict[str, tuple[str, Any]] = {}
        found = []
        for agent_name, agent in self.agents.items():
            for index, entry in enumerate(agent.tools):
                where = ("agents", agent_name, "tools", index)
                if entry.kind == "builtin" and entry.name not in BUILTINS:
                    found.append(problem(where, f"unknown built-in tool {entry.name!r}; built-ins: {', '.join(BUILTINS)}"))
                if entry.kind == "python":
                    try:  # imports the module, so `botweave check` catches a mistyped one
                        load_python_tools(entry.python or "")
                    except ValueError as exc:
                        found.append(problem((*where, "python"), str(exc)))
                if entry.kind != "mcp":
                    continue
                name, server = entry.server
                if "__" in name or not name.strip():
                    found.append(problem((*where, "mcp"), f"name the server without `__` (its tools are called {name}__TOOL)"))
                    continue
                seen = servers.setdefault(name, (".".join(map(str, where)), server))
                if seen[1] != server:
                    found.append(problem((*where, "mcp", name), f"defined differently at {seen[0]}; one name, one server"))
                if server.url is not None:
                    refusal = self.egress_policy(agent_name).refusal(server.url)
                    if refusal is not None:
                        found.append(problem((*where, "mcp", name, "url"), refusal))
        return found

    def media_for(self, agent: str | None) -> MediaConfig:
        """The media settings an agent works with: the top-level `media:` with the agent's own
        on top (the top level alone for no agent)."""
        config = self.agents.get(agent) if agent is not None else None
        return self.media.merged(config.media if config is not None else None)

    def platform(self, name: str) -> PlatformConfig | None:
        return getattr(self.platforms, name, None)

    def enabled_platforms(self, only: Iterable[str] | None = None, *, warn: bool = True) -> dict[str, PlatformConfig]:
        """Platforms that are switched on and have their credentials; others warn (once, at
        start: a reload asks again without `warn`)."""
        enabled = {}
        wanted = set(installed_platforms()) if only is None else set(only)
        for name in installed_platforms():
            section = self.platform(name)
            if name not in wanted or section is None or not section.enabled:
                continue
            hints = self.missing_credentials(name)
            if hints:
                if warn:
                    log.warning("platform %s skipped: %s", name, "; ".join(hints))
                continue
            enabled[name] = section
        return enabled

    def missing_credentials(self, platform: str) -> list[str]:
        """What keeps a configured platform from starting, one hint per empty credential
        (naming the variable that should have filled it, where bot.yaml used one)."""
        section = self.platform(platform)
        missing = section.missing_credentials() if section is not None else []
        return [_missing_hint(platform, field, self._env_refs) for field in missing]

    def bot_config_for(self, platform: str) -> BotConfig:
        section = self.platform(platform)
        if section is None:
            spec = installed_platforms().get(platform)
            section = spec.config() if spec is not None else PlatformConfig()
        return section.bot_config(self.bot)


def unroutable_models(config: Config) -> list[str]:
    """Each agent whose model litellm cannot route (an unknown provider prefix, a typo),
    found before the first turn apologises for it. Imports litellm (seconds, the first time),
    unless every model is the offline stand-in, which botweave itself answers (any
    `offline/...` name: botweave.offline_model answers them all, without litellm)."""
    routed = {name: agent for name, agent in config.agents.items() if not agent.model.startswith("offline/")}
    if not routed:
        return []
    from botweave.model_calls import litellm_module

    litellm = litellm_module()
    problems = []
    for name, agent in routed.items():
        try:
            litellm.get_llm_provider(model=agent.model, api_base=agent.api_base)
        except litellm.BadRequestError as exc:  # litellm's answer for a model it cannot route
            reason = str(exc).splitlines()[0][:200]
            problems.append(f"agents.{name}.model: litellm cannot route {agent.model!r} ({reason})")
    return problems


def _missing_hint(platform: str, field: str, env_refs: dict[str, list[str]]) -> str:
    variables = env_refs.get(f"platforms.{platform}.{field}", [])
    if variables:
        return f"platforms.{platform}.{field} is empty (set {' or '.join(variables)})"
    return f"platforms.{platform}.{field} is not set"


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
            raise ConfigError([_yaml_problem(origin, exc)]) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([f"{origin}: cannot be read ({exc})"]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([f"{origin}: the top level must be a mapping (bot:, agents:, platforms:, …)"])
    refs: dict[str, list[str]] = {}
    unset: list[str] = []
    data = substitute_env(raw, os.environ if env is None else env, refs=refs, unset=unset)
    if unset:
        raise ConfigError(unset)
    try:
        config = Config.model_validate(data, context={"platforms": tuple(installed_platforms())})
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, Config)) from None
    config._env_refs = refs
    if not isinstance(source, Mapping):
        _anchor_files_dirs(config, Path(source).resolve().parent)
        config._source = Path(source)
    config._revision = config_revision(config)
    return config


def config_revision(config: Config) -> str:
    """A short hash of the effective configuration (variables substituted, defaults filled
    in), the same for the same settings whatever their order or layout in the file. Secrets
    are part of it, so a new token is a new revision; the hash is all that is shown of them."""
    return fingerprint(config)[:12]


def fingerprint(section: Any) -> str:
    """The SHA-256 of a section's settings, secrets included, layout and key order not."""
    text = json.dumps(_revealed(section), sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _revealed(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, BaseModel):
        return _revealed(value.model_dump(mode="python"))
    if isinstance(value, Mapping):
        return {str(key): _revealed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_revealed(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted(str(item) for item in value)
    return value


def _anchor_files_dirs(config: Config, base: Path) -> None:
    """A relative `files_dir` is relative to the configuration file, like every path in it,
    not to wherever the bot happens to be started from."""
    sections: list[MediaConfig | MediaOverrides] = [config.media]
    sections += [agent.media for agent in config.agents.values() if agent.media is not None]
    for section in sections:
        if section.files_dir and not Path(section.files_dir).expanduser().is_absolute():
            section.files_dir = str(base / section.files_dir)


def _yaml_problem(origin: str, exc: yaml.YAMLError) -> str:
    """`bot.yaml:12:5: not valid YAML: <what>`, the place first, the way editors link it."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{origin}:{mark.line + 1}:{mark.column + 1}" if mark is not None else origin
    what = " ".join(str(part) for part in (getattr(exc, "context", None), getattr(exc, "problem", None)) if part)
    return f"{where}: not valid YAML: {what or exc}"


def default_store_url(config: Config) -> str:
    """Where `botweave run` and `chat` keep state when bot.yaml names no store: one SQLite
    file per configuration file in the user state dir, named after the file and a hash of
    its absolute path (so two bot.yaml files in different folders never share state); the
    built-in configuration gets one of its own."""
    return _state_file_url(config.source)


def _state_file_url(source: Path | None) -> str:
    state = Path(platformdirs.user_state_dir("botweave", appauthor=False))
    if source is None:
        name = "builtin.db"
    else:
        absolute = source.resolve()
        digest = hashlib.sha256(str(absolute).encode()).hexdigest()[:8]
        name = f"{absolute.stem}-{digest}.db"
    return f"sqlite:///{state / name}"


def store_settings(source: Path | None) -> StoreConfig:
    """The `store:` section of a configuration file that may not load as a whole, with the
    store `botweave run` would use when it names none: how another process (`botweave
    reload`, `doctor`) still finds the state of the bot running on that file after someone
    broke it. ConfigError when not even that section can be read."""
    if source is None:
        return StoreConfig(url=_state_file_url(None))
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError([f"{source}: cannot be read ({exc})"]) from None
    section = raw.get("store") if isinstance(raw, dict) else None
    unset: list[str] = []
    data = substitute_env(section if isinstance(section, dict) else {}, os.environ, "store", unset=unset)
    if unset:
        raise ConfigError(unset)
    try:
        settings = StoreConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, StoreConfig, prefix="store")) from None
    if settings.url is None:
        settings.url = _state_file_url(source)
    return settings


def find_config(explicit: str | None) -> Path | None:
    """./bot.yaml, then ./bot.yaml.example; None means the built-in configuration."""
    if explicit:
        return Path(explicit)
    for candidate in ("bot.yaml", "bot.yaml.example"):
        if Path(candidate).is_file():
            return Path(candidate)
    return None


BUILTIN_CONFIG: dict[str, Any] = {
    "agents": {
        "assistant": {
            "model": "offline/echo",
            "instructions": "You are a helpful assistant.",
            # Try one with `call react {"emoji": "👍"}`: offline/echo calls tools on request.
            "tools": ["send_message", "react", "edit_message", "delete_message", "create_thread", "fetch_url"],
        }
    },
    "platforms": {"console": {}},
}
