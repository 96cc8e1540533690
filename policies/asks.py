"""The agent asks back: `ask_user` pauses a turn until the person it answers replies.

It works as the approval desk does (policies/approvals.py), and for the same reasons: the
question is posted into the conversation, with one button per option when there are options;
everything about it lives in the store, so the press or the reply may reach any process; the
first answer is written with `set_if_absent`, so a second press, or a press racing the
deadline, changes nothing; the waiting turn keeps a short-lived "live" key fresh, and a
question whose live key is gone is reported expired (at the next start, or when pressed).

Only the person asked can answer. A press of an option by anyone else is told it is not
theirs. Without options the person's next message in that conversation is the answer: the
runtime offers every incoming message to `claim` before it is recorded, and a claimed message
starts no turn of its own (nor counts as "a new message" for `busy_mode`); commands are never
claimed, so `/stop` still stops the waiting turn. A typed option (its label, or its number)
answers a question with options too, for people whose client shows no buttons.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from botweave.adapter import Adapter
from botweave.buttons import ButtonBook
from botweave.conversations import conversation_key
from botweave.delivery import PROCESS, Delivery, Destination
from botweave.events import ConversationEvents
from botweave.methods import Caller, MethodError, MethodRegistry, NoParams, Params
from botweave.store import Store
from botweave.tasks import TaskOwner
from botweave.tooling import ToolContext
from botweave.types import BotMessage, Button, PlatformEvent, PressAnswer

from .approvals import KEEP_S, LIVE_TTL_S, POLL_S, orphans, settled

log = logging.getLogger(__name__)

ANSWER = "ask:answer"
#: The longest answer handed to the model (a reply may be long; the model gets it whole up to this).
MAX_ANSWER_CHARS = 4000

Outcome = Literal["answered", "timeout", "expired", "withdrawn"]


def _seconds(value: float) -> str:
    return f"{value:g} s"


def no_answer(timeout: float) -> str:
    """What the model is told when nobody answered in time."""
    return f"no answer within {_seconds(timeout)}"


def session_of(conversation: str) -> str:
    """How a gateway client names the conversation: a web session by its id, any other
    conversation by its key."""
    platform, _, rest = conversation.partition(":")
    return rest if platform == "web" and rest else conversation


@dataclass(frozen=True, slots=True)
class Answer:
    """How a question ended: the answer and who gave it, or why there is none."""

    outcome: Outcome
    value: str = ""
    by: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> Answer:
        data = json.loads(raw)
        return cls(data.get("outcome", "expired"), str(data.get("value") or ""), str(data.get("by") or ""))

    def line(self) -> str:
        """The line the question gains once it ended."""
        if self.outcome == "answered":
            return f"✅ {self.by} answered: {self.value}"
        if self.outcome == "timeout":
            return "⌛ No answer in time."
        if self.outcome == "withdrawn":
            return "⏹ Withdrawn: the turn was stopped before this was answered."
        return "⌛ Expired: the bot stopped before this was answered."

    def told(self) -> str:
        """What a press after the end is answered."""
        return {
            "answered": f"Already answered: {self.value}",
            "timeout": "Too late: this question timed out.",
            "expired": "This question expired.",
            "withdrawn": "This question was withdrawn.",
        }[self.outcome]


@dataclass(slots=True)
class Question:
    """One question as the store keeps it."""

    id: str
    question: str
    options: list[str]
    asked_id: str
    asked_name: str
    platform: str
    conversation: str
    agent: str
    deadline: float
    text: str = ""
    chat_id: str | None = None
    thread_id: str | None = None
    message_id: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> Question:
        return cls(**json.loads(raw))

    def shown(self) -> dict[str, Any]:
        """The `ask` event's data: what a gateway client shows and answers."""
        data: dict[str, Any] = {
            "id": self.id,
            "question": self.question,
            "session": session_of(self.conversation),
            "conversation": self.conversation,
            "agent": self.agent,
            "asked": {"platform": self.platform, "user_id": self.asked_id, "name": self.asked_name},
            "message_id": self.message_id,
            "deadline": self.deadline,
        }
        if self.options:
            data["options"] = list(self.options)
        return data

    def pick(self, text: str) -> str | None:
        """The option a typed reply names (its label, any case, or its number), or None;
        without options any reply is the answer."""
        reply = text.strip()
        if not self.options:
            return reply or None
        if reply.isdigit() and 1 <= int(reply) <= len(self.options):
            return self.options[int(reply) - 1]
        folded = reply.casefold()
        return next((option for option in self.options if option.casefold() == folded), None)


def question_text(question: str, options: Sequence[str], asked: str, timeout: float) -> str:
    """The message people read: the question, and how to answer it."""
    how = "Pick one below" if options else "Reply with your answer"
    return f"❓ {question}\n\n{how}, {asked} (only you can answer; {_minutes(timeout)} to reply)."


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:g} seconds"
    return f"{seconds / 60:.0f} minutes"


class AnswerParams(Params):
    id: str
    value: str


def _question_key(ask_id: str) -> str:
    return f"ask:{ask_id}"


def _answer_key(ask_id: str) -> str:
    return f"ask:{ask_id}:answer"


def _live_key(ask_id: str) -> str:
    return f"ask:{ask_id}:live"


def _waiting_key(conversation: str, user_id: str) -> str:
    return f"ask:waiting:{conversation}:{user_id}"


PENDING = "asks:pending:"


class AskDesk:
    """Asks people and reads their answers (see the module docstring). It implements the
    kernel's `Asks`; the runtime hands it to every turn, offers it every incoming message
    (`claim`) and routes presses to `answer`."""

    def __init__(
        self,
        store: Store,
        delivery: Delivery,
        adapters: Mapping[str, Adapter],
        buttons: ButtonBook,
        *,
        shared: bool = False,
        poll_seconds: float = POLL_S,
        events: ConversationEvents | None = None,
    ) -> None:
        self._store = store
        self._delivery = delivery
        self._adapters = adapters
        self._buttons = buttons
        #: Whether other processes share the store (a reply may reach one that did not ask).
        self._shared = shared
        self._poll = poll_seconds
        self._events = events
        self._wakeups: dict[str, asyncio.Event] = {}  # questions this process waits for
        self._waiting: dict[tuple[str, str], str] = {}  # (conversation, person) -> question id
        self._tasks = TaskOwner("asks")
        self._shutting_down = False

    # --- asking -------------------------------------------------------------------------

    async def ask(self, question: str, options: Sequence[str], timeout_seconds: float, context: ToolContext) -> dict[str, str]:
        origin = context.origin
        if origin is None:
            return {"error": "nobody to ask: no person's message started this turn"}
        adapter = self._adapters.get(origin.platform)
        if adapter is None:
            return {"error": f"nobody to ask: {origin.platform} is not connected"}
        waiting = (context.conversation or conversation_key(origin), origin.sender.user_id)
        # One question at a time per person and conversation: a reply could not say which of
        # two it answers. The place is taken before the first await (two calls of one round).
        busy = {"error": f"a question to {origin.sender.name} is already waiting here; ask one thing at a time"}
        if waiting in self._waiting:
            return busy
        asked = Question(
            id=uuid.uuid4().hex[:16],
            question=question,
            options=list(options),
            asked_id=origin.sender.user_id,
            asked_name=origin.sender.name,
            platform=origin.platform,
            conversation=waiting[0],
            agent=context.agent,
            deadline=time.time() + timeout_seconds,
        )
        self._waiting[waiting] = asked.id
        try:
            if self._shared and not await self._store.set_if_absent(
                _waiting_key(*waiting), asked.id, ttl=timeout_seconds + KEEP_S
            ):
                return busy  # asked in another process
            try:
                return await self._ask(asked, adapter, origin, timeout_seconds)
            finally:
                await asyncio.shield(self._store.delete(_waiting_key(*waiting)))
        finally:
            if self._waiting.get(waiting) == asked.id:
                del self._waiting[waiting]

    async def _ask(self, asked: Question, adapter: Adapter, origin: BotMessage, timeout_seconds: float) -> dict[str, str]:
        """Post the question, wait for its end, show how it ended: the tool's result."""
        asked.text = question_text(asked.question, asked.options, asked.asked_name, timeout_seconds)
        keep = timeout_seconds + KEEP_S
        buttons: list[Button] = []
        if asked.options and adapter.capabilities.buttons:
            buttons = await self._buttons.issue(
                [Button(option, ANSWER, f"{asked.id}:{n}") for n, option in enumerate(asked.options)], ttl=keep
            )
        elif asked.options:  # no buttons here: the options as a numbered list to type from
            listed = "\n".join(f"{n}. {option}" for n, option in enumerate(asked.options, start=1))
            asked.text = f"{asked.text}\n{listed}"
        wakeup = self._wakeups[asked.id] = asyncio.Event()
        try:
            # Recorded before it is posted: the answer may come the moment it shows.
            await self._store.set(_live_key(asked.id), PROCESS, ttl=LIVE_TTL_S)
            await self._store.set(_question_key(asked.id), asked.to_json(), ttl=keep)
            await self._store.set(PENDING + asked.id, "1", ttl=keep)
            to = Destination(adapter, origin.channel.channel_id, origin.thread_id, reply_to=origin.message_id,
                             conversation=asked.conversation)
            delivered = await self._delivery.post(to, asked.text, buttons=buttons)
            if delivered.cancelled or delivered.failures or not delivered.message_ids:
                await self._forget(asked)
                why = delivered.failures[0].detail if delivered.failures else "the question was not posted"
                return {"error": f"could not ask: {why}"}
            asked.chat_id, asked.thread_id = origin.channel.channel_id, origin.thread_id
            asked.message_id = delivered.message_ids[-1]
            await self._store.set(_question_key(asked.id), asked.to_json(), ttl=keep)
            if self._events is not None:
                await self._events.publish(asked.conversation, "ask", asked.shown())
            try:
                answer = await self._wait(asked, wakeup)
            except asyncio.CancelledError:
                if not self._shutting_down:  # stopped, interrupted or re-run: nobody waits any more
                    await asyncio.shield(self._expire(asked, Answer("withdrawn")))
                raise
            await self._show(asked, answer)
            await self._store.delete(PENDING + asked.id)
            if answer.outcome == "answered":
                return {"answer": answer.value}
            return {"error": no_answer(timeout_seconds)}
        finally:
            self._wakeups.pop(asked.id, None)
            # A turn that stops waiting is no longer live: a question it leaves open is
            # reported expired from now on.
            await asyncio.shield(self._store.delete(_live_key(asked.id)))

    async def _wait(self, asked: Question, wakeup: asyncio.Event) -> Answer:
        """The answer (seen in the store, so it may come from any process), or the deadline."""
        raw = await settled(
            self._store, _answer_key(asked.id), _live_key(asked.id), asked.deadline, wakeup,
            poll=self._poll, timeout=Answer("timeout").to_json(),
        )
        return Answer.from_json(raw)

    async def _show(self, asked: Question, answer: Answer) -> None:
        """Edit the question to show how it ended, its buttons gone (and tell the gateway's
        clients, once)."""
        if self._events is not None:
            ended = {"id": asked.id, "outcome": answer.outcome, "value": answer.value, "by": answer.by,
                     "session": session_of(asked.conversation), "asked": asked.shown()["asked"]}
            await self._events.publish(asked.conversation, "ask.resolved", ended, unique=f"evonce:ask:{asked.id}")
        adapter = self._adapters.get(asked.platform)
        if adapter is None or asked.chat_id is None or asked.message_id is None:
            return
        to = Destination(adapter, asked.chat_id, asked.thread_id, conversation=asked.conversation)
        result = await self._delivery.edit(to, asked.message_id, f"{asked.text}\n\n{answer.line()}", buttons=())
        if not result.ok:
            log.warning("question %s: could not show its answer: %s %s", asked.id, result.status, result.detail)

    async def _forget(self, asked: Question) -> None:
        await self._store.delete(_question_key(asked.id), PENDING + asked.id, _live_key(asked.id))

    # --- answers ------------------------------------------------------------------------

    async def answer(self, event: PlatformEvent) -> PressAnswer | None:
        """A press of an option (None for any other button): the answer when it is the asked
        person's and the question is open; the presser is told what happened either way."""
        if event.action_id != ANSWER or not event.value:
            return None
        ask_id, _, index = event.value.rpartition(":")
        raw = await self._store.get(_question_key(ask_id))
        if raw is None:
            return PressAnswer("This question is no longer open.", alert=True)
        asked = Question.from_json(raw)
        if event.user_id != asked.asked_id:
            return PressAnswer(f"This question is not yours to answer; it is waiting for {asked.asked_name}.", alert=True)
        if not index.isdigit() or int(index) >= len(asked.options):
            return PressAnswer("This button no longer works.", alert=True)
        value = asked.options[int(index)]
        refusal = await self._record(asked, value)
        if refusal is not None:
            return PressAnswer(refusal, alert=refusal.startswith("This question expired"))
        return PressAnswer(f"Answered: {value}")

    @property
    def listening(self) -> bool:
        """Whether a message could be an answer: a question waits here, or (a shared store)
        may wait in another process. When not, `claim` has nothing to look up."""
        return bool(self._waiting) or self._shared

    async def claim(self, item: BotMessage) -> bool:
        """Whether `item` is the answer to an open question (and is now recorded as such):
        a message, not a command, from the person asked, in the conversation asked in."""
        if not self.listening:
            return False  # the common case: nobody waits, nothing to look up
        if item.sender.is_bot or item.is_command:
            return False
        waiting = (conversation_key(item), item.sender.user_id)
        ask_id = self._waiting.get(waiting)
        if ask_id is None and self._shared:
            ask_id = await self._store.get(_waiting_key(*waiting))
        if ask_id is None:
            return False
        raw = await self._store.get(_question_key(ask_id))
        if raw is None:
            return False
        asked = Question.from_json(raw)
        value = asked.pick(item.text)
        if value is None:
            return False  # with options, a message that names none is a message
        return await self._record(asked, value[:MAX_ANSWER_CHARS]) is None

    async def _record(self, asked: Question, value: str) -> str | None:
        """Record the asked person's answer, once; what to tell them when it was answered
        before or its turn is gone (None when it is now the answer)."""
        ended = await self._store.get(_answer_key(asked.id))
        if ended is not None:
            return Answer.from_json(ended).told()
        if await self._store.get(_live_key(asked.id)) is None:
            await self._expire(asked)
            return "This question expired: the bot stopped before it was answered."
        answer = Answer("answered", value, asked.asked_name)
        if not await self._store.set_if_absent(_answer_key(asked.id), answer.to_json(), ttl=KEEP_S):
            latest = await self._store.get(_answer_key(asked.id))
            return Answer.from_json(latest).told() if latest else "Already answered."
        wakeup = self._wakeups.get(asked.id)
        if wakeup is not None:  # the waiting turn is in this process: no need to wait for its next look
            wakeup.set()
        return None

    # --- the gateway ----------------------------------------------------------------------

    def register_methods(self, registry: MethodRegistry) -> None:
        """`ask.answer` and `ask.list` for the gateway's clients: the person asked answers from
        a browser as they would by pressing an option or replying."""
        registry.register("ask.answer", self._answer_method, scope="write", params=AnswerParams,
                          help="answer a question an agent asked you")
        registry.register("ask.list", self._list_method, scope="read", help="the open questions put to you")

    async def open_in(self, conversation: str) -> list[Question]:
        """The questions of `conversation` whose turn still waits (what a resuming client is
        sent again)."""
        return [q for q in await self.pending() if q.conversation == conversation]

    async def pending(self) -> list[Question]:
        """Open questions whose turn still waits, oldest deadline first."""
        found = []
        for key in await self._store.keys(PENDING):
            ask_id = key.removeprefix(PENDING)
            raw = await self._store.get(_question_key(ask_id))
            if raw is None or await self._store.get(_answer_key(ask_id)) is not None:
                continue
            if await self._store.get(_live_key(ask_id)) is not None:
                found.append(Question.from_json(raw))
        return sorted(found, key=lambda q: q.deadline)

    async def _list_method(self, caller: Caller, params: NoParams) -> dict[str, Any]:
        mine = [q.shown() for q in await self.pending() if caller.admin or caller.speaks_for(q.platform, q.asked_id)]
        return {"asks": mine}

    async def resent(self, caller: Caller, conversation: str) -> list[dict[str, Any]]:
        """The `ask` events to send again to `caller`, who resumed `conversation`."""
        return [q.shown() for q in await self.open_in(conversation)]

    async def _answer_method(self, caller: Caller, params: AnswerParams) -> dict[str, Any]:
        raw = await self._store.get(_question_key(params.id))
        if raw is None:
            raise MethodError("not_found", f"no open question {params.id}")
        asked = Question.from_json(raw)
        if not caller.speaks_for(asked.platform, asked.asked_id):
            raise MethodError("forbidden", f"this question is waiting for {asked.asked_name}, not you")
        value = asked.pick(params.value)
        if value is None:
            raise MethodError("bad_request", f"value: one of {', '.join(asked.options)}")
        refusal = await self._record(asked, value[:MAX_ANSWER_CHARS])
        if refusal is not None:
            raise MethodError("conflict", refusal)
        return {"outcome": "answered", "value": value}

    async def _expire(self, asked: Question, answer: Answer | None = None) -> None:
        """A question whose turn is gone: ended as expired (unless an answer beat us to it) and
        shown so, in the background, so the press is answered in time."""
        answer = answer or Answer("expired")
        if await self._store.set_if_absent(_answer_key(asked.id), answer.to_json(), ttl=KEEP_S):
            self._tasks.spawn(self._close(asked, answer), name="show an ended question")

    async def _close(self, asked: Question, answer: Answer) -> None:
        await self._show(asked, answer)
        await self._store.delete(PENDING + asked.id)

    # --- after a restart ----------------------------------------------------------------

    async def sweep(self) -> int:
        """Report every question whose turn no longer runs (asked by a process that is gone):
        ended as expired and its message edited. Returns how many were closed."""
        def keys(ask_id: str) -> tuple[str, str, str]:
            return _live_key(ask_id), _question_key(ask_id), _answer_key(ask_id)

        closed = 0
        async for ask_id, raw, ended in orphans(self._store, PENDING, keys, Answer("expired").to_json()):
            asked, answer = Question.from_json(raw), Answer.from_json(ended)
            log.info("question %s: its turn stopped before the end; reported %s", ask_id, answer.outcome)
            await self._store.delete(_waiting_key(asked.conversation, asked.asked_id))
            await self._close(asked, answer)
            closed += 1
        return closed

    def shutting_down(self) -> None:
        """From now on a wait cut off is the process ending: its question stays open for the
        next start to report."""
        self._shutting_down = True

    async def stop(self) -> None:
        """Let the edits still in flight finish (briefly)."""
        await self._tasks.wait(timeout=5.0)
