"""One agent turn, the pipeline's last step: history in, reply out (streamed or whole),
history appended.

A turn's effects commit together: the user and assistant entries, the reply exactly as it
will be sent, and the turn's marker (keyed by the inbound message) are written in one atomic
store step, before the first chunk goes out. A turn that runs again after a crash finds the
marker and only delivers what was committed (`resume`), so the model never sees a turn
twice in its history and the person never gets a reply that differs from the recorded one.
A streamed reply is on screen before it is complete, so it commits its history after the
last edit; a re-run edits the same messages (the outbox remembers them).

A model failure becomes a short apology and a logged error, never a crashed bot; the typing
indicator is renewed for as long as the turn runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from botweave.agents import Agent, AgentError, History
from botweave.delivery import Delivered, Prepared, ReplyChannel
from botweave.pipeline import Inbound, TurnOutcome, TurnStatus
from botweave.store import Operation, Put, Store
from botweave.types import BotMessage

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I couldn't answer that just now. Please try again in a moment."

#: Told after a reply went out: (message, agent, what was delivered, seconds the turn took).
Finished = Callable[[BotMessage, Agent, Delivered, float], Awaitable[None]]


def user_entry(msg: BotMessage) -> dict[str, str]:
    """The user turn as stored and sent: attributed to its author in groups."""
    turn = msg.prompt_text
    if msg.is_group:
        turn = f"[{msg.sender.name}] {turn}"
    return {"role": "user", "content": turn}


def turn_marker(msg: BotMessage) -> str:
    """The key whose presence says this message's turn has committed."""
    return f"turn:{msg.platform}:{msg.channel.channel_id}:{msg.message_id}"


def reply_record(reply: ReplyChannel) -> str:
    """Where a committed turn keeps the reply it is delivering."""
    return f"reply:{reply.key('reply')}"


async def keep_typing(reply: ReplyChannel) -> None:
    adapter = reply.adapter
    if not adapter.capabilities.typing:
        return
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            try:
                await adapter.typing(reply.chat_id, thread_id=reply.origin.thread_id)
            except Exception:
                log.debug("typing indicator failed", exc_info=True)
            await asyncio.sleep(adapter.typing_interval_s)


class AgentTurn:
    """The endpoint of the pipeline: the routed agent answers."""

    def __init__(
        self, agents: Mapping[str, Agent], history: History, finished: Finished, store: Store, ttl: float
    ) -> None:
        self._agents = agents
        self._history = history
        self._finished = finished
        self._store = store
        self._ttl = ttl

    async def __call__(self, inbound: Inbound) -> TurnOutcome:
        target = inbound.target
        agent = self._agents.get(target.name) if target is not None and target.kind == "agent" else None
        if agent is None:
            msg = inbound.message
            log.warning("%s: no route for chat %s; message dropped", msg.platform, msg.channel.channel_id)
            return TurnOutcome(TurnStatus.UNROUTABLE)
        return await self.run(inbound.message, agent, inbound.conversation, inbound.reply)

    async def resume(self, msg: BotMessage, reply: ReplyChannel) -> TurnOutcome | None:
        """Finish a turn that committed before its process stopped: deliver the committed
        reply (chunks already confirmed are not sent again). None when the turn never
        committed and has to run."""
        if await self._store.get(turn_marker(msg)) is None:
            return None
        raw = await self._store.get(reply_record(reply))
        if raw is None:  # silent, or streamed: everything was on screen before the commit
            return TurnOutcome(TurnStatus.REPLIED, detail="resumed")
        log.info("%s: delivering the committed reply to %s after a restart", msg.platform, msg.message_id)
        delivered = await reply.deliver(Prepared.from_json(raw))
        return TurnOutcome(TurnStatus.REPLIED, delivered, detail="resumed")

    async def run(self, msg: BotMessage, agent: Agent, conversation: str, reply: ReplyChannel) -> TurnOutcome:
        started = time.monotonic()
        earlier = await self._history.load(conversation, agent.config.max_history)
        entry = user_entry(msg)
        typing = asyncio.create_task(keep_typing(reply))
        try:
            if reply.can_stream():
                delivered = await reply.stream_text(
                    agent.stream(earlier, entry["content"]), model=agent.model, elapsed=lambda: time.monotonic() - started
                )
                if delivered.cancelled:
                    return TurnOutcome(TurnStatus.CANCELLED, delivered)
                answer = {"role": "assistant", "content": "" if delivered.silent else delivered.text}
                await self._store.commit(
                    turn_marker(msg),
                    [self._history.append_op(conversation, agent.config.max_history, entry, answer)],
                    ttl=self._ttl,
                )
            else:
                text = await agent.complete(earlier, entry["content"])
                prepared = await reply.prepare(text, model=agent.model, seconds=time.monotonic() - started)
                if prepared is None:
                    return TurnOutcome(TurnStatus.CANCELLED, Delivered(cancelled=True))
                prepared = await self._commit(msg, agent, conversation, reply, entry, prepared)
                delivered = await reply.deliver(prepared)
        except AgentError as exc:
            log.error("%s", exc)
            apology = await reply.send_text(APOLOGY, purpose="apology")
            return TurnOutcome(TurnStatus.AGENT_ERROR, apology, detail=str(exc))
        finally:
            typing.cancel()
        if delivered.silent:
            return TurnOutcome(TurnStatus.SILENT, delivered)
        await self._finished(msg, agent, delivered, time.monotonic() - started)
        return TurnOutcome(TurnStatus.REPLIED, delivered)

    async def _commit(
        self,
        msg: BotMessage,
        agent: Agent,
        conversation: str,
        reply: ReplyChannel,
        entry: dict[str, str],
        prepared: Prepared,
    ) -> Prepared:
        """History, reply and marker in one step; what to deliver is what was committed."""
        answer = {"role": "assistant", "content": "" if prepared.silent else prepared.text}
        operations: list[Operation] = [self._history.append_op(conversation, agent.config.max_history, entry, answer)]
        if not prepared.silent:
            operations.append(Put(reply_record(reply), prepared.to_json(), ttl=self._ttl))
        if await self._store.commit(turn_marker(msg), operations, ttl=self._ttl):
            return prepared
        # Another run of this turn committed first (or our own commit landed and its answer
        # was lost to a timeout): deliver that one, never a second version.
        raw = await self._store.get(reply_record(reply))
        return Prepared.from_json(raw) if raw is not None else Prepared("", (), silent=True)
