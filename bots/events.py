"""Conversation events: what happens in every conversation, numbered and kept in the store,
so a client of the gateway can follow any conversation live and, after being away, get
exactly what it missed.

The kernel publishes at the places where things happen: delivery posts a message, a streamed
reply grows (`delta`), a tool is called, a turn ends (`final`, `stopped`, `error`), an
approval is asked for and decided, a stranger asks to pair. Each event is appended to its
conversation's bounded log in the store (`Store.log_append`), which gives it the
conversation's next `seq`: one number after the other, across restarts and across every
worker sharing the store. Messages are also kept as records (the conversation's transcript),
so a client that connects late, or whose cursor is older than the log, reads the history.

All of this exists only where the gateway is configured: without it the runtime hands no
`ConversationEvents` to anyone, and every publication point is one `is None` test, so a bot
without a gateway pays nothing for it.

Who follows the events is not the kernel's business: listeners in this process are told of
each append (`listen`), and a store shared by several processes also feeds everyone's appends
to whoever reads its `log_feed` (the gateway in the ingress does).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from botweave.store import Append, LogSlice, Operation, Put, Store
from botweave.tasks import spawn

log = logging.getLogger(__name__)

#: Every event name the gateway sends (the protocol's list).
EVENT_NAMES = (
    "approval.requested",
    "approval.resolved",
    "ask",
    "ask.resolved",
    "delta",
    "error",
    "final",
    "message",
    "pairing.requested",
    "pairing.resolved",
    "presence",
    "resync",
    "stopped",
    "tool",
)
#: Store keys: the event log, the transcript (message ids in order), each message's record,
#: the mark that a message is in the transcript, what each conversation is (for listing
#: them). Publishers name their once-only appends under `evonce:`.
LOG_PREFIX = "ev:"
_TRANSCRIPT = "evtx:"
_RECORD = "evmsg:"
_SEEN = "evseen:"
CONVERSATION_PREFIX = "evconv:"
#: In a conversation's listing: its newest message, whose changes the listing follows.
_LAST_ID = "last_id"
#: How long message records and conversation listings are kept after their last change.
RECORD_TTL_S = 30 * 24 * 3600.0
#: How long the key that makes an append happen once lives.
UNIQUE_TTL_S = 7 * 24 * 3600.0
#: The longest text a conversation's listing shows of its last message.
LAST_TEXT_CHARS = 200

#: Told in this process of every append: (conversation, seq, the event as the log holds it).
Listener = Callable[[str, int, str], None]
#: How tool arguments are masked before anyone sees them (the approval desk's masking).
Mask = Callable[[Any], Any]


def encode(event: str, data: Mapping[str, Any]) -> str:
    """An event as the log holds it: `{"event": ..., "data": ...}` (compact JSON)."""
    return json.dumps({"event": event, "data": data}, ensure_ascii=False, separators=(",", ":"), default=str)


def conversation_kind(conversation: str) -> str:
    """`web`, `dm`, `thread` or `group`, from a conversation key."""
    platform, _, rest = conversation.partition(":")
    if platform == "web":
        return "web"
    if rest.startswith("dm:"):
        return "dm"
    return "thread" if ":" in rest else "group"


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


class ConversationEvents:
    """Publishes events into each conversation's log and keeps its messages (see the module
    docstring). `log_size` events and `history` messages are kept per conversation."""

    def __init__(self, store: Store, *, log_size: int = 2000, history: int = 500, mask: Mask | None = None) -> None:
        self.store = store
        self.log_size = log_size
        self.history_size = history
        self._mask = mask
        self._listeners: list[Listener] = []

    # --- the log ------------------------------------------------------------------------------

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Be told of every append this process makes; returns the way to stop."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def publish(
        self, conversation: str, event: str, data: Mapping[str, Any], *, unique: str | None = None
    ) -> int:
        """Append one event to the conversation's log; its seq (0 when `unique` names an
        append made before: nothing was appended)."""
        value = encode(event, data)
        seq = await self.store.log_append(
            LOG_PREFIX + conversation, value, max_len=self.log_size, unique=unique, unique_ttl=UNIQUE_TTL_S
        )
        if seq:
            for listener in tuple(self._listeners):
                try:
                    listener(conversation, seq, value)
                except Exception:  # boundary: a listener, a subscriber's code
                    log.exception("a conversation-event listener failed")
        return seq

    async def read(self, conversation: str, *, after: int = 0, limit: int = 500) -> LogSlice:
        return await self.store.log_read(LOG_PREFIX + conversation, after=after, limit=limit)

    async def head(self, conversation: str) -> int:
        """The conversation's newest seq (0: no event yet)."""
        return (await self.read(conversation, after=1 << 62, limit=0)).head

    # --- messages -----------------------------------------------------------------------------

    async def post(
        self, conversation: str, message: Mapping[str, Any], *, title: str = "", unique: str | None = None
    ) -> int:
        """A new message: kept in the transcript, listed with its conversation (under
        `title`, the chat's name where the platform gives one; without it, the name known
        already), and published as a `message` event. Posting the same id again keeps one
        record (the newest), unless `unique` names a post made before: then nothing changes."""
        record = {"conversation": conversation, **message}
        message_id = str(record["id"])
        encoded = json.dumps(record, ensure_ascii=False, default=str)
        if not title:  # the bot's own posts know no chat name: the one a person's message gave stays
            known = await self.listing(conversation)
            title = str(known.get("title") or "") if known is not None else ""
        listing = {
            "conversation": conversation,
            "platform": conversation.partition(":")[0],
            "kind": conversation_kind(conversation),
            "title": title,
            "last_at": record.get("at") or time.time(),
            "last_text": str(record.get("text") or "")[:LAST_TEXT_CHARS],
            _LAST_ID: message_id,
        }
        operations: list[Operation] = [
            Append(_TRANSCRIPT + conversation, (message_id,), self.history_size),
            Put(self._record_key(conversation, message_id), encoded, ttl=RECORD_TTL_S),
            Put(CONVERSATION_PREFIX + conversation, json.dumps(listing, ensure_ascii=False), ttl=RECORD_TTL_S),
        ]
        new = await self.store.commit(f"{_SEEN}{conversation}:{message_id}", operations, ttl=RECORD_TTL_S)
        seq = await self.publish(conversation, "message", record, unique=unique)
        if not new and seq:  # the same id again, and not an append made before: the newer record
            await self.store.set(self._record_key(conversation, message_id), encoded, ttl=RECORD_TTL_S)
        return seq

    async def update(self, conversation: str, message: Mapping[str, Any]) -> int:
        """A message that changed (grew, was edited, reacted to, deleted): its record replaced
        and published again under the same id."""
        record = {"conversation": conversation, **message}
        message_id = str(record["id"])
        encoded = json.dumps(record, ensure_ascii=False, default=str)
        await self.store.set(self._record_key(conversation, message_id), encoded, ttl=RECORD_TTL_S)
        listing = await self.listing(conversation)
        if listing is not None and listing.get(_LAST_ID) == message_id:
            # the newest message grew (a streamed reply) or changed: the listing says what it says now
            listing["last_text"] = str(record.get("text") or "")[:LAST_TEXT_CHARS]
            await self.store.set(CONVERSATION_PREFIX + conversation, json.dumps(listing, ensure_ascii=False), ttl=RECORD_TTL_S)
        return await self.publish(conversation, "message", record)

    async def message(self, conversation: str, message_id: str) -> dict[str, Any] | None:
        raw = await self.store.get(self._record_key(conversation, message_id))
        return json.loads(raw) if raw is not None else None

    async def history(
        self, conversation: str, *, before: str | None = None, limit: int = 50
    ) -> tuple[list[dict[str, Any]], bool]:
        """The newest `limit` messages before the message `before` (default: the newest),
        oldest first, and whether older ones exist."""
        ids = list(dict.fromkeys(await self.store.list_range(_TRANSCRIPT + conversation)))
        if before is not None:
            ids = ids[: ids.index(before)] if before in ids else []
        picked = ids[-limit:] if limit > 0 else []
        found: list[dict[str, Any]] = []
        for message_id in picked:
            record = await self.message(conversation, message_id)
            if record is not None:
                found.append(record)
        return found, len(ids) > len(picked)

    async def listing(self, conversation: str) -> dict[str, Any] | None:
        """What a conversation is and when it was last active (None: no message yet)."""
        raw = await self.store.get(CONVERSATION_PREFIX + conversation)
        return json.loads(raw) if raw is not None else None

    async def conversations(self) -> list[dict[str, Any]]:
        """Every conversation with messages, newest activity first."""
        found = []
        for key in await self.store.keys(CONVERSATION_PREFIX):
            raw = await self.store.get(key)
            if raw is not None:
                found.append({k: v for k, v in json.loads(raw).items() if k != _LAST_ID})
        return sorted(found, key=lambda c: float(c.get("last_at") or 0), reverse=True)

    async def forget(self, conversation: str) -> None:
        """Drop a conversation's messages and listing (its numbering goes on)."""
        ids = await self.store.list_range(_TRANSCRIPT + conversation)
        keys = [self._record_key(conversation, i) for i in ids] + [f"{_SEEN}{conversation}:{i}" for i in ids]
        await self.store.delete(_TRANSCRIPT + conversation, CONVERSATION_PREFIX + conversation, *keys)

    @staticmethod
    def _record_key(conversation: str, message_id: str) -> str:
        return f"{_RECORD}{conversation}:{message_id}"

    # --- runs ---------------------------------------------------------------------------------

    def run(self, conversation: str, message_id: str) -> RunEvents:
        """The events of one answer to `message_id` (each attempt a run of its own)."""
        return RunEvents(self, conversation, new_id("r"), message_id)

    def masked(self, arguments: Any) -> Any:
        return self._mask(arguments) if self._mask is not None else arguments


class RunEvents:
    """One answer's events, in its conversation: its words as they stream, its tool calls and
    how it ended.

    Words are published at the model's pace without making the model wait for the store:
    `delta` hands the words to a publication in flight, and words that arrive while one is
    being written go out together as the next event (nothing is dropped; the text of the
    deltas is the text of the answer). Every other event waits for the words before it, so
    the log keeps the run's order."""

    __slots__ = ("events", "conversation", "run_id", "message_id", "model", "_unsent", "_sending")

    def __init__(self, events: ConversationEvents, conversation: str, run_id: str, message_id: str) -> None:
        self.events = events
        self.conversation = conversation
        self.run_id = run_id
        self.message_id = message_id
        #: The model answering (a fallback, when the agent's own failed); `tool` and `final`
        #: events carry it once known.
        self.model = ""
        self._unsent = ""
        self._sending: asyncio.Task[None] | None = None

    async def _publish(self, event: str, data: dict[str, Any]) -> None:
        await self.events.publish(self.conversation, event, {"run_id": self.run_id, "message_id": self.message_id, **data})

    async def delta(self, text: str) -> None:
        self._unsent += text
        if self._sending is None or self._sending.done():
            if self._sending is not None:
                self._sending.result()  # an earlier write that failed fails the turn here
            self._sending = spawn(self._send_words(), name="publish a run's words")

    async def _send_words(self) -> None:
        while self._unsent:
            text, self._unsent = self._unsent, ""
            await self._publish("delta", {"text": text})

    async def settle(self) -> None:
        """Until the words handed over so far are in the log."""
        sending = self._sending
        if sending is not None:
            await asyncio.shield(sending)

    async def tool(self, call_id: str, name: str, status: str, arguments: Any) -> None:
        await self.settle()
        shown = self.events.masked(arguments)
        data = {"call_id": call_id, "name": name, "status": status, "arguments": shown}
        await self._publish("tool", {**data, "model": self.model} if self.model else data)

    async def final(self, text: str, reply_ids: Sequence[str], **more: Any) -> None:
        await self.settle()
        data = {"text": text, "reply_ids": list(reply_ids), **more}
        await self._publish("final", {**data, "model": self.model} if self.model else data)

    async def stopped(self, reason: str) -> None:
        await self.settle()
        await self._publish("stopped", {"reason": reason})

    async def error(self, message: str) -> None:
        await self.settle()
        await self._publish("error", {"message": message})
