"""How an item that `App.submit` accepts is recorded, and read back: one intake per way a
process receives, chosen by `open_intake` at start from the inbound carrier the store hands
out (store/carrier.py) and what that carrier says of itself. An intake only records and replays; the
arrival chain (runtime/arrival.py) stamps, orders, signals and deduplicates every item, and
runs its turn.

- `Intake` itself records nothing: an App not started yet, or started only to post, hands
  an item over at once.
- `JournalIntake`, on a carrier that is not shared (the journal of a SQLite store; memory in
  tests): the item is
  written to the store's inbound journal before `submit` returns, and its entry is removed
  once its turn is done. At start, whatever the journal still holds (a turn a crash cut off)
  runs first.
- `StreamIntake`, on a shared carrier (Redis's stream): the item is appended to the shared stream, which any worker
  reads; a local platform's item (the console) is answered here, beside the stream, since
  nothing would redeliver a terminal's line.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial

from botweave.adapter import Adapter
from botweave.config import PlatformConfig, StoreConfig
from botweave.conversations import ConversationLocks
from botweave.model_calls import import_litellm
from botweave.pipeline import TurnOutcome
from botweave.runtime.arrival import ArrivalChain, Item, Record, Recorder
from botweave.runtime.arrival import Inbox as Inbox  # the App, as the intakes (and reloading) hand it on
from botweave.runtime.connections import Platforms
from botweave.runtime.lifecycle import Lifecycle
from botweave.store import Patience, Store
from botweave.store.carrier import InboundCarrier
from botweave.store.errors import outage_errors
from botweave.tasks import TaskOwner
from botweave.types import BotMessage

log = logging.getLogger(__name__)

#: An item read back from the shared stream: checked when it was appended, and answered by
#: the worker that read it.
STREAMED = Record(durable=True, here=True)
#: A local platform's item beside the shared stream: answered here, and nothing redelivers it.
LOCAL = Record(durable=False, here=True)


@dataclass(frozen=True)
class Turns:
    """What every intake hands its items on to: the arrival chain, the task owner of the
    turns it runs (`App.drain` waits for them), and the App's life."""

    arrivals: ArrivalChain
    tasks: TaskOwner
    life: Lifecycle


class Intake:
    """Nothing is recorded: an item runs at once (an App not started, or started to post only)."""

    def __init__(self, turns: Turns) -> None:
        self.turns = turns

    @property
    def recorder(self) -> Recorder | None:
        """What records a submitted item; None: it is handed over at once."""
        return None

    def receives(self, adapter: Adapter) -> bool:
        """Whether `adapter` receives in this process (else it only sends)."""
        return False

    async def replay(self, inbox: Inbox) -> None:
        """Run what an earlier run received and did not finish."""

    async def run(
        self, inbox: Inbox, background: TaskOwner, platforms: Platforms, sections: Mapping[str, PlatformConfig]
    ) -> None:
        """Start taking items in from elsewhere (the shared stream, its platform leaders)."""


class _Journaled(Record):
    """An item in the inbound journal: its turn runs once the App is ready (not while it
    stops: the next start answers it), and its entry is removed after. A turn cut off (a
    crash, a store away for longer than the grace) leaves the entry for the next start."""

    def __init__(self, journal: InboundCarrier, entry: str, life: Lifecycle) -> None:
        super().__init__(durable=True, here=True)
        self._journal = journal
        self._entry = entry
        self._life = life

    async def carry(self, turn: Callable[[], Awaitable[TurnOutcome]]) -> None:
        await self._life.ready.wait()
        if self._life.stopping.is_set():
            return  # stopping: recorded, and the next start answers it
        try:
            await turn()
        except outage_errors() as exc:
            log.warning("a turn met a store outage longer than the grace (%s); it runs again at the next start", exc)
            return
        except Exception:  # boundary: a journaled item's turn (an event's hooks included), so its entry is removed
            log.exception("turn crashed; its message is dropped so it is not retried forever")
        await self._journal.done(self._entry)


class JournalIntake(Intake):
    def __init__(self, turns: Turns, journal: InboundCarrier) -> None:
        super().__init__(turns)
        self.journal = journal

    @property
    def recorder(self) -> Recorder:
        return self

    def receives(self, adapter: Adapter) -> bool:
        return True

    def appends(self, msg: BotMessage) -> ConversationLocks | None:
        return None  # the journal's order is its turns' order, held from arrival

    async def record(self, item: Item, *, ordered: bool) -> Record | None:
        entry = await self.journal.record(item)
        return None if entry is None else _Journaled(self.journal, entry, self.turns.life)

    async def replay(self, inbox: Inbox) -> None:
        left = await self.journal.pending()
        if left:
            log.warning("answering %d message(s) a previous run received but did not finish", len(left))
        for entry, item in left:
            await self.turns.arrivals.recorded(item, _Journaled(self.journal, entry, self.turns.life), inbox, detached=True)


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
        # One append at a time per conversation, in the order items arrived: the stream's
        # sequence numbers are the conversation's order (an SDK that hands over each message
        # in a task of its own must not let a later one overtake), and so are their receipt
        # times.
        self._appending = ConversationLocks()

    @property
    def recorder(self) -> Recorder:
        return self

    def receives(self, adapter: Adapter) -> bool:
        return self._receive and self._role == "all" and adapter.local

    def _local(self, item: Item) -> bool:
        adapter = self._adapters.get(item.platform)
        return adapter is not None and adapter.local

    def appends(self, msg: BotMessage) -> ConversationLocks | None:
        return None if self._local(msg) else self._appending

    async def record(self, item: Item, *, ordered: bool) -> Record | None:
        """A local platform's item is answered here, beside the stream; any other is appended
        (a /stop and an event unordered: they run at once, not after the conversation's
        earlier messages)."""
        if self._local(item):
            return LOCAL
        entry = await self.stream.record(item, ordered=ordered)
        return None if entry is None else Record(durable=True, here=False)

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
            read = partial(self.turns.arrivals.recorded, record=STREAMED, inbox=inbox, detached=False)
            background.spawn(self.stream.run(read, life.stopping, life.drain), name="inbound stream")
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
