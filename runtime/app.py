"""The App: a bot, from the platforms it connects to the agents that answer; made and wired by
`runtime/builder.py` (`App.from_config`), and read here as the table of contents of a bot's
life: it holds and exposes its parts and never makes one. `submit` returns once an item is
recorded (`runtime/intake.py`: journal, shared stream, or nothing before start), `handle`
answers it; both are ways into the arrival chain (`runtime/arrival.py`), which every item
takes to the end of its turn. `run`/`serve` are a process's life
(`runtime/process.py`), `reload` applies the file again in place (`runtime/reload.py`)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from botweave.adapter import Adapter
from botweave.agents import Agent
from botweave.conversations import conversation_key
from botweave.files import FileSource
from botweave.gateway.server import Gateway
from botweave.pipeline import TurnOutcome
from botweave.push import NotificationCategory, NotificationOutcome, Notifier, Recipient
from botweave.rooms.hub import RoomHub
from botweave.router import Router
from botweave.runtime import process
from botweave.runtime.arrival import Arrival
from botweave.runtime.builder import Lasting, build
from botweave.runtime.config import Config, load_config
from botweave.runtime.intake import JournalIntake, StreamIntake, open_intake
from botweave.runtime.lifecycle import Role
from botweave.runtime.logs import setup_logging
from botweave.runtime.ops import OpsServer, ProcessOps, store_problem
from botweave.runtime.poster import Poster
from botweave.runtime.process import EXIT_CONFIG, EXIT_OK, EXIT_PLATFORM, EXIT_STALLED, EXIT_STARTUP, EXIT_STORE
from botweave.runtime.reload import Reloading
from botweave.runtime.reload_plan import ReloadResult
from botweave.runtime.scheduled_agents import AgentSchedules
from botweave.runtime.watchdog import Watchdogs
from botweave.store import Store
from botweave.store.carrier import InboundCarrier
from botweave.tools import Toolsets
from botweave.types import BotMessage, Button, MessageActionResult, PlatformEvent, PressAnswer

__all__ = ["App", "ReloadResult", "Role", "Watchdogs", "EXIT_OK", "EXIT_PLATFORM", "EXIT_CONFIG", "EXIT_STORE",
           "EXIT_STARTUP", "EXIT_STALLED"]

log = logging.getLogger(__name__)


class App:
    """A running bot. Build it with `App.from_config("bot.yaml")`, register commands, hooks and
    tools on it, then `run()` it (blocking, with signal handling) or `await serve()` it in your
    own event loop; the same object is what `botweave run` serves and a plugin's `setup(app)` gets."""

    def __init__(self, lasting: Lasting, reloads: Reloading, ops: ProcessOps) -> None:
        """Hold what the builder made (`App.from_config` is how an App is made); the builder
        then sets `plugins` and `gateway`, which need the finished App."""
        self.role = lasting.role
        #: Where the bot's state lives (conversations, history, dedup, the journal or stream).
        self.store = lasting.store
        #: What plugins and programs register on (see docs/guides/plugins.md).
        self.hooks = lasting.hooks
        self.commands = lasting.commands
        self.history = lasting.history
        self.preferences = lasting.preferences
        #: The platforms this process runs, and the enabled ones that never came up (with why).
        self.adapters = lasting.platforms.adapters
        self.failed_platforms = lasting.platforms.failed
        self.targets = lasting.targets
        #: Who is heard, and what waits for a person.
        self.access = lasting.access
        self.approvals = lasting.approvals
        self.asks = lasting.asks
        #: What agents keep about each person.
        self.memory = lasting.memory
        #: Fallbacks, cool-downs, budgets and usage around every model call.
        self.models = lasting.guard
        self.model_processes = lasting.model_processes
        #: Conversation events, published everywhere things happen; None without a gateway.
        self.events = lasting.events
        #: Reloading the configuration in place (runtime/reload.py).
        self.reloads = reloads
        #: The plugins whose setup ran, installed ones first (set by the builder; runtime/plugins.py).
        self.plugins: list[str] = []
        #: The WebSocket control plane this process serves (None without one, or in a worker;
        #: set by the builder).
        self.gateway: Gateway | None = None
        self._parts = lasting
        self._ops = ops
        self._platforms = lasting.platforms
        self._handling, self._intake = lasting.handling, lasting.intake
        self._tracer, self._arrivals = lasting.tracer, lasting.arrivals
        self._gateway_serving = False

    @classmethod
    def from_config(
        cls, source: str | os.PathLike[str] | Mapping[str, Any] | Config, *, store: Store | None = None, role: Role = "all"
    ) -> App:
        """An App for a bot.yaml path, a mapping of the same shape, or a loaded `Config`; the
        plugins it lists (and those installed under the `botweave.plugins` entry point) are
        set up here. `store` replaces the one the configuration names (tests, embedding)."""
        config = source if isinstance(source, Config) else load_config(source)
        return build(cls, config, store=store, role=role)

    # --- the live generation: what the configuration running now made (a reload replaces
    # these, so they are looked up each time, never kept) ---------------------------------------

    @property
    def config(self) -> Config:
        return self._parts.live.generation.config

    @property
    def revision(self) -> str:
        """The revision of the configuration this process answers with (`config_revision`)."""
        return self._parts.live.generation.revision

    @property
    def agents(self) -> dict[str, Agent]:
        return self._parts.live.generation.agents

    @property
    def router(self) -> Router:
        return self._parts.live.generation.router

    @property
    def tools(self) -> Toolsets:
        return self._parts.live.generation.tools

    @property
    def rooms(self) -> RoomHub | None:
        return self._parts.live.generation.rooms

    @property
    def schedules(self) -> AgentSchedules | None:
        return self._parts.live.generation.schedules

    @property
    def notifier(self) -> Notifier:
        return self._parts.live.generation.notifier

    @property
    def _poster(self) -> Poster:
        return self._parts.live.generation.poster

    @property
    def ops(self) -> OpsServer | None:
        """The ops endpoint (`ops.listen`), while it is served."""
        return self._ops.endpoint

    # --- lifecycle ------------------------------------------------------------------------

    def add_adapter(self, adapter: Adapter) -> None:
        """Attach an adapter (`start` does this for each enabled platform; tests attach their own)."""
        self._platforms.add(adapter, self)

    async def start(self, platforms: Iterable[str] | None = None, *, receive: bool = True) -> None:
        """Connect the store and start every enabled platform (or just `platforms`). SQLite or memory:
        all in this process, through the store's inbound journal (replayed first). Redis: the shared
        stream; `ingress` holds the platforms (leader lock), `worker` answers, `all` does both.
        `ops.listen` serves the operator's endpoints from the first moment (alive, not ready)."""
        if self.config.ops.listen and self.ops is None:
            await self._ops.serve_endpoint(self.config.ops.listen, self.readiness)
        await self.store.connect()
        log.info("store: %s", self.store.describe())
        if self.role != "ingress":  # an ingress process never runs a turn
            if self.model_processes is not None:
                await self.model_processes.start()
            if self._parts.model_clients is not None:
                self._parts.model_clients.open()
            await self.tools.start(self.agents)
        sections = self.config.enabled_platforms(platforms)
        for name, section in sections.items():
            if name not in self.adapters:
                self.add_adapter(self._platforms.create(name, section, self))
        parts = self._parts
        self._intake = await open_intake(
            parts.turns, self.store, self.config.store, parts.patience, self.adapters, role=self.role, receive=receive
        )
        await self._intake.replay(self)
        for name in self.adapters:
            self.access.explain(name)
        await self._platforms.start(sections, self, self._intake.receives)
        await self._intake.run(self, self._parts.background, self._platforms, sections)
        answers = receive and self.role in ("all", "worker")
        if answers:
            await self._start_answering()
        self._parts.notices.start_digests(self._parts.background, self._parts.life.stopping)
        self.reloads.started(self._intake, self._parts.background, platforms, answers=answers)
        self._ops.started(receive=receive)
        if self.gateway is not None and receive:
            self._gateway_serving = True
            await self.gateway.start()
        self._parts.life.started()

    async def _start_answering(self) -> None:
        """What only a process that answers runs: rooms' and agents' schedules, and the
        approvals a stopped run left open, closed as expired."""
        await self._parts.live.generation.start_schedules()
        closed = await self.approvals.sweep()
        if closed:
            log.warning("%d approval request(s) were left unanswered by a stopped run; reported expired", closed)
        asked = await self.asks.sweep()
        if asked:
            log.warning("%d question(s) an agent asked were left unanswered by a stopped run; reported expired", asked)

    async def stop(self, timeout: float = 5.0) -> None:
        """Let in-flight turns finish for up to `timeout` seconds, then cancel, then disconnect.
        A cancelled turn is not lost: its item stays in the journal or the stream, and runs
        again at the next start or in another worker."""
        self._parts.life.stop(timeout)
        if self.gateway is not None:
            await self.gateway.stop()
        self.approvals.shutting_down()
        self.asks.shutting_down()
        await self._parts.live.generation.stop_schedules()
        # the stream's own wind-down: up to `timeout` for started turns, then the hand-back
        await self._parts.background.close(timeout + 2.0, grace=1.0)
        await self._parts.turns.tasks.close(timeout, grace=1.0)
        await self._platforms.stop()
        await self.approvals.stop()
        await self.asks.stop()
        await self.reloads.stop()
        await self.tools.stop()
        if self.model_processes is not None:
            await self.model_processes.close()
        if self._parts.model_clients is not None:
            await self._parts.model_clients.close()
        await self.models.close()
        await self.store.close()
        if self._tracer is not None:
            await asyncio.to_thread(self._tracer.close)
        await self._ops.stop()

    async def drain(self) -> None:
        """Wait until every submitted item has been handled (tests, shutdown)."""
        await self._parts.turns.tasks.drain()

    @property
    def needs_litellm(self) -> bool:
        """Whether this process's own model calls go through litellm (imported as it starts)."""
        return self._parts.model_clients is not None and self._parts.model_clients.uses_litellm(a.model for a in self.agents.values())

    @property
    def uptime(self) -> float:
        return self._parts.life.uptime()

    @property
    def stream(self) -> InboundCarrier | None:
        """The shared stream this process takes items from (a Redis store, once started)."""
        return self._intake.stream if isinstance(self._intake, StreamIntake) else None

    @property
    def journal(self) -> InboundCarrier | None:
        """The store's inbound journal (a store of this process's own, once started to receive)."""
        return self._intake.journal if isinstance(self._intake, JournalIntake) else None

    def receiving(self, platform: str) -> Adapter | None:
        """The adapter that receives `platform`'s events in this process, if any: with a
        shared stream, the platform leader's while this process holds the connection."""
        return self._platforms.receiving(platform)

    # --- running as a process -----------------------------------------------------------------

    def run(self, platforms: Iterable[str] | None = None) -> int:
        """Run the bot until SIGINT or SIGTERM (or the console's input ends); blocks, and
        returns the exit code (0 clean stop, 1 a platform failed to start or died, 2 the ops
        endpoint could not listen, 3 the store was unreachable). Its process stays the
        program's (see `serve`). Logs go to stderr at INFO unless the program configured
        logging itself."""
        if not logging.getLogger().handlers:
            setup_logging(logging.INFO)
        return asyncio.run(self.serve(platforms))

    async def serve(
        self, platforms: Iterable[str] | None = None, *, on_started: Callable[[], None] | None = None,
        watchdogs: Watchdogs | None = None,
    ) -> int:
        """`run` inside a running event loop: start, answer until told to stop, stop.
        `on_started` is called once everything has started (the CLI tunes its own process
        then); nothing here changes the loop, the interpreter or any library. `watchdogs` hand
        the process to the bot as `botweave run` does: SIGHUP reloads, a wedge ends it."""
        return await process.serve(self, self._platforms, self._ops.loop_watch, platforms, on_started, watchdogs)

    async def readiness(self) -> dict[str, str]:
        """The parts of this process that cannot serve right now, each with why (empty when
        all can): the store, and every platform it started or failed to start."""
        if not self._parts.life.serving:
            return {"app": self._parts.life.state()}
        problem = await store_problem(self.store)
        failing = {**({"store": problem} if problem else {}), **await self._platforms.readiness()}
        gateway = self.gateway.readiness() if self.gateway is not None and self._gateway_serving else None
        if gateway:
            failing["gateway"] = gateway
        return failing

    # --- extending ------------------------------------------------------------------------------

    def add_tool(self, tool: Callable[..., Any], *, agents: Sequence[str] | None = None) -> None:
        """Offer a Python function as a tool to `agents` (all when None), the way `{python: ...}`
        entries in bot.yaml are; plugins call this from their setup. Its schema comes from the
        type hints and the docstring (see `botweave.tool`). The agents of a reloaded
        configuration get it too (all of them, or those of `agents` that are still there)."""
        self.reloads.added.add(tool, self.agents, agents)

    # --- reloading ------------------------------------------------------------------------------

    async def reload(self, source: str | os.PathLike[str] | Config | None = None, *, everywhere: bool = False) -> ReloadResult:
        """Read the configuration again (or `source`: another file, a `Config`) and apply what
        changed in place once all of it is valid: a refused file changes nothing. With
        `everywhere`, every other process on a shared store reloads its own file too."""
        return await self._ops.reload(source, everywhere=everywhere)

    # --- inbound --------------------------------------------------------------------------

    async def submit(self, item: BotMessage | PlatformEvent) -> None:
        """Accept an item: it is recorded (the Redis stream, or the store's journal) when this
        returns, and its turn runs in the background. A failure to record raises, so the
        adapter does not acknowledge what could still be lost. A message that answers a
        question an agent asked (`ask_user`) is that answer, and starts no turn."""
        if not isinstance(item, BotMessage) or not self.asks.listening:
            await self._record(item)  # no question waits anywhere: nothing to claim, no lock
            return
        # Whether it answers a question may take a store read; in its conversation's arrival
        # order, so a later message (an SDK hands each over in a task of its own) never
        # records first. Recording spawns the turn, so nothing here waits for one.
        async with self._arrivals.hold(conversation_key(item)):
            if await self.asks.claim(item):
                await self._handling.answered(item)
                return
            await self._record(item)

    async def _record(self, item: BotMessage | PlatformEvent) -> None:
        if self._tracer is None:
            await self._handling.submit(item, self, self._intake.recorder)
            return
        with self._tracer.intake(item):  # the trace's root: its context travels with the item
            await self._handling.submit(item, self, self._intake.recorder)

    async def handle(
        self, item: BotMessage | PlatformEvent, *, deduplicated: bool = False, arrival: Arrival | None = None
    ) -> TurnOutcome:
        """Run one item's turn. An item handed over here directly takes the arrival chain
        first (its platform retry check, unless `deduplicated`: its caller checked it; its
        conversation's turn); the chain hands its own items over with their `arrival`."""
        if self._tracer is None:
            return await self._handling.handle(item, self, deduplicated=deduplicated, arrival=arrival)
        with self._tracer.turn(item) as span:
            outcome = await self._handling.handle(item, self, deduplicated=deduplicated, arrival=arrival)
            if span is not None:
                span.set("botweave.outcome", outcome.status.value)
            return outcome

    async def answer_press(self, event: PlatformEvent) -> tuple[PlatformEvent, PressAnswer]:
        """A button press, read in whichever process holds the platform connection: what its
        button stood for (the button book), what it decides (an approval), and what the
        presser is told. Adapters call this before acknowledging the press."""
        return await self._handling.answer_press(event)

    # --- outbound: everything goes through delivery ------------------------------------------

    async def notify(
        self,
        category: NotificationCategory | str,
        recipients: Iterable[Recipient | str],
        content: str,
        identity: str | None = None,
        urgent: bool = False,
    ) -> list[NotificationOutcome]:
        """Tell people something needs them (approvals, questions), honouring each
        person's categories, quiet hours and detail level."""
        return await self.notifier.notify(NotificationCategory(category), list(recipients), content, identity, urgent)

    async def send_to(
        self, target: str, text: str, *, origin: BotMessage | None = None, buttons: Sequence[Button] = ()
    ) -> MessageActionResult:
        """Post text to a target (`origin`, `<platform>`, `<platform>:<chat>[:<thread>]`);
        an unresolvable target is a `no_route` result. Presses of `buttons` come back as
        `button_pressed` events (hooks) with the button's own `action_id` and `value`."""
        return await self._poster.send_to(target, text, origin=origin, buttons=buttons)

    async def send_file(
        self,
        target: str,
        *,
        data: bytes | None = None,
        data_base64: str | None = None,
        path: str | None = None,
        url: str | None = None,
        filename: str | None = None,
        mime: str | None = None,
        caption: str = "",
        origin: BotMessage | None = None,
        agent: str | None = None,
        key: str | None = None,
    ) -> MessageActionResult:
        """Post a file to a target from exactly one source: bytes, base64, a `path` inside
        `media.files_dir`, or a `url` the network egress policy allows (the agent's own when
        `agent` is given); within `media.max_bytes` (the agent's own media settings, too). The
        caption follows the platform's caption limit; the rest of a long one follows as messages."""
        source = FileSource(data=data, data_base64=data_base64, path=path, url=url, filename=filename, mime=mime)
        return await self._poster.send_file(target, source, caption=caption, origin=origin, agent=agent, key=key)
