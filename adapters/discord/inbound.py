"""Inbound: discord.py's gateway messages and raw events as `BotMessage`s and `PlatformEvent`s.

Guild channels, threads, forum posts and DMs become `BotMessage`s; reactions, edits, deletions,
member joins/leaves and new threads become `PlatformEvent`s. Our own messages (the bot user's,
and those of our application's webhooks, see `webhooks.py`) are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Any

import discord
from botweave.adapter import Adapter
from botweave.adapters.cache import BoundedCache
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
    QuotedRef,
)

log = logging.getLogger(__name__)

# A mention and the blanks after it: removing our own mention takes its blanks along, so
# "<@bot> hi" reads "hi" while the rest of the text (code indentation too) stays untouched.
_MENTION = re.compile(r"(?:<@!?(?P<user>\d+)>|<@&(?P<role>\d+)>|<#(?P<channel>\d+)>)(?P<trail>[ \t]*)")
# Message types that carry a person's (or bot's) words; joins, pins, boosts etc. are skipped.
_CHAT_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
_ALL_KINDS = EVENT_KINDS  # Discord reports every kind (member events need the Members intent)
_MEMBER_KINDS = frozenset({"member_joined", "member_left"})


class DiscordInbound(Adapter):
    """The inbound half of `DiscordAdapter`: its gateway client calls these `_on_*` handlers."""

    # Set up by DiscordAdapter.__init__.
    client: discord.Client
    application_id: int | None
    _quotes: BoundedCache[int, QuotedRef | None]
    _message_channels: BoundedCache[str, int]
    _own_deletes: BoundedCache[int, bool]
    _webhook_owner: BoundedCache[int, bool]

    if TYPE_CHECKING:  # provided by DiscordWebhooks

        async def _is_own_webhook_message(self, message: discord.Message) -> bool: ...

    def _is_self(self, user_id: int | None) -> bool:
        return self.self_user is not None and user_id is not None and str(user_id) == self.self_user.user_id

    def _is_own(self, message: discord.Message) -> bool:
        """Ours: sent by the bot user, or by a webhook of our application (interaction replies,
        room posts through the channel webhooks this adapter uses)."""
        if self._is_self(message.author.id):
            return True
        if message.webhook_id is None:
            return False
        if self._webhook_owner.get(message.webhook_id):
            return True
        if self.application_id is not None:
            return message.webhook_id == self.application_id or message.application_id == self.application_id
        return False

    async def _on_message(self, message: discord.Message) -> None:
        try:
            item = await self.normalize(message)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # discord.py tolerates some missing fields (no `author`) that we cannot do without
            log.warning("discord: skipped malformed message %s (%s: %s)", message.id, type(exc).__name__, exc)
            return
        except Exception:
            log.exception("discord: could not read message %s", message.id)
            return
        if item is not None:
            await self.dispatch(item)

    async def normalize(self, message: discord.Message) -> BotMessage | None:
        """Turn a gateway message into a BotMessage; None for ours, system and empty messages."""
        if self._is_own(message) or message.type not in _CHAT_TYPES:
            return None
        if message.webhook_id is not None and await self._is_own_webhook_message(message):
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
            platform=self.platform,
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
        if guild is None or self.self_user is None:
            return set()
        own = int(self.self_user.user_id)
        return {role.id for role in guild.roles if role.tags is not None and role.tags.bot_id == own}

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
                if self._is_self(user_id):
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
        if self.self_user is not None and any(self._is_self(u) for u in message.raw_mentions):
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
        channel = self.client.get_channel(channel_id) or self.client.get_partial_messageable(channel_id)
        try:
            fetched = await channel.fetch_message(message_id)  # type: ignore[union-attr]
        except (discord.HTTPException, OSError, asyncio.TimeoutError) as exc:
            log.info("discord: replied-to message %s not available (%s)", message_id, exc)
            return None
        return self._quote(fetched)

    def _quote(self, target: discord.Message) -> QuotedRef:
        text, _ = self._clean_text(target)
        return QuotedRef(str(target.id), text, "bot" if self._is_own(target) else "user")

    # --- inbound platform events -------------------------------------------------------------

    def _event_place(self, channel_id: int) -> tuple[str, str | None]:
        """Events name the thread as their channel; report it like messages (parent + thread)."""
        channel = self.client.get_channel(channel_id)
        if isinstance(channel, discord.Thread):
            return str(channel.parent_id), str(channel.id)
        return str(channel_id), None

    async def _emit(self, event: PlatformEvent) -> None:
        if event.kind in self.emits:
            await self.dispatch(event)

    async def _on_reaction(self, kind: str, payload: discord.RawReactionActionEvent) -> None:
        if self._is_self(payload.user_id):
            return
        chat_id, thread_id = self._event_place(payload.channel_id)
        emoji = str(payload.emoji)  # unicode as is; custom as <:name:id> (<a:name:id> animated)
        await self._emit(
            PlatformEvent(
                kind=kind,  # type: ignore[arg-type]
                platform=self.platform,
                chat_id=chat_id,
                user_id=str(payload.user_id),
                message_id=str(payload.message_id),
                emoji=emoji,
                thread_id=thread_id,
                raw=payload,
            )
        )

    async def _on_raw_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
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
        await self._emit(
            PlatformEvent(
                kind="message_edited",
                platform=self.platform,
                chat_id=chat_id,
                user_id=str(message.author.id),
                message_id=str(message.id),
                new_text=text,
                thread_id=thread_id,
                event_id=f"edit:{message.id}:{stamp}",
                raw=payload.data,
            )
        )

    async def _on_raw_delete(self, channel_id: int, message_ids: list[int], cached: list[discord.Message]) -> None:
        chat_id, thread_id = self._event_place(channel_id)
        # Ours (e.g. a silenced stream's placeholder) is not news, whichever process deleted it.
        ours = {m.id for m in cached if self._is_own(m)}
        for message_id in message_ids:
            self._quotes.discard(message_id)
            if message_id in self._own_deletes or message_id in ours:
                continue
            await self._emit(
                PlatformEvent(
                    kind="message_deleted",
                    platform=self.platform,
                    chat_id=chat_id,
                    user_id="",  # Discord does not say who deleted a message
                    message_id=str(message_id),
                    thread_id=thread_id,
                    event_id=f"delete:{message_id}",
                )
            )

    async def _on_member(self, kind: str, guild_id: int, user_id: int) -> None:
        if self._is_self(user_id):
            return
        await self._emit(PlatformEvent(kind=kind, platform=self.platform, chat_id=str(guild_id), user_id=str(user_id)))  # type: ignore[arg-type]

    async def _on_thread_create(self, thread: discord.Thread) -> None:
        if self._is_self(thread.owner_id):
            return
        await self._emit(
            PlatformEvent(
                kind="thread_created",
                platform=self.platform,
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
        "mime": attachment.content_type or "",
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
