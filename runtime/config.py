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

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

import yaml
from botweave.config import (
    AgentConfig,
    BotConfig,
    ConfigError,
    PlatformConfig,
    RouteConfig,
    Section,
    StoreConfig,
    format_errors,
    problem,
    raise_problems,
    substitute_env,
)
from botweave.policies.config import AdmissionConfig
from botweave.push.config import PushConfig
from botweave.rooms.config import Rooms
from botweave.runtime.platforms import installed_platforms
from pydantic import Field, PrivateAttr, ValidationError, create_model, field_validator, model_validator

log = logging.getLogger(__name__)

#: `platforms:` accepts a section for every installed platform, each validated by its own model.
PlatformsConfig = create_model(
    "PlatformsConfig",
    __base__=Section,
    **{name: (Optional[spec.config], None) for name, spec in installed_platforms().items()},  # type: ignore[call-overload]
)


def parse_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:9464` for IPv6) as (host, port); port 0 lets the system choose."""
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9464, or 0.0.0.0:9464 in a container)")
    return host, int(port)


class OpsConfig(Section):
    """`ops:` what operators and their tools read: `/metrics`, `/healthz` and `/readyz` on
    `listen` (HOST:PORT). Off unless set here or with `--ops-listen`."""

    listen: Optional[str] = None

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            parse_listen(value)
        return value


class Config(Section):
    bot: BotConfig = Field(default_factory=BotConfig)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    platforms: PlatformsConfig = Field(default_factory=PlatformsConfig)  # type: ignore[valid-type]
    routes: list[RouteConfig] = Field(default_factory=list)
    store: StoreConfig = Field(default_factory=StoreConfig)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    rooms: Rooms = Field(default_factory=dict)
    push: PushConfig = Field(default_factory=PushConfig)
    schedules: dict[str, Any] = Field(default_factory=dict)
    ops: OpsConfig = Field(default_factory=OpsConfig)
    #: Python modules whose `setup(app)` runs at start (`module` or `module:function`), after
    #: those installed under the `botweave.plugins` entry point.
    plugins: list[str] = Field(default_factory=list)

    @field_validator("plugins")
    @classmethod
    def _importable_names(cls, value: list[str]) -> list[str]:
        for name in value:
            module, _, attr = name.partition(":")
            if not all(part.isidentifier() for part in module.split(".")) or (attr and not attr.isidentifier()):
                raise ValueError(f"{name!r} is not a module name (package.module or package.module:function)")
        return value

    _env_refs: dict[str, list[str]] = PrivateAttr(default_factory=dict)

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
        raise_problems(type(self).__name__, problems)
        return self

    def platform(self, name: str) -> PlatformConfig | None:
        return getattr(self.platforms, name, None)

    def enabled_platforms(self, only: Iterable[str] | None = None) -> dict[str, PlatformConfig]:
        """Platforms that are switched on and have their credentials; others warn once."""
        enabled = {}
        wanted = set(installed_platforms()) if only is None else set(only)
        for name in installed_platforms():
            section = self.platform(name)
            if name not in wanted or section is None or not section.enabled:
                continue
            hints = self.missing_credentials(name)
            if hints:
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
    return config


def _yaml_problem(origin: str, exc: yaml.YAMLError) -> str:
    """`bot.yaml:12:5: not valid YAML: <what>`, the place first, the way editors link it."""
    mark = getattr(exc, "problem_mark", None)
    where = f"{origin}:{mark.line + 1}:{mark.column + 1}" if mark is not None else origin
    what = " ".join(str(part) for part in (getattr(exc, "context", None), getattr(exc, "problem", None)) if part)
    return f"{where}: not valid YAML: {what or exc}"


def find_config(explicit: str | None) -> Path | None:
    """./bot.yaml, then ./bot.yaml.example; None means the built-in configuration."""
    if explicit:
        return Path(explicit)
    for candidate in ("bot.yaml", "bot.yaml.example"):
        if Path(candidate).is_file():
            return Path(candidate)
    return None


BUILTIN_CONFIG: dict[str, Any] = {
    "agents": {"assistant": {"model": "offline/echo", "instructions": "You are a helpful assistant."}},
    "platforms": {"console": {}},
}
