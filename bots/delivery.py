"""Getting a reply onto the platform: hooks, silence, footer, chunking, streaming (SPEC §8, §9).

This is the one place replies leave the runtime, so every platform gets the same shaping and
every sent chunk's id is kept.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from botweave.config import BotConfig
from botweave.hooks import HookEvent, HookRegistry
from botweave.replies import chunk_text, format_footer, is_silent, with_footer
from botweave.store import Store
from botweave.streaming import StreamingReply
from botweave.types import BotMessage, MessageActionResult

if TYPE_CHECKING:  # adapters import bots types; import them back only for typing
    from botweave.adapter import Adapter

log = logging.getLogger(__name__)


@dataclass
class Delivery:
    """What happened to one reply: the text as sent and the ids of every message it used."""

    text: str = ""
    message_ids: list[str] = field(default_factory=list)
    silent: bool = False
    cancelled: bool = False
    failures: list[MessageActionResult] = field(default_factory=list)


@dataclass
class Outbox:
    """Remembers every chunk sent for an inbound message, so a turn that runs again after a
    crash never posts a chunk twice. A chunk is claimed *before* it is sent: one whose send
    may have reached the platform is never sent again (SPEC §9)."""

    store: Store
    ttl: float

    async def claim(self, key: str) -> bool:
        return await self.store.set_if_absent(key, "", ttl=self.ttl)

    async def record(self, key: str, message_id: str) -> None:
        await self.store.set(key, message_id, ttl=self.ttl)

    async def sent_id(self, key: str) -> str | None:
        return (await self.store.get(key)) or None


@dataclass
class ReplyChannel:
    """Where a turn's reply goes: the adapter plus the conversation of the message."""

    adapter: Adapter
    origin: BotMessage
    config: BotConfig
    hooks: HookRegistry
    outbox: Outbox | None = None

    @property
    def chat_id(self) -> str:
        return self.origin.channel.channel_id

    async def _send_chunk(self, text: str, index: int, purpose: str = "reply") -> MessageActionResult:
        key = f"out:{self.origin.platform}:{self.chat_id}:{self.origin.message_id}:{purpose}:{index}"
        if self.outbox is not None and not await self.outbox.claim(key):
            sent = await self.outbox.sent_id(key)
            log.info("%s: chunk %s of the reply to %s was already sent; not sending it again", self.origin.platform, index, self.origin.message_id)
            return MessageActionResult("ok", self.chat_id, "already sent", message_id=sent)
        result = await self.adapter.send(
            self.chat_id,
            text,
            thread_id=self.origin.thread_id,
            reply_to=self.origin.message_id if index == 0 else None,
        )
        if self.outbox is not None and result.ok and result.message_id is not None:
            await self.outbox.record(key, result.message_id)
        return result

    async def _edit(self, message_id: str, text: str) -> MessageActionResult:
        return await self.adapter.edit(self.chat_id, message_id, text, thread_id=self.origin.thread_id)

    async def _delete(self, message_id: str) -> MessageActionResult:
        return await self.adapter.delete(self.chat_id, message_id)

    async def _before_send(self, text: str) -> str | None:
        """`message_sending` hooks may rewrite the reply or cancel it (None)."""
        if not self.hooks.has("message_sending"):
            return text
        event = await self.hooks.run(
            HookEvent("message_sending", self._payload(text), message=self.origin, text=text)
        )
        return None if event.denied or event.text is None else event.text

    async def _after_send(self, delivery: Delivery) -> None:
        await self.adapter.end_reply(self.chat_id, delivery.message_ids)
        if self.hooks.has("message_sent"):
            payload = self._payload(delivery.text) | {"message_ids": list(delivery.message_ids)}
            await self.hooks.run(HookEvent("message_sent", payload, message=self.origin, text=delivery.text))

    def _payload(self, text: str) -> dict[str, object]:
        return {
            "platform": self.origin.platform,
            "chat_id": self.chat_id,
            "thread_id": self.origin.thread_id,
            "reply_to": self.origin.message_id,
            "text": text,
        }

    def _final_text(self, text: str, model: str | None, seconds: float | None) -> str:
        return with_footer(text, format_footer(model, seconds)) if self.config.footer else text

    async def send_text(
        self, text: str, *, model: str | None = None, seconds: float | None = None, purpose: str = "reply"
    ) -> Delivery:
        """Deliver a complete reply, chunked to the platform's limit."""
        delivery = Delivery()
        if is_silent(text, self.config.allow_silence, self.config.silence_token):
            delivery.silent = True
            return delivery
        final = await self._before_send(self._final_text(text, model, seconds))
        if final is None:
            delivery.cancelled = True
            return delivery
        delivery.text = final
        caps = self.adapter.capabilities
        for index, chunk in enumerate(chunk_text(final, caps.max_message_length, caps.length_unit)):
            result = await self._send_chunk(chunk, index, purpose)
            if result.ok and result.message_id is not None:
                delivery.message_ids.append(result.message_id)
            else:
                delivery.failures.append(result)
                log.warning("%s: sending a reply chunk failed: %s %s", self.origin.platform, result.status, result.detail)
        await self._after_send(delivery)
        return delivery

    def can_stream(self) -> bool:
        return self.config.streaming and self.adapter.capabilities.can_edit

    def streaming_reply(self) -> StreamingReply:
        caps = self.adapter.capabilities
        floor_ms = caps.edit_floor_for(self.origin.channel.channel_type)
        return StreamingReply(
            send=self._send_chunk,
            edit=self._edit,
            delete=self._delete,
            interval=max(self.config.stream_edit_interval_ms, floor_ms) / 1000,
            limit=caps.max_message_length,
            unit=caps.length_unit,
        )

    async def stream_text(
        self, deltas: AsyncIterator[str], *, model: str | None = None, elapsed: Callable[[], float] | None = None
    ) -> Delivery:
        """Stream a reply by editing; the streamed message becomes the final reply."""
        stream = self.streaming_reply()
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
        delivery = Delivery()
        if is_silent(text, self.config.allow_silence, token):
            await stream.discard()
            delivery.silent = True
            return delivery
        seconds = elapsed() if elapsed is not None else None
        final = await self._before_send(self._final_text(text, model, seconds))
        if final is None:
            await stream.discard()
            delivery.cancelled = True
            return delivery
        delivery.text = final
        delivery.message_ids = await stream.finish(final)
        await self._after_send(delivery)
        return delivery
