"""Outbound: replies, edits, deletions, reactions and typing through discord.py's REST client.

discord.py's own per-route rate limiting and `retry_after` handling are relied on instead of
adding a second layer that would fight them. Every action reports a `MessageActionResult`;
`_failure` maps discord.py's errors onto the SPEC §9 statuses.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import discord
from botweave.adapter import Adapter
from botweave.adapters.cache import BoundedCache
from botweave.adapters.discord.client import ALLOWED_MENTIONS
from botweave.types import MessageActionResult

log = logging.getLogger(__name__)

#: Discord's message limit, counted in characters (code points).
MAX_MESSAGE_LENGTH = 2000
#: Discord tolerates roughly 5 edits per 5 s per channel; one per second keeps streams smooth.
EDIT_FLOOR_MS = 1000


def chunk_nonce(key: str) -> str:
    """The nonce a keyed chunk is sent with: the same for every attempt, within Discord's 25
    characters. With `enforce_nonce` Discord answers a repeat with the original message."""
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


class DiscordOutbound(Adapter):
    """The outbound half of `DiscordAdapter`, apart from `send_as` (see `webhooks.py`)."""

    # A create carrying a nonce it has seen (from the same bot, within minutes) is not created
    # again: discord.py sends `enforce_nonce` with every nonce it is given.
    idempotency = "key"

    # Set up by DiscordAdapter.__init__.
    client: discord.Client
    _message_channels: BoundedCache[str, int]
    _own_deletes: BoundedCache[int, bool]

    def _channel(self, channel_id: int) -> Any:
        """A sendable channel: the cached one, or a partial handle that needs no cache."""
        return self.client.get_channel(channel_id) or self.client.get_partial_messageable(channel_id)

    def _target_id(self, chat_id: str, message_id: str | None = None, thread_id: str | None = None) -> int:
        """Where a message lives: the thread if given, else where we saw/sent it, else the chat."""
        if thread_id:
            return int(thread_id)
        known = self._message_channels.get(message_id) if message_id else None
        return known if known is not None else int(chat_id)

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None = None, reply_to: str | None = None
    ) -> MessageActionResult:
        return await self.send(chat_id, text, thread_id=thread_id, reply_to=reply_to, nonce=chunk_nonce(key))

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        reply_to: str | None = None,
        nonce: str | None = None,
    ) -> MessageActionResult:
        try:
            target = self._target_id(chat_id, thread_id=thread_id)
            reference = None
            if reply_to:
                reference = discord.MessageReference(
                    message_id=int(reply_to), channel_id=target, fail_if_not_exists=False
                )
            sent = await self._channel(target).send(
                text, reference=reference, allowed_mentions=ALLOWED_MENTIONS, nonce=nonce
            )
        except Exception as exc:  # noqa: BLE001 - outbound actions report, never raise
            return _failure(chat_id, "send", exc)
        self._message_channels.put(str(sent.id), target)
        return MessageActionResult("ok", chat_id, message_id=str(sent.id))

    async def edit(
        self, chat_id: str, message_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        try:
            channel = self._channel(self._target_id(chat_id, message_id, thread_id))
            await channel.get_partial_message(int(message_id)).edit(content=text, allowed_mentions=ALLOWED_MENTIONS)
        except Exception as exc:  # noqa: BLE001
            return _failure(chat_id, "edit", exc)
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def delete(self, chat_id: str, message_id: str) -> MessageActionResult:
        try:
            channel = self._channel(self._target_id(chat_id, message_id))
            self._own_deletes.put(int(message_id), True)
            await channel.get_partial_message(int(message_id)).delete()
        except Exception as exc:  # noqa: BLE001
            return _failure(chat_id, "delete", exc)
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def react(self, chat_id: str, message_id: str, emoji: str) -> MessageActionResult:
        try:
            channel = self._channel(self._target_id(chat_id, message_id))
            await channel.get_partial_message(int(message_id)).add_reaction(emoji)
        except Exception as exc:  # noqa: BLE001
            return _failure(chat_id, "react", exc)
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def typing(self, chat_id: str, *, thread_id: str | None = None) -> None:
        try:
            await self._channel(self._target_id(chat_id, thread_id=thread_id)).typing()
        except Exception as exc:  # noqa: BLE001 - a missed typing indicator is harmless
            log.debug("discord: typing in %s failed: %s", chat_id, exc)


def _failure(chat_id: str, action: str, exc: Exception) -> MessageActionResult:
    """Map discord.py's errors onto the SPEC §9 statuses, with a short reason."""
    if isinstance(exc, ValueError):
        return MessageActionResult("no_route", chat_id, f"{action}: not a Discord id ({exc})")
    if isinstance(exc, discord.NotFound):
        status = "no_route" if action == "send" else "failed"
        return MessageActionResult(status, chat_id, f"{action}: not found ({exc.text or exc.status})")
    if isinstance(exc, discord.HTTPException):
        return MessageActionResult("failed", chat_id, f"{action}: HTTP {exc.status} {exc.text}".strip())
    log.warning("discord: %s in %s failed: %s: %s", action, chat_id, type(exc).__name__, exc)
    return MessageActionResult("failed", chat_id, f"{action}: {type(exc).__name__}: {exc}")
