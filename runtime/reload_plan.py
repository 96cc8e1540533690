"""What a reload changes, decided without doing any of it: which settings differ between the
running configuration and the file (applied in place, or waiting for a restart), what each
platform's connection needs (left alone, reconnected, started, stopped), and the result a
reload reports. runtime/reload.py does what this decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from botweave.config import BotConfig, PlatformConfig
from botweave.gateway.config import GatewayConfig
from botweave.runtime.config import Config, OpsConfig, fingerprint
from botweave.runtime.platforms import installed_platforms

Status = Literal["applied", "unchanged", "invalid"]
Move = Literal["start", "stop", "reconnect"]
_DONE: dict[str, str] = {"start": "started", "stop": "stopped", "reconnect": "reconnected"}

#: Settings a running process keeps until it is restarted: where its state lives, its model
#: clients and helper processes, the addresses of its ops endpoint and gateway, the code it
#: loaded.
RESTART_ONLY = ("store", "models", "ops.listen", "gateway.listen", "plugins")
#: Sections compared setting by setting, since some of their settings wait for a restart.
_BY_SETTING: dict[str, Any] = {"ops": OpsConfig, "gateway": GatewayConfig}
#: Fields of a platform's section that are not its connection: the policies every platform
#: shares (allowlists, group policy, streaming, ...) and where bare-platform targets post.
_NOT_CONNECTION = frozenset(BotConfig.model_fields) | {"home_chat"}


@dataclass(frozen=True)
class ReloadResult:
    """What a reload did. `before` and `after` are config revisions (equal unless applied)."""

    status: Status
    before: str
    after: str
    #: Top-level sections applied in place (`agents`, `routes`, `platforms.telegram`, ...).
    changed: tuple[str, ...] = ()
    #: What happened to each platform whose connection settings changed: reconnected,
    #: started (switched on) or stopped (switched off). The others were not touched.
    platforms: dict[str, Move] = field(default_factory=dict)
    #: Settings that changed in the file and take effect only at the next restart.
    restart: tuple[str, ...] = ()
    #: Platforms that did not come back up after their reconnect, with why.
    failed: dict[str, str] = field(default_factory=dict)
    #: Why the file was refused: the problems `botweave check` prints, one per line.
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "invalid"

    def problems(self) -> str:
        """Why the file was refused, in one line (the fields and what they accept)."""
        first, *more = (self.error or "").splitlines() or [""]
        return f"{first} {'; '.join(line.strip() for line in more)}" if more else first

    def summary(self) -> str:
        """One line, as logged and as `botweave reload` prints it."""
        if self.status == "invalid":
            return f"config reload refused, still running revision {self.before}: {self.problems()}"
        if self.status == "unchanged":
            line = f"config unchanged: revision {self.before}"
        else:
            line = f"config reloaded: revision {self.before} -> {self.after}; applied: {', '.join(self.changed) or 'nothing'}"
            if self.platforms:
                line += "; platforms: " + ", ".join(f"{name} {_DONE[move]}" for name, move in self.platforms.items())
        if self.failed:
            line += "; failed to reconnect: " + ", ".join(f"{name} ({why})" for name, why in self.failed.items())
        if self.restart:
            line += f"; waiting for a restart: {', '.join(self.restart)}"
        return line

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReloadResult:
        return cls(
            status=data["status"], before=data["before"], after=data["after"],
            changed=tuple(data.get("changed") or ()), platforms=dict(data.get("platforms") or {}),
            restart=tuple(data.get("restart") or ()), failed=dict(data.get("failed") or {}), error=data.get("error"),
        )


# --- what changed (pure) ----------------------------------------------------------------------


def changed_sections(old: Config, new: Config) -> tuple[list[str], list[str]]:
    """The settings that differ, as (applied in place, waiting for a restart). A platform's
    section is named on its own (`platforms.discord`), and so is each setting of `ops:` and
    `gateway:` (`gateway.tokens`)."""
    applied: list[str] = []
    restart: list[str] = []
    for name in Config.model_fields:
        if name == "platforms" or name in _BY_SETTING:
            continue
        if fingerprint(getattr(old, name)) != fingerprint(getattr(new, name)):
            (restart if name in RESTART_ONLY else applied).append(name)
    for name in installed_platforms():
        before, after = old.platform(name), new.platform(name)
        if (fingerprint(before) if before is not None else None) != (fingerprint(after) if after is not None else None):
            applied.append(f"platforms.{name}")
    for section, model in _BY_SETTING.items():
        for name in model.model_fields:
            setting = f"{section}.{name}"
            if fingerprint(getattr(getattr(old, section), name)) != fingerprint(getattr(getattr(new, section), name)):
                (restart if setting in RESTART_ONLY else applied).append(setting)
    return applied, restart


def connection(section: PlatformConfig) -> str:
    """The connection settings of a platform's section: what its SDK client is made with."""
    return fingerprint(section.model_dump(mode="python", exclude=set(_NOT_CONNECTION)))


def platform_moves(old: Mapping[str, PlatformConfig], new: Mapping[str, PlatformConfig]) -> dict[str, Move]:
    """What a reload does to each platform this process runs or would run; one whose
    connection settings did not change is absent (it is left alone)."""
    moves: dict[str, Move] = {}
    for name in sorted({*old, *new}):
        if name not in new:
            moves[name] = "stop"
        elif name not in old:
            moves[name] = "start"
        elif connection(old[name]) != connection(new[name]):
            moves[name] = "reconnect"
    return moves


def keep_restart_only(new: Config, old: Config) -> None:
    """The settings only a restart applies keep their running values in the new generation."""
    new.store, new.models, new.plugins = old.store, old.models, old.plugins
    new.ops.listen, new.gateway.listen = old.ops.listen, old.gateway.listen
