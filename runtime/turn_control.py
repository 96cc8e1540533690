"""Turn control: people steer a conversation's turns while they wait or run.

`/stop` ends the conversation's running turn and the ones queued behind it; an edit re-runs
the edited message (cancelling its running turn, or answering again into the earlier reply
shortly after it); a deletion cancels the deleted message's turn; `busy_mode` says what a
new message does to a running turn (`queue` waits, `interrupt` cancels it, `collect` lets
the messages that came meanwhile be answered together).

Every signal is a record in the store, so it reaches a turn whichever worker runs it, and a
turn that a crash cut off is not replayed once it was cancelled:

* marks per conversation, compared with each message's receipt time (`received_at`, stamped
  when the item is accepted): `/stop` marks "everything received up to now" (for everyone,
  or for one person in a group), and in `interrupt`/`collect` the newest addressed message
  marks itself as the latest;
* records per message: a deletion, the newest edit, and, for a while after an answer, what
  the answer was (its history item and message ids) so an edit can re-run it in place;
* a counter per chat that every signal bumps: a running turn watches only that (and, in its
  own process, an event set at once), and reads the marks when it moves.

A turn asks before it starts (so a queued one ends without running) and a watcher asks while
it runs. Cancelling a running turn cancels its task; the stream keeps what it showed with a
mark saying why, and the turn's marker is committed so nothing replays it. How a cancelled
turn lands in history depends on why: a stopped or interrupted exchange stays, marked; a
collected message stays as a person's turn; a deleted one leaves nothing; an edited one is
answered again with the new text in its place.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from botweave.agents import Agent, History
from botweave.config import BotConfig
from botweave.conversations import conversation_key
from botweave.delivery import ReplyChannel
from botweave.events import ConversationEvents
from botweave.pipeline import Handler, Inbound, Step, TurnOutcome, TurnStatus
from botweave.policies.gating import decide_gate
from botweave.runtime.turns import run_events, turn_marker, user_entry
from botweave.store import Put, Remove, Store, store_failures
from botweave.types import META_RECEIVED_AT, META_REVISION, BotMessage, PlatformEvent

log = logging.getLogger(__name__)

#: Metadata of a message answered again after an edit: when the edit it answers was made, and
#: the earlier answer (history item, message ids) it replaces.
META_EDIT_AT = "edit_at"
META_RERUN = "rerun"

Reason = Literal["stopped", "deleted", "edited", "interrupted", "collected"]

#: How often a running turn looks at its chat's signal counter (other workers' signals; its
#: own process wakes it at once).
POLL_S = 0.3
#: A running turn's record lives this long unless renewed (a crashed worker's disappears).
RUNNING_TTL_S = 30.0
#: How long marks and per-message records are kept: longer than any turn waits or runs.
MARK_TTL_S = 24 * 3600.0
STOP_COMMANDS = frozenset({"stop"})

#: What a cut-off streamed reply ends with, per reason (None: it is rewritten or removed).
CUT_MARKS: dict[Reason, str | None] = {
    "stopped": "\n\n(stopped)",
    "interrupted": "\n\n(interrupted)",
    "deleted": None,
    "edited": None,
    "collected": None,
}
STOP_HELP = "stop the answer that is running (and the messages waiting behind it)"
STOPPED = "Stopped."
NOTHING_RUNNING = "Nothing is running."
NOT_YOURS = "Only {name} (who asked) or the owner can stop this answer."
STALE_NOTICE = "I was offline when you sent this ({age} ago), so I'm not answering it now. Send it again if it still matters."
FAILED_NOTICE = "Sorry, something went wrong and I couldn't answer this message."


# --- pure decisions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Marks:
    """What the store says about one message's turn right now."""

    stop_all: float | None = None  # /stop for the whole conversation: messages received up to then
    stop_own: float | None = None  # /stop by the message's author (in a group): theirs up to then
    latest: float | None = None  # the newest addressed message's receipt (interrupt, collect)
    deleted: bool = False
    edit_at: float | None = None  # when the message was last edited
    edit_text: str | None = None


def verdict(
    received_at: float, marks: Marks, busy_mode: str, *, starting: bool, edit_seen: float | None
) -> Reason | None:
    """Why this message's turn must not (go on to) run, or None. `starting`: the turn has not
    begun (a queued turn); `edit_seen`: the edit whose text the turn already answers."""
    if marks.deleted:
        return "deleted"
    if any(mark is not None and mark >= received_at for mark in (marks.stop_all, marks.stop_own)):
        return "stopped"
    newer = marks.latest is not None and marks.latest > received_at
    if newer and busy_mode == "interrupt":
        return "interrupted"
    if newer and busy_mode == "collect" and starting:
        return "collected"
    if not starting and marks.edit_at is not None and (edit_seen is None or marks.edit_at > edit_seen):
        return "edited"
    return None


def is_stale(msg: BotMessage, after_seconds: float) -> float | None:
    """The message's age at receipt when it is older than `after_seconds` (0: never stale)."""
    if after_seconds <= 0:
        return None
    age = received_at(msg) - msg.timestamp.timestamp()
    return age if age > after_seconds else None


def busy_signal(msg: BotMessage, config: BotConfig) -> bool:
    """Whether a message counts as "a new message" for `interrupt`/`collect`: one a person
    addressed to the bot (not a command, which answers on its own), from someone the
    allowlist lets in."""
    if config.busy_mode == "queue" or msg.sender.is_bot or msg.is_command or not msg.allow_control:
        return False
    if config.allowed_users and msg.sender.user_id not in config.allowed_users:
        return False
    return decide_gate(msg, config.group_policy) == "reply"


def format_age(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours < 48 else f"{hours // 24} days"


def received_at(msg: BotMessage) -> float:
    value = msg.metadata.get(META_RECEIVED_AT)
    return float(value) if isinstance(value, (int, float)) else msg.timestamp.timestamp()


# --- keys -------------------------------------------------------------------------------------


def _signal_key(platform: str, chat_id: str) -> str:
    return f"ctl:sig:{platform}:{chat_id}"


def _message_key(kind: str, platform: str, chat_id: str, message_id: str) -> str:
    return f"ctl:{kind}:{platform}:{chat_id}:{message_id}"


def _float(raw: str | None) -> float | None:
    return float(raw) if raw else None


class TurnControl:
    """The runtime's side of turn control: stamping arrivals, the signals, the `/stop`
    command, and the pipeline steps that guard each turn (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        history: History,
        config_for: Callable[[str], BotConfig],
        ttl: float,
        admitted: Callable[[BotMessage, BotConfig], Awaitable[bool]],
        *,
        events: ConversationEvents | None = None,
    ) -> None:
        self._store = store
        self._events = events
        self._admitted = admitted
        self._history = history
        self._config_for = config_for
        self._ttl = ttl
        self._last_stamp = 0.0
        self._wakers: dict[tuple[str, str], set[asyncio.Event]] = {}

    # --- arrival ------------------------------------------------------------------------------

    def stamp(self, item: BotMessage | PlatformEvent) -> None:
        """Record when this process received a message (strictly increasing, so two messages
        never share a receipt time and marks compare them exactly)."""
        if not isinstance(item, BotMessage) or META_RECEIVED_AT in item.metadata:
            return
        now = max(time.time(), self._last_stamp + 1e-6)
        self._last_stamp = now
        item.metadata[META_RECEIVED_AT] = now

    @staticmethod
    def is_control(item: BotMessage | PlatformEvent) -> bool:
        """A `/stop`: it must not queue behind the turn it stops."""
        return isinstance(item, BotMessage) and item.allow_control and item.command in STOP_COMMANDS

    async def arrived(self, msg: BotMessage) -> None:
        """A new message in `interrupt`/`collect` mode becomes its conversation's latest,
        before it is recorded, so the turns before it see it when they look."""
        config = self._config_for(msg.platform)
        if not busy_signal(msg, config) or not await self._admitted(msg, config):
            return  # a stranger's message must not cut off someone else's turn
        await self._store.set(f"ctl:latest:{conversation_key(msg)}", repr(received_at(msg)), ttl=MARK_TTL_S)
        await self._signal(msg.platform, msg.channel.channel_id)

    async def _signal(self, platform: str, chat_id: str) -> None:
        await self._store.incr(_signal_key(platform, chat_id), ttl=MARK_TTL_S)
        for waker in self._wakers.get((platform, chat_id), ()):
            waker.set()

    # --- events -------------------------------------------------------------------------------

    async def on_event(self, event: PlatformEvent) -> BotMessage | None:
        """An edit or a deletion of a person's message; returns the message to answer again
        when an edit came within the re-run window after its answer."""
        if event.message_id is None or event.kind not in ("message_edited", "message_deleted"):
            return None
        where = (event.platform, event.chat_id, event.message_id)
        if event.kind == "message_deleted":
            await self._store.set(_message_key("deleted", *where), "1", ttl=MARK_TTL_S)
            await self._signal(event.platform, event.chat_id)
            return None
        text = event.new_text or ""
        at = time.time()
        await self._store.set(_message_key("edit", *where), json.dumps({"at": at, "text": text}), ttl=MARK_TTL_S)
        await self._signal(event.platform, event.chat_id)
        raw = await self._store.get(_message_key("replied", *where))
        if raw is None:
            return None  # waiting or running (it picks the edit up), too old, or never ours
        answered = json.loads(raw)
        original = BotMessage.from_dict(answered["message"])
        if event.user_id and event.user_id != original.sender.user_id:
            return None
        revision = await self._store.incr(_message_key("revision", *where), ttl=MARK_TTL_S)
        metadata = {k: v for k, v in original.metadata.items() if k != META_RECEIVED_AT}
        # What the new answer takes the place of travels with it (through the journal or the
        # stream), so a long wait for its turn cannot lose it.
        metadata |= {META_REVISION: revision, META_EDIT_AT: at, META_RERUN: {"item": answered["item"], "reply": answered["reply"]}}
        return dataclasses.replace(
            original, content=text, metadata=metadata, timestamp=original.timestamp.now(original.timestamp.tzinfo)
        )

    # --- /stop --------------------------------------------------------------------------------

    async def stop_command(self, inbound: Inbound) -> str:
        msg = inbound.message
        answered = _message_key("stop-answer", msg.platform, msg.channel.channel_id, msg.message_id)
        earlier = await self._store.get(answered)
        if earlier is not None:
            return earlier  # the same /stop once more (replayed after a restart): the same answer
        answer = await self._stop(inbound)
        await self._store.set(answered, answer, ttl=MARK_TTL_S)
        return answer

    async def _stop(self, inbound: Inbound) -> str:
        msg = inbound.message
        conversation = inbound.conversation
        running_raw = await self._store.get(f"ctl:running:{conversation}")
        running = json.loads(running_raw) if running_raw else None
        owner = inbound.config.owner_user_id
        sender = msg.sender.user_id
        everyone = not msg.is_group or (owner is not None and sender == owner)
        mark = repr(received_at(msg))
        if everyone:
            await self._store.set(f"ctl:stop:{conversation}", mark, ttl=MARK_TTL_S)
        else:
            await self._store.set(f"ctl:stop:{conversation}:{sender}", mark, ttl=MARK_TTL_S)
        await self._signal(msg.platform, msg.channel.channel_id)
        if running is None:
            return NOTHING_RUNNING
        if not everyone and running.get("user") != sender:
            return NOT_YOURS.format(name=running.get("name") or "the person who asked")
        return STOPPED

    # --- the pipeline's steps -----------------------------------------------------------------

    async def stale_step(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        """A message the platform handed over long after it was sent (the bot was down) gets
        a notice instead of a late answer; a recorded turn re-running after a crash was fresh
        when it arrived, and is answered."""
        msg = inbound.message
        age = None if inbound.observe_only else is_stale(msg, inbound.config.stale_after_seconds)
        if age is None:
            return await call_next(inbound)
        log.info("%s: message %s arrived %.0fs after it was sent; told its author", msg.platform, msg.message_id, age)
        delivered = await inbound.reply.send_text(STALE_NOTICE.format(age=format_age(age)), purpose="stale")
        return TurnOutcome(TurnStatus.STALE, delivered)

    def guard(self, agents: Mapping[str, Agent]) -> Step:
        """The pipeline step that guards the turns of `agents` (a generation's: the control
        itself outlives reloads, since it holds the running turns' signals)."""
        return partial(self._guard, agents)

    async def _guard(self, agents: Mapping[str, Agent], inbound: Inbound, call_next: Handler) -> TurnOutcome:
        """The turn runs only while nobody cancelled it; an edit while it runs answers the
        new text instead; a reply that could not be delivered is told to its sender."""
        target = inbound.target
        agent = agents.get(target.name) if target is not None and target.kind == "agent" else None
        if agent is None or inbound.observe_only:
            return await call_next(inbound)
        edit_seen = inbound.message.metadata.get(META_EDIT_AT)
        earlier = inbound.message.metadata.get(META_RERUN)
        if isinstance(earlier, dict) and inbound.replaces is None:
            # an edited message answered again after its reply: that answer's messages and
            # history item are taken over
            inbound.replaces = earlier.get("item")
            inbound.reply.replacing = [str(i) for i in earlier.get("reply") or []]
        while True:
            msg = inbound.message
            # the chat's counter and the marks in one read; every mark bumps the counter, so
            # a chat without one has no marks
            seen, marks = await self._read(msg, inbound.conversation, with_signal=True)
            mode = inbound.config.busy_mode
            reason = verdict(received_at(msg), marks, mode, starting=True, edit_seen=edit_seen)
            if reason is not None:
                return await self._cancelled(inbound, agent, reason, started=False)
            if marks.edit_at is not None and marks.edit_text is not None and (edit_seen is None or marks.edit_at > edit_seen):
                edit_seen = marks.edit_at
                await self._answer_edit(inbound, marks.edit_text, [])
            outcome, reason = await self._watched(inbound, call_next, edit_seen, seen)
            if reason is None:
                assert outcome is not None
                await self._answered(inbound, outcome)
                return outcome
            if reason != "edited":
                return await self._cancelled(inbound, agent, reason, started=True)
            marks = await self._marks(msg, inbound.conversation)
            edit_seen = marks.edit_at
            log.info("%s: message %s was edited while answered; answering the new text", msg.platform, msg.message_id)
            if self._events is not None:
                await run_events(inbound, self._events).stopped("edited")
                inbound.run = None  # the new text is answered by a run of its own
            await self._answer_edit(inbound, marks.edit_text or "", list(inbound.reply.streamed))

    async def _answer_edit(self, inbound: Inbound, text: str, replacing: list[str]) -> None:
        """From now on the turn answers `text`, written into `replacing` (what it showed): a
        new revision, so its keys are its own, unless nothing was shown yet."""
        msg = inbound.message
        revision = msg.metadata.get(META_REVISION)
        if replacing:
            where = (msg.platform, msg.channel.channel_id, msg.message_id)
            revision = await self._store.incr(_message_key("revision", *where), ttl=MARK_TTL_S)
        edited = dataclasses.replace(msg, content=text, metadata={**msg.metadata, META_REVISION: revision})
        inbound.message = edited
        inbound.turn = None
        inbound.reply = dataclasses.replace(
            inbound.reply, origin=edited, replacing=[*inbound.reply.replacing, *replacing], partial="", streamed=[]
        )

    async def _marks(self, msg: BotMessage, conversation: str) -> Marks:
        return (await self._read(msg, conversation, with_signal=False))[1]

    async def _read(self, msg: BotMessage, conversation: str, *, with_signal: bool) -> tuple[str | None, Marks]:
        """What the store says about this message's turn, in one call: the chat's signal
        counter (when asked for) and the marks."""
        where = (msg.platform, msg.channel.channel_id, msg.message_id)
        keys = [
            f"ctl:stop:{conversation}",
            f"ctl:stop:{conversation}:{msg.sender.user_id}",
            f"ctl:latest:{conversation}",
            _message_key("deleted", *where),
            _message_key("edit", *where),
        ]
        if with_signal:
            keys.append(_signal_key(msg.platform, msg.channel.channel_id))
        found = await self._store.get_many(keys)
        stop_all, stop_own, latest, deleted, edit_raw = found[:5]
        edit = json.loads(edit_raw) if edit_raw else {}
        marks = Marks(
            stop_all=_float(stop_all),
            stop_own=_float(stop_own),
            latest=_float(latest),
            deleted=deleted is not None,
            edit_at=edit.get("at"),
            edit_text=edit.get("text"),
        )
        return (found[5] if with_signal else None), marks

    async def _watched(
        self, inbound: Inbound, call_next: Handler, edit_seen: float | None, seen: str | None
    ) -> tuple[TurnOutcome | None, Reason | None]:
        """Run the rest of the pipeline in a task of its own and cancel it when a signal says
        so: (its outcome, None) when it ran to the end, (None, why) when it was cancelled."""
        msg = inbound.message
        chat = (msg.platform, msg.channel.channel_id)
        running_key = f"ctl:running:{inbound.conversation}"
        running = json.dumps({"message": msg.message_id, "user": msg.sender.user_id, "name": msg.sender.name})
        # What the turn writes for others to read (a /stop asking who runs) is queued behind
        # it, never waited for: every later read sees it.
        self._store.later(Put(running_key, running, RUNNING_TTL_S))
        waker = asyncio.Event()
        self._wakers.setdefault(chat, set()).add(waker)
        signal_key = _signal_key(*chat)
        renewed = time.monotonic()
        async def rest() -> TurnOutcome:
            return await call_next(inbound)

        child = asyncio.create_task(rest())
        try:
            while True:
                woken = asyncio.create_task(waker.wait())
                await asyncio.wait({child, woken}, timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
                woken.cancel()
                if child.done():
                    return child.result(), None
                try:
                    now = await self._store.get(signal_key)
                    if time.monotonic() - renewed > RUNNING_TTL_S / 3:
                        self._store.later(Put(running_key, running, RUNNING_TTL_S))
                        renewed = time.monotonic()
                except store_failures() as exc:  # a missed look only delays a stop
                    log.debug("turn control could not read its signal: %s", exc)
                    continue
                if now == seen and not waker.is_set():
                    continue
                seen = now
                waker.clear()
                marks = await self._marks(msg, inbound.conversation)
                reason = verdict(received_at(msg), marks, inbound.config.busy_mode, starting=False, edit_seen=edit_seen)
                if reason is None:
                    continue
                inbound.reply.cut_mark = CUT_MARKS[reason]
                child.cancel()
                await asyncio.wait({child})
                if not child.cancelled():  # it finished just before the cancel landed
                    return child.result(), None
                return None, reason
        finally:
            if not child.done():  # we were cancelled ourselves (shutdown, a lost lease)
                child.cancel()
                with contextlib.suppress(BaseException):  # boundary: a cancelled turn, reported by its own
                    await child
            wakers = self._wakers.get(chat)
            if wakers is not None:
                wakers.discard(waker)
                if not wakers:
                    del self._wakers[chat]
            self._store.later(Remove(running_key))

    async def _cancelled(self, inbound: Inbound, agent: Agent, reason: Reason, *, started: bool) -> TurnOutcome:
        """A turn that will not (go on to) answer: history as the reason says, and its marker,
        so a restart does not answer it after all. A stopped turn that had started stays in
        history, marked; one stopped while it waited never happened. An interrupted or
        collected message stays as the person's turn, for the turn that answers them all."""
        msg = inbound.message
        reply = inbound.reply
        exchange: list[dict[str, Any]] = []
        if (reason == "stopped" and started) or (reason == "interrupted" and reply.partial):
            mark = CUT_MARKS[reason] or ""
            said = (reply.partial + mark).strip() if reply.partial else f"({reason} before answering)"
            exchange = [user_entry(msg), {"role": "assistant", "content": said}]
        elif reason in ("collected", "interrupted"):
            exchange = [user_entry(msg)]
        elif reason == "deleted":
            for message_id in [*reply.streamed, *reply.replacing]:
                await reply.adapter.delete(reply.chat_id, message_id)
        operations = (
            [self._history.append_turn_op(inbound.conversation, agent.config.max_history, exchange)] if exchange else []
        )
        await self._store.commit(turn_marker(msg), operations, ttl=self._ttl)
        if self._events is not None:
            await run_events(inbound, self._events).stopped(reason)
        log.info("%s: the turn for message %s ended: %s", msg.platform, msg.message_id, reason)
        status = TurnStatus.COLLECTED if reason == "collected" else TurnStatus.STOPPED
        return TurnOutcome(status, detail=reason)

    async def _answered(self, inbound: Inbound, outcome: TurnOutcome) -> None:
        """Keep what an edit within the re-run window needs; tell the sender when the answer
        could not be delivered at all."""
        msg = inbound.message
        delivered = outcome.delivery
        if delivered is not None and delivered.failures and not delivered.message_ids:
            await self.tell_failure(inbound.reply)
        window = inbound.config.rerun_window_seconds
        if window <= 0 or outcome.history_item is None or delivered is None:
            return
        record = {
            "message": msg.to_dict(),
            "item": outcome.history_item,
            "reply": list(delivered.message_ids),
        }
        where = (msg.platform, msg.channel.channel_id, msg.message_id)
        self._store.later(Put(_message_key("replied", *where), json.dumps(record, ensure_ascii=False), window))

    @staticmethod
    async def tell_failure(reply: ReplyChannel) -> None:
        """One short notice that a message got no answer (once: the outbox keys it)."""
        try:
            await reply.send_text(FAILED_NOTICE, purpose="failure")
        except Exception:  # boundary: a turn's failure notice, the last thing its turn does
            log.warning("could not tell %s that its message failed", reply.origin.platform, exc_info=True)
