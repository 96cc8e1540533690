"""The whole bot.yaml. Each section's model belongs to the package it configures (platform
sections to their adapters, `admission:` to policies, `rooms:` to rooms, `push:` to push);
this module puts them together, checks what refers to what, and loads the file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

import yaml
from botweave.config import (
    AgentConfig,
    BotConfig,
    ConfigError,
    NetworkConfig,
    PlatformConfig,
    RouteConfig,
    Section,
    StoreConfig,
    format_errors,
    substitute_env,
)
from botweave.policies.config import AdmissionConfig
from botweave.policies.egress import EgressPolicy
from botweave.push.preferences import PushConfig, parse_push_config
from botweave.rooms.config import RoomConfig
from botweave.runtime.platforms import installed_platforms
from botweave.runtime.schedules import ScheduleConfig
from botweave.tools import BUILTINS, load_python_tools
from pydantic import Field, PrivateAttr, ValidationError, create_model, model_validator

log = logging.getLogger(__name__)

#: `platforms:` accepts a section for every installed platform, each validated by its own model.
PlatformsConfig = create_model(
    "PlatformsConfig",
    __base__=Section,
    **{name: (Optional[spec.config], None) for name, spec in installed_platforms().items()},  # type: ignore[call-overload]
)


class Config(Section):
    bot: BotConfig = Field(default_factory=BotConfig)
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    platforms: PlatformsConfig = Field(default_factory=PlatformsConfig)  # type: ignore[valid-type]
    routes: list[RouteConfig] = Field(default_factory=list)
    store: StoreConfig = Field(default_factory=StoreConfig)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    rooms: dict[str, Any] = Field(default_factory=dict)
    push: dict[str, Any] = Field(default_factory=dict)
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)
    network: NetworkConfig = Field(default_factory=NetworkConfig)

    _env_refs: dict[str, list[str]] = PrivateAttr(default_factory=dict)

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
        for name, room in self.room_configs.items():
            missing = [member for member in room.roster if member not in self.agents]
            if missing:
                raise ValueError(
                    f"rooms.{name}.roster: {', '.join(missing)} not defined under `agents:`; "
                    f"defined agents: {', '.join(sorted(self.agents))}"
                )
        for name, schedule in self.schedules.items():
            if schedule.agent not in self.agents:
                raise ValueError(
                    f"schedules.{name}.agent: unknown agent {schedule.agent!r}; defined agents: "
                    + ", ".join(sorted(self.agents))
                )
        self._check_network()
        self._check_tools()
        return self

    def egress_policy(self, agent: str) -> EgressPolicy:
        """The network policy `agent`'s tools live under: its own `network:`, else the global one."""
        return EgressPolicy.from_config(self.agents[agent].network or self.network)

    def _check_network(self) -> None:
        blocks = [("network", self.network)] + [
            (f"agents.{name}.network", agent.network) for name, agent in self.agents.items() if agent.network
        ]
        for where, block in blocks:
            for field in ("allow_hosts", "deny_hosts"):
                for index, entry in enumerate(getattr(block, field)):
                    try:
                        EgressPolicy([entry])
                    except ValueError as exc:
                        raise ValueError(f"{where}.{field}.{index}: {exc}") from None

    def _check_tools(self) -> None:
        servers: dict[str, tuple[str, Any]] = {}
        for agent_name, agent in self.agents.items():
            for index, entry in enumerate(agent.tools):
                where = f"agents.{agent_name}.tools.{index}"
                if entry.kind == "builtin" and entry.name not in BUILTINS:
                    raise ValueError(f"{where}: unknown built-in tool {entry.name!r}; built-ins: {', '.join(BUILTINS)}")
                if entry.kind == "python":
                    try:  # imports the module, so `botweave check` catches a mistyped one
                        load_python_tools(entry.python or "")
                    except ValueError as exc:
                        raise ValueError(f"{where}.python: {exc}") from None
                if entry.kind != "mcp":
                    continue
                name, server = entry.server
                if "__" in name or not name.strip():
                    raise ValueError(f"{where}.mcp: name the server without `__` (its tools are called {name}__TOOL)")
                seen = servers.setdefault(name, (where, server))
                if seen[1] != server:
                    raise ValueError(f"{where}.mcp.{name}: defined differently at {seen[0]}; one name, one server")
                if server.url is not None:
                    refusal = self.egress_policy(agent_name).refusal(server.url)
                    if refusal is not None:
                        raise ValueError(f"{where}.mcp.{name}.url: {refusal}")

    @cached_property
    def room_configs(self) -> dict[str, RoomConfig]:
        return {str(name): RoomConfig.from_dict(str(name), data) for name, data in self.rooms.items()}

    @cached_property
    def push_config(self) -> PushConfig:
        return parse_push_config(self.push, platforms=installed_platforms())

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
        raise ConfigError(format_errors(exc, Config)) from None
    config.push_config  # noqa: B018 - parsing it here reports each push.* problem at load time
    config._env_refs = refs
    return config


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
