"""One agent turn, the pipeline's last step: history in, reply out (streamed or whole),
history appended.

A model failure becomes a short apology and a logged error, never a crashed bot; the typing
indicator is renewed for as long as the turn runs. However it ends, a turn is reported once:
one INFO line with what an operator asks first (which conversation, agent and model, how it
ended, how long it took, how many tokens it used) and the turn metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from botweave.agents import Agent, AgentError, History
from botweave.delivery import Delivered, ReplyChannel
from botweave.metrics import TURN_SECONDS, TURNS, counting_usage
from botweave.pipeline import Inbound, TurnOutcome, TurnStatus
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


Run = Callable[["AgentTurn", BotMessage, Agent, str, ReplyChannel], Awaitable[TurnOutcome]]


def _reported(run: Run) -> Run:
    """The turn's INFO line and metrics, whichever way it ended (an exception is `error`)."""

    @functools.wraps(run)
    async def reported(self: AgentTurn, msg: BotMessage, agent: Agent, conversation: str, reply: ReplyChannel) -> TurnOutcome:
        started = time.monotonic()
        outcome = "error"
        with counting_usage() as usage:
            try:
                result = await run(self, msg, agent, conversation, reply)
                outcome = result.status.value
                return result
            except asyncio.CancelledError:
                outcome = "cancelled"
                raise
            finally:
                seconds = time.monotonic() - started
                TURNS.labels(agent.name, outcome).inc()
                TURN_SECONDS.observe(seconds)
                fields = {
                    "conversation": conversation,
                    "agent": agent.name,
                    "model": agent.model,
                    "outcome": outcome,
                    "latency_ms": round(seconds * 1000),
                    "tokens_in": usage.tokens_in,
                    "tokens_out": usage.tokens_out,
                }
                log.info(
                    "turn %s: agent=%s model=%s outcome=%s latency_ms=%d tokens_in=%d tokens_out=%d",
                    *fields.values(),
                    extra=fields,
                )

    return reported


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

    def __init__(self, agents: Mapping[str, Agent], history: History, finished: Finished) -> None:
        self._agents = agents
        self._history = history
        self._finished = finished

    async def __call__(self, inbound: Inbound) -> TurnOutcome:
        target = inbound.target
        agent = self._agents.get(target.name) if target is not None and target.kind == "agent" else None
        if agent is None:
            msg = inbound.message
            log.warning("%s: no route for chat %s; message dropped", msg.platform, msg.channel.channel_id)
            return TurnOutcome(TurnStatus.UNROUTABLE)
        return await self.run(inbound.message, agent, inbound.conversation, inbound.reply)

    @_reported
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
            else:
                text = await agent.complete(earlier, entry["content"])
                delivered = await reply.send_text(text, model=agent.model, seconds=time.monotonic() - started)
        except AgentError as exc:
            log.error("%s", exc)
            apology = await reply.send_text(APOLOGY, purpose="apology")
            return TurnOutcome(TurnStatus.AGENT_ERROR, apology, detail=str(exc))
        finally:
            typing.cancel()
        if delivered.cancelled:
            return TurnOutcome(TurnStatus.CANCELLED, delivered)
        answer = {"role": "assistant", "content": "" if delivered.silent else delivered.text}
        await self._history.append(conversation, agent.config.max_history, entry, answer)
        if delivered.silent:
            return TurnOutcome(TurnStatus.SILENT, delivered)
        await self._finished(msg, agent, delivered, time.monotonic() - started)
        return TurnOutcome(TurnStatus.REPLIED, delivered)
