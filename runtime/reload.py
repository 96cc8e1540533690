"""Reloading the configuration of a running bot: read the file again, check all of it, and
only then put it in place, without dropping a platform connection or a turn under way.

A reload builds a new generation (runtime/generation.py) with the builder that made the
first one, so what runs after a reload is what a start on that file would have made. The
order is what makes it safe:

1. Load and validate the whole file, as `botweave check` does (the models litellm cannot
   route included). Anything wrong, and nothing changes: the error is logged as one line,
   returned, and the bot reports the file on disk as differing from what runs (`/readyz`,
   the gateway's `health`, `botweave doctor`) until a reload succeeds.
2. Build the new generation; start the MCP servers that are new or whose settings changed
   (a server whose settings did not change is taken over, still connected).
3. Swap, in one step with no await in between: the live generation, each platform's
   effective settings (allowlists, policies, rate limits), and every part that follows the
   swap (`on_swap`, registered by the builder: push preferences' defaults, the admission
   limits, the digests, the loop watch's threshold, the gateway's tokens and settings). A
   turn already running keeps the generation it started with; the next item takes the new one.
4. Hand the schedules over: the old schedulers stop scheduling, the new ones start from the
   shared ledger (a job whose timing changed starts afresh rather than counting the old
   timing's occurrences as missed).
5. Reconnect only the platforms whose connection settings changed (token, mode, API base
   URL, ...), start the ones switched on, stop the ones switched off.
6. Once no item runs in the old generation any more, stop what only it used: its schedulers'
   runs are waited for, its MCP servers that were not taken over are stopped.

Settings a running process cannot take (`store:`, `models:`, `ops.listen`, `gateway.listen`,
`plugins:`) keep their running values; the reload says they wait for a restart. What
changed is decided in runtime/reload_plan.py. `Reloading` is `App.reloads`; what other
processes and the operator see of a process (its record, the loop watch, the ops endpoint)
is the process's ops (runtime/ops.py), which reload through it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botweave.agents import Agent
from botweave.config import ConfigError, PlatformConfig
from botweave.metrics import CONFIG_RELOADS
from botweave.runtime.config import Config, load_config, unroutable_models
from botweave.runtime.connections import Platforms
from botweave.runtime.gateway import enable_web
from botweave.runtime.generation import Generation, Live
from botweave.runtime.intake import Inbox, Intake, StreamIntake
from botweave.runtime.lifecycle import Role
from botweave.runtime.reload_plan import Move, ReloadResult, changed_sections, keep_restart_only, platform_moves
from botweave.tasks import TaskOwner
from botweave.tooling import Tool
from botweave.tools.python import function_tool

log = logging.getLogger(__name__)

Loader = Callable[[], Config]
#: Told of each generation a reload puts live, in the same step (nothing may await there).
SwapHook = Callable[[Generation], None]
#: Makes a generation from a configuration, wired to the App's lasting parts (the builder's).
Rebuild = Callable[[Config], Generation]


# --- applying ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Started:
    """What `App.start` settled that a reload works within."""

    intake: Intake
    #: Where the leaders of platforms a reload starts run (the App's background tasks).
    background: TaskOwner
    #: The platforms `App.start` was asked for (None: every enabled one).
    requested: tuple[str, ...] | None
    #: This process answers (rooms' and agents' schedules run here).
    answers: bool


class Reloading:
    """The App's reloads (`App.reloads`), one at a time, each in the order the module
    docstring gives. A new generation is made by `rebuild` (the builder's, as the first was)
    and gets the tools a program or plugin added with `App.add_tool` (`added`). Parts outside
    the generation that follow each one put live register with `on_swap`. The builder hands
    it the App as the receiver of reconnected platforms (`receive_with`), once the App exists."""

    def __init__(
        self, live: Live, platforms: Platforms, rebuild: Rebuild, *, role: Role, source: Path | None
    ) -> None:
        self._live = live
        self._platforms = platforms
        self._rebuild = rebuild
        self._role = role
        self._receiver: Inbox | None = None
        #: The tools `App.add_tool` gave, offered to every generation a reload makes.
        self.added = AddedTools()
        #: How the configuration is read again: the file the App was made from, unless the
        #: CLI says how it reads one (its default store, `--ops-listen`).
        self.loader: Loader | None = file_loader(source) if source is not None else None
        self._started: _Started | None = None
        #: The last reload's result (None before the first).
        self.last: ReloadResult | None = None
        self._followers: list[SwapHook] = []
        self._lock = asyncio.Lock()
        self._retiring: set[Generation] = set()
        self._tasks = TaskOwner("reload")
        self._read = _stat(source)  # the file as it was when it was last read

    def receive_with(self, receiver: Inbox) -> None:
        """Where the adapters of platforms a reload (re)connects hand what they receive."""
        self._receiver = receiver

    def on_swap(self, hook: SwapHook) -> None:
        """Tell `hook` of each generation a reload puts live, in the swap's own step."""
        self._followers.append(hook)

    def read_with(self, loader: Loader) -> None:
        """Read the configuration again with `loader` (how the CLI reads a file: its default
        store, `--ops-listen`) instead of plainly loading the file the App was made from."""
        self.loader = loader

    def started(self, intake: Intake, background: TaskOwner, platforms: Iterable[str] | None, *, answers: bool) -> None:
        """`App.start` is done: reloads work within what it started."""
        requested = tuple(platforms) if platforms is not None else None
        self._started = _Started(intake, background, requested, answers)

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
        old = self._live.generation
        before = old.revision
        try:
            config = await self._load(source)
        except ConfigError as exc:
            return ReloadResult("invalid", before, before, error=str(exc))
        self._read = _stat(config.source)
        _, restart = changed_sections(old.config, config)
        keep_restart_only(config, old.config)
        enable_web(config)  # as the first start did, when the gateway runs
        applied, _ = changed_sections(old.config, config)
        sections = self._enabled(config)
        moves = platform_moves(self._enabled(old.config), sections)
        if not applied and not moves:
            return ReloadResult("unchanged", before, before, restart=tuple(restart))
        try:
            generation = self._rebuild(config)
            self.added.offer(generation.agents)
        except ConfigError as exc:
            return ReloadResult("invalid", before, before, error=str(exc))
        started = self._started
        if started is not None and self._role != "ingress":
            generation.tools.mcp.take_over(old.tools.mcp)
            await generation.tools.start(generation.agents)
        self._swap(generation, reconnecting=moves)
        if started is not None and started.answers:
            await _hand_over_schedules(old, generation)
        failed = await self._move(moves, sections) if started is not None else {}
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
        if self._role != "ingress":  # a process that runs turns checks what `check` checks
            problems = await asyncio.to_thread(unroutable_models, config)
            if problems:
                raise ConfigError(problems)
        return config

    def _enabled(self, config: Config) -> dict[str, PlatformConfig]:
        """The platforms of `config` this process runs (those `App.start` was asked for)."""
        if self._started is None:
            return {}
        return config.enabled_platforms(self._started.requested, warn=False)

    def _swap(self, generation: Generation, *, reconnecting: Collection[str]) -> None:
        """Everything the next item reads, switched in one step (nothing here awaits): the
        live generation, each platform's effective settings, then every follower (push
        preferences' defaults, the admission limits, the loop watch, the gateway, ...)."""
        self._live.generation = generation
        self._platforms.reconfigure(generation.config, reconnecting)
        for hook in self._followers:
            hook(generation)

    async def _move(self, moves: Mapping[str, Move], sections: Mapping[str, PlatformConfig]) -> dict[str, str]:
        """Reconnect, start or stop each platform in `moves`; the ones that failed, with why."""
        assert self._started is not None and self._receiver is not None
        intake, platforms = self._started.intake, self._platforms
        failed: dict[str, str] = {}
        for name, move in moves.items():
            section = sections.get(name)
            log.info("platform %s: %s, for the reloaded configuration", name, move)
            failure = await platforms.replace(name, section, self._receiver, intake.receives)
            if failure is not None:
                failed[name] = failure
            adapter = platforms.adapters.get(name)
            if isinstance(intake, StreamIntake) and not (adapter is not None and adapter.local):
                intake.lead(name, section if adapter is not None else None, self._receiver, self._started.background, platforms)
        return failed

    async def _retire(self, old: Generation) -> None:
        """Stop what only `old` used, once nothing runs in it any more."""
        await old.settled()
        await stop_generation(old)
        self._retiring.discard(old)

    def drift(self) -> dict[str, str]:
        """How the configuration file differs from what runs, if it does: a reload refused
        it, it changed since it was read, or it changed settings only a restart applies."""
        last, source = self.last, self._live.generation.config.source
        revision = self._live.generation.revision
        if last is not None and last.status == "invalid" and self.loader is not None:
            return {"config": f"the file on disk differs from what runs (revision {revision}): {last.problems()}"}
        if self.loader is not None and source is not None and _stat(source) != self._read:
            return {"config": f"{source} changed on disk since it was read; revision {revision} runs (reload to apply it)"}
        if last is not None and last.restart:
            return {"config": f"{', '.join(last.restart)} changed in the file; the running values stay until a restart"}
        return {}

    def config_status(self) -> dict[str, str]:
        """The revision this process runs and, under `differs`, how the file on disk differs
        from it (a reload refused it, it was edited since, or it changed settings only a
        restart applies): what the gateway's `health` reports."""
        note = self.drift().get("config")
        return {"revision": self._live.generation.revision, **({"differs": note} if note else {})}

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
    await generation.stop_schedules()
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


class AddedTools:
    """Tools a program or plugin offered with `App.add_tool`, given again to the agents of
    every generation a reload makes."""

    def __init__(self) -> None:
        self._added: list[tuple[Tool, tuple[str, ...] | None]] = []

    def add(self, tool: Callable[..., Any], agents: Mapping[str, Agent], names: Sequence[str] | None) -> None:
        """Give `tool` to the agents `names` (all when None) of the live generation `agents`."""
        unknown = [name for name in names or () if name not in agents]
        if unknown:
            raise ValueError(f"add_tool: unknown agent(s) {', '.join(unknown)}; agents: {', '.join(agents)}")
        made = function_tool(tool)
        chosen = list(names) if names is not None else list(agents)
        for name in chosen:
            if made.name in agents[name].tools:
                raise ValueError(f"add_tool: agent {name} already has a tool named {made.name!r}")
        for name in chosen:
            agents[name].tools[made.name] = made
        self._added.append((made, tuple(names) if names is not None else None))

    def offer(self, agents: Mapping[str, Agent]) -> None:
        """Give a reloaded configuration's agents the added tools (all of them, or those of
        the names that are still there); a clash with a tool of the new configuration is a
        configuration error naming both."""
        for made, names in self._added:
            for name in names if names is not None else agents:
                agent = agents.get(name)
                if agent is None:
                    continue
                if made.name in agent.tools:
                    raise ConfigError([f"agents.{name}.tools: a tool named {made.name!r} was added by a plugin already"])
                agent.tools[made.name] = made
