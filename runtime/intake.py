"""How an item that `App.submit` accepts is recorded and reaches `App.handle`: one intake
per way a process receives, chosen by `open_intake` at start from the inbound carrier the
store hands out (store/carrier.py) and what that carrier says of itself.

- `Intake` itself records nothing: an App not started yet, or started only to post, runs
  an item at once.
- `JournalIntake`, on a carrier that is not shared (the journal of a SQLite store; memory in
  tests): the item is written to the store's inbound journal before `submit` returns, and
  its entry is removed once its turn is done. Its turn is spawned before the first await,
  holding its conversation's place, so the arrival order of a conversation's messages is the
  order of its turns while other conversations run concurrently. At start, whatever the
  journal still holds (a turn a crash cut off) runs first.
- `StreamIntake`, on a shared carrier (Redis's stream): the item is appended to the shared
  stream, which any worker reads; a local platform's item (the console) is answered here,
  beside the stream, since nothing would redeliver a terminal's line.

Each tells `App.handle` where its item was `recorded` (an argument, not a context), and calls
it through the App it is given, so whoever wraps `App.handle` sees every item.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, Protocol

from botweave.adapter import Adapter
from botweave.config import PlatformConfig, StoreConfig
from botweave.conversations import ConversationLocks, conversation_key
from botweave.model_calls import import_litellm
from botweave.pipeline import TurnOutcome
from botweave.runtime.connections import Platforms, Receiver
from botweave.runtime.lifecycle import Lifecycle
from botweave.runtime.turn_control import TurnControl
from botweave.store import Patience, Store
from botweave.store.carrier import InboundCarrier
from botweave.store.errors import outage_errors
from botweave.tasks import TaskOwner
from botweave.types import BotMessage, PlatformEvent

log = logging.getLogger(__name__)

Recorded = Literal["journal", "stream", "here"]
"""Where an item `App.handle` runs was recorded: `journal` (the store's inbound journal,
which holds its conversation's place already), `stream` (the shared stream), or `here` (a
local platform's item beside the stream: its place is held too, and nothing redelivers it).
A recorded item was checked for a platform retry when it was recorded, so a turn running
again after a crash is not taken for one."""


class Inbox(Receiver, Protocol):
    """The App, as its intake sees it."""

    @property
    def needs_litellm(self) -> bool: ...

    async def handle(
        self, item: BotMessage | PlatformEvent, *, deduplicated: bool = False, recorded: Recorded | None = None
    ) -> TurnOutcome: ...


@dataclass(frozen=True)
class Turns:
    """What every intake spawns turns with."""

    control: TurnControl
    tasks: TaskOwner
    locks: ConversationLocks
    life: Lifecycle

    def spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        self.tasks.spawn(work, name="handle an inbound item")


class Intake:
    """Nothing is recorded: an item runs at once (an App not started, or started to post only)."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns

    def receives(self, adapter: Adapter) -> bool:
        """Whether `adapter` receives in this process (else it only sends)."""
        return False

    async def submit(self, item: BotMessage | PlatformEvent, inbox: Inbox) -> None:
        self.turns.control.stamp(item)
        self.turns.spawn(inbox.handle(item))

    async def replay(self, inbox: Inbox) -> None:
        """Run what an earlier run received and did not finish."""

    async def run(
        self, inbox: Inbox, background: TaskOwner, platforms: Platforms, sections: Mapping[str, PlatformConfig]
    ) -> None:
        """Start taking items in from elsewhere (the shared stream, its platform leaders)."""


class JournalIntake(Intake):
    def __init__(self, turns: Turns, journal: InboundCarrier) -> None:
        super().__init__(turns)
        self.journal = journal

    def receives(self, adapter: Adapter) -> bool:
        return True

    async def replay(self, inbox: Inbox) -> None:
        left = await self.journal.pending()
        if left:
            log.warning("answering %d message(s) a previous run received but did not finish", len(left))
        for entry, item in left:
            done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
            done.set_result(entry)
            self.turns.spawn(self._journaled(item, done, inbox))

    async def submit(self, item: BotMessage | PlatformEvent, inbox: Inbox) -> None:
        control = self.turns.control
        ordered = not control.is_control(item)
        control.stamp(item)
        recorded: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        # takes its place in the conversation now
        self.turns.spawn(self._journaled(item, recorded, inbox, ordered=ordered))
        try:
            if ordered and isinstance(item, BotMessage):
                await control.arrived(item)  # before its turn can start: it waits for `recorded`
            entry = await self.journal.record(item)
        except BaseException:
            recorded.set_result(None)
            raise
        recorded.set_result(entry)

    async def _journaled(
        self, item: BotMessage | PlatformEvent, recorded: asyncio.Future[str | None], inbox: Inbox, *, ordered: bool = True
    ) -> None:
        """One journaled item: its turn, then its entry removed. A turn cut off (a crash, a
        store away for longer than the grace) leaves the entry for the next start."""
        turns = self.turns
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(item, BotMessage) and ordered and not turns.control.is_control(item):
                # the conversation's place is taken before the first await: arrival order
                await stack.enter_async_context(turns.locks.hold(conversation_key(item)))
            entry = await recorded
            if entry is None:
                return  # a platform retry of an item recorded already
            await turns.life.ready.wait()
            if turns.life.stopping.is_set():
                return  # stopping: recorded, and the next start answers it
            try:
                await inbox.handle(item, recorded="journal")
            except outage_errors() as exc:
                log.warning("a turn met a store outage longer than the grace (%s); it runs again at the next start", exc)
                return
            except Exception:
                log.exception("turn crashed; its message is dropped so it is not retried forever")
            await self.journal.done(entry)


class StreamIntake(Intake):
    def __init__(
        self,
        turns: Turns,
        stream: InboundCarrier,
        adapters: Mapping[str, Adapter],
        *,
        role: str,
        receive: bool,
    ) -> None:
        super().__init__(turns)
        self.stream = stream
        self._adapters = adapters
        self._role = role
        self._receive = receive
        self._publishing = ConversationLocks()

    def receives(self, adapter: Adapter) -> bool:
        return self._receive and self._role == "all" and adapter.local

    async def submit(self, item: BotMessage | PlatformEvent, inbox: Inbox) -> None:
        """A /stop is not queued behind the turn it stops; any other message in `interrupt`
        or `collect` mode tells the turns before it that it came."""
        control = self.turns.control
        ordered = not control.is_control(item)
        adapter = self._adapters.get(item.platform)
        if adapter is not None and adapter.local:
            control.stamp(item)
            told: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self.turns.spawn(self._here(item, told, inbox, ordered=ordered))  # takes its place now
            try:
                if ordered and isinstance(item, BotMessage):
                    await control.arrived(item)  # before its turn can start: it waits for `told`
            except BaseException:
                told.set_result(False)
                raise
            told.set_result(True)
            return
        if isinstance(item, PlatformEvent) or not ordered:
            control.stamp(item)
            await self.stream.record(item, ordered=False)
            return
        # One append at a time per conversation, in the order items arrived: the stream's
        # sequence numbers are the conversation's order (an SDK that hands over each message
        # in a task of its own must not let a later one overtake), and so are their receipt
        # times.
        async with self._publishing.hold(conversation_key(item)):
            control.stamp(item)
            await control.arrived(item)
            await self.stream.record(item)

    async def _here(self, item: BotMessage | PlatformEvent, told: asyncio.Future[bool], inbox: Inbox, *, ordered: bool) -> None:
        """A local platform's item beside the shared stream: answered in this process, one
        turn at a time per conversation, in the order the items arrived (a /stop acts on the
        turn it stops, without waiting behind it)."""
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(item, BotMessage) and ordered:
                # the conversation's place is taken before the first await: arrival order
                await stack.enter_async_context(self.turns.locks.hold(conversation_key(item)))
            if not await told:
                return  # its arrival could not be noted; `submit` raised
            await inbox.handle(item, recorded="here")

    async def run(
        self, inbox: Inbox, background: TaskOwner, platforms: Platforms, sections: Mapping[str, PlatformConfig]
    ) -> None:
        """Workers answer from the stream; ingress processes hold the platforms' receiving
        connections, one process per platform by leader lock."""
        if not self._receive:
            return
        life = self.turns.life
        if self._role in ("all", "worker"):
            # litellm takes seconds to import; doing it now, off the loop, keeps the first
            # turn from stalling the lock and stream heartbeats.
            if inbox.needs_litellm:
                await import_litellm()
            background.spawn(self.stream.run(partial(_from_stream, inbox), life.stopping, life.drain), name="inbound stream")
        for name, adapter in platforms.adapters.items():
            if name in sections and not adapter.local:
                self.lead(name, sections[name], inbox, background, platforms)

    def lead(
        self, name: str, section: PlatformConfig | None, inbox: Inbox, background: TaskOwner, platforms: Platforms
    ) -> None:
        """Hold (or stand by for) platform `name`'s receiving connection on `section`, in a
        process that holds connections; a leader there already takes the new settings (a
        reload), None stops it."""
        if not self._receive or self._role not in ("all", "ingress"):
            return
        leader = next((leader for leader in platforms.leaders if leader.platform == name), None)
        make = partial(platforms.create, name, section, inbox) if section is not None else None
        if leader is not None:
            leader.renew(make)
            if make is None:
                platforms.leaders.remove(leader)
            return
        if make is None:
            return
        leader = self.stream.leader(name, make)
        if leader is None:  # nobody else receives from this store: the platform started here
            return
        platforms.leaders.append(leader)
        background.spawn(leader.run(self.turns.life.stopping), name=f"{name} leader")


async def _from_stream(inbox: Inbox, item: BotMessage | PlatformEvent) -> TurnOutcome:
    return await inbox.handle(item, recorded="stream")


async def open_intake(
    turns: Turns,
    store: Store,
    config: StoreConfig,
    patience: Patience,
    adapters: Mapping[str, Adapter],
    *,
    role: str,
    receive: bool,
) -> Intake:
    """The intake for the carrier `store` hands out: the shared stream's when the carrier is
    shared, else its journal's when this process receives, else none."""
    carrier = store.inbound_carrier(
        dedup_ttl=config.dedup_ttl_seconds, lease=config.stream_lease_seconds, lock_ttl=config.lock_ttl_seconds,
        patience=patience,
    )
    if carrier.shared:
        await carrier.open()
        return StreamIntake(turns, carrier, adapters, role=role, receive=receive)
    if receive:
        return JournalIntake(turns, carrier)
    return Intake(turns)
