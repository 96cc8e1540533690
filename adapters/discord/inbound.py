"""Inbound: discord.py's gateway messages and raw events as `BotMessage`s and `PlatformEvent`s.

Guild channels, threads, forum posts and DMs become `BotMessage`s; reactions, edits, deletions,
member joins/leaves, new threads and button presses (interactions) become `PlatformEvent`s. Our own messages (the bot user's,
and those of our application's webhooks, see `webhooks.py`) are dropped. `DiscordInbound`'s
`on_*` methods are the client's event handlers, registered with `Client.event`; a malformed
gateway payload costs that one event, never the connection: the client parses each dispatch
behind its schema (client.py), and `on_error` is the one place a handler's failure is caught.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from typing import Any

import discord
from botweave.adapter import Adapter
from botweave.mime import clean_mime
from botweave.tasks import failure_line
from botweave.types import (
    EVENT_KINDS,
    META_MENTIONS_BOT,
    META_REPLY_TO_BOT,
    META_SCOPE,
    BotChannel,
    BotMessage,
    BotUser,
    MessageType,
    PlatformEvent,
    PressAnswer,
    QuotedRef,
)

from ..cache import BoundedCache
from .webhooks import DiscordWebhooks

log = logging.getLogger(__name__)

# A mention and the blanks after it: removing our own mention takes its blanks along, so
# "<@bot> hi" reads "hi" while the rest of the text (code indentation too) stays untouched.
_MENTION = re.compile(r"(?:<@!?(?P<user>\d+)>|<@&(?P<role>\d+)>|<#(?P<channel>\d+)>)(?P<trail>[ \t]*)")
# Message types that carry a person's (or bot's) words; joins, pins, boosts etc. are skipped.
_CHAT_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
ALL_KINDS = EVENT_KINDS  # Discord reports every kind (member events need the Members intent)
MEMBER_KINDS = frozenset({"member_joined", "member_left"})
_HANDLERS = (
    "on_error",
    "on_message",
    "on_raw_message_edit",
    "on_raw_message_delete",
    "on_raw_bulk_message_delete",
    "on_raw_reaction_add",
    "on_raw_reaction_remove",
    "on_member_join",
    "on_raw_member_remove",
    "on_thread_create",
    "on_interaction",
)


def build_intents(member_events: bool) -> discord.Intents:
    """The gateway intents the adapter needs; `members` is privileged, so only on request."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    intents.guild_reactions = True
    intents.dm_reactions = True
    intents.members = member_events
    return intents


class DiscordInbound:
    def __init__(
        self,
        adapter: Adapter,
        client: discord.Client,
        webhooks: DiscordWebhooks,
        *,
        message_channels: BoundedCache[str, int],
        own_deletes: BoundedCache[int, bool],
    ) -> None:
        self._adapter = adapter
        self._client = client
        self._webhooks = webhooks
        self._message_channels = message_channels  # message id -> the channel/thread it lives in
        self._own_deletes = own_deletes  # deletions we made ourselves
        self._quotes: BoundedCache[int, QuotedRef | None] = BoundedCache(512)  # referenced message -> quote
        for name in _HANDLERS:
            client.event(getattr(self, name))

    def _is_own(self, message: discord.Message) -> bool:
        """Ours: sent by the bot user, or by a webhook of our application (interaction replies,
        room posts through the channel webhooks this adapter uses)."""
        return self._adapter.is_self(message.author.id) or self._webhooks.posted_by_us(message)

    # --- discord.py's events (registered by name, as `Client.event` does) ----------------------

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        """The boundary of every handler below: discord.py runs each event's handler in a task
        of its own and calls this with any exception it raised, so an odd payload costs that
        event only. Say so in one line."""
        error = sys.exc_info()[1]
        if error is None:
            log.warning("discord: %s skipped an unexpected payload", event_method)
            return
        log.warning("discord: %s skipped an unexpected payload (%s)", event_method, failure_line(error))

    async def on_message(self, message: discord.Message) -> None:
        item = await self.normalize(message)
        if item is not None:
            await self._adapter.dispatch(item)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        cached = [payload.cached_message] if payload.cached_message else []
        await self._deleted(payload.channel_id, [payload.message_id], cached)

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        await self._deleted(payload.channel_id, sorted(payload.message_ids), payload.cached_messages)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        await self._reaction("reaction_added", payload)

    async def on_raw_reaction_remove(self, payload: discord.RawReactionActionEvent) -> None:
        await self._reaction("reaction_removed", payload)

    async def on_member_join(self, member: discord.Member) -> None:
        await self._member("member_joined", member.guild.id, member.id)

    async def on_raw_member_remove(self, payload: discord.RawMemberRemoveEvent) -> None:
        await self._member("member_left", payload.guild_id, payload.user.id)

    # --- messages ----------------------------------------------------------------------------

    async def normalize(self, message: discord.Message) -> BotMessage | None:
        """Turn a gateway message into a BotMessage; None for ours, system and empty messages."""
        if self._is_own(message) or message.type not in _CHAT_TYPES:
            return None
        if message.webhook_id is not None and await self._webhooks.looked_up_as_ours(message):
            return None
        chat_id, thread_id, channel = self._place(message.channel)
        self._message_channels.put(str(message.id), message.channel.id)
        text, mentions_bot = self._clean_text(message)
        attachments = [_attachment(a) for a in message.attachments]
        if not text and not attachments and not message.stickers:
            return None
        quoted, reply_to, reply_to_bot = await self._reference(message)
        bot_authored = message.author.bot or message.webhook_id is not None
        sender = BotUser(str(message.author.id), message.author.name, message.author.display_name, bot_authored)
        metadata: dict[str, Any] = {META_MENTIONS_BOT: mentions_bot, META_REPLY_TO_BOT: reply_to_bot}
        if message.guild is not None:
            metadata[META_SCOPE] = str(message.guild.id)
        if message.webhook_id is not None:
            metadata["webhook_id"] = str(message.webhook_id)
        if thread_id is not None:
            metadata["thread_name"] = getattr(message.channel, "name", "")
            if isinstance(getattr(message.channel, "parent", None), discord.ForumChannel):
                metadata["forum_post"] = True
        result = BotMessage(
            message_id=str(message.id),
            content=text,
            sender=sender,
            channel=channel,
            message_type=_message_type(text, attachments, bool(message.stickers)),
            timestamp=message.created_at,
            reply_to=reply_to,
            thread_id=thread_id,
            attachments=attachments,
            quoted=quoted,
            metadata=metadata,
            allow_control=not bot_authored,
            platform=self._adapter.platform,
        )
        if result.is_command and result.message_type is MessageType.TEXT:
            result.message_type = MessageType.COMMAND
        return result

    def _place(self, channel: Any) -> tuple[str, str | None, BotChannel]:
        """(chat id, thread id, BotChannel): a thread's chat is its parent channel."""
        if isinstance(channel, discord.Thread):
            parent = channel.parent
            title = parent.name if parent is not None else channel.name
            chat_id = str(channel.parent_id)
            return chat_id, str(channel.id), BotChannel(chat_id, "thread", title)
        if isinstance(channel, discord.DMChannel):
            recipient = channel.recipient
            return str(channel.id), None, BotChannel(str(channel.id), "dm", recipient.name if recipient else "")
        if isinstance(channel, discord.GroupChannel):
            return str(channel.id), None, BotChannel(str(channel.id), "group", channel.name or "")
        return str(channel.id), None, BotChannel(str(channel.id), "channel", getattr(channel, "name", "") or "")

    def _own_role_ids(self, guild: discord.Guild | None) -> set[int]:
        """The bot's managed role(s) in this guild: mentioning one addresses the bot."""
        if guild is None:
            return set()
        return {role.id for role in guild.roles if role.tags is not None and self._adapter.is_self(role.tags.bot_id)}

    def _clean_text(self, message: discord.Message) -> tuple[str, bool]:
        """Drop our own mention, spell other mentions as @name / #channel; report if we were addressed."""
        users = {u.id: u for u in message.mentions}
        own_roles = self._own_role_ids(message.guild)
        guild = message.guild
        mentioned = False

        def name_of(match: re.Match[str]) -> str | None:
            """`@name` / `#name` for a mention, "" for ours, None when it cannot be resolved."""
            nonlocal mentioned
            if match.group("user"):
                user_id = int(match.group("user"))
                if self._adapter.is_self(user_id):
                    mentioned = True
                    return ""
                user = users.get(user_id)
                return f"@{user.name}" if user is not None else None
            if match.group("role"):
                role_id = int(match.group("role"))
                if role_id in own_roles:
                    mentioned = True
                    return ""
                role = guild.get_role(role_id) if guild is not None else None
                return f"@{role.name}" if role is not None else None
            channel_id = int(match.group("channel"))
            channel = guild.get_channel_or_thread(channel_id) if guild is not None else None
            return f"#{channel.name}" if channel is not None else None

        def replace(match: re.Match[str]) -> str:
            name = name_of(match)
            if name is None:
                return match.group(0)
            return name + match.group("trail") if name else ""

        text = _MENTION.sub(replace, message.content).strip()
        if any(self._adapter.is_self(u) for u in message.raw_mentions):
            mentioned = True
        if own_roles & set(message.raw_role_mentions):
            mentioned = True
        return text, mentioned

    async def _reference(self, message: discord.Message) -> tuple[QuotedRef | None, str | None, bool]:
        """The replied-to message: from the gateway when included, else fetched once and cached."""
        ref = message.reference
        if ref is None or ref.message_id is None or ref.type is not discord.MessageReferenceType.default:
            return None, None, False
        reply_to = str(ref.message_id)
        target = ref.resolved if ref.resolved is not None else ref.cached_message
        if isinstance(target, discord.DeletedReferencedMessage):
            quoted = None
        elif isinstance(target, discord.Message):
            quoted = self._quote(target)
        elif ref.message_id in self._quotes:
            quoted = self._quotes.get(ref.message_id)
        else:
            quoted = await self._fetch_quote(ref.channel_id, ref.message_id)
        self._quotes.put(ref.message_id, quoted)
        return quoted, reply_to, quoted is not None and quoted.author == "bot"

    async def _fetch_quote(self, channel_id: int, message_id: int) -> QuotedRef | None:
        channel = self._client.get_channel(channel_id) or self._client.get_partial_messageable(channel_id)
        try:
            fetched = await channel.fetch_message(message_id)  # type: ignore[union-attr]
        except (discord.HTTPException, OSError, asyncio.TimeoutError, ValueError) as exc:
            # ValueError: a body orjson refuses (REST answers are decoded as discord.py ships)
            log.info("discord: replied-to message %s not available (%s)", message_id, exc)
            return None
        return self._quote(fetched)

    def _quote(self, target: discord.Message) -> QuotedRef:
        text, _ = self._clean_text(target)
        files = tuple(_attachment(a) for a in target.attachments)
        return QuotedRef(str(target.id), text, "bot" if self._is_own(target) else "user", files)

    # --- inbound platform events -------------------------------------------------------------

    def _event_place(self, channel_id: int) -> tuple[str, str | None]:
        """Events name the thread as their channel; report it like messages (parent + thread)."""
        channel = self._client.get_channel(channel_id)
        if isinstance(channel, discord.Thread):
            return str(channel.parent_id), str(channel.id)
        return str(channel_id), None

    async def _reaction(self, kind: str, payload: discord.RawReactionActionEvent) -> None:
        if self._adapter.is_self(payload.user_id):
            return
        chat_id, thread_id = self._event_place(payload.channel_id)
        emoji = str(payload.emoji)  # unicode as is; custom as <:name:id> (<a:name:id> animated)
        await self._adapter.dispatch(
            PlatformEvent(
                kind=kind,  # type: ignore[arg-type]
                platform=self._adapter.platform,
                chat_id=chat_id,
                user_id=str(payload.user_id),
                message_id=str(payload.message_id),
                emoji=emoji,
                thread_id=thread_id,
                raw=payload,
            )
        )

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """A button on one of our messages was pressed: a `button_pressed` event, answered
        within Discord's three seconds (an ephemeral reply when there is something to tell the
        presser, else a deferred update that changes nothing on screen)."""
        data: dict[str, Any] = dict(interaction.data or {})
        if interaction.type is not discord.InteractionType.component or data.get("component_type") != 2:
            return
        message = interaction.message
        channel_id = interaction.channel_id
        if message is None or channel_id is None:
            return
        chat_id, thread_id = self._event_place(channel_id)
        event = PlatformEvent(
            kind="button_pressed",
            platform=self._adapter.platform,
            chat_id=chat_id,
            user_id=str(interaction.user.id),
            message_id=str(message.id),
            thread_id=thread_id,
            event_id=f"interaction:{interaction.id}",
            action_id=str(data.get("custom_id") or ""),
            raw=interaction,
        )

        async def acknowledge(answer: PressAnswer) -> None:
            with self._webhooks.rebased():  # interaction answers go through the webhook adapter
                if answer.text:
                    await interaction.response.send_message(answer.text, ephemeral=True)
                else:
                    await interaction.response.defer()

        await self._adapter.pressed(event, acknowledge)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """Only real content edits count; embed unfurls re-send the message without editing it."""
        message = payload.message
        self._quotes.discard(message.id)  # a later reply must quote the new text
        if self._is_own(message):
            return
        cached = payload.cached_message
        if cached is not None:
            if cached.content == message.content:
                return
        elif message.edited_at is None:
            return
        text, _ = self._clean_text(message)
        chat_id, thread_id = self._event_place(payload.channel_id)
        stamp = message.edited_at.isoformat() if message.edited_at else ""
        await self._adapter.dispatch(
            PlatformEvent(
                kind="message_edited",
                platform=self._adapter.platform,
                chat_id=chat_id,
                user_id=str(message.author.id),
                message_id=str(message.id),
                new_text=text,
                thread_id=thread_id,
                event_id=f"edit:{message.id}:{stamp}",
                raw=payload.data,
            )
        )

    async def _deleted(self, channel_id: int, message_ids: list[int], cached: list[discord.Message]) -> None:
        chat_id, thread_id = self._event_place(channel_id)
        # Ours (e.g. a silenced stream's placeholder) is not news, whichever process deleted it.
        ours = {m.id for m in cached if self._is_own(m)}
        for message_id in message_ids:
            self._quotes.discard(message_id)
            if message_id in self._own_deletes or message_id in ours:
                continue
            await self._adapter.dispatch(
                PlatformEvent(
                    kind="message_deleted",
                    platform=self._adapter.platform,
                    chat_id=chat_id,
                    user_id="",  # Discord does not say who deleted a message
                    message_id=str(message_id),
                    thread_id=thread_id,
                    event_id=f"delete:{message_id}",
                )
            )

    async def _member(self, kind: str, guild_id: int, user_id: int) -> None:
        if self._adapter.is_self(user_id):
            return
        event = PlatformEvent(kind=kind, platform=self._adapter.platform, chat_id=str(guild_id), user_id=str(user_id))  # type: ignore[arg-type]
        await self._adapter.dispatch(event)

    async def on_thread_create(self, thread: discord.Thread) -> None:
        if self._adapter.is_self(thread.owner_id):
            return
        await self._adapter.dispatch(
            PlatformEvent(
                kind="thread_created",
                platform=self._adapter.platform,
                chat_id=str(thread.parent_id),
                user_id=str(thread.owner_id or ""),
                thread_id=str(thread.id),
                new_text=thread.name,
                event_id=f"thread:{thread.id}",
            )
        )


def _attachment(attachment: discord.Attachment) -> dict[str, Any]:
    return {
        "url": attachment.url,
        "mime": clean_mime(attachment.content_type) or "",
        "size": attachment.size,
        "filename": attachment.filename,
        "file_id": str(attachment.id),
    }


def _message_type(text: str, attachments: list[dict[str, Any]], sticker: bool) -> MessageType:
    """TEXT when there are words; otherwise the kind of the first attachment (or a sticker)."""
    if text:
        return MessageType.TEXT
    if attachments:
        mime = attachments[0]["mime"]
        for prefix, kind in (("image/", MessageType.IMAGE), ("audio/", MessageType.AUDIO), ("video/", MessageType.VIDEO)):
            if mime.startswith(prefix):
                return kind
        return MessageType.FILE
    return MessageType.STICKER if sticker else MessageType.TEXT
