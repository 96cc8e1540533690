"""Delivery: the one way out. Every message the product posts (replies, room turns, pairing
notices, notifications, files, what agents' tools post) leaves through here, so
`message_sending` / `message_sent` hooks and the outbox see all of it, and every platform gets
the same shaping. Agents' edits, deletions, reactions and new threads go through here too, so
a hook that rewrites outgoing text sees an edit's text as well.

`Delivery.post` is the primitive: `prepare` (hooks, chunking to the platform's limit), then
`deliver` (one send per chunk, recorded in the outbox when the post has a key, hooks again).
A turn keeps the two apart: it commits what `prepare` made together with its history, then
delivers it, so a turn that runs again after a crash sends exactly what was committed.
`ReplyChannel` is a turn's view of it: the reply to one inbound message, with the bot's
silence, footer and streaming settings on top. See docs/architecture.md and docs/delivery.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from botweave import tracing
from botweave.adapter import Adapter
from botweave.config import BotConfig
from botweave.conversations import conversation_key, direct_conversation
from botweave.events import ConversationEvents, RunEvents
from botweave.hooks import HookEvent, HookRegistry
from botweave.replies import chunk_text, format_footer, is_silent, measure, with_footer
from botweave.store import Put, Store
from botweave.streaming import Rewind, StreamingReply
from botweave.types import AgentIdentity, BotMessage, Button, MessageActionResult, OutboundFile, revision_suffix

log = logging.getLogger(__name__)


@dataclass
class Delivered:
    """What happened to one post: the text as sent and the ids of every message it used."""

    text: str = ""
    message_ids: list[str] = field(default_factory=list)
    silent: bool = False
    cancelled: bool = False
    failures: list[MessageActionResult] = field(default_factory=list)
    #: The chat a direct message went to (only `post_direct` learns it from the platform).
    chat_id: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failures and not self.cancelled

    def result(self, target: str) -> MessageActionResult:
        """The post as one typed action result, the way tools and callers report it."""
        ids = tuple(self.message_ids)
        if self.failures:
            first = self.failures[0]
            return MessageActionResult(first.status, target, first.detail, message_ids=ids)
        if self.cancelled:
            return MessageActionResult("failed", target, "cancelled by a message_sending hook")
        return MessageActionResult("ok", target, message_id=ids[0] if ids else None, message_ids=ids)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a post goes: a chat (and thread) on one platform; the first chunk may quote
    the message it answers. `conversation` names the conversation the post belongs to where
    that is not simply the chat (a direct conversation is keyed by its person)."""

    adapter: Adapter
    chat_id: str
    thread_id: str | None = None
    reply_to: str | None = None
    conversation: str | None = None

    @property
    def target(self) -> str:
        base = f"{self.adapter.platform}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base

    @property
    def conversation_key(self) -> str:
        if self.conversation:
            return self.conversation
        person = self.adapter.direct_user(self.chat_id)
        return direct_conversation(self.adapter.platform, person) if person is not None else self.target


#: Who wrote an intent: an unconfirmed one names the process that stopped mid-send.
PROCESS = f"{socket.gethostname()}:{os.getpid()}"
#: Pauses before sending a keyed chunk again after a failed attempt in the same process.
RESEND_PAUSES_S = (0.5, 2.0)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A post made ready to send: the text after `message_sending` hooks, cut into the chunks
    that go out. A turn commits this before its first send, so every later attempt (after a
    crash, in another worker) sends exactly these chunks."""

    text: str
    chunks: tuple[str, ...]
    silent: bool = False

    def to_json(self) -> str:
        return json.dumps({"text": self.text, "chunks": list(self.chunks), "silent": self.silent}, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> Prepared:
        data = json.loads(raw)
        return cls(str(data["text"]), tuple(str(c) for c in data["chunks"]), bool(data.get("silent")))


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """What the outbox knows of one chunk: it was about to be sent (`at`, a Unix time), or it
    was sent (`message_id`)."""

    sent: bool
    at: float = 0.0
    message_id: str | None = None


@dataclass
class Outbox:
    """An intent before and a confirmation after every keyed chunk.

    A chunk with a confirmation is never sent again. A chunk with only an intent may or may
    not have reached the platform (the sender died, or the answer was lost); `Delivery`
    settles it the way the platform allows before sending it again."""

    store: Store
    ttl: float

    @staticmethod
    def _key(chunk_key: str) -> str:
        return f"outbox:{chunk_key}"

    async def record(self, chunk_key: str) -> ChunkRecord | None:
        raw = await self.store.get(self._key(chunk_key))
        if raw is None:
            return None
        data = json.loads(raw)
        if data.get("s") == "sent":
            return ChunkRecord(True, float(data.get("at") or 0), data.get("id"))
        return ChunkRecord(False, float(data.get("at") or 0))

    async def begin(self, chunk_key: str) -> tuple[ChunkRecord, bool]:
        """The chunk's record before a send: the intent this call wrote (True), or what an
        earlier attempt left (False: sent, or only intended). The check and the intent are
        one store call; only a chunk found there is read again."""
        while True:
            at = time.time()
            intent = json.dumps({"s": "intent", "at": at, "by": PROCESS})
            if await self.store.set_if_absent(self._key(chunk_key), intent, ttl=self.ttl):
                return ChunkRecord(False, at), True
            found = await self.record(chunk_key)
            if found is not None:
                return found, False
            # it expired between the two calls: claim it again

    def confirm(self, chunk_key: str, message_id: str | None) -> None:
        """Queued behind the send, not waited for (`Store.later`): the next chunk and the turn
        go on at once, and every later look at this record sees it. A crash that loses it
        leaves the intent, which is settled as any unconfirmed chunk is."""
        record = json.dumps({"s": "sent", "id": message_id, "at": time.time()})
        self.store.later(Put(self._key(chunk_key), record, self.ttl))


@dataclass
class SentLedger:
    """The ids of the messages the bot posted, per chat, so an agent's tools can edit and
    delete the bot's own messages and nobody else's (a bot that is a group admin could
    otherwise delete what people wrote)."""

    store: Store
    ttl: float = 7 * 24 * 3600.0

    @staticmethod
    def key(platform: str, chat_id: str, message_id: str) -> str:
        return f"own:{platform}:{chat_id}:{message_id}"

    async def record(self, platform: str, chat_id: str, message_ids: list[str]) -> None:
        for message_id in message_ids:
            await self.store.set(self.key(platform, chat_id, message_id), "1", ttl=self.ttl)

    async def is_own(self, platform: str, chat_id: str, message_id: str) -> bool:
        return await self.store.get(self.key(platform, chat_id, message_id)) is not None


class Delivery:
    def __init__(
        self,
        hooks: HookRegistry,
        outbox: Outbox | None = None,
        ledger: SentLedger | None = None,
        events: ConversationEvents | None = None,
    ) -> None:
        self.hooks = hooks
        self.outbox = outbox
        #: Set by the runtime when some agent may edit or delete what the bot posted.
        self.ledger = ledger
        #: Set by the runtime when the gateway is configured: what the bot posts is published
        #: in its conversation (platforms that show their messages through the events
        #: themselves, the web, publish their own).
        self.events = events

    async def post(
        self,
        to: Destination,
        text: str,
        *,
        key: str | None = None,
        identity: AgentIdentity | None = None,
        origin: BotMessage | None = None,
        buttons: Sequence[Button] = (),
    ) -> Delivered:
        """Post `text` whole: `message_sending` hooks may rewrite or cancel it, then it goes
        out chunk by chunk. `key` names the post in the outbox (a turn's reply, say), so a
        retry of the same post sends only the chunks that never went out. `buttons` go under
        the last chunk, where they follow everything they are about."""
        prepared = await self.prepare(to, text, origin, identity=identity)
        if prepared is None:
            return Delivered(cancelled=True)
        return await self.deliver(to, prepared, key=key, identity=identity, origin=origin, buttons=buttons)

    async def prepare(
        self, to: Destination, text: str, origin: BotMessage | None, *, identity: AgentIdentity | None = None
    ) -> Prepared | None:
        """Run `message_sending` hooks and cut the result into the platform's chunks; None
        when a hook cancelled the post."""
        final = await self.before_send(to, text, origin)
        if final is None:
            return None
        caps = to.adapter.capabilities
        limit = caps.max_message_length
        if identity is not None and limit is not None:
            # Each piece of an agent's turn carries its name where the platform cannot post
            # under it: leave the name room, so no piece is split again without it.
            limit -= measure(to.adapter.name_prefix(identity), caps.length_unit)
        return Prepared(final, tuple(chunk_text(final, limit, caps.length_unit)))

    async def deliver(
        self,
        to: Destination,
        prepared: Prepared,
        *,
        key: str | None = None,
        identity: AgentIdentity | None = None,
        origin: BotMessage | None = None,
        buttons: Sequence[Button] = (),
    ) -> Delivered:
        """Send prepared chunks (those the outbox has not confirmed, when keyed), then run
        `message_sent` hooks."""
        delivered = Delivered(text=prepared.text)
        last = len(prepared.chunks) - 1
        attributes: tracing.Attributes = {"botweave.platform": to.adapter.platform, "botweave.chunks": len(prepared.chunks)}
        with tracing.span("botweave.deliver", attributes) as span:
            for index, chunk in enumerate(prepared.chunks):
                extra = buttons if index == last else ()
                result = await self.send_chunk(to, chunk, index, key=key, identity=identity, buttons=extra)
                if result.ok and result.message_id is not None:
                    delivered.message_ids.append(result.message_id)
                elif result.ok:
                    continue  # posted under an identity; not every platform reports an id
                else:
                    delivered.failures.append(result)
                    log.warning("%s: sending a chunk to %s failed: %s %s",
                                to.adapter.platform, to.chat_id, result.status, result.detail)
                    if identity is not None:
                        break  # an agent's turn cut short reads worse than one that failed whole
            if delivered.failures:
                span.fail(delivered.failures[0].status)
            await self.after_send(to, delivered, origin, identity=identity, buttons=buttons)
        return delivered

    async def post_direct(
        self, adapter: Adapter, user_id: str, text: str, *, buttons: Sequence[Button] = ()
    ) -> Delivered:
        """A direct message to a person (pairing, notifications, approval requests), through
        the same hooks; `buttons` go under the last chunk. `Delivered.chat_id` is the direct
        chat it went to."""
        to = Destination(adapter, user_id, conversation=direct_conversation(adapter.platform, user_id))
        delivered = Delivered()
        final = await self.before_send(to, text, None)
        if final is None:
            delivered.cancelled = True
            return delivered
        delivered.text = final
        caps = adapter.capabilities
        chunks = chunk_text(final, caps.max_message_length, caps.length_unit)
        for index, chunk in enumerate(chunks):
            extra = buttons if index == len(chunks) - 1 else ()
            result = await adapter.send_direct(user_id, chunk, buttons=extra)
            if result.ok:
                delivered.chat_id = result.target
            if result.ok and result.message_id is not None:
                delivered.message_ids.append(result.message_id)
            elif not result.ok:
                delivered.failures.append(result)
        await self.after_send(to, delivered, None, buttons=buttons)
        return delivered

    async def post_file(
        self,
        to: Destination,
        file: OutboundFile,
        *,
        caption: str = "",
        key: str | None = None,
        origin: BotMessage | None = None,
    ) -> Delivered:
        """Post a file with a caption: `message_sending` hooks see the caption (and the file's
        name, type and size) and may rewrite or cancel it; with a key the file is never posted
        twice. The adapter cuts the caption to the platform's caption limit."""
        delivered = Delivered()
        final = await self.before_send(to, caption, origin, file=file)
        if final is None:
            delivered.cancelled = True
            return delivered
        delivered.text = final
        file_key = f"{key}:file" if key is not None else None
        outbox = self.outbox if file_key is not None else None
        if outbox is not None and file_key is not None:
            record, _ = await outbox.begin(file_key)
            if record.sent:
                log.debug("%s: file %s of %s was already sent", to.adapter.platform, file.filename, key)
                delivered.message_ids.extend((record.message_id or "").split(",") if record.message_id else [])
                return delivered
            # No platform can tell whether an earlier upload of this file went out: an
            # unconfirmed one is sent again (at least once), like a Telegram message.
        result = await to.adapter.send_file(
            to.chat_id, file, caption=final, thread_id=to.thread_id, reply_to=to.reply_to
        )
        delivered.message_ids.extend(result.message_ids or ((result.message_id,) if result.message_id else ()))
        if not result.ok:
            delivered.failures.append(result)
            log.warning("%s: sending a file to %s failed: %s %s", to.adapter.platform, to.chat_id, result.status, result.detail)
        elif outbox is not None and file_key is not None:
            outbox.confirm(file_key, ",".join(delivered.message_ids) or None)
        await self.after_send(to, delivered, origin, file=file)
        return delivered

    async def send_chunk(
        self,
        to: Destination,
        text: str,
        index: int,
        *,
        key: str | None = None,
        identity: AgentIdentity | None = None,
        buttons: Sequence[Button] = (),
    ) -> MessageActionResult:
        """One platform message. With a key: an intent before the send, a confirmation after
        it, never sent again once confirmed, and an unconfirmed earlier attempt settled the
        way the platform allows (see `Idempotency`) before sending again."""
        outbox = self.outbox
        if key is None or outbox is None:
            return await self._send(to, text, index, identity, None, buttons)
        chunk_key = f"{key}:{index}"
        record, fresh = await outbox.begin(chunk_key)
        if record.sent:
            log.debug("%s: chunk %s of %s was already sent", to.adapter.platform, index, key)
            return MessageActionResult("ok", to.chat_id, "already sent", message_id=record.message_id)
        unsettled = not fresh  # an earlier attempt may have reached the platform
        since = record.at
        result = MessageActionResult("failed", to.chat_id, "not sent")
        for pause in (0.0, *RESEND_PAUSES_S):
            if pause:
                tracing.event("botweave.retry", {"botweave.chunk": index, "botweave.status": result.status})
                await asyncio.sleep(pause)
            if unsettled:
                found = await self._settle(to, chunk_key, since)
                if found is not None:
                    outbox.confirm(chunk_key, found)
                    return MessageActionResult("ok", to.chat_id, "sent earlier", message_id=found)
            result = await self._send(to, text, index, identity, chunk_key, buttons)
            if result.ok:
                outbox.confirm(chunk_key, result.message_id)
                return result
            if not result.retryable:  # the platform refused it: nothing was posted, and would not be
                break
            unsettled = True
        return result

    async def _send(
        self,
        to: Destination,
        text: str,
        index: int,
        identity: AgentIdentity | None,
        chunk_key: str | None,
        buttons: Sequence[Button] = (),
    ) -> MessageActionResult:
        adapter = to.adapter
        reply_to = to.reply_to if index == 0 else None
        if buttons:  # a message with buttons is the bot's own, never under an agent's name
            return await adapter.send(to.chat_id, text, thread_id=to.thread_id, reply_to=reply_to, buttons=buttons)
        if identity is not None:
            return await adapter.send_as(identity, to.chat_id, text, thread_id=to.thread_id)
        if chunk_key is not None and adapter.idempotency != "none":
            return await adapter.send_keyed(to.chat_id, text, key=chunk_key, thread_id=to.thread_id, reply_to=reply_to)
        return await adapter.send(to.chat_id, text, thread_id=to.thread_id, reply_to=reply_to)

    async def _settle(self, to: Destination, chunk_key: str, since: float) -> str | None:
        """The id of the chunk's message if an earlier attempt posted it and the platform can
        say so; None means send it (again)."""
        adapter = to.adapter
        if adapter.idempotency == "key":
            return None  # the platform itself drops the repeat
        if adapter.idempotency == "lookup":
            try:
                return await adapter.find_sent(to.chat_id, chunk_key, thread_id=to.thread_id, since=since)
            except Exception as exc:  # boundary: outbound, the adapter's SDK lookup; cannot tell, so sending again beats losing it
                log.warning(
                    "%s: could not look up whether %s was posted (%s); sending it again",
                    adapter.platform, chunk_key, exc,
                )
                return None
        log.info(
            "%s: %s may have been sent before the process stopped; the platform cannot tell, so it is sent again",
            adapter.platform, chunk_key,
        )
        return None

    async def before_send(
        self, to: Destination, text: str, origin: BotMessage | None, *, file: OutboundFile | None = None
    ) -> str | None:
        """`message_sending` hooks may rewrite the text (a file's caption) or cancel the post (None)."""
        if not self.hooks.has("message_sending"):
            return text
        event = await self.hooks.run(HookEvent("message_sending", _payload(to, text, file), message=origin, text=text))
        return None if event.denied or event.text is None else event.text

    async def after_send(
        self,
        to: Destination,
        delivered: Delivered,
        origin: BotMessage | None,
        *,
        file: OutboundFile | None = None,
        identity: AgentIdentity | None = None,
        buttons: Sequence[Button] = (),
    ) -> None:
        await to.adapter.end_reply(to.chat_id, delivered.message_ids)
        if self.ledger is not None and delivered.message_ids:
            await self.ledger.record(to.adapter.platform, to.chat_id, delivered.message_ids)
        if self.events is not None and delivered.message_ids and not to.adapter.events_native:
            await self._publish(to, delivered, file, identity, buttons)
        if self.hooks.has("message_sent"):
            payload = _payload(to, delivered.text, file) | {"message_ids": list(delivered.message_ids)}
            await self.hooks.run(HookEvent("message_sent", payload, message=origin, text=delivered.text))

    async def _publish(
        self,
        to: Destination,
        delivered: Delivered,
        file: OutboundFile | None,
        identity: AgentIdentity | None,
        buttons: Sequence[Button],
    ) -> None:
        """What the bot posted on a platform, as the message watchers of its conversation see
        (once: a post delivered again after a restart is the same message)."""
        assert self.events is not None
        adapter = to.adapter
        ids = list(delivered.message_ids)
        me = adapter.self_user
        record = bot_message(ids[0], delivered.text, me.user_id if me else "", me.name if me else adapter.platform, identity)
        record |= {"ids": ids, "reply_to": to.reply_to, "buttons": [b.to_dict() for b in buttons]}
        if file is not None:
            record["attachments"] = [{"file_id": None, "filename": file.filename, "mime": file.mime, "size": file.size}]
        unique = f"evonce:out:{adapter.platform}:{to.chat_id}:{ids[0]}"
        await self.events.post(to.conversation_key, record, unique=unique)

    async def _publish_change(self, to: Destination, message_id: str, change: dict[str, object]) -> None:
        """A change to one of the bot's messages on a platform (an edit, a deletion)."""
        if self.events is None or to.adapter.events_native:
            return
        conversation = to.conversation_key
        record = await self.events.message(conversation, message_id) or {"id": message_id}
        await self.events.update(conversation, record | change)


    # --- what agents do to messages: edits, deletions, reactions, threads ----------------------

    async def edit(
        self,
        to: Destination,
        message_id: str,
        text: str,
        *,
        origin: BotMessage | None = None,
        buttons: Sequence[Button] | None = None,
    ) -> MessageActionResult:
        """Replace a message's text (and its buttons, when `buttons` is given: none removes
        them); `message_sending` hooks see (and may rewrite or cancel) the new text as they
        would a new post."""
        final = await self.before_send(to, text, origin)
        if final is None:
            return MessageActionResult("failed", to.target, "cancelled by a message_sending hook")
        caps = to.adapter.capabilities
        if caps.max_message_length is not None and measure(final, caps.length_unit) > caps.max_message_length:
            detail = f"the new text is longer than one {to.adapter.platform} message ({caps.max_message_length})"
            return MessageActionResult("failed", to.target, detail)
        result = await to.adapter.edit(to.chat_id, message_id, final, thread_id=to.thread_id, buttons=buttons)
        if result.ok:
            change: dict[str, object] = {"text": final, "edited": True}
            if buttons is not None:
                change["buttons"] = [b.to_dict() for b in buttons]
            await self._publish_change(to, message_id, change)
        return result

    async def delete(self, to: Destination, message_id: str) -> MessageActionResult:
        result = await to.adapter.delete(to.chat_id, message_id)
        if result.ok:
            await self._publish_change(to, message_id, {"deleted": True, "text": ""})
        return result

    async def react(self, to: Destination, message_id: str, emoji: str) -> MessageActionResult:
        return await to.adapter.react(to.chat_id, message_id, emoji)

    async def create_thread(
        self, to: Destination, name: str, *, message_id: str | None = None, origin: BotMessage | None = None
    ) -> MessageActionResult:
        """Open a thread; its name is shown to people, so hooks see it like a post's text."""
        final = await self.before_send(to, name, origin)
        if final is None:
            return MessageActionResult("failed", to.target, "cancelled by a message_sending hook")
        result = await to.adapter.create_thread(to.chat_id, final, message_id=message_id)
        if result.ok and result.message_id is not None and self.ledger is not None:
            await self.ledger.record(to.adapter.platform, to.chat_id, [result.message_id])
        return result


def bot_message(
    message_id: str, text: str, bot_id: str, bot_name: str, identity: AgentIdentity | None = None
) -> dict[str, object]:
    """A message the bot posted, as conversation events show it: the bot's own, or an agent's
    (a room turn) with the agent's identity."""
    record: dict[str, object] = {
        "id": message_id,
        "author": {"kind": "agent" if identity else "bot", "id": bot_id, "name": identity.name if identity else bot_name},
        "text": text,
        "at": time.time(),
        "attachments": [],
        "buttons": [],
        "reactions": [],
        "edited": False,
        "deleted": False,
    }
    if identity is not None:
        record["agent"] = {"name": identity.name, "avatar_url": identity.avatar_url, "icon_emoji": identity.icon_emoji}
    return record


def _payload(to: Destination, text: str, file: OutboundFile | None = None) -> dict[str, object]:
    payload: dict[str, object] = {
        "platform": to.adapter.platform,
        "chat_id": to.chat_id,
        "thread_id": to.thread_id,
        "reply_to": to.reply_to,
        "text": text,
    }
    if file is not None:  # what hooks may know of a file: never its bytes
        payload["file"] = {"filename": file.filename, "mime": file.mime, "size": file.size}
    return payload


@dataclass
class ReplyChannel:
    """Where a turn's reply goes: the conversation of one inbound message, with the platform's
    silence, footer and streaming settings."""

    delivery: Delivery
    adapter: Adapter
    origin: BotMessage
    config: BotConfig
    #: The reply being streamed, once `stream_text` started it (its edits show the bot at work).
    stream: StreamingReply | None = field(default=None, init=False)
    #: The messages of an earlier answer to the same message (it was edited): this reply is
    #: written into them where the platform can edit, and replaces them where it cannot.
    replacing: list[str] = field(default_factory=list)
    #: What a streamed reply cut off mid-way ends with; None leaves it as it stands (it is
    #: about to be rewritten or removed).
    cut_mark: str | None = " …"
    #: While streaming: the text so far and the messages showing it, for whoever cut it off.
    partial: str = ""
    streamed: list[str] = field(default_factory=list)
    #: Where the answer's progress is published when the gateway is configured (its words as
    #: they stream, its tool calls, how it ended).
    run: RunEvents | None = None

    @property
    def chat_id(self) -> str:
        return self.origin.channel.channel_id

    @property
    def destination(self) -> Destination:
        origin = self.origin
        conversation = conversation_key(origin) if self.delivery.events is not None else None
        return Destination(self.adapter, self.chat_id, origin.thread_id, origin.message_id, conversation)

    def key(self, purpose: str) -> str:
        """The outbox key of one post answering this message: the same in every attempt."""
        origin = self.origin
        return f"out:{origin.platform}:{self.chat_id}:{origin.message_id}{revision_suffix(origin)}:{purpose}"

    def _final_text(self, text: str, model: str | None, seconds: float | None, tools: Sequence[str] = ()) -> str:
        return with_footer(text, format_footer(model, seconds, tools)) if self.config.footer else text

    async def prepare(
        self, text: str, *, model: str | None = None, seconds: float | None = None, tools: Sequence[str] = ()
    ) -> Prepared | None:
        """The reply as it will be sent (silence, footer, hooks, chunks); None when a hook
        cancelled it."""
        if is_silent(text, self.config.allow_silence, self.config.silence_token):
            return Prepared("", (), silent=True)
        final = self._final_text(text, model, seconds, tools)
        return await self.delivery.prepare(self.destination, final, self.origin)

    async def deliver(self, prepared: Prepared, *, purpose: str = "reply") -> Delivered:
        """Send a prepared reply; chunks confirmed by an earlier attempt are not sent again."""
        if prepared.silent:
            await self._drop_replaced(0)
            return Delivered(silent=True)
        if purpose == "reply" and self.replacing:
            return await self._deliver_in_place(prepared)
        return await self.delivery.deliver(self.destination, prepared, key=self.key(purpose), origin=self.origin)

    async def _deliver_in_place(self, prepared: Prepared) -> Delivered:
        """The reply written into the earlier answer's messages, chunk by chunk; chunks beyond
        them are posted, earlier messages left over are deleted. A platform that cannot edit
        gets the earlier answer deleted and this one posted."""
        if not self.adapter.capabilities.can_edit:
            await self._drop_replaced(0)
            return await self.delivery.deliver(self.destination, prepared, key=self.key("reply"), origin=self.origin)
        to = self.destination
        delivered = Delivered(text=prepared.text)
        for index, chunk in enumerate(prepared.chunks):
            if index < len(self.replacing):
                message_id = self.replacing[index]
                result = await self.adapter.edit(self.chat_id, message_id, chunk, thread_id=self.origin.thread_id)
                result = MessageActionResult(result.status, result.target, result.detail, message_id=message_id)
            else:
                result = await self.delivery.send_chunk(to, chunk, index, key=self.key("reply"))
            if result.ok and result.message_id is not None:
                delivered.message_ids.append(result.message_id)
            elif not result.ok:
                delivered.failures.append(result)
        await self._drop_replaced(len(prepared.chunks))
        await self.delivery.after_send(to, delivered, self.origin)
        return delivered

    async def _drop_replaced(self, keep: int) -> None:
        for message_id in self.replacing[keep:]:
            await self.adapter.delete(self.chat_id, message_id)
        del self.replacing[keep:]

    async def send_text(
        self,
        text: str,
        *,
        model: str | None = None,
        seconds: float | None = None,
        purpose: str = "reply",
        tools: Sequence[str] = (),
    ) -> Delivered:
        """Deliver a complete reply; the agent's silence token sends nothing."""
        prepared = await self.prepare(text, model=model, seconds=seconds, tools=tools)
        if prepared is None:
            return Delivered(cancelled=True)
        return await self.deliver(prepared, purpose=purpose)

    async def send_file(self, file: OutboundFile, *, caption: str = "", purpose: str = "file") -> Delivered:
        """Post a file into the conversation (an image the model drew, say), once per purpose."""
        return await self.delivery.post_file(
            self.destination, file, caption=caption, key=self.key(purpose), origin=self.origin
        )

    def can_stream(self) -> bool:
        return self.config.streaming and self.adapter.capabilities.can_edit

    def streaming_reply(self) -> StreamingReply:
        caps = self.adapter.capabilities
        floor_ms = caps.edit_floor_for(self.origin.channel.channel_type)
        to, key = self.destination, self.key("reply")

        async def send(text: str, index: int) -> MessageActionResult:
            return await self.delivery.send_chunk(to, text, index, key=key)

        async def edit(message_id: str, text: str) -> MessageActionResult:
            return await self.adapter.edit(self.chat_id, message_id, text, thread_id=self.origin.thread_id)

        async def delete(message_id: str) -> MessageActionResult:
            return await self.adapter.delete(self.chat_id, message_id)

        stream = StreamingReply(
            send=send,
            edit=edit,
            delete=delete,
            interval=max(self.config.stream_edit_interval_ms, floor_ms) / 1000,
            limit=caps.max_message_length,
            unit=caps.length_unit,
        )
        stream.adopt(self.replacing)  # an earlier answer's messages are rewritten, not left
        self.replacing = []
        self.streamed = stream.message_ids
        return stream

    async def stream_text(
        self,
        deltas: AsyncIterator[str],
        *,
        model: str | Callable[[], str] | None = None,
        elapsed: Callable[[], float] | None = None,
        tools: Sequence[str] = (),
    ) -> Delivered:
        """Stream a reply by editing; the streamed message becomes the final reply. `tools`
        and `model` (a callable: the model that answered, known at the end) are read once the
        stream ended (a turn learns which tools it used as it goes). A `Rewind` delta cuts the
        text back: the words after it are another model's answer, written in the same place."""
        stream = self.stream = self.streaming_reply()
        token = self.config.effective_silence_token
        text = ""
        unshown = ""  # words not yet published: the reply might still be the silence token
        run = self.run
        self.partial = ""
        try:
            async for delta in deltas:
                if isinstance(delta, Rewind):
                    published = len(text) - len(unshown)
                    text = text[: delta.keep]
                    unshown = text[published:] if delta.keep > published else ""
                    self.partial = text
                    await stream.update(text)  # the words taken back leave the screen (when any are kept)
                    continue
                text += delta
                self.partial = text
                if self.config.allow_silence and token.startswith(text.strip()):
                    unshown += delta
                    continue  # might still become the silence token: show nothing yet
                if run is not None:
                    await run.delta(unshown + delta)
                    unshown = ""
                await stream.update(text)
        except BaseException:
            if stream.message_ids and self.cut_mark is not None:  # never leave a half-written message looking final
                if text.strip():
                    await stream.finish(text + self.cut_mark)
                else:  # every word shown was taken back (a model that failed mid-answer)
                    await stream.discard()
            raise
        if is_silent(text, self.config.allow_silence, token):
            await stream.discard()
            return Delivered(silent=True)
        seconds = elapsed() if elapsed is not None else None
        to = self.destination
        answered = model() if callable(model) else model
        final = await self.delivery.before_send(to, self._final_text(text, answered, seconds, tools), self.origin)
        if final is None:
            await stream.discard()
            return Delivered(cancelled=True)
        with tracing.span("botweave.deliver", {"botweave.platform": to.adapter.platform, "botweave.streamed": True}) as span:
            delivered = Delivered(text=final, message_ids=await stream.finish(final))
            span.set("botweave.chunks", len(delivered.message_ids))
            await self.delivery.after_send(to, delivered, self.origin)
        return delivered
