"""Delivery: the one way out. Every message the product posts (replies, room turns, pairing
notices, notifications, what agents' tools post) leaves through here, so `message_sending` /
`message_sent` hooks and the outbox see all of it, and every platform gets the same shaping.
Agents' edits, deletions, reactions and new threads go through here too, so a hook that
rewrites outgoing text sees an edit's text as well.

`Delivery.post` is the primitive: hooks, chunking to the platform's limit, one send per
chunk (recorded in the outbox when the post has a key), hooks again. `ReplyChannel` is a
turn's view of it: the reply to one inbound message, with the bot's silence, footer and
streaming settings on top. See docs/architecture.md.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from botweave.adapter import Adapter
from botweave.config import BotConfig
from botweave.hooks import HookEvent, HookRegistry
from botweave.replies import chunk_text, format_footer, is_silent, measure, with_footer
from botweave.store import Store
from botweave.streaming import StreamingReply
from botweave.types import AgentIdentity, BotMessage, MessageActionResult

log = logging.getLogger(__name__)


@dataclass
class Delivered:
    """What happened to one post: the text as sent and the ids of every message it used."""

    text: str = ""
    message_ids: list[str] = field(default_factory=list)
    silent: bool = False
    cancelled: bool = False
    failures: list[MessageActionResult] = field(default_factory=list)

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
    the message it answers."""

    adapter: Adapter
    chat_id: str
    thread_id: str | None = None
    reply_to: str | None = None

    @property
    def target(self) -> str:
        base = f"{self.adapter.platform}:{self.chat_id}"
        return f"{base}:{self.thread_id}" if self.thread_id else base


@dataclass
class Outbox:
    """Remembers every chunk sent under a key, so a post that runs again after a crash never
    sends a chunk twice. A chunk is claimed *before* it is sent: one whose send may have
    reached the platform is never sent again."""

    store: Store
    ttl: float

    async def claim(self, key: str) -> bool:
        return await self.store.set_if_absent(key, "", ttl=self.ttl)

    async def record(self, key: str, message_id: str) -> None:
        await self.store.set(key, message_id, ttl=self.ttl)

    async def sent_id(self, key: str) -> str | None:
        return (await self.store.get(key)) or None


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
    def __init__(self, hooks: HookRegistry, outbox: Outbox | None = None, ledger: SentLedger | None = None) -> None:
        self.hooks = hooks
        self.outbox = outbox
        #: Set by the runtime when some agent may edit or delete what the bot posted.
        self.ledger = ledger

    async def post(
        self,
        to: Destination,
        text: str,
        *,
        key: str | None = None,
        identity: AgentIdentity | None = None,
        origin: BotMessage | None = None,
    ) -> Delivered:
        """Post `text` whole: `message_sending` hooks may rewrite or cancel it, then it goes
        out chunk by chunk. `key` names the post in the outbox (a turn's reply, say), so a
        retry of the same post sends only the chunks that never went out."""
        delivered = Delivered()
        final = await self.before_send(to, text, origin)
        if final is None:
            delivered.cancelled = True
            return delivered
        delivered.text = final
        caps = to.adapter.capabilities
        limit = caps.max_message_length
        if identity is not None and limit is not None:
            # Each piece of an agent's turn carries its name where the platform cannot post
            # under it: leave the name room, so no piece is split again without it.
            limit -= measure(to.adapter.name_prefix(identity), caps.length_unit)
        for index, chunk in enumerate(chunk_text(final, limit, caps.length_unit)):
            result = await self.send_chunk(to, chunk, index, key=key, identity=identity)
            if result.ok and result.message_id is not None:
                delivered.message_ids.append(result.message_id)
            elif result.ok:
                continue  # posted under an identity; not every platform reports an id
            else:
                delivered.failures.append(result)
                log.warning("%s: sending a chunk to %s failed: %s %s", to.adapter.platform, to.chat_id, result.status, result.detail)
                if identity is not None:
                    break  # an agent's turn cut short reads worse than one that failed whole
        await self.after_send(to, delivered, origin)
        return delivered

    async def post_direct(self, adapter: Adapter, user_id: str, text: str) -> Delivered:
        """A direct message to a person (pairing, notifications), through the same hooks."""
        to = Destination(adapter, user_id)
        delivered = Delivered()
        final = await self.before_send(to, text, None)
        if final is None:
            delivered.cancelled = True
            return delivered
        delivered.text = final
        caps = adapter.capabilities
        for chunk in chunk_text(final, caps.max_message_length, caps.length_unit):
            result = await adapter.send_direct(user_id, chunk)
            if result.ok and result.message_id is not None:
                delivered.message_ids.append(result.message_id)
            elif not result.ok:
                delivered.failures.append(result)
        await self.after_send(to, delivered, None)
        return delivered

    async def send_chunk(
        self, to: Destination, text: str, index: int, *, key: str | None = None, identity: AgentIdentity | None = None
    ) -> MessageActionResult:
        """One platform message; with a key, never twice."""
        chunk_key = f"{key}:{index}" if key is not None else None
        if chunk_key is not None and self.outbox is not None and not await self.outbox.claim(chunk_key):
            sent = await self.outbox.sent_id(chunk_key)
            log.info("%s: chunk %s of %s was already sent; not sending it again", to.adapter.platform, index, key)
            return MessageActionResult("ok", to.chat_id, "already sent", message_id=sent)
        if identity is not None:
            result = await to.adapter.send_as(identity, to.chat_id, text, thread_id=to.thread_id)
        else:
            result = await to.adapter.send(
                to.chat_id, text, thread_id=to.thread_id, reply_to=to.reply_to if index == 0 else None
            )
        if chunk_key is not None and self.outbox is not None and result.ok and result.message_id is not None:
            await self.outbox.record(chunk_key, result.message_id)
        return result

    async def before_send(self, to: Destination, text: str, origin: BotMessage | None) -> str | None:
        """`message_sending` hooks may rewrite the text or cancel the post (None)."""
        if not self.hooks.has("message_sending"):
            return text
        event = await self.hooks.run(HookEvent("message_sending", _payload(to, text), message=origin, text=text))
        return None if event.denied or event.text is None else event.text

    async def after_send(self, to: Destination, delivered: Delivered, origin: BotMessage | None) -> None:
        await to.adapter.end_reply(to.chat_id, delivered.message_ids)
        if self.ledger is not None and delivered.message_ids:
            await self.ledger.record(to.adapter.platform, to.chat_id, delivered.message_ids)
        if self.hooks.has("message_sent"):
            payload = _payload(to, delivered.text) | {"message_ids": list(delivered.message_ids)}
            await self.hooks.run(HookEvent("message_sent", payload, message=origin, text=delivered.text))


    # --- what agents do to messages: edits, deletions, reactions, threads ----------------------

    async def edit(
        self, to: Destination, message_id: str, text: str, *, origin: BotMessage | None = None
    ) -> MessageActionResult:
        """Replace a message's text; `message_sending` hooks see (and may rewrite or cancel)
        the new text as they would a new post."""
        final = await self.before_send(to, text, origin)
        if final is None:
            return MessageActionResult("failed", to.target, "cancelled by a message_sending hook")
        caps = to.adapter.capabilities
        if caps.max_message_length is not None and measure(final, caps.length_unit) > caps.max_message_length:
            detail = f"the new text is longer than one {to.adapter.platform} message ({caps.max_message_length})"
            return MessageActionResult("failed", to.target, detail)
        return await to.adapter.edit(to.chat_id, message_id, final, thread_id=to.thread_id)

    async def delete(self, to: Destination, message_id: str) -> MessageActionResult:
        return await to.adapter.delete(to.chat_id, message_id)

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


def _payload(to: Destination, text: str) -> dict[str, object]:
    return {
        "platform": to.adapter.platform,
        "chat_id": to.chat_id,
        "thread_id": to.thread_id,
        "reply_to": to.reply_to,
        "text": text,
    }


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

    @property
    def chat_id(self) -> str:
        return self.origin.channel.channel_id

    @property
    def destination(self) -> Destination:
        return Destination(self.adapter, self.chat_id, self.origin.thread_id, self.origin.message_id)

    def _key(self, purpose: str) -> str:
        return f"out:{self.origin.platform}:{self.chat_id}:{self.origin.message_id}:{purpose}"

    def _final_text(self, text: str, model: str | None, seconds: float | None, tools: Sequence[str] = ()) -> str:
        return with_footer(text, format_footer(model, seconds, tools)) if self.config.footer else text

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
        if is_silent(text, self.config.allow_silence, self.config.silence_token):
            return Delivered(silent=True)
        final = self._final_text(text, model, seconds, tools)
        return await self.delivery.post(self.destination, final, key=self._key(purpose), origin=self.origin)

    def can_stream(self) -> bool:
        return self.config.streaming and self.adapter.capabilities.can_edit

    def streaming_reply(self) -> StreamingReply:
        caps = self.adapter.capabilities
        floor_ms = caps.edit_floor_for(self.origin.channel.channel_type)
        to, key = self.destination, self._key("reply")

        async def send(text: str, index: int) -> MessageActionResult:
            return await self.delivery.send_chunk(to, text, index, key=key)

        async def edit(message_id: str, text: str) -> MessageActionResult:
            return await self.adapter.edit(self.chat_id, message_id, text, thread_id=self.origin.thread_id)

        async def delete(message_id: str) -> MessageActionResult:
            return await self.adapter.delete(self.chat_id, message_id)

        return StreamingReply(
            send=send,
            edit=edit,
            delete=delete,
            interval=max(self.config.stream_edit_interval_ms, floor_ms) / 1000,
            limit=caps.max_message_length,
            unit=caps.length_unit,
        )

    async def stream_text(
        self,
        deltas: AsyncIterator[str],
        *,
        model: str | None = None,
        elapsed: Callable[[], float] | None = None,
        tools: Sequence[str] = (),
    ) -> Delivered:
        """Stream a reply by editing; the streamed message becomes the final reply. `tools`
        is read once the stream ended (a turn learns which tools it used as it goes)."""
        stream = self.stream = self.streaming_reply()
        token = self.config.effective_silence_token
        text = ""
        try:
            async for delta in deltas:
                text += delta
                if self.config.allow_silence and token.startswith(text.strip()):
                    continue  # might still become the silence token: show nothing yet
                await stream.update(text)
        except BaseException:
            if stream.message_ids:  # never leave a half-written message looking final
                await stream.finish(text + " …")
            raise
        if is_silent(text, self.config.allow_silence, token):
            await stream.discard()
            return Delivered(silent=True)
        seconds = elapsed() if elapsed is not None else None
        to = self.destination
        final = await self.delivery.before_send(to, self._final_text(text, model, seconds, tools), self.origin)
        if final is None:
            await stream.discard()
            return Delivered(cancelled=True)
        delivered = Delivered(text=final, message_ids=await stream.finish(final))
        await self.delivery.after_send(to, delivered, self.origin)
        return delivered
