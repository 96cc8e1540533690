"""One inbound item, from its platform retry check to how it ended: a platform event goes to
the hooks and turn control; a message takes its conversation's turn (unless its intake held
that place on arrival, or it is a /stop, which acts on the turn holding it) and runs the
pipeline of the live generation (see runtime/generation.py), which it keeps to its end. Every
item is counted once, by how it ended, and is part of the queue depth while it waits or runs."""

from __future__ import annotations

import asyncio
import logging

from botweave.buttons import PREFIX as BUTTON_PREFIX
from botweave.buttons import ButtonBook
from botweave.conversations import ConversationLocks, conversation_key
from botweave.delivery import Delivery, ReplyChannel
from botweave.hooks import HookEvent, HookRegistry
from botweave.metrics import INBOUND, QUEUE_DEPTH
from botweave.pipeline import Inbound, TurnOutcome, TurnStatus
from botweave.policies.approvals import ApprovalDesk
from botweave.policies.asks import AskDesk
from botweave.runtime.connections import Platforms
from botweave.runtime.generation import Live
from botweave.runtime.intake import Inbox, Recorded
from botweave.runtime.turn_control import TurnControl
from botweave.store import Store
from botweave.store.carrier import dedup_key
from botweave.store.errors import outage_errors
from botweave.types import BotMessage, PlatformEvent, PressAnswer

log = logging.getLogger(__name__)


class Handling:
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

    async def handle(
        self, item: BotMessage | PlatformEvent, inbox: Inbox, *, deduplicated: bool, recorded: Recorded | None
    ) -> TurnOutcome:
        QUEUE_DEPTH.inc()
        outcome = "error"
        try:
            result = await self._handle(item, inbox, deduplicated=deduplicated or recorded is not None, recorded=recorded)
            outcome = result.status.value
            return result
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            QUEUE_DEPTH.dec()
            kind = item.message_type.value if isinstance(item, BotMessage) else item.kind
            INBOUND.labels(item.platform, kind, outcome).inc()

    async def _handle(
        self, item: BotMessage | PlatformEvent, inbox: Inbox, *, deduplicated: bool, recorded: Recorded | None
    ) -> TurnOutcome:
        key = None if deduplicated else dedup_key(item)
        if key is not None and not await self._store.set_if_absent(key, "1", ttl=self._dedup_ttl):
            return TurnOutcome(TurnStatus.DUPLICATE)
        if isinstance(item, PlatformEvent):
            return await self._event(item, inbox)
        self._control.stamp(item)  # handed over directly (not through `submit`)
        if recorded in ("journal", "here"):  # the conversation's lock was taken on arrival
            return await self._run_pipeline(item, durable=recorded == "journal")
        if self._control.is_control(item):  # it acts on the turn holding the lock
            return await self._run_pipeline(item, durable=deduplicated)
        async with self._locks.hold(conversation_key(item)):
            return await self._run_pipeline(item, durable=deduplicated)

    async def _event(self, event: PlatformEvent, inbox: Inbox) -> TurnOutcome:
        await self._hooks.run(HookEvent(event.hook_event, event.hook_payload()))
        if event.platform in self._platforms.adapters:
            again = await self._control.on_event(event)
            if again is not None:  # an edit soon after its answer: answered again, in its turn
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
        except Exception as exc:
            # Nothing vanishes silently: the sender hears that this message got no answer.
            log.exception("%s: the turn for message %s failed", msg.platform, msg.message_id)
            await self._control.tell_failure(reply)
            return TurnOutcome(TurnStatus.FAILED, detail=f"{type(exc).__name__}: {exc}")
        finally:
            generation.leave()

    async def answered(self, msg: BotMessage) -> None:
        """A message that was the answer to an agent's question: counted, and its platform's
        retry of it kept from starting a turn after all."""
        key = dedup_key(msg)
        if key is not None:
            await self._store.set(key, "1", ttl=self._dedup_ttl)
        INBOUND.labels(msg.platform, msg.message_type.value, "answer").inc()

    async def answer_press(self, event: PlatformEvent) -> tuple[PlatformEvent, PressAnswer]:
        event, known = await self._buttons.read(event)
        if not known:
            stale = (event.action_id or "").startswith(BUTTON_PREFIX)
            return event, PressAnswer("This button no longer works.", alert=True) if stale else PressAnswer()
        answer = await self._approvals.answer(event) or await self._asks.answer(event)
        return event, answer or PressAnswer()
