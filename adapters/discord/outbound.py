"""Outbound: replies, edits, deletions, reactions, typing, files and room posts through
discord.py's REST client.

discord.py's own per-route rate limiting and `retry_after` handling are relied on instead of
adding a second layer that would fight them. `classify` reads discord.py's errors. Files go
up as message attachments (multipart, the caption as the message's content); files people
sent are read from Discord's CDN, whose attachment URLs need no bot token.
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, Literal

import discord
from botweave.adapter import ActionError, ByteLimit, NoIdentity, Outbound, Outcome
from botweave.files import http_chunks
from botweave.types import AgentIdentity, Button, OutboundFile

from ..cache import BoundedCache
from .webhooks import DiscordWebhooks

log = logging.getLogger(__name__)

#: Discord's message limit, counted in characters (code points).
MAX_MESSAGE_LENGTH = 2000
#: Discord tolerates roughly 5 edits per 5 s per channel; one per second keeps streams smooth.
EDIT_FLOOR_MS = 1000
#: Replies may ping the people they answer, never @everyone/@here or roles.
ALLOWED_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True)
PUBLIC_THREAD: Literal[11] = 11
#: Discord's codes for "not in this kind of channel" (a DM; a thread inside a thread).
_NO_THREADS_HERE = frozenset({50003, 50024})


_STYLES = {"default": discord.ButtonStyle.secondary, "primary": discord.ButtonStyle.primary,
           "danger": discord.ButtonStyle.danger}


def components(buttons: Sequence[Button]) -> discord.ui.View:
    """One action row of buttons, each button's id as its `custom_id`. The view is stopped
    before it is sent: presses are read from the gateway by the adapter (`on_interaction`), so
    discord.py's view store must not keep (or answer) it."""
    view = discord.ui.View(timeout=None)
    for button in buttons:
        view.add_item(discord.ui.Button(label=button.label[:80], custom_id=button.action_id, style=_STYLES[button.style]))
    view.stop()
    return view


def chunk_nonce(key: str) -> str:
    """The nonce a keyed chunk is sent with: the same for every attempt, within Discord's 25
    characters. With `enforce_nonce` Discord answers a repeat with the original message."""
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


class DiscordOutbound(Outbound):
    def __init__(
        self,
        client: discord.Client,
        webhooks: DiscordWebhooks,
        *,
        message_channels: BoundedCache[str, int],
        own_deletes: BoundedCache[int, bool],
    ) -> None:
        self._client = client
        self._webhooks = webhooks
        self._message_channels = message_channels  # message id -> the channel/thread it lives in
        self._own_deletes = own_deletes  # deletions we made, so their echo is not news

    def _channel(self, channel_id: int) -> Any:
        """A sendable channel: the cached one, or a partial handle that needs no cache."""
        return self._client.get_channel(channel_id) or self._client.get_partial_messageable(channel_id)

    def _target_id(self, chat_id: str, message_id: str | None = None, thread_id: str | None = None) -> int:
        """Where a message lives: the thread if given, else where we saw/sent it, else the chat."""
        if thread_id:
            return int(thread_id)
        known = self._message_channels.get(message_id) if message_id else None
        return known if known is not None else int(chat_id)

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None, reply_to: str | None
    ) -> str:
        return await self.send(chat_id, text, thread_id=thread_id, reply_to=reply_to, nonce=chunk_nonce(key))

    async def send(
        self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None, nonce: str | None = None
    ) -> str:
        """Post one message; a nonce makes discord.py send `enforce_nonce`, so a repeat within
        Discord's window returns the first message instead of posting a second."""
        target = self._target_id(chat_id, thread_id=thread_id)
        reference = None
        if reply_to:
            reference = discord.MessageReference(message_id=int(reply_to), channel_id=target, fail_if_not_exists=False)
        sent = await self._channel(target).send(text, reference=reference, allowed_mentions=ALLOWED_MENTIONS, nonce=nonce)
        self._message_channels.put(str(sent.id), target)
        return str(sent.id)

    async def send_buttons(
        self, chat_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None, reply_to: str | None
    ) -> str:
        """A message with one row of buttons (message components)."""
        target = self._target_id(chat_id, thread_id=thread_id)
        reference = None
        if reply_to:
            reference = discord.MessageReference(message_id=int(reply_to), channel_id=target, fail_if_not_exists=False)
        sent = await self._channel(target).send(
            text, reference=reference, allowed_mentions=ALLOWED_MENTIONS, view=components(buttons)
        )
        self._message_channels.put(str(sent.id), target)
        return str(sent.id)

    async def edit_buttons(
        self, chat_id: str, message_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None
    ) -> None:
        channel = self._channel(self._target_id(chat_id, message_id, thread_id))
        await channel.get_partial_message(int(message_id)).edit(
            content=text, allowed_mentions=ALLOWED_MENTIONS, view=components(buttons) if buttons else None
        )

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str:
        target = self._target_id(chat_id, thread_id=thread_id)
        reference = None
        if reply_to:
            reference = discord.MessageReference(message_id=int(reply_to), channel_id=target, fail_if_not_exists=False)
        upload = discord.File(io.BytesIO(file.data), filename=file.filename)
        sent = await self._channel(target).send(
            caption or None, file=upload, reference=reference, allowed_mentions=ALLOWED_MENTIONS
        )
        self._message_channels.put(str(sent.id), target)
        return str(sent.id)

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        url = str(ref.get("url") or "")
        if not url:
            raise ActionError("failed", "the attachment has no URL")
        async for chunk in http_chunks(url, limit):
            yield chunk

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        channel = self._channel(self._target_id(chat_id, message_id, thread_id))
        await channel.get_partial_message(int(message_id)).edit(content=text, allowed_mentions=ALLOWED_MENTIONS)

    async def delete(self, chat_id: str, message_id: str) -> None:
        channel = self._channel(self._target_id(chat_id, message_id))
        self._own_deletes.put(int(message_id), True)
        await channel.get_partial_message(int(message_id)).delete()

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        channel = self._channel(self._target_id(chat_id, message_id))
        await channel.get_partial_message(int(message_id)).add_reaction(emoji)

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        await self._channel(self._target_id(chat_id, thread_id=thread_id)).typing()

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None) -> str:
        """A public thread: on the message that prompted it when there is one (Discord then
        shows the thread under that message), else a thread of its own in the channel. The
        REST routes are used directly, so no cached channel object is needed."""
        http = self._client.http
        try:
            if message_id:
                data = await http.start_thread_with_message(
                    int(chat_id), int(message_id), name=name[:100], auto_archive_duration=1440
                )
            else:
                data = await http.start_thread_without_message(
                    int(chat_id), name=name[:100], auto_archive_duration=1440, type=PUBLIC_THREAD
                )
        except discord.HTTPException as exc:
            if exc.code in _NO_THREADS_HERE:
                raise ActionError("unsupported", f"create_thread: {exc.text or exc.status}") from exc
            raise
        return str(data["id"])

    async def whose_direct_chat(self, chat_id: str) -> str | None:
        """The person of a DM channel: from discord.py's cache, or else asked of Discord."""
        try:
            channel_id = int(chat_id)
        except ValueError:
            return None
        channel = self._client.get_channel(channel_id)
        if channel is None:
            channel = await self._client.fetch_channel(channel_id)
        if isinstance(channel, discord.DMChannel) and channel.recipient is not None:
            return str(channel.recipient.id)
        return None

    async def direct_chat(self, user_id: str) -> str:
        """The DM channel with the user (opened once; discord.py caches it)."""
        channel = await self._client.create_dm(discord.Object(id=int(user_id)))
        return str(channel.id)

    async def send_as(self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None) -> str:
        """Post as the agent itself: the channel's webhook with the agent's name and avatar.

        Without Manage Webhooks (403), or where a channel cannot have webhooks (a DM), the
        channel gets the name in the text from then on. A post the webhook refused was not
        posted, so it goes out with the name in the text too. A webhook deleted behind our back
        (404 on execute: nothing was posted) is replaced once.
        """
        channel_id = int(chat_id)
        thread = discord.Object(id=int(thread_id)) if thread_id else None
        if self._webhooks.refused(channel_id):
            raise NoIdentity
        for attempt in range(2):
            try:
                webhook = await self._webhooks.for_channel(channel_id)
            except discord.HTTPException as exc:
                if exc.status not in (400, 403):  # 404: no such channel, reported by the send
                    raise _refused(chat_id, exc) from exc
                # 403 Missing Permissions, or 400 for a channel without webhooks (a DM): for good
                self._webhooks.refuse(channel_id)
                log.warning(
                    "discord: no channel webhook in %s (HTTP %s %s); room posts there use a name "
                    "prefix. Give the bot Manage Webhooks to post under each agent's own name.",
                    chat_id, exc.status, exc.text,
                )
                raise NoIdentity from exc
            try:
                sent = await self._webhooks.execute(webhook, identity, text, thread, ALLOWED_MENTIONS)
            except discord.NotFound as exc:
                self._webhooks.forget(channel_id)
                if attempt == 0 and exc.code == 10015:  # Unknown Webhook (deleted): nothing posted
                    continue
                raise _refused(chat_id, exc) from exc
            except discord.Forbidden as exc:
                self._webhooks.refuse(channel_id)
                raise _refused(chat_id, exc) from exc
            except discord.HTTPException as exc:
                if exc.status == 400:  # refused before posting (e.g. a username Discord rejects)
                    raise _refused(chat_id, exc) from exc
                raise
            self._message_channels.put(str(sent.id), sent.channel.id)
            return str(sent.id)
        raise ActionError("failed", "send: the channel webhook kept disappearing")

    def retryable(self, exc: Exception) -> bool:
        """discord.py already waited out rate limits; a 4xx is Discord saying no."""
        if isinstance(exc, discord.HTTPException):
            return exc.status >= 500
        return not isinstance(exc, ValueError)

    def classify(self, exc: Exception, action: str) -> Outcome:
        """discord.py's errors as statuses, with a short reason."""
        if isinstance(exc, ValueError):
            return "no_route", f"{action}: not a Discord id ({exc})"
        if isinstance(exc, discord.NotFound):
            return ("no_route" if action == "send" else "failed"), f"{action}: not found ({exc.text or exc.status})"
        if isinstance(exc, discord.HTTPException):
            return "failed", f"{action}: HTTP {exc.status} {exc.text}".strip()
        log.warning("discord: %s failed: %s: %s", action, type(exc).__name__, exc)
        return "failed", f"{action}: {type(exc).__name__}: {exc}"


def _refused(chat_id: str, exc: discord.HTTPException) -> NoIdentity:
    """This post goes out with the name in the text: the webhook refused it, so nothing was posted."""
    log.info("discord: webhook post in %s refused (HTTP %s %s); using a name prefix", chat_id, exc.status, exc.text)
    return NoIdentity()
