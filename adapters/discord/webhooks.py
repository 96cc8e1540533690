"""Room identities: posting as each agent through a channel webhook, and knowing our webhooks.

Rooms post each agent's turn through one channel webhook per channel (`send_as`), with the
agent's name and avatar per message, so a channel reads like a conversation between agents.
The webhook is found (ours, from an earlier run) or created once and cached; a bot without
Manage Webhooks gets a 403 there, and that channel falls back to the bold name prefix for good.
Messages those webhooks post come back over the gateway like any other; they are recognised by
webhook id (or, for a webhook another worker created, by asking Discord once who owns it) and
dropped, so a room never hears its own posts.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord
from botweave.adapter import Adapter
from botweave.adapters.cache import BoundedCache
from botweave.adapters.discord.client import ALLOWED_MENTIONS
from botweave.adapters.discord.outbound import MAX_MESSAGE_LENGTH, _failure
from botweave.replies import chunk_text
from botweave.types import AgentIdentity, MessageActionResult
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

log = logging.getLogger(__name__)

#: The name of the channel webhook rooms post through (users see it in Integrations).
WEBHOOK_NAME = "botweave"
#: Discord's limit on a webhook message's username.
MAX_WEBHOOK_USERNAME = 80


class DiscordWebhooks(Adapter):
    """`send_as` through channel webhooks, and the cache of which webhooks are ours."""

    # Set up by DiscordAdapter.__init__.
    client: discord.Client
    application_id: int | None
    _message_channels: BoundedCache[str, int]
    _webhooks: BoundedCache[int, discord.Webhook]
    _webhook_locks: dict[int, asyncio.Lock]
    _no_webhooks: BoundedCache[int, bool]
    _webhook_owner: BoundedCache[int, bool]
    _webhook_lookups: dict[int, asyncio.Future[bool]]
    _webhook_adapter: AsyncWebhookAdapter | None

    async def _is_own_webhook_message(self, message: discord.Message) -> bool:
        """Whether a webhook message comes from a webhook of ours that this process did not set up.

        A room's posts may come from a webhook another worker (or an earlier run) created; its
        echo must be dropped here too. `GET /webhooks/{id}` answers for webhooks our application
        owns even without Manage Webhooks; a 403/404 means someone else's. The verdict is cached
        per webhook, so each foreign webhook costs one call.
        """
        webhook_id = message.webhook_id
        if webhook_id is None or self.application_id is None or webhook_id == self.application_id:
            return False
        known = self._webhook_owner.get(webhook_id)
        if known is not None:
            return known
        # discord.py handles each message in its own task: a burst from one webhook shares a lookup
        lookup = self._webhook_lookups.get(webhook_id)
        if lookup is None:
            lookup = asyncio.ensure_future(self._look_up_webhook(webhook_id))
            self._webhook_lookups[webhook_id] = lookup
            lookup.add_done_callback(lambda _: self._webhook_lookups.pop(webhook_id, None))
        return await asyncio.shield(lookup)

    async def _look_up_webhook(self, webhook_id: int) -> bool:
        """One `GET /webhooks/{id}`; a transient failure is not cached, so a later message asks again."""
        try:
            data = await self.client.http.get_webhook(webhook_id)
        except (discord.Forbidden, discord.NotFound):
            self._webhook_owner.put(webhook_id, False)
            return False
        except (discord.HTTPException, OSError, asyncio.TimeoutError) as exc:
            log.info("discord: could not look up webhook %s (%s); treating it as foreign", webhook_id, exc)
            return False
        ours = self._owns_webhook(data)
        self._webhook_owner.put(webhook_id, ours)
        return ours

    def _owns_webhook(self, data: Any) -> bool:
        """A webhook payload created by our application (or by our bot user)."""
        app = data.get("application_id")
        if app is not None and self.application_id is not None and str(app) == str(self.application_id):
            return True
        creator = data.get("user") or {}
        return self.self_user is not None and str(creator.get("id")) == self.self_user.user_id

    async def send_as(
        self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        """Post as the agent itself: the channel's webhook with the agent's name and avatar.

        Without Manage Webhooks (403), or where a channel cannot have webhooks (a DM), the
        channel falls back to the bold name prefix from then on. A webhook deleted behind our
        back (404 on execute: nothing was posted) is replaced once.
        """
        try:
            channel_id = int(chat_id)
            thread = discord.Object(id=int(thread_id)) if thread_id else None
        except ValueError as exc:
            return _failure(chat_id, "send", exc)
        if channel_id in self._no_webhooks:
            return await self._send_named(identity, chat_id, text, thread_id)
        for attempt in range(2):
            try:
                webhook = await self._channel_webhook(channel_id)
            except discord.HTTPException as exc:
                if exc.status not in (400, 403):  # 404: no such channel, reported by send
                    return await self._prefixed(identity, chat_id, text, thread_id, exc)
                # 403 Missing Permissions, or 400 for a channel without webhooks (a DM): for good
                self._no_webhooks.put(channel_id, True)
                log.warning(
                    "discord: no channel webhook in %s (HTTP %s %s); room posts there use a name "
                    "prefix. Give the bot Manage Webhooks to post under each agent's own name.",
                    chat_id, exc.status, exc.text,
                )
                return await self._send_named(identity, chat_id, text, thread_id)
            except Exception as exc:  # noqa: BLE001 - outbound actions report, never raise
                return _failure(chat_id, "send", exc)
            try:
                sent = await self._execute(webhook, identity, text, thread)
            except discord.NotFound as exc:
                self._webhooks.discard(channel_id)
                if attempt == 0 and exc.code == 10015:  # Unknown Webhook (deleted): nothing posted
                    continue
                return await self._prefixed(identity, chat_id, text, thread_id, exc)
            except discord.Forbidden as exc:
                self._webhooks.discard(channel_id)
                self._no_webhooks.put(channel_id, True)
                return await self._prefixed(identity, chat_id, text, thread_id, exc)
            except discord.HTTPException as exc:
                if exc.status == 400:  # refused before posting (e.g. a username Discord rejects)
                    return await self._prefixed(identity, chat_id, text, thread_id, exc)
                return _failure(chat_id, "send", exc)
            except Exception as exc:  # noqa: BLE001
                return _failure(chat_id, "send", exc)
            self._message_channels.put(str(sent.id), sent.channel.id)
            return MessageActionResult("ok", chat_id, message_id=str(sent.id))
        return MessageActionResult("failed", chat_id, "send: the channel webhook kept disappearing")

    async def _prefixed(
        self, identity: AgentIdentity, chat_id: str, text: str, thread_id: str | None, exc: discord.HTTPException
    ) -> MessageActionResult:
        """This post goes out with the name prefix (the webhook refused it, so nothing was posted)."""
        log.info("discord: webhook post in %s refused (HTTP %s %s); using a name prefix", chat_id, exc.status, exc.text)
        return await self._send_named(identity, chat_id, text, thread_id)

    async def _send_named(
        self, identity: AgentIdentity, chat_id: str, text: str, thread_id: str | None
    ) -> MessageActionResult:
        """The bold-name fallback (`Adapter.send_as`), kept within Discord's 2000 characters.

        The runtime cuts a turn at the full limit before it reaches us, and the name in front
        would push a full piece over it (Discord refuses such a message outright). So the first
        piece leaves room for the name and the rest is posted as continuation messages.
        """
        room_left = MAX_MESSAGE_LENGTH - len(f"**{identity.name}:** ")
        if len(text) <= room_left or room_left < 1:
            return await super().send_as(identity, chat_id, text, thread_id=thread_id)
        first, *rest = chunk_text(text, room_left, "chars")
        result = await super().send_as(identity, chat_id, first, thread_id=thread_id)
        for piece in rest:
            if not result.ok:
                break
            result = await self.send(chat_id, piece, thread_id=thread_id)
        return result

    async def _channel_webhook(self, channel_id: int) -> discord.Webhook:
        """The channel's webhook for room posts: cached, else ours from before, else a new one.

        Raw routes rather than `TextChannel.webhooks()`, so a send-only worker without a
        channel cache can post too. One lock per channel keeps concurrent posts from creating
        two webhooks.
        """
        cached = self._webhooks.get(channel_id)
        if cached is not None:
            return cached
        lock = self._webhook_locks.setdefault(channel_id, asyncio.Lock())
        async with lock:
            cached = self._webhooks.get(channel_id)
            if cached is not None:
                return cached
            http = self.client.http
            existing = [
                h for h in await http.channel_webhooks(channel_id)
                if h.get("type") == 1 and h.get("token") and self._owns_webhook(h)
            ]
            existing.sort(key=lambda h: h.get("name") != WEBHOOK_NAME)  # ours by name first
            data = existing[0] if existing else await http.create_webhook(channel_id, name=WEBHOOK_NAME)
            webhook = discord.Webhook.from_state(data, self.client._connection)  # type: ignore[arg-type]
            self._webhooks.put(channel_id, webhook)
            self._webhook_owner.put(webhook.id, True)
            return webhook

    async def _execute(
        self, webhook: discord.Webhook, identity: AgentIdentity, text: str, thread: discord.Object | None
    ) -> discord.WebhookMessage:
        """Execute the webhook with `wait=true` (we need the message id), through our REST base."""
        token = async_context.set(self._webhook_adapter) if self._webhook_adapter is not None else None
        try:
            return await webhook.send(
                text,
                username=identity.name[:MAX_WEBHOOK_USERNAME] or discord.utils.MISSING,
                avatar_url=identity.avatar_url or discord.utils.MISSING,
                thread=thread if thread is not None else discord.utils.MISSING,
                allowed_mentions=ALLOWED_MENTIONS,
                wait=True,
            )
        finally:
            if token is not None:
                async_context.reset(token)
