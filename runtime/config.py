"""The whole bot.yaml. Each section's model belongs to the package it configures (platform
sections to their adapters, `admission:` to policies, `rooms:` to rooms, `push:` to push);
this module puts them together, checks what refers to what, and loads the file.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

import platformdirs
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
    substitute_env,
)
from botweave.policies.config import AdmissionConfig
from botweave.push.preferences import PushConfig, parse_push_config
from botweave.rooms.config import RoomConfig
from botweave.runtime.platforms import installed_platforms
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
    schedules: dict[str, Any] = Field(default_factory=dict)

    _env_refs: dict[str, list[str]] = PrivateAttr(default_factory=dict)
    #: The file this configuration was read from (None: a mapping, or the built-in one).
    _source: Optional[Path] = PrivateAttr(default=None)

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def base_dir(self) -> Path | None:
        """The folder relative store paths are taken from: the configuration file's."""
        return self._source.resolve().parent if self._source is not None else None

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
        return self

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
    if not isinstance(source, Mapping):
        config._source = Path(source)
    return config


def default_store_url(config: Config) -> str:
    """Where `botweave run` and `chat` keep state when bot.yaml names no store: one SQLite
    file per configuration file in the user state dir, named after the file and a hash of
    its absolute path (so two bot.yaml files in different folders never share state); the
    built-in configuration gets one of its own."""
    state = Path(platformdirs.user_state_dir("botweave", appauthor=False))
    if config.source is None:
        name = "builtin.db"
    else:
        absolute = config.source.resolve()
        digest = hashlib.sha256(str(absolute).encode()).hexdigest()[:8]
        name = f"{absolute.stem}-{digest}.db"
    return f"sqlite:///{state / name}"


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
