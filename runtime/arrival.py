"""The arrival chain: the one way an inbound item takes in this process, from the moment it
comes in to the end of its turn. Its steps are fixed and composed once, with the pipeline's
own `compose()` and its one middleware signature, the way aiogram's Dispatcher registers its
outer middlewares:

    stamp -> order -> signal -> dedup -> turn

- `stamp`: the item's receipt time, which turn control compares its marks with.
- `order`: the item's place in its conversation's line, taken before the first await, so
  the order messages arrive in is the order their turns run in, however long recording each
  takes. A /stop takes no place (it acts on the turn holding one, and must not wait behind
  it), nor does an event. An item whose turn runs in another process (the shared stream)
  keeps its place in the intake's line while it is signalled and appended instead, so the
  stream's order is the arrival order too.
- `signal`: a new message in `interrupt`/`collect` mode tells the turns before it that it
  came, before it is recorded.
- `dedup`: a platform's retry ends here. For a submitted item the intake's record is the
  check (the record and the retry key land together, so a crash between them can neither
  lose nor double an item); an item handed over directly claims its key; an item read back
  from a record was checked when it was recorded.
- `turn`: once the item's place comes, an event goes to the hooks and turn control, a
  message through the live generation's pipeline (runtime/generation.py), which it keeps to
  its end. A submitted item's turn runs in a task of its own, so `submit` returns once the
  item is recorded.

Three ways in: `submit` (`App.submit`: the intake records the item), `recorded` (an item an
intake reads back from its record: the journal at start, the shared stream), and `handle`
(`App.handle`: an item handed over directly, answered in the caller). Every turn passes
through `App.handle`, so whoever wraps it sees every item; each is counted once, by how it
ended, and is part of the queue depth while it waits in `App.handle` or runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from botweave.buttons import PREFIX as BUTTON_PREFIX
from botweave.buttons import ButtonBook
from botweave.conversations import ConversationLocks, Place, conversation_key
from botweave.delivery import Delivery, ReplyChannel
from botweave.hooks import HookEvent, HookRegistry
from botweave.metrics import INBOUND, QUEUE_DEPTH
from botweave.pipeline import Inbound, TurnOutcome, TurnStatus, compose
from botweave.policies.approvals import ApprovalDesk
from botweave.policies.asks import AskDesk
from botweave.runtime.connections import Platforms, Receiver
from botweave.runtime.generation import Live
from botweave.runtime.turn_control import TurnControl
from botweave.store import Store
from botweave.store.carrier import dedup_key
from botweave.store.errors import outage_errors
from botweave.tasks import TaskOwner
from botweave.types import BotMessage, PlatformEvent, PressAnswer

log = logging.getLogger(__name__)

Item = BotMessage | PlatformEvent
Outcome = TurnOutcome | None
"""How an item's way ended here: its turn's outcome, or None when the turn runs on in a task
of its own or in the process that reads the shared stream."""


class Record:
    """What an intake made of an item it recorded (or read back), as the rest of its way
    needs to know."""

    def __init__(self, *, durable: bool, here: bool) -> None:
        #: Recorded to outlive this process: a turn running again after a crash finishes
        #: what it committed instead of deciding afresh.
        self.durable = durable
        #: Its turn runs in this process (else in the one that reads the shared stream).
        self.here = here

    async def carry(self, turn: Callable[[], Awaitable[TurnOutcome]]) -> None:
        """Run the item's turn as its record wants it run (the journal: once the App is
        ready, and the entry removed after)."""
        await turn()


class Recorder(Protocol):
    """An intake, as the chain has it record a submitted item."""

    def appends(self, msg: BotMessage) -> ConversationLocks | None:
        """The line whose order `msg`'s record must keep (a shared stream's sequence numbers),
        or None when its place is its turn's, in this process."""
        ...

    async def record(self, item: Item, *, ordered: bool) -> Record | None:
        """Record `item` before the platform is acknowledged; None when its record says it
        was seen already (a platform retry). A failure to record raises."""
        ...


class Inbox(Receiver, Protocol):
    """The App, as its intake and its arrival chain see it."""

    @property
    def needs_litellm(self) -> bool: ...

    async def handle(self, item: Item, *, deduplicated: bool = False, arrival: Arrival | None = None) -> TurnOutcome: ...


@dataclass(eq=False)
class Arrival:
    """One item on its way along the chain, with what the steps learned about it."""

    item: Item
    inbox: Inbox
    #: The intake recording it now (`submit`); None when it was read back or handed over.
    recorder: Recorder | None = None
    #: How it was recorded: the dedup step's, for a submitted item; the intake's, read back.
    record: Record | None = None
    #: Its platform retry check was done already (read back from a record, or the caller says so).
    checked: bool = False
    #: Its turn runs in a task of its own (the way in returns once the item is recorded).
    detached: bool = False
    #: A message that keeps its conversation's order (not an event, not a /stop).
    ordered: bool = False
    #: Its place in its conversation's line, while this way holds it.
    place: Place | None = None


class ArrivalChain:
    """The chain's steps, its turn, and the three ways in (see the module docstring)."""

    def __init__(
        self,
        *,
        store: Store,
        dedup_ttl: float,
        platforms: Platforms,
        live: Live,
        hooks: HookRegistry,
        delivery: Delivery,
        locks: ConversationLocks,
        control: TurnControl,
        buttons: ButtonBook,
        approvals: ApprovalDesk,
        asks: AskDesk,
        tasks: TaskOwner,
    ) -> None:
        self._store = store
        self._dedup_ttl = dedup_ttl
        self._platforms = platforms
        self._live = live
        self._hooks = hooks
        self._delivery = delivery
        self._locks = locks
        self._control = control
        self._buttons = buttons
        self._approvals = approvals
        self._asks = asks
        #: Where submitted items' turns run (App.drain waits for them).
        self.tasks = tasks
        self._chain = compose([self._stamp, self._order, self._signal, self._dedup], self._turn_of)

    # --- the ways in ----------------------------------------------------------------------------

    async def submit(self, item: Item, inbox: Inbox, recorder: Recorder | None) -> None:
        """An item the App accepts: returns once `recorder` recorded it, its turn running on;
        a failure to record raises. Without a recorder (an App not started, or started only
        to post) the item is handed over at once."""
        if recorder is None:
            self.tasks.spawn(inbox.handle(item), name="handle an inbound item")
            return
        await self._chain(Arrival(item, inbox, recorder=recorder, detached=True))

    async def recorded(self, item: Item, record: Record, inbox: Inbox, *, detached: bool) -> Outcome:
        """An item an intake read back from its record: its turn runs here, in a task of its
        own when `detached` (the journal at start), else in the caller (the shared stream,
        which acknowledges the entry after)."""
        return await self._chain(Arrival(item, inbox, record=record, checked=True, detached=detached))

    async def handle(self, item: Item, inbox: Inbox, *, deduplicated: bool, arrival: Arrival | None) -> TurnOutcome:
        """`App.handle`: an item's turn, counted by how it ended. With `arrival`, the chain
        brought it here; without, it is handed over directly and takes the chain first
        (`deduplicated`: its caller checked it for a platform retry)."""
        QUEUE_DEPTH.inc()
        outcome = "error"
        try:
            if arrival is not None:
                result = await self._turn(arrival)
            else:
                ended = await self._chain(Arrival(item, inbox, checked=deduplicated))
                if ended is None:  # a handed-over item never leaves the caller
                    raise RuntimeError("an item handed over directly ended without an outcome")
                result = ended
            outcome = result.status.value
            return result
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            QUEUE_DEPTH.dec()
            kind = item.message_type.value if isinstance(item, BotMessage) else item.kind
            INBOUND.labels(item.platform, kind, outcome).inc()

    # --- the steps ------------------------------------------------------------------------------

    async def _stamp(self, arrival: Arrival, call_next: Callable[[Arrival], Awaitable[Outcome]]) -> Outcome:
        self._control.stamp(arrival.item)
        return await call_next(arrival)

    async def _order(self, arrival: Arrival, call_next: Callable[[Arrival], Awaitable[Outcome]]) -> Outcome:
        item = arrival.item
        if not isinstance(item, BotMessage) or self._control.is_control(item):
            return await call_next(arrival)  # an event; a /stop acts on the turn holding the place
        arrival.ordered = True
        key = conversation_key(item)
        appends = arrival.recorder.appends(item) if arrival.recorder is not None else None
        if appends is not None:  # its turn runs elsewhere: in line while signalled and appended
            async with appends.hold(key):
                return await call_next(arrival)
        arrival.place = self._locks.place(key)
        try:
            return await call_next(arrival)
        finally:
            if arrival.place is not None:  # else its turn's task took it along
                arrival.place.release()

    async def _signal(self, arrival: Arrival, call_next: Callable[[Arrival], Awaitable[Outcome]]) -> Outcome:
        item = arrival.item
        if arrival.ordered and arrival.recorder is not None and isinstance(item, BotMessage):
            await self._control.arrived(item)  # before it is recorded
        return await call_next(arrival)

    async def _dedup(self, arrival: Arrival, call_next: Callable[[Arrival], Awaitable[Outcome]]) -> Outcome:
        if arrival.recorder is not None:
            arrival.record = await arrival.recorder.record(arrival.item, ordered=arrival.ordered)
            if arrival.record is None:
                return TurnOutcome(TurnStatus.DUPLICATE)
        elif not arrival.checked:
            key = dedup_key(arrival.item)
            if key is not None and not await self._store.set_if_absent(key, "1", ttl=self._dedup_ttl):
                return TurnOutcome(TurnStatus.DUPLICATE)
        return await call_next(arrival)

    async def _turn_of(self, arrival: Arrival) -> Outcome:
        """The chain's end: the item's turn once its place comes, through `App.handle`."""
        record = arrival.record
        if record is not None and not record.here:
            return None  # the process that reads the shared stream answers it
        if arrival.detached and record is not None:
            place, arrival.place = arrival.place, None  # its turn's task holds it from now on
            self.tasks.spawn(self._detached(arrival, record, place), name="handle an inbound item")
            return None
        if record is None and arrival.recorder is None:
            return await self._turn(arrival)  # handed over: in `App.handle` already
        return await arrival.inbox.handle(arrival.item, arrival=arrival)

    async def _detached(self, arrival: Arrival, record: Record, place: Place | None) -> None:
        try:
            if place is not None:
                await place.wait()
            await record.carry(partial(arrival.inbox.handle, arrival.item, arrival=arrival))
        finally:
            if place is not None:
                place.release()

    # --- the turn -------------------------------------------------------------------------------

    async def _turn(self, arrival: Arrival) -> TurnOutcome:
        """The item's turn, once its place comes (waiting for it is part of the queue depth)."""
        if arrival.place is not None:
            await arrival.place.wait()
        item = arrival.item
        if isinstance(item, PlatformEvent):
            return await self._event(item, arrival.inbox)
        durable = arrival.record.durable if arrival.record is not None else arrival.checked
        return await self._run_pipeline(item, durable=durable)

    async def _event(self, event: PlatformEvent, inbox: Inbox) -> TurnOutcome:
        await self._hooks.run(HookEvent(event.hook_event, event.hook_payload()))
        if event.platform in self._platforms.adapters:
            again = await self._control.on_event(event)
            if again is not None:  # an edit soon after its answer: answered again, as a new arrival
                await inbox.submit(again)
        return TurnOutcome(TurnStatus.EVENT)

    async def _run_pipeline(self, msg: BotMessage, *, durable: bool) -> TurnOutcome:
        adapter = self._platforms.adapters.get(msg.platform)
        if adapter is None:
            log.warning("message from platform %r that has no adapter; dropped", msg.platform)
            return TurnOutcome(TurnStatus.DROPPED_UNKNOWN_PLATFORM)
        config = self._platforms.configs[msg.platform]
        reply = ReplyChannel(self._delivery, adapter, msg, config)
        generation = self._live.generation  # this item's, to its end
        generation.enter()
        try:
            if durable:
                # A recorded item may be running again after a crash: a turn that committed
                # is finished by delivering what it committed, never decided afresh.
                resumed = await generation.turn.resume(msg, reply)
                if resumed is not None:
                    return resumed
            return await generation.pipeline(Inbound(msg, adapter, config, reply, generation.router.resolve(msg)))
        except outage_errors():
            raise  # not a failure of the turn: it runs again once the store is back
        except Exception as exc:  # boundary: a turn
            # Nothing vanishes silently: the sender hears that this message got no answer.
            log.exception("%s: the turn for message %s failed", msg.platform, msg.message_id)
            await self._control.tell_failure(reply)
            return TurnOutcome(TurnStatus.FAILED, detail=f"{type(exc).__name__}: {exc}")
        finally:
            generation.leave()

    # --- beside the chain -----------------------------------------------------------------------

    async def answered(self, msg: BotMessage) -> None:
        """A message that was the answer to an agent's question: counted, and its platform's
        retry of it kept from starting a turn after all (the key the dedup step claims)."""
        key = dedup_key(msg)
        if key is not None:
            await self._store.set(key, "1", ttl=self._dedup_ttl)
        INBOUND.labels(msg.platform, msg.message_type.value, "answer").inc()

    async def answer_press(self, event: PlatformEvent) -> tuple[PlatformEvent, PressAnswer]:
        """A button press, read in whichever process holds the platform connection."""
        event, known = await self._buttons.read(event)
        if not known:
            stale = (event.action_id or "").startswith(BUTTON_PREFIX)
            return event, PressAnswer("This button no longer works.", alert=True) if stale else PressAnswer()
        answer = await self._approvals.answer(event) or await self._asks.answer(event)
        return event, answer or PressAnswer()
