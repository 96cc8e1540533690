"""One agent turn, the pipeline's last step: history in, reply out (streamed or whole),
history appended. A turn with tools records its calls and their results in history with the
answer, as one item, so later turns see what the agent did.

A model failure becomes a short apology and a logged error, never a crashed bot; the typing
indicator shows for a turn that takes a while (see `TypingIndicator`) and is renewed for as
long as it runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from botweave.agents import Agent, AgentError, History, ToolTurn
from botweave.delivery import Delivered, ReplyChannel
from botweave.pipeline import Inbound, TurnOutcome, TurnStatus
from botweave.tooling import ToolContext
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


#: How long a finished turn waits for a typing call already on its way: the turn is over
#: only once the platform has it (a caller may start the next turn of the chat right away),
#: but a slow call never holds a turn back for long.
TYPING_SETTLE_S = 1.0

_typing_calls: set[asyncio.Task[None]] = set()  # running indicators, kept alive until they end


class TypingIndicator:
    """The typing indicator of one turn, as the platform's `typing` settings say.

    In `auto` mode nothing happens until the turn has run for `delay_ms`, and a turn that ends
    sooner costs only a timer: most answers arrive before a person would miss an indicator,
    and each indicator is a platform call. Once shown, it is renewed every
    `adapter.typing_interval_s` until `stop`.

    A streamed reply that is being written shows the bot at work by itself: no indicator is
    sent while the stream wrote within the last `typing_interval_s` (the indicator fills the
    silences, such as tool calls between two streamed passages).

    A call once started is never cancelled: cancelling an HTTP request in flight can cost its
    pooled connection (some clients even lose track of it), so `stop` only keeps new calls from
    starting and lets the one in flight finish.
    """

    def __init__(self, reply: ReplyChannel) -> None:
        self._reply = reply
        self._adapter = reply.adapter
        self._chat_id = reply.chat_id
        self._thread_id = reply.origin.thread_id
        self._settings = reply.config.typing
        self._stopped = False
        self._timer: asyncio.TimerHandle | None = None
        self._pause: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._settings.mode == "never" or not self._adapter.capabilities.typing:
            return
        delay = self._settings.delay_ms / 1000 if self._settings.mode == "auto" else 0.0
        if delay > 0:
            self._timer = asyncio.get_running_loop().call_later(delay, self._begin)
        else:
            self._begin()

    def _begin(self) -> None:
        self._timer = None
        if self._stopped:
            return
        task = asyncio.create_task(self._keep())
        self._task = task
        _typing_calls.add(task)
        task.add_done_callback(_typing_calls.discard)

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._adapter.typing_interval_s
        while not self._stopped:
            stream = self._reply.stream
            quiet_for = time.monotonic() - stream.last_write if stream is not None else interval
            if quiet_for >= interval:
                await self._adapter.typing(self._chat_id, thread_id=self._thread_id)  # never raises
                if self._stopped:
                    return
                quiet_for = 0.0
            pause = self._pause = loop.create_future()
            wake = loop.call_later(interval - quiet_for, _resolve, pause)
            try:
                await pause
            finally:
                wake.cancel()

    async def stop(self) -> None:
        """No further calls; a call in flight finishes (the turn waits up to TYPING_SETTLE_S)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pause is not None:
            _resolve(self._pause)
        task = self._task
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=TYPING_SETTLE_S)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


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

    async def run(self, msg: BotMessage, agent: Agent, conversation: str, reply: ReplyChannel) -> TurnOutcome:
        started = time.monotonic()
        earlier = await self._history.load(conversation, agent.config.max_history)
        entry = user_entry(msg)
        turn = ToolTurn(ToolContext(agent.name, msg, conversation))
        typing = TypingIndicator(reply)
        typing.start()
        try:
            if reply.can_stream():
                delivered = await reply.stream_text(
                    agent.stream(earlier, entry["content"], turn),
                    model=agent.model,
                    elapsed=lambda: time.monotonic() - started,
                    tools=turn.used,
                )
            else:
                text = await agent.complete(earlier, entry["content"], turn)
                delivered = await reply.send_text(
                    text, model=agent.model, seconds=time.monotonic() - started, tools=turn.used
                )
        except AgentError as exc:
            log.error("%s", exc)
            apology = await reply.send_text(APOLOGY, purpose="apology")
            return TurnOutcome(TurnStatus.AGENT_ERROR, apology, detail=str(exc))
        finally:
            await typing.stop()
        if delivered.cancelled:
            return TurnOutcome(TurnStatus.CANCELLED, delivered)
        answer = {"role": "assistant", "content": "" if delivered.silent else delivered.text}
        await self._history.append_turn(conversation, agent.config.max_history, [entry, *turn.messages, answer])
        if delivered.silent:
            return TurnOutcome(TurnStatus.SILENT, delivered)
        await self._finished(msg, agent, delivered, time.monotonic() - started)
        return TurnOutcome(TurnStatus.REPLIED, delivered)
