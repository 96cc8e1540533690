"""The runtime: wires adapters, the inbound pipeline, agents and delivery together.

Adapters hand items to `submit`, which returns as soon as the item is recorded (platforms
want a fast ack, and must not be acknowledged for an item that could still be lost): in the
Redis stream for several workers, otherwise in the store's inbound journal. The turn runs in
a task that takes the conversation's lock *before* its first await, so the arrival order of
a conversation's messages is the order of its turns, while other conversations run
concurrently. At start, whatever the journal still holds (a turn a crash cut off) runs first.

`run` (and `serve`, its async form) is the whole life of a bot process, the one the CLI's
`botweave run` and `chat` use: start, answer until SIGINT/SIGTERM (or the console's input
ends, or a platform dies), stop, and say how it went as an exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from contextvars import ContextVar
from functools import partial
from pathlib import Path
from typing import Any, Literal

from botweave.adapter import Adapter, PlatformRejected
from botweave.agents import Agent, History
from botweave.buttons import PREFIX as BUTTON_PREFIX
from botweave.buttons import ButtonBook
from botweave.commands import CommandRegistry
from botweave.config import BotConfig, ConfigError, PlatformConfig
from botweave.conversations import ConversationLocks
from botweave.delivery import Delivered, Delivery, Outbox, ReplyChannel, SentLedger
from botweave.files import FileSource, send_file
from botweave.hooks import HookEvent, HookRegistry
from botweave.media.reader import MediaStep
from botweave.metrics import INBOUND, QUEUE_DEPTH
from botweave.model_calls import InProcess, ModelCalls, litellm_module
from botweave.model_client import ModelCallExecutor
from botweave.pipeline import Inbound, TurnOutcome, TurnStatus
from botweave.policies.access_control import PAIR_HELP, PAIR_USAGE, AccessControl
from botweave.policies.admission import Admission, AdmissionLimits, AdmissionStep
from botweave.policies.approvals import ApprovalDesk
from botweave.policies.authors import AuthorScreen
from botweave.policies.egress import EgressPolicy
from botweave.policies.rate_limit import RateLimit
from botweave.push import NotificationCategory, NotificationOutcome, Notifier, Recipient
from botweave.push.commands import NOTIFY_HELP, notify_command
from botweave.push.notifier import mention_triggers
from botweave.push.preferences import PreferenceStore
from botweave.rooms.hub import RoomHub
from botweave.router import Router, conversation_key
from botweave.runtime import event_loop as oldest_first
from botweave.runtime.commands import BuiltinCommands
from botweave.runtime.config import Config, load_config
from botweave.runtime.durable import InboundJournal, InboundStream, PlatformLeader, dedup_key, outage_errors
from botweave.runtime.event_loop import serving
from botweave.runtime.heap import settle_heap
from botweave.runtime.logs import setup_logging
from botweave.runtime.model_processes import ModelProcesses
from botweave.runtime.ops import OpsServer
from botweave.runtime.pipeline import build_pipeline
from botweave.runtime.platforms import installed_platforms
from botweave.runtime.plugins import load_plugins
from botweave.runtime.schedules import AgentSchedules
from botweave.runtime.steps import Observe
from botweave.runtime.turn_control import STOP_HELP, TurnControl, received_at
from botweave.runtime.turns import AgentTurn
from botweave.store import MemoryStore, Patience, PatientStore, Store, StoreUnavailable, open_store
from botweave.store.patient import backend
from botweave.store.redis import RedisStore
from botweave.targets import Targets
from botweave.tasks import TaskOwner, spawn
from botweave.tools import ToolServices, Toolsets
from botweave.tools.python import function_tool
from botweave.types import AgentIdentity, BotMessage, Button, MessageActionResult, PlatformEvent, PressAnswer

log = logging.getLogger(__name__)

Role = Literal["all", "worker", "ingress"]

#: Set while `handle` runs an item that came from a durable record (the journal, which
#: already holds the conversation's place, or the stream), or from a local platform beside
#: the stream ("here": its place is held too, and nothing redelivers a terminal's line).
#: Handing it over this way keeps `App.handle(item)` the one call every item goes through,
#: for whoever wraps it.
_RECORDED: ContextVar[Literal["journal", "stream", "here", None]] = ContextVar("botweave_recorded", default=None)

DIGEST_FLUSH_SECONDS = 30.0
#: Pauses between the tries to start a platform: three tries over about ten seconds.
START_RETRY_PAUSES = (3.0, 7.0)
#: How long /readyz waits for the store to answer before calling it unreachable.
STORE_PROBE_TIMEOUT_S = 2.0
#: How often `serve` looks for a platform that died.
DEATH_WATCH_S = 0.5

#: Exit codes: a clean stop; an enabled platform that never came up or died; a configuration
#: that cannot run; a store that cannot be reached at start.
EXIT_OK, EXIT_PLATFORM, EXIT_CONFIG, EXIT_STORE = 0, 1, 2, 3


async def _loaded(loading: asyncio.Future[Any]) -> None:
    """Wait for the import started at serve; a broken litellm is logged here, and each turn
    that needs it says so again."""
    try:
        await loading
    except Exception:
        log.exception("litellm failed to import; agents on litellm models will not answer")


def _kind(item: BotMessage | PlatformEvent) -> str:
    return item.message_type.value if isinstance(item, BotMessage) else item.kind


Handle = Callable[..., Coroutine[Any, Any, TurnOutcome]]


def _counted(handle: Handle) -> Handle:
    """Every inbound item handled is counted once, by how it ended, and is part of the queue
    depth while it waits for its conversation's turn or runs."""

    @functools.wraps(handle)
    async def counted(self: App, item: BotMessage | PlatformEvent, **options: Any) -> TurnOutcome:
        QUEUE_DEPTH.inc()
        outcome = "error"
        try:
            result = await handle(self, item, **options)
            outcome = result.status.value
            return result
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            QUEUE_DEPTH.dec()
            INBOUND.labels(item.platform, _kind(item), outcome).inc()

    return counted


class App:
    def __init__(self, config: Config, *, store: Store | None = None, role: Role = "all") -> None:
        self.config = config
        self.role = role
        self.stream: InboundStream | None = None
        self.journal: InboundJournal | None = None
        self._stopping = asyncio.Event()
        self._ready = asyncio.Event()  # the adapters are started: journaled turns may answer
        self._background = TaskOwner("app")
        self._leaders: list[PlatformLeader] = []
        self._drain_seconds = 5.0  # how long a stopping stream lets started turns finish
        cfg = config.store
        self.patience = Patience(cfg.outage_grace_seconds)
        chosen = store or open_store(cfg.url or "memory://", cfg.prefix, base=config.base_dir)
        self.store: Store = chosen if isinstance(chosen, PatientStore) else PatientStore(chosen, patience=self.patience)
        self.hooks = HookRegistry()
        self.commands = CommandRegistry()
        self.model_processes = ModelProcesses(config.models.processes) if config.models.processes else None
        calls: ModelCalls = self.model_processes or InProcess()
        self.agents = {name: Agent(name, cfg, calls=calls) for name, cfg in config.agents.items()}
        self.router = Router(config.routes, default_agent=next(iter(self.agents)))
        self.history = History(self.store)
        self.adapters: dict[str, Adapter] = {}
        #: Enabled platforms that never came up, with why (the CLI exits 1 for these).
        self.failed_platforms: dict[str, str] = {}
        self._platform_configs: dict[str, BotConfig] = {}
        self._locks = ConversationLocks()
        self._publishing = ConversationLocks()
        self._tasks = TaskOwner("turn")
        self._started_at = time.monotonic()
        self.delivery = Delivery(self.hooks, Outbox(self.store, config.store.dedup_ttl_seconds))
        self.targets = Targets(self.adapters)
        self.tools = Toolsets(
            config.agents, ToolServices(self.delivery, self.targets, config.media_for), config.egress_policy
        )
        if self.tools.needs_ledger:
            self.delivery.ledger = SentLedger(self.store)
        try:
            for name, agent in self.agents.items():
                agent.tools.update(self.tools.local_tools(name))
        except ValueError as exc:
            raise ConfigError([str(exc)]) from None
        self.access = AccessControl(self.store, self.delivery, cli_config=self._pairing_cli_config(given=store is not None))
        self.buttons = ButtonBook(self.store)
        self.approvals = ApprovalDesk(
            self.store,
            self.delivery,
            self.adapters,
            self.buttons,
            owner_of=lambda platform: self.access.owner(platform, self._bot_config(platform)),
            notify=self._approval_requested,
        )
        self.push = config.push
        self.preferences = PreferenceStore.from_config(self.store, self.push)
        self.notifier = Notifier(
            self.preferences, self.push.transports(self._send_direct), self.store, directory=self.push.directory
        )
        self.rooms = (
            RoomHub(
                config.rooms, self.agents, self.store, self._post_as, self.targets.canonical,
                posted=self._room_posted, missed=self._room_missed,
            )
            if config.rooms
            else None
        )
        self.schedules = (
            AgentSchedules(
                config.schedules,
                agents=self.agents,
                history=self.history,
                delivery=self.delivery,
                targets=self.targets,
                locks=self._locks,
                bot_config_for=self._bot_config,
                store=self.store,
                failed=self._schedule_failed,
            )
            if config.schedules
            else None
        )
        BuiltinCommands(self.commands, self.agents, self.history, self.rooms, lambda: self.uptime).register()
        self.commands.register("pair", self.access.pair_command, help=PAIR_HELP, args=PAIR_USAGE)
        self.commands.register("notify", notify_command(self.preferences), help=NOTIFY_HELP)
        limits = config.admission
        admission = Admission(
            AdmissionLimits(
                limits.max_concurrent_turns, limits.max_concurrent_turns_per_scope, limits.overflow, limits.queue_depth
            ),
            # several workers share one budget through the store
            slots=self.store if isinstance(backend(self.store), RedisStore) else None,
        )
        self.turn = AgentTurn(
            self.agents, self.history, self._finished, self.store, cfg.dedup_ttl_seconds, approvals=self.approvals
        )
        self.control = TurnControl(
            self.store, self.agents, self.history, self._bot_config, cfg.dedup_ttl_seconds, self._may_steer
        )
        self.commands.register("stop", self.control.stop_command, help=STOP_HELP)
        self.pipeline = build_pipeline(
            authors=AuthorScreen(self.store),
            access=self.access,
            hooks=self.hooks,
            router=self.router,
            delivery=self.delivery,
            commands=self.commands,
            rooms=self.rooms,
            observe=Observe(self.agents, self.history, self.store, cfg.dedup_ttl_seconds),
            rate_limit=RateLimit(self.store),
            admission=AdmissionStep(admission, self.store, limits.busy_message),
            media=MediaStep(self.agents, {name: config.media_for(name) for name in self.agents}),
            control=self.control,
            turn=self.turn,
        )
        self.ops: OpsServer | None = None
        self._serving = False  # started and not stopping: what /readyz reports first
        #: The plugins whose setup ran, installed ones first (see runtime/plugins.py).
        self.plugins = load_plugins(self, config.plugins)

    @classmethod
    def from_config(
        cls, source: str | os.PathLike[str] | Mapping[str, Any] | Config, *, store: Store | None = None, role: Role = "all"
    ) -> App:
        config = source if isinstance(source, Config) else load_config(source)
        return cls(config, store=store, role=role)

    # --- lifecycle ------------------------------------------------------------------------

    def add_adapter(self, adapter: Adapter) -> None:
        """Attach an adapter (`start` does this for each enabled platform; tests attach their own)."""
        name = adapter.platform
        self.adapters[name] = adapter
        self._platform_configs[name] = self.config.bot_config_for(name)
        adapter.bind(self.submit, self.answer_press)

    async def start(self, platforms: Iterable[str] | None = None, *, receive: bool = True) -> None:
        """Connect the store and start every enabled platform (or just `platforms`).

        With SQLite or the in-memory store everything runs in this process, through the
        store's inbound journal (replayed first). With Redis, inbound items go through the
        shared stream: `ingress` holds the platform connections (one process per platform,
        by leader lock), `worker` answers from the stream, `all` does both.
        `ops.listen` (every role) serves the operator's endpoints from the first moment, so
        a slow start is alive but not ready.
        """
        if self.config.ops.listen and self.ops is None:
            self.ops = OpsServer(self.config.ops.listen, self.readiness)
            await self.ops.start()
        await self.store.connect()
        log.info("store: %s", self.store.describe())
        if self.role != "ingress":  # an ingress process never runs a turn
            if self.model_processes is not None:
                await self.model_processes.start()
            await self._start_tools()
        sections = self.config.enabled_platforms(platforms)
        for name, section in sections.items():
            if name not in self.adapters:
                self.add_adapter(installed_platforms()[name].create(section))
        raw = backend(self.store)
        shared = raw if isinstance(raw, RedisStore) else None
        inbound = receive and shared is None
        cfg = self.config.store
        if shared is not None:
            self.stream = InboundStream(
                shared, lease=cfg.stream_lease_seconds, lock_ttl=cfg.lock_ttl_seconds, patience=self.patience
            )
            await self.stream.ensure_group()
        elif receive:
            self.journal = InboundJournal(self.store, cfg.dedup_ttl_seconds)
            left = await self.journal.pending()
            if left:
                log.warning("answering %d message(s) a previous run received but did not finish", len(left))
            for entry, item in left:
                self._spawn(self._journaled(item, self._settled(entry)), item)
        for name in list(self.adapters):
            self._explain_access(name)
            here = inbound or (receive and self.role == "all" and self.adapters[name].local)
            failure = await self._start_platform(name, sections.get(name), inbound=here)
            if failure is not None:
                self.failed_platforms[name] = failure
                self.adapters.pop(name)
                self._platform_configs.pop(name)
        if shared is not None and self.stream is not None and receive:
            if self.role in ("all", "worker"):
                # litellm takes seconds to import; doing it now, off the loop, keeps the first
                # turn from stalling the lock and stream heartbeats.
                await asyncio.to_thread(litellm_module)
                self._background.spawn(
                    self.stream.run(self._from_stream, self._stopping, lambda: self._drain_seconds), name="inbound stream"
                )
            if self.role in ("all", "ingress"):
                for name, adapter in self.adapters.items():
                    if name in sections and not adapter.local:
                        leader = PlatformLeader(
                            name,
                            partial(self._inbound_adapter, name, sections[name]),
                            shared,
                            self.config.store.lock_ttl_seconds,
                            self.patience,
                        )
                        self._leaders.append(leader)
                        self._background.spawn(leader.run(self._stopping), name=f"{name} leader")
        if self.rooms is not None and receive and self.role in ("all", "worker"):
            await self.rooms.start()
        if self.schedules is not None and receive and self.role in ("all", "worker"):
            await self.schedules.start()
        if self.push.directory:
            self._background.spawn(self._flush_digests(), name="notification digests")
        if receive and self.role in ("all", "worker"):
            closed = await self.approvals.sweep()
            if closed:
                log.warning("%d approval request(s) were left unanswered by a stopped run; reported expired", closed)
        self._started_at = time.monotonic()
        self._ready.set()
        self._serving = True

    async def _start_platform(self, name: str, section: PlatformConfig | None, *, inbound: bool) -> str | None:
        """Start a platform, trying again over ~10 s (a network blip at boot is not an
        outage) unless the platform refused us for good; the failure, in one line, when it
        never came up. Each try gets a fresh adapter: SDK clients do not restart once closed."""
        failure = ""
        for attempt, pause in enumerate((*START_RETRY_PAUSES, None), start=1):
            adapter = self.adapters[name]
            try:
                await adapter.start(inbound=inbound)
                self._connected(name, adapter, inbound)
                return None
            except Exception as exc:
                failure = f"{exc}" if isinstance(exc, PlatformRejected) else f"{type(exc).__name__}: {exc}"
                with contextlib.suppress(Exception):
                    await adapter.stop()
                if pause is None or section is None or isinstance(exc, PlatformRejected):
                    break
                log.warning("platform %s did not start (%s); try %d of %d in %.0fs",
                            name, failure, attempt + 1, len(START_RETRY_PAUSES) + 1, pause)
                await asyncio.sleep(pause)
                self.add_adapter(installed_platforms()[name].create(section))
        log.error("platform %s failed to start: %s", name, failure)
        return failure

    async def _start_tools(self) -> None:
        """Connect the MCP servers agents use, then offer their tools to those agents."""
        await self.tools.start()
        for name, agent in self.agents.items():
            for tool_name, tool in self.tools.server_tools(name).items():
                if tool_name in agent.tools:
                    log.warning("agent %s: MCP tool %s has the name of another tool; not offered", name, tool_name)
                    continue
                agent.tools[tool_name] = tool

    def _bot_config(self, platform: str) -> BotConfig:
        return self._platform_configs.get(platform) or self.config.bot_config_for(platform)

    async def _may_steer(self, msg: BotMessage, config: BotConfig) -> bool:
        """Only someone the bot answers may interrupt or add to a running turn."""
        return await self.access.verdict(msg, config) == "admit"

    @staticmethod
    def _connected(name: str, adapter: Adapter, inbound: bool) -> None:
        me = adapter.self_user
        who = (me.username or me.display_name or me.user_id) if me is not None else "?"
        how = (adapter.mode or "receiving") if inbound else "sending only"
        log.info("%s: connected as %s (%s)", name, who, how, extra={"platform": name, "bot": who, "mode": how})

    def _inbound_adapter(self, name: str, section: Any) -> Adapter:
        """A second adapter instance that receives; the first one only sends."""
        adapter = installed_platforms()[name].create(section)
        adapter.bind(self.submit, self.answer_press)
        return adapter

    def _pairing_cli_config(self, *, given: bool) -> Path | None:
        """The file `botweave pair --config` must read to open this process's store: the
        configuration file, when the store is the one it names (or the SQLite file the CLI
        derives from it) and lives outside this process. None otherwise."""
        source = self.config.source
        if given or source is None or isinstance(backend(self.store), MemoryStore):
            return None
        return source.resolve()

    def _explain_access(self, platform: str) -> None:
        config = self._platform_configs[platform]
        if config.unknown_user_policy == "pair":
            log.warning(
                "%s: unknown users get a pairing code; %s, or list them in allowed_users",
                platform, self.access.approval_hint(platform, config.owner_user_id),
            )
        elif config.unknown_user_policy == "deny":
            log.warning("%s: unknown users are ignored; add their ids to allowed_users to let them in", platform)

    async def stop(self, timeout: float = 5.0) -> None:
        """Let in-flight turns finish for up to `timeout` seconds, then cancel, then disconnect.
        A cancelled turn is not lost: its item stays in the journal or the stream, and runs
        again at the next start or in another worker."""
        self._drain_seconds = timeout
        self._serving = False
        self._stopping.set()
        self.approvals.shutting_down()
        if self.rooms is not None:
            await self.rooms.stop()
        if self.schedules is not None:
            await self.schedules.stop()
        # the stream's own wind-down: up to `timeout` for started turns, then the hand-back
        await self._background.close(timeout + 2.0, grace=1.0)
        await self._tasks.close(timeout, grace=1.0)
        for name, adapter in self.adapters.items():
            try:
                await adapter.stop()
            except Exception:
                log.exception("platform %s did not stop cleanly", name)
        await self.approvals.stop()
        await self.tools.stop()
        if self.model_processes is not None:
            await self.model_processes.close()
        await self.store.close()
        if self.ops is not None:
            await self.ops.stop()
            self.ops = None

    async def drain(self) -> None:
        """Wait until every submitted item has been handled (tests, shutdown)."""
        await self._tasks.drain()

    @property
    def uptime(self) -> float:
        return time.monotonic() - self._started_at

    # --- running as a process -----------------------------------------------------------------

    def run(self, platforms: Iterable[str] | None = None) -> int:
        """Run the bot until SIGINT or SIGTERM (or the console's input ends); blocks, and
        returns the exit code (0 clean stop, 1 a platform failed to start or died, 2 the ops
        endpoint could not listen, 3 the store was unreachable). Logs go to stderr at INFO
        unless the program configured logging itself."""
        if not logging.getLogger().handlers:
            setup_logging(logging.INFO)
        return oldest_first.run(self.serve(platforms))

    async def serve(self, platforms: Iterable[str] | None = None) -> int:
        """`run` inside a running event loop: start, answer until told to stop, stop."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        handled: list[signal.Signals] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
                handled.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread, or no signals here: Ctrl-C raises KeyboardInterrupt instead
        try:
            return await self._serve(platforms, stop)
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    async def _serve(self, platforms: Iterable[str] | None, stop: asyncio.Event) -> int:
        # litellm takes seconds to import: done off the loop while the platforms connect, so
        # the first turn does not stall every other conversation for it.
        asyncio.get_running_loop().set_default_executor(ModelCallExecutor(thread_name_prefix="botweave"))
        loading = asyncio.create_task(asyncio.to_thread(litellm_module)) if self.role != "ingress" else None
        try:
            await self.start(platforms)
        except StoreUnavailable as exc:
            log.error("%s", exc)
            await self.stop()
            return EXIT_STORE
        except OSError as exc:  # the ops endpoint's address is taken or not ours
            log.error("%s", exc)
            await self.stop()
            return EXIT_CONFIG
        finally:
            if loading is not None:
                await _loaded(loading)
        settle_heap()
        if not self.adapters:
            if not self.failed_platforms:
                log.error("no platform is running; enable one under `platforms:` in bot.yaml")
            await self.stop()
            return EXIT_PLATFORM
        waiters = [spawn(stop.wait(), name="wait for a signal"), spawn(self._death(), name="watch the platforms")]
        console = self.adapters.get("console")
        if console is not None and len(self.adapters) == 1:
            waiters.append(spawn(console.finished.wait(), name="wait for end of input"))  # type: ignore[attr-defined]
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        died = waiters[1] in done
        if not stop.is_set() and not died:
            await self.drain()  # end of input: answer what was asked, then leave
        await self.stop()
        return EXIT_PLATFORM if self.failed_platforms or died else EXIT_OK

    async def _death(self) -> None:
        """Returns when a running platform's connection ended for good (its adapter says why)."""
        while True:
            await asyncio.sleep(DEATH_WATCH_S)
            for name, adapter in list(self.adapters.items()):
                if adapter.failure:
                    log.error("platform %s stopped: %s", name, adapter.failure)
                    self.failed_platforms[name] = adapter.failure
                    return

    async def readiness(self) -> dict[str, str]:
        """The parts of this process that cannot serve right now, each with why (empty when
        all can): the store, and every platform it started or failed to start. Where this
        process holds a platform's receiving connection (see PlatformLeader), that one counts."""
        if not self._serving:
            return {"app": "stopping" if self._stopping.is_set() else "starting"}
        failing: dict[str, str] = {}
        try:
            await asyncio.wait_for(self.store.get("ops:ready"), STORE_PROBE_TIMEOUT_S)
        except asyncio.TimeoutError:
            failing["store"] = f"no answer within {STORE_PROBE_TIMEOUT_S:.0f}s"
        except Exception as exc:
            failing["store"] = f"{type(exc).__name__}: {exc}"
        receiving = {leader.platform: leader.adapter for leader in self._leaders if leader.adapter is not None}
        for name, adapter in list(self.adapters.items()):
            try:
                problem = await (receiving.get(name) or adapter).readiness()
            except Exception as exc:
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                failing[name] = problem
        for name, failure in self.failed_platforms.items():
            failing.setdefault(name, f"failed to start: {failure}")
        return failing

    # --- extending ------------------------------------------------------------------------------

    def add_tool(self, tool: Callable[..., Any], *, agents: Sequence[str] | None = None) -> None:
        """Offer a Python function as a tool to `agents` (all when None), the way `{python: ...}`
        entries in bot.yaml are; plugins call this from their setup. Its schema comes from the
        type hints and the docstring (see `botweave.tool`)."""
        unknown = [name for name in agents or () if name not in self.agents]
        if unknown:
            raise ValueError(f"add_tool: unknown agent(s) {', '.join(unknown)}; agents: {', '.join(self.agents)}")
        made = function_tool(tool)
        for name in agents if agents is not None else self.agents:
            if made.name in self.agents[name].tools:
                raise ValueError(f"add_tool: agent {name} already has a tool named {made.name!r}")
            self.agents[name].tools[made.name] = made

    # --- inbound --------------------------------------------------------------------------

    async def submit(self, item: BotMessage | PlatformEvent) -> None:
        """Accept an item: it is recorded (the Redis stream, or the store's journal) when this
        returns, and its turn runs in the background. A failure to record raises, so the
        adapter does not acknowledge what could still be lost.

        A /stop is not queued behind the turn it stops; any other message in `interrupt` or
        `collect` mode tells the turns before it that it came."""
        ordered = not self.control.is_control(item)
        if self.stream is not None and self._local(item):
            self.control.stamp(item)
            told: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._spawn(self._here(item, told, ordered=ordered), item)  # takes its place in the conversation now
            try:
                if ordered and isinstance(item, BotMessage):
                    await self.control.arrived(item)  # before its turn can start: it waits for `told`
            except BaseException:
                told.set_result(False)
                raise
            told.set_result(True)
            return
        if self.stream is not None:
            if isinstance(item, PlatformEvent) or not ordered:
                self.control.stamp(item)
                await self.stream.publish(item, dedup_key(item), self.config.store.dedup_ttl_seconds, ordered=False)
                return
            # One append at a time per conversation, in the order items arrived: the stream's
            # sequence numbers are the conversation's order (an SDK that hands over each
            # message in a task of its own must not let a later one overtake), and so are
            # their receipt times.
            async with self._publishing.hold(conversation_key(item)):
                self.control.stamp(item)
                await self.control.arrived(item)
                await self.stream.publish(item, dedup_key(item), self.config.store.dedup_ttl_seconds)
            return
        self.control.stamp(item)
        journal = self.journal
        if journal is None:  # not started to receive: nothing to record into
            self._spawn(self.handle(item), item)
            return
        recorded: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._spawn(self._journaled(item, recorded, ordered=ordered), item)  # takes its place in the conversation now
        try:
            if ordered and isinstance(item, BotMessage):
                await self.control.arrived(item)  # before its turn can start: it waits for `recorded`
            entry = await journal.record(item)
        except BaseException:
            recorded.set_result(None)
            raise
        recorded.set_result(entry)

    def _spawn(self, work: Coroutine[Any, Any, Any], item: BotMessage | PlatformEvent) -> None:
        # With the model calls in other processes, a turn runs ahead of other work from the
        # moment it is spawned (see _run_pipeline), so it starts while a burst is still being
        # taken in rather than once every message of it was.
        place: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self.model_processes is not None and isinstance(item, BotMessage):
            place = serving(received_at(item), ahead_until_asked=True)
        with place:
            self._tasks.spawn(work, name="handle an inbound item")

    def _local(self, item: BotMessage | PlatformEvent) -> bool:
        adapter = self.adapters.get(item.platform)
        return adapter is not None and adapter.local

    async def _here(self, item: BotMessage | PlatformEvent, told: asyncio.Future[bool], *, ordered: bool) -> None:
        """A local platform's item beside the shared stream: answered in this process, one
        turn at a time per conversation, in the order the items arrived (a /stop acts on the
        turn it stops, without waiting behind it)."""
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(item, BotMessage) and ordered:
                # the conversation's place is taken before the first await: arrival order
                await stack.enter_async_context(self._locks.hold(conversation_key(item)))
            if not await told:
                return  # its arrival could not be noted; `submit` raised
            token = _RECORDED.set("here")
            try:
                await self.handle(item)
            finally:
                _RECORDED.reset(token)

    @staticmethod
    def _settled(entry: str) -> asyncio.Future[str | None]:
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        done.set_result(entry)
        return done

    async def _journaled(
        self, item: BotMessage | PlatformEvent, recorded: asyncio.Future[str | None], *, ordered: bool = True
    ) -> None:
        """One journaled item: its turn, then its entry removed. A turn cut off (a crash, a
        store away for longer than the grace) leaves the entry for the next start."""
        journal = self.journal
        assert journal is not None
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(item, BotMessage) and ordered and not self.control.is_control(item):
                # the conversation's place is taken before the first await: arrival order
                await stack.enter_async_context(self._locks.hold(conversation_key(item)))
            entry = await recorded
            if entry is None:
                return  # a platform retry of an item recorded already
            await self._ready.wait()
            if self._stopping.is_set():
                return  # stopping: recorded, and the next start answers it
            token = _RECORDED.set("journal")
            try:
                await self.handle(item)
            except outage_errors() as exc:
                log.warning("a turn met a store outage longer than the grace (%s); it runs again at the next start", exc)
                return
            except Exception:
                log.exception("turn crashed; its message is dropped so it is not retried forever")
            finally:
                _RECORDED.reset(token)
            await journal.done(entry)

    @_counted
    async def handle(self, item: BotMessage | PlatformEvent, *, deduplicated: bool = False) -> TurnOutcome:
        """Run the pipeline for one item. Recorded items (the journal, the shared stream) and
        `deduplicated` ones were checked when they were recorded, so a turn re-running after a
        crash is not mistaken for a platform retry."""
        recorded = _RECORDED.get()
        if recorded is not None:
            _RECORDED.set(None)  # for this item only, not for whatever the turn calls
            deduplicated = True
        key = None if deduplicated else dedup_key(item)
        if key is not None and not await self.store.set_if_absent(key, "1", ttl=self.config.store.dedup_ttl_seconds):
            return TurnOutcome(TurnStatus.DUPLICATE)
        if isinstance(item, PlatformEvent):
            return await self._handle_event(item)
        self.control.stamp(item)  # handed over directly (not through `submit`)
        if recorded in ("journal", "here"):  # the conversation's lock was taken on arrival
            return await self._run_pipeline(item, durable=recorded == "journal")
        if self.control.is_control(item):  # it acts on the turn holding the lock
            return await self._run_pipeline(item, durable=deduplicated)
        async with self._locks.hold(conversation_key(item)):
            return await self._run_pipeline(item, durable=deduplicated)

    async def _run_pipeline(self, msg: BotMessage, *, durable: bool = False) -> TurnOutcome:
        # its place in the event loop, if the loop is oldest-first; with the model calls in
        # other processes, ahead of all other work until it has asked its model
        with serving(received_at(msg), ahead_until_asked=self.model_processes is not None):
            return await self._answer(msg, durable=durable)

    async def _answer(self, msg: BotMessage, *, durable: bool) -> TurnOutcome:
        adapter = self.adapters.get(msg.platform)
        if adapter is None:
            log.warning("message from platform %r that has no adapter; dropped", msg.platform)
            return TurnOutcome(TurnStatus.DROPPED_UNKNOWN_PLATFORM)
        config = self._platform_configs[msg.platform]
        reply = ReplyChannel(self.delivery, adapter, msg, config)
        if durable:
            # A recorded item may be running again after a crash: a turn that committed is
            # finished by delivering what it committed, never decided afresh.
            resumed = await self.turn.resume(msg, reply)
            if resumed is not None:
                return resumed
        try:
            return await self.pipeline(Inbound(msg, adapter, config, reply, self.router.resolve(msg)))
        except outage_errors():
            raise  # not a failure of the turn: it runs again once the store is back
        except Exception as exc:
            # Nothing vanishes silently: the sender hears that this message got no answer.
            log.exception("%s: the turn for message %s failed", msg.platform, msg.message_id)
            await self.control.tell_failure(reply)
            return TurnOutcome(TurnStatus.FAILED, detail=f"{type(exc).__name__}: {exc}")

    async def _from_stream(self, item: BotMessage | PlatformEvent) -> TurnOutcome:
        token = _RECORDED.set("stream")
        try:
            return await self.handle(item)
        finally:
            _RECORDED.reset(token)

    async def answer_press(self, event: PlatformEvent) -> tuple[PlatformEvent, PressAnswer]:
        """A button press, read in whichever process holds the platform connection: what its
        button stood for (the button book), what it decides (an approval), and what the
        presser is told. Adapters call this before acknowledging the press."""
        event, known = await self.buttons.read(event)
        if not known:
            stale = (event.action_id or "").startswith(BUTTON_PREFIX)
            return event, PressAnswer("This button no longer works.", alert=True) if stale else PressAnswer()
        answer = await self.approvals.answer(event)
        return event, answer or PressAnswer()

    async def _handle_event(self, event: PlatformEvent) -> TurnOutcome:
        await self.hooks.run(HookEvent(event.hook_event, event.hook_payload()))
        if event.platform in self.adapters:
            again = await self.control.on_event(event)
            if again is not None:  # an edit soon after its answer: answered again, in its turn
                await self.submit(again)
        return TurnOutcome(TurnStatus.EVENT)

    # --- push and rooms ------------------------------------------------------------------

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

    async def _room_posted(self, room: str, speaker: str, text: str) -> None:
        for recipient, category in mention_triggers(text, self.push.known_people()):
            await self.notifier.notify(category, [recipient], text, identity=f"room {room} ({speaker})")

    async def _room_missed(self, room: str, detail: str) -> None:
        owner = self.rooms.configs[room].owner if self.rooms is not None else None
        log.warning("room %s: %s", room, detail)
        if owner:
            await self.notifier.notify(
                NotificationCategory.SCHEDULED_TASK_FAILED, [owner], f"Room {room}: {detail}", identity=f"room {room}"
            )

    async def _schedule_failed(self, name: str, detail: str) -> None:
        owner = self.config.schedules[name].owner
        if owner:
            await self.notifier.notify(
                NotificationCategory.SCHEDULED_TASK_FAILED, [owner], f"Schedule {name}: {detail}", identity=f"schedule {name}"
            )

    async def _flush_digests(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=DIGEST_FLUSH_SECONDS)
            try:
                await self.notifier.flush_digests()
            except Exception:
                log.exception("delivering notification digests failed; will retry")

    async def _approval_requested(self, platform: str, user_id: str, content: str, agent: str) -> None:
        await self.notifier.notify(
            NotificationCategory.APPROVAL_REQUESTED, [f"{platform}:{user_id}"], content, identity=agent, urgent=True
        )

    async def _finished(self, msg: BotMessage, agent: Agent, delivered: Delivered, seconds: float) -> None:
        """A long turn tells the person who asked (`agent_finished`, if they opted in)."""
        if seconds >= self.push.agent_finished_after_seconds:
            await self.notifier.notify(
                NotificationCategory.AGENT_FINISHED,
                [f"{msg.platform}:{msg.sender.user_id}"],
                delivered.text,
                identity=agent.name,
            )

    # --- outbound: everything goes through delivery ------------------------------------------

    async def send_to(
        self, target: str, text: str, *, origin: BotMessage | None = None, buttons: Sequence[Button] = ()
    ) -> MessageActionResult:
        """Post text to a target (`origin`, `<platform>`, `<platform>:<chat>[:<thread>]`);
        an unresolvable target is a `no_route` result. Presses of `buttons` come back as
        `button_pressed` events (hooks) with the button's own `action_id` and `value`."""
        to = self.targets.resolve(target, origin)
        if to is None:
            return MessageActionResult("no_route", target, "target not resolvable")
        issued = await self.buttons.issue(buttons) if buttons else []
        return (await self.delivery.post(to, text, origin=origin, buttons=issued)).result(target)

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
        egress = self.config.egress_policy(agent) if agent is not None else EgressPolicy.from_config(self.config.network)
        source = FileSource(data=data, data_base64=data_base64, path=path, url=url, filename=filename, mime=mime)
        return await send_file(
            self.delivery, self.targets, target, source,
            media=self.config.media_for(agent), origin=origin, caption=caption, egress=egress.refusal, key=key,
        )

    async def _post_as(self, target: str, identity: AgentIdentity, text: str) -> MessageActionResult:
        to = self.targets.resolve(target)
        if to is None:
            return MessageActionResult("no_route", target, "target not resolvable")
        return (await self.delivery.post(to, text, identity=identity)).result(target)

    async def _send_direct(self, platform: str, user_id: str, text: str) -> MessageActionResult:
        adapter = self.adapters.get(platform)
        if adapter is None:
            return MessageActionResult("no_route", f"{platform}:{user_id}", f"platform {platform} is not running")
        return (await self.delivery.post_direct(adapter, user_id, text)).result(f"{platform}:{user_id}")
