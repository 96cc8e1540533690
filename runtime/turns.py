"""One agent turn: history in, reply out (streamed or whole), history appended.

A model failure becomes a short apology and a logged error, never a crashed bot; the typing
indicator is renewed for as long as the turn runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from botweave.agents import Agent, AgentError, History
from botweave.delivery import Delivery, ReplyChannel
from botweave.types import BotMessage

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I couldn't answer that just now. Please try again in a moment."

#: Told after a reply went out: (message, agent, delivery, seconds the turn took).
Finished = Callable[[BotMessage, Agent, Delivery, float], Awaitable[None]]


@dataclass
class TurnOutcome:
    """What the pipeline did with one inbound item; tests and benchmarks read it."""

    status: str  # replied, silent, cancelled, command, observed, duplicate, dropped_*, denied, ...
    delivery: Delivery | None = None
    detail: str = ""

    @property
    def message_ids(self) -> list[str]:
        return self.delivery.message_ids if self.delivery else []


def user_entry(msg: BotMessage) -> dict[str, str]:
    """The user turn as stored and sent: attributed to its author in groups."""
    turn = msg.prompt_text
    if msg.is_group:
        turn = f"[{msg.sender.name}] {turn}"
    return {"role": "user", "content": turn}


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


async def agent_turn(
    msg: BotMessage, agent: Agent, conversation: str, reply: ReplyChannel, history: History, finished: Finished
) -> TurnOutcome:
    started = time.monotonic()
    earlier = await history.load(conversation, agent.config.max_history)
    entry = user_entry(msg)
    typing = asyncio.create_task(keep_typing(reply))
    try:
        if reply.can_stream():
            delivery = await reply.stream_text(
                agent.stream(earlier, entry["content"]), model=agent.model, elapsed=lambda: time.monotonic() - started
            )
        else:
            text = await agent.complete(earlier, entry["content"])
            delivery = await reply.send_text(text, model=agent.model, seconds=time.monotonic() - started)
    except AgentError as exc:
        log.error("%s", exc)
        return TurnOutcome("agent_error", await reply.send_text(APOLOGY, purpose="apology"), detail=str(exc))
    finally:
        typing.cancel()
    if delivery.cancelled:
        return TurnOutcome("cancelled", delivery)
    answer = {"role": "assistant", "content": "" if delivery.silent else delivery.text}
    await history.append(conversation, agent.config.max_history, entry, answer)
    if delivery.silent:
        return TurnOutcome("silent", delivery)
    await finished(msg, agent, delivery, time.monotonic() - started)
    return TurnOutcome("replied", delivery)
