"""Channel webhooks: the one per channel that rooms post through, and knowing which are ours.

Rooms post each agent's turn through one channel webhook per channel, with the agent's name and
avatar per message, so a channel reads like a conversation between agents. The webhook is found
(ours, from an earlier run) or created once and cached; a channel where the bot may not have
one (no Manage Webhooks, or a DM) is remembered as such, and its room posts carry the name in
the text instead (see `outbound.DiscordOutbound.send_as`).
Messages those webhooks post come back over the gateway like any other; they are recognised by
webhook id (or, for a webhook another worker created, by asking Discord once who owns it) and
dropped, so a room never hears its own posts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import aiohttp
import discord
from botweave.adapter import Adapter
from botweave.tasks import TaskOwner
from botweave.types import AgentIdentity
from discord.webhook.async_ import async_context

from ..cache import BoundedCache
from .rebase import RebasedWebhookAdapter

log = logging.getLogger(__name__)

#: The name of the channel webhook rooms post through (users see it in Integrations).
WEBHOOK_NAME = "botweave"
#: Discord's limit on a webhook message's username.
MAX_WEBHOOK_USERNAME = 80


class DiscordWebhooks:
    def __init__(self, adapter: Adapter, client: discord.Client, *, api_base: str | None) -> None:
        self._adapter = adapter
        self._client = client
        self._webhooks: BoundedCache[int, discord.Webhook] = BoundedCache(1024)  # channel -> ours
        self._locks: dict[int, asyncio.Lock] = {}
        self._refused: BoundedCache[int, bool] = BoundedCache(4096)  # channels where we may not have one
        self._owner: BoundedCache[int, bool] = BoundedCache(4096)  # webhook id -> ours?
        self._lookups: dict[int, asyncio.Task[bool]] = {}
        self._tasks = TaskOwner("discord: webhooks")
        # Webhook calls do not use the client's HTTPClient, so they are rebased on their own.
        self._rest = RebasedWebhookAdapter(api_base.rstrip("/")) if api_base else None

    async def close(self) -> None:
        """Stop webhook look-ups still running (the client they ask is closing)."""
        await self._tasks.close()

    # --- which messages are ours -------------------------------------------------------------

    def posted_by_us(self, message: discord.Message) -> bool:
        """Sent through a webhook known to be ours, or one of our application's own
        (interaction replies)."""
        if message.webhook_id is None:
            return False
        if self._owner.get(message.webhook_id):
            return True
        app = self._client.application_id
        if app is not None:
            return message.webhook_id == app or message.application_id == app
        return False

    async def looked_up_as_ours(self, message: discord.Message) -> bool:
        """Whether a webhook message comes from a webhook of ours that this process did not set up.

        A room's posts may come from a webhook another worker (or an earlier run) created; its
        echo must be dropped too. `GET /webhooks/{id}` answers for webhooks our application
        owns even without Manage Webhooks; a 403/404 means someone else's. The verdict is cached
        per webhook, so each foreign webhook costs one call.
        """
        webhook_id = message.webhook_id
        app = self._client.application_id
        if webhook_id is None or app is None or webhook_id == app:
            return False
        known = self._owner.get(webhook_id)
        if known is not None:
            return bool(known)
        # discord.py handles each message in its own task: a burst from one webhook shares a lookup
        lookup = self._lookups.get(webhook_id)
        if lookup is None:
            lookup = self._tasks.spawn(self._look_up(webhook_id), name=f"look up webhook {webhook_id}")
            self._lookups[webhook_id] = lookup
            lookup.add_done_callback(lambda _: self._lookups.pop(webhook_id, None))
        return await asyncio.shield(lookup)

    async def _look_up(self, webhook_id: int) -> bool:
        """One `GET /webhooks/{id}`; a transient failure is not cached, so a later message asks again."""
        try:
            data = await self._client.http.get_webhook(webhook_id)
        except (discord.Forbidden, discord.NotFound):
            self._owner.put(webhook_id, False)
            return False
        except (discord.HTTPException, aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError) as exc:
            # Discord's other refusals (5xx after discord.py's retries), the network, or a JSON
            # body discord.py could not decode: not cached, asked again by a later message.
            log.info("discord: could not look up webhook %s (%s); treating it as foreign", webhook_id, exc)
            return False
        ours = self._owns(data)
        self._owner.put(webhook_id, ours)
        return ours

    def _owns(self, data: Any) -> bool:
        """A webhook payload created by our application (or by our bot user)."""
        if not isinstance(data, dict):
            return False
        app = data.get("application_id")
        own_app = self._client.application_id
        if app is not None and own_app is not None and str(app) == str(own_app):
            return True
        user = data.get("user")
        return isinstance(user, dict) and self._adapter.is_self(user.get("id"))

    # --- posting through them ----------------------------------------------------------------

    def refused(self, channel_id: int) -> bool:
        return channel_id in self._refused

    def refuse(self, channel_id: int) -> None:
        """This channel cannot have our webhook (for good: a permission or channel kind)."""
        self._webhooks.discard(channel_id)
        self._refused.put(channel_id, True)

    def forget(self, channel_id: int) -> None:
        """The cached webhook is gone; the next post finds or creates another."""
        self._webhooks.discard(channel_id)

    async def for_channel(self, channel_id: int) -> discord.Webhook:
        """The channel's webhook for room posts: cached, else ours from before, else a new one.

        Raw routes rather than `TextChannel.webhooks()`, so a send-only worker without a
        channel cache can post too. One lock per channel keeps concurrent posts from creating
        two webhooks.
        """
        cached = self._webhooks.get(channel_id)
        if cached is not None:
            return cached
        async with self._locks.setdefault(channel_id, asyncio.Lock()):
            cached = self._webhooks.get(channel_id)
            if cached is not None:
                return cached
            http = self._client.http
            existing = [
                h for h in await http.channel_webhooks(channel_id)
                if h.get("type") == 1 and h.get("token") and self._owns(h)
            ]
            existing.sort(key=lambda h: h.get("name") != WEBHOOK_NAME)  # ours by name first
            data = existing[0] if existing else await http.create_webhook(channel_id, name=WEBHOOK_NAME)
            webhook = discord.Webhook.from_state(data, self._client._connection)
            self._webhooks.put(channel_id, webhook)
            self._owner.put(webhook.id, True)
            return webhook

    @contextlib.contextmanager
    def rebased(self) -> Iterator[None]:
        """Run discord.py's webhook-adapter calls (webhook posts, interaction answers) against
        our REST base for the duration of the block (the context variable is per task)."""
        token = async_context.set(self._rest) if self._rest is not None else None
        try:
            yield
        finally:
            if token is not None:
                async_context.reset(token)

    async def execute(
        self,
        webhook: discord.Webhook,
        identity: AgentIdentity,
        text: str,
        thread: discord.Object | None,
        allowed_mentions: discord.AllowedMentions,
    ) -> discord.WebhookMessage:
        """Execute the webhook with `wait=true` (we need the message id), through our REST base."""
        with self.rebased():
            return await webhook.send(
                text,
                username=identity.name[:MAX_WEBHOOK_USERNAME] or discord.utils.MISSING,
                avatar_url=identity.avatar_url or discord.utils.MISSING,
                thread=thread if thread is not None else discord.utils.MISSING,
                allowed_mentions=allowed_mentions,
                wait=True,
            )
