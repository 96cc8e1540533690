"""One agent turn, the pipeline's last step: history in, reply out (streamed or whole),
history appended. A turn with tools records its calls and their results in history with the
answer, as one item, so later turns see what the agent did.

A turn's effects commit together: the user and assistant entries, the reply exactly as it
will be sent, and the turn's marker (keyed by the inbound message) are written in one atomic
store step, before the first chunk goes out. A turn that runs again after a crash finds the
marker and only delivers what was committed (`resume`), so the model never sees a turn
twice in its history and the person never gets a reply that differs from the recorded one.
A streamed reply is on screen before it is complete, so it commits its history after the
last edit; a re-run edits the same messages (the outbox remembers them).

A model failure becomes a short apology and a logged error, never a crashed bot; the typing
indicator shows for a turn that takes a while (see `TypingIndicator`) and is renewed for as
long as it runs. The agent reads what the media step made of the message's files when there
were any (images as content parts), and history keeps their compact markers; images the
model returns follow its words as files.
However it ends, a turn is reported once: one INFO line with what an operator asks first
(which conversation, agent and model, how it ended, how long it took, how many tokens it
used) and the turn metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botweave.agents import Agent, AgentError, Briefing, History, ToolTurn, UserTurn
from botweave.context import Context, Fitted
from botweave.delivery import Delivered, Prepared, ReplyChannel
from botweave.events import ConversationEvents, RunEvents
from botweave.files import markers_for, message_text
from botweave.metrics import TURN_SECONDS, TURNS, counting_usage
from botweave.model_guard import CallRefused
from botweave.pipeline import Inbound, TurnOutcome, TurnStatus
from botweave.store import Operation, Put, Store
from botweave.tasks import spawn
from botweave.tooling import Approvals, Asks, ToolContext
from botweave.types import BotMessage, OutboundFile, revision_suffix

log = logging.getLogger(__name__)

APOLOGY = "Sorry, I couldn't answer that just now. Please try again in a moment."
#: When trying again cannot help (a missing or refused API key): the log has the cause.
MISCONFIGURED_APOLOGY = (
    "Sorry, I can't answer: this bot is misconfigured (its model cannot be used as it is set up). "
    "Whoever runs the bot will find the cause in its log."
)

#: Told after a reply went out: (message, agent, what was delivered, seconds the turn took).
Finished = Callable[[BotMessage, Agent, Delivered, float], Awaitable[None]]


def attribution(msg: BotMessage) -> str:
    """What goes in front of a user turn: its author's name in groups."""
    return f"[{msg.sender.name}] " if msg.is_group else ""


def user_entry(msg: BotMessage) -> dict[str, str]:
    """The user turn as stored and sent when its files are not read: attributed to its
    author in groups, with a marker per file."""
    return {"role": "user", "content": attribution(msg) + message_text(msg)}


@dataclass
class _Report:
    outcome: str = "error"  # an exception that is not a cancellation


@contextlib.contextmanager
def _reporting(conversation: str, agent: Agent) -> Iterator[_Report]:
    """The turn's INFO line and metrics, whichever way it ended."""
    report = _Report()
    started = time.monotonic()
    with counting_usage() as usage:
        try:
            yield report
        except asyncio.CancelledError:
            report.outcome = "cancelled"
            raise
        finally:
            seconds = time.monotonic() - started
            TURNS.labels(agent.name, report.outcome).inc()
            TURN_SECONDS.observe(seconds)
            fields = {
                "conversation": conversation,
                "agent": agent.name,
                "model": usage.model or agent.model,  # the model that answered: a fallback, perhaps
                "outcome": report.outcome,
                "latency_ms": round(seconds * 1000),
                "tokens_in": usage.tokens_in,
                "tokens_out": usage.tokens_out,
            }
            log.info(
                "turn %s: agent=%s model=%s outcome=%s latency_ms=%d tokens_in=%d tokens_out=%d",
                *fields.values(),
                extra=fields,
            )


def run_events(inbound: Inbound, events: ConversationEvents) -> RunEvents:
    """The events of the answer `inbound` is getting: made once per answer (turn control may
    have made them already; an edit's re-run starts new ones)."""
    if inbound.run is None:
        inbound.run = events.run(inbound.conversation, inbound.message.message_id)
    return inbound.run


def turn_marker(msg: BotMessage) -> str:
    """The key whose presence says this message's turn has committed."""
    return f"turn:{msg.platform}:{msg.channel.channel_id}:{msg.message_id}{revision_suffix(msg)}"


def reply_record(reply: ReplyChannel) -> str:
    """Where a committed turn keeps the reply it is delivering."""
    return f"reply:{reply.key('reply')}"


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
        self._held = 0  # questions to the person waiting: the bot is not at work meanwhile

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
        task = spawn(self._keep(), name="typing indicator")
        self._task = task
        _typing_calls.add(task)
        task.add_done_callback(_typing_calls.discard)

    async def _keep(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self._adapter.typing_interval_s
        while not self._stopped:
            stream = self._reply.stream
            quiet_for = time.monotonic() - stream.last_write if stream is not None else interval
            if quiet_for >= interval and not self._held:
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

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No indicator while the turn waits for the person (an `ask_user` question): "typing…"
        would say the bot is writing when it is the person's turn."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1

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


@dataclass(frozen=True)
class AsksQuietly:
    """The turn's `Asks`, with its typing indicator held while a question waits."""

    asks: Asks
    typing: TypingIndicator

    async def ask(
        self, question: str, options: Sequence[str], timeout_seconds: float, context: ToolContext
    ) -> dict[str, str]:
        with self.typing.held():
            return await self.asks.ask(question, options, timeout_seconds, context)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class AgentTurn:
    """The endpoint of the pipeline: the routed agent answers."""

    def __init__(
        self,
        agents: Mapping[str, Agent],
        history: History,
        finished: Finished,
        store: Store,
        ttl: float,
        *,
        approvals: Approvals | None = None,
        events: ConversationEvents | None = None,
        asks: Asks | None = None,
        briefing: Briefing | None = None,
    ) -> None:
        self._briefing = briefing
        self._contexts: dict[str, Context] = {}
        self._approvals = approvals
        self._asks = asks
        self._events = events
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
        if self._events is not None:
            inbound.reply.run = run_events(inbound, self._events)
        with _reporting(inbound.conversation, agent) as report:
            result = await self.run(
                inbound.message, agent, inbound.conversation, inbound.reply, inbound.turn, inbound.replaces
            )
            report.outcome = result.status.value
            return result

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
        if self._events is not None:
            run = self._events.run(reply.destination.conversation_key, msg.message_id)
            await run.final(delivered.text, delivered.message_ids, resumed=True)
        return TurnOutcome(TurnStatus.REPLIED, delivered, detail="resumed")

    async def run(
        self,
        msg: BotMessage,
        agent: Agent,
        conversation: str,
        reply: ReplyChannel,
        turn: UserTurn | None = None,
        replaces: str | None = None,
    ) -> TurnOutcome:
        """`replaces`: the history item of an earlier answer to this message (it was edited
        since), which this turn's exchange takes the place of."""
        started = time.monotonic()
        stored = await self._history.load_items(conversation, agent.config.max_history)
        turn = turn or UserTurn(message_text(msg))
        prefix = attribution(msg)
        entry = {"role": "user", "content": turn.history(prefix)}
        images: list[OutboundFile] = []
        typing = TypingIndicator(reply)
        asks = AsksQuietly(self._asks, typing) if self._asks is not None else None
        tools = ToolTurn(ToolContext(agent.name, msg, conversation, approvals=self._approvals, run=reply.run, asks=asks))
        if self._briefing is not None:
            tools.instructions = await self._briefing(agent.name, msg)
        fitted = await self.fit(agent, stored, turn.content(prefix), tools)
        earlier, content = fitted.history, fitted.user_content
        tools.room = fitted.window - fitted.tokens  # what the tool rounds may add
        tools.count = self.context(agent).counter.message
        typing.start()
        try:
            if reply.can_stream():
                delivered = await reply.stream_text(
                    agent.stream(earlier, content, tools, images=images),
                    model=lambda: tools.model or agent.model,
                    elapsed=lambda: time.monotonic() - started,
                    tools=tools.used,
                )
                if delivered.cancelled:
                    return await self._cancelled(reply, delivered)
                said = "" if delivered.silent else delivered.text
                if images and not delivered.silent:
                    await self._send_images(reply, images, delivered)
                    said = "\n".join(part for part in (said, markers_for(images)) if part)
                exchange = [entry, *tools.messages, {"role": "assistant", "content": said}]
                operations, item = await self._history_ops(conversation, agent, exchange, replaces, fitted)
                await self._store.commit(turn_marker(msg), operations, ttl=self._ttl)
            else:
                text = await agent.complete(earlier, content, tools, images=images)
                if images and not text.strip():
                    prepared: Prepared | None = Prepared("", ())  # only pictures: nothing to say in words
                else:
                    prepared = await reply.prepare(
                        text, model=tools.model or agent.model, seconds=time.monotonic() - started, tools=tools.used
                    )
                if prepared is None:
                    return await self._cancelled(reply, Delivered(cancelled=True))
                said = "" if prepared.silent else prepared.text
                if images and not prepared.silent:
                    said = "\n".join(part for part in (said, markers_for(images)) if part)
                exchange = [entry, *tools.messages, {"role": "assistant", "content": said}]
                operations, item = await self._history_ops(conversation, agent, exchange, replaces, fitted)
                prepared = await self._commit(msg, reply, operations, prepared)
                delivered = await reply.deliver(prepared)
                if images and not prepared.silent:
                    await self._send_images(reply, images, delivered)
        except CallRefused as exc:  # over budget, or every model resting: the person is told why
            log.warning("%s", exc)
            told = await reply.send_text(exc.notice, purpose="notice") if exc.notice else Delivered()
            if reply.run is not None:
                await reply.run.error(exc.notice or str(exc))
            return TurnOutcome(TurnStatus.AGENT_ERROR, told, detail=str(exc))
        except AgentError as exc:
            log.error("%s", exc)
            apology = await reply.send_text(MISCONFIGURED_APOLOGY if exc.misconfigured else APOLOGY, purpose="apology")
            if reply.run is not None:
                await reply.run.error(str(exc))
            return TurnOutcome(TurnStatus.AGENT_ERROR, apology, detail=str(exc))
        finally:
            await typing.stop()
        if reply.run is not None:
            await reply.run.final(delivered.text, delivered.message_ids, silent=delivered.silent, cancelled=delivered.cancelled)
        if delivered.silent:
            return TurnOutcome(TurnStatus.SILENT, delivered, history_item=item)
        await self._finished(msg, agent, delivered, time.monotonic() - started)
        return TurnOutcome(TurnStatus.REPLIED, delivered, history_item=item)

    @staticmethod
    async def _cancelled(reply: ReplyChannel, delivered: Delivered) -> TurnOutcome:
        """A message_sending hook cancelled the reply."""
        if reply.run is not None:
            await reply.run.final("", [], cancelled=True)
        return TurnOutcome(TurnStatus.CANCELLED, delivered)

    def context(self, agent: Agent) -> Context:
        """The agent's context window keeper (its token counts are cached across turns)."""
        found = self._contexts.get(agent.name)
        if found is None or found.config is not agent.config:
            found = self._contexts[agent.name] = Context(agent.config, agent.calls)
        return found

    async def fit(
        self, agent: Agent, stored: list[tuple[str, list[dict[str, Any]]]], content: Any, tools: ToolTurn
    ) -> Fitted:
        """The history this turn sends, folded when the request would not fit the window."""
        return await self.context(agent).fit(stored, agent.frame(content, tools), agent.tools_json(), content)

    async def _history_ops(
        self, conversation: str, agent: Agent, exchange: list[dict[str, Any]], replaces: str | None, fitted: Fitted
    ) -> tuple[list[Operation], str]:
        """The exchange's history write, and the item as stored: appended, or put in the
        place of the earlier answer's item it replaces; with the whole history rewritten
        when a summary took the place of its oldest turns."""
        if fitted.stored is not None:
            return self._history.rewrite_ops(conversation, agent.config.max_history, fitted.stored, exchange, replaces)
        append = self._history.append_turn_op(conversation, agent.config.max_history, exchange)
        if replaces is None:
            return [append], append.values[0]
        return await self._history.replace_turn_ops(conversation, agent.config.max_history, replaces, exchange), append.values[0]

    @staticmethod
    async def _send_images(reply: ReplyChannel, images: list[OutboundFile], delivered: Delivered) -> None:
        """The model's images, each as a file after its words; their ids join the reply's."""
        for number, image in enumerate(images, start=1):
            posted = await reply.send_file(image, purpose=f"image-{number}")
            delivered.message_ids.extend(posted.message_ids)
            delivered.failures.extend(posted.failures)

    async def _commit(
        self, msg: BotMessage, reply: ReplyChannel, operations: list[Operation], prepared: Prepared
    ) -> Prepared:
        """History, reply and marker in one step; what to deliver is what was committed."""
        operations = list(operations)
        if not prepared.silent:
            operations.append(Put(reply_record(reply), prepared.to_json(), ttl=self._ttl))
        if await self._store.commit(turn_marker(msg), operations, ttl=self._ttl):
            return prepared
        # Another run of this turn committed first (or our own commit landed and its answer
        # was lost to a timeout): deliver that one, never a second version.
        raw = await self._store.get(reply_record(reply))
        return Prepared.from_json(raw) if raw is not None else Prepared("", (), silent=True)
