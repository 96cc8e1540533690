"""Reloading the configuration of a running bot: read the file again, check all of it, and
only then put it in place, without dropping a platform connection or a turn under way.

A reload builds a new generation (runtime/generation.py) with the builder that made the
first one, so what runs after a reload is what a start on that file would have made. The
order is what makes it safe:

1. Load and validate the whole file, as `botweave check` does (the models litellm cannot
   route included). Anything wrong, and nothing changes: the error is logged as one line,
   returned, and the bot reports the file on disk as differing from what runs (`/readyz`,
   `botweave doctor`) until a reload succeeds.
2. Build the new generation; start the MCP servers that are new or whose settings changed
   (a server whose settings did not change is taken over, still connected).
3. Swap, in one step with no await in between: the live generation, each platform's
   effective settings (allowlists, policies, rate limits), push preferences' defaults, the
   admission limits. A turn already running keeps the generation it started with; the next
   item takes the new one.
4. Hand the schedules over: the old schedulers stop scheduling, the new ones start from the
   shared ledger (a job whose timing changed starts afresh rather than counting the old
   timing's occurrences as missed).
5. Reconnect only the platforms whose connection settings changed (token, mode, API base
   URL, ...), start the ones switched on, stop the ones switched off.
6. Once no item runs in the old generation any more, stop what only it used: its schedulers'
   runs are waited for, its MCP servers that were not taken over are stopped.

Settings a running process cannot take (`store:`, `models.processes`, `ops.listen`,
`plugins:`) keep their running values; the reload says they wait for a restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from botweave.agents import Agent
from botweave.config import BotConfig, ConfigError, PlatformConfig
from botweave.metrics import CONFIG_RELOADS
from botweave.runtime.builder import Lasting, admission_limits, build_generation
from botweave.runtime.config import Config, OpsConfig, fingerprint, load_config, unroutable_models
from botweave.runtime.generation import Generation
from botweave.runtime.intake import Inbox, Intake, StreamIntake
from botweave.runtime.platforms import installed_platforms
from botweave.tasks import TaskOwner

log = logging.getLogger(__name__)

Status = Literal["applied", "unchanged", "invalid"]
Move = Literal["start", "stop", "reconnect"]
_DONE: dict[str, str] = {"start": "started", "stop": "stopped", "reconnect": "reconnected"}
Loader = Callable[[], Config]

#: Settings a running process keeps until it is restarted: where its state lives, its model
#: helper processes, the address of its ops endpoint, the code it loaded.
RESTART_ONLY = ("store", "models", "ops.listen", "plugins")
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
    section is named on its own (`platforms.discord`), and so is each setting of `ops:`."""
    applied: list[str] = []
    restart: list[str] = []
    for name in Config.model_fields:
        if name in ("platforms", "ops"):
            continue
        if fingerprint(getattr(old, name)) != fingerprint(getattr(new, name)):
            (restart if name in RESTART_ONLY else applied).append(name)
    for name in installed_platforms():
        before, after = old.platform(name), new.platform(name)
        if (fingerprint(before) if before is not None else None) != (fingerprint(after) if after is not None else None):
            applied.append(f"platforms.{name}")
    for name in OpsConfig.model_fields:
        if getattr(old.ops, name) != getattr(new.ops, name):
            (restart if f"ops.{name}" in RESTART_ONLY else applied).append(f"ops.{name}")
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
    new.ops.listen = old.ops.listen


# --- applying ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Running:
    """What `App.start` settled that a reload works within."""

    intake: Intake
    #: Where the leaders of platforms a reload starts run (the App's background tasks).
    background: TaskOwner
    #: The platforms `App.start` was asked for (None: every enabled one).
    requested: tuple[str, ...] | None
    #: This process answers (rooms' and agents' schedules run here).
    answers: bool


class Reloading:
    """The App's reloads, one at a time, each in the order the module docstring gives.

    `offer` gives a new generation's agents the tools a program or plugin added with
    `App.add_tool`; `receiver` is where the adapters of reconnected platforms hand what they
    receive (the App)."""

    def __init__(
        self,
        parts: Lasting,
        receiver: Inbox,
        *,
        source: Path | None,
        offer: Callable[[Mapping[str, Agent]], None],
        start_digests: Callable[[], None],
    ) -> None:
        self._parts = parts
        self._receiver = receiver
        self._offer = offer
        self._start_digests = start_digests
        #: How the configuration is read again: the file the App was made from, unless the
        #: CLI says how it reads one (its default store, `--ops-listen`).
        self.loader: Loader | None = file_loader(source) if source is not None else None
        self.running: Running | None = None
        #: The last reload's result (None before the first).
        self.last: ReloadResult | None = None
        #: Told the loop-stall threshold when a reload changes it (the loop watchdog, if any).
        self.on_loop_stall: Callable[[float], None] | None = None
        self._lock = asyncio.Lock()
        self._retiring: set[Generation] = set()
        self._tasks = TaskOwner("reload")
        self._read = _stat(source)  # the file as it was when it was last read

    async def reload(self, source: str | os.PathLike[str] | Config | None = None) -> ReloadResult:
        """Read the configuration again (or `source`: another file, or a `Config`), and apply
        it if all of it is valid. Logs one line with the revisions before and after."""
        async with self._lock:
            result = await self._reload(source)
        self.last = result
        CONFIG_RELOADS.labels(result.status).inc()
        (log.error if result.status == "invalid" else log.info)("%s", result.summary())
        return result

    async def _reload(self, source: str | os.PathLike[str] | Config | None) -> ReloadResult:
        old = self._parts.live.generation
        before = old.revision
        try:
            config = await self._load(source)
        except ConfigError as exc:
            return ReloadResult("invalid", before, before, error=str(exc))
        self._read = _stat(config.source)
        applied, restart = changed_sections(old.config, config)
        sections = self._enabled(config)
        moves = platform_moves(self._enabled(old.config), sections)
        if not applied and not moves:
            return ReloadResult("unchanged", before, before, restart=tuple(restart))
        keep_restart_only(config, old.config)
        try:
            generation = build_generation(config, self._parts)
            self._offer(generation.agents)
        except ConfigError as exc:
            return ReloadResult("invalid", before, before, error=str(exc))
        running = self.running
        if running is not None and self._parts.role != "ingress":
            generation.tools.mcp.take_over(old.tools.mcp)
            await generation.tools.start(generation.agents)
        self._swap(generation, reconnecting=moves)
        if running is not None and running.answers:
            await _hand_over_schedules(old, generation)
        failed = await self._move(moves, sections) if running is not None else {}
        self._retiring.add(old)
        self._tasks.spawn(self._retire(old), name=f"retire configuration revision {before}")
        return ReloadResult(
            "applied", before, generation.revision, changed=tuple(applied), platforms=dict(moves),
            restart=tuple(restart), failed=failed,
        )

    async def _load(self, source: str | os.PathLike[str] | Config | None) -> Config:
        if isinstance(source, Config):
            config = source
        else:
            loader = file_loader(Path(source)) if source is not None else self.loader
            if loader is None:
                raise ConfigError(["this bot was not made from a configuration file, so there is none to read again"])
            config = await asyncio.to_thread(loader)  # it imports the Python tools the file names
        if self._parts.role != "ingress":  # a process that runs turns checks what `check` checks
            problems = await asyncio.to_thread(unroutable_models, config)
            if problems:
                raise ConfigError(problems)
        return config

    def _enabled(self, config: Config) -> dict[str, PlatformConfig]:
        """The platforms of `config` this process runs (those `App.start` was asked for)."""
        if self.running is None:
            return {}
        return config.enabled_platforms(self.running.requested, warn=False)

    def _swap(self, generation: Generation, *, reconnecting: Collection[str]) -> None:
        """Everything the next item reads, switched in one step (nothing here awaits)."""
        parts, config = self._parts, generation.config
        parts.live.generation = generation
        parts.platforms.reconfigure(config, reconnecting)
        parts.preferences.configure(config.push)
        parts.admission.limits = admission_limits(config.admission)
        if self.on_loop_stall is not None:
            self.on_loop_stall(config.ops.loop_stall_seconds)
        if config.push.directory:
            self._start_digests()

    async def _move(self, moves: Mapping[str, Move], sections: Mapping[str, PlatformConfig]) -> dict[str, str]:
        """Reconnect, start or stop each platform in `moves`; the ones that failed, with why."""
        assert self.running is not None
        intake, platforms = self.running.intake, self._parts.platforms
        failed: dict[str, str] = {}
        for name, move in moves.items():
            section = sections.get(name)
            log.info("platform %s: %s, for the reloaded configuration", name, move)
            failure = await platforms.replace(name, section, self._receiver, intake.receives)
            if failure is not None:
                failed[name] = failure
            adapter = platforms.adapters.get(name)
            if isinstance(intake, StreamIntake) and not (adapter is not None and adapter.local):
                intake.lead(name, section if adapter is not None else None, self._receiver, self.running.background, platforms)
        return failed

    async def _retire(self, old: Generation) -> None:
        """Stop what only `old` used, once nothing runs in it any more."""
        await old.settled()
        await stop_generation(old)
        self._retiring.discard(old)

    def drift(self) -> dict[str, str]:
        """How the configuration file differs from what runs, if it does: a reload refused
        it, it changed since it was read, or it changed settings only a restart applies."""
        last, source = self.last, self._parts.live.generation.config.source
        revision = self._parts.live.generation.revision
        if last is not None and last.status == "invalid" and self.loader is not None:
            return {"config": f"the file on disk differs from what runs (revision {revision}): {last.problems()}"}
        if self.loader is not None and source is not None and _stat(source) != self._read:
            return {"config": f"{source} changed on disk since it was read; revision {revision} runs (reload to apply it)"}
        if last is not None and last.restart:
            return {"config": f"{', '.join(last.restart)} changed in the file; the running values stay until a restart"}
        return {}

    async def stop(self) -> None:
        """The App stops: the generations still being retired are stopped now."""
        await self._tasks.close(0.5, grace=0.5)
        for old in list(self._retiring):
            await stop_generation(old)
        self._retiring.clear()


async def _hand_over_schedules(old: Generation, new: Generation) -> None:
    """The old schedulers stop scheduling (their runs go on), the new ones take over."""
    if old.rooms is not None:
        old.rooms.scheduler.halt()
    if old.schedules is not None:
        old.schedules.halt()
    if new.rooms is not None:
        await new.rooms.start(old.rooms)
    if new.schedules is not None:
        await new.schedules.start(old.schedules)


async def stop_generation(generation: Generation) -> None:
    """Stop the schedulers (waiting for their runs) and the MCP servers of a generation."""
    if generation.rooms is not None:
        await generation.rooms.stop()
    if generation.schedules is not None:
        await generation.schedules.stop()
    await generation.tools.stop()


def file_loader(source: Path) -> Loader:
    return lambda: load_config(source)


def _stat(source: Path | None) -> tuple[int, int] | None:
    """What tells a file changed without reading it: its modification time and size."""
    if source is None:
        return None
    try:
        status = source.stat()
    except OSError:
        return (0, 0)
    return (status.st_mtime_ns, status.st_size)
