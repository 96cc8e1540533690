"""Telegram updates → `BotMessage` / `PlatformEvent`, and their hand-over to the runtime.

What an update means is decided by pure functions of a python-telegram-bot `Update` (and, for
mentions and replies, of who the bot is: `TelegramInbound`), so every rule — what counts as a
mention, which reply is real, which content may issue commands — can be read in one place.

`TelegramInbound` is also PTB's one handler. Each update is normalised and dispatched; it
keeps count of what was handed over, so polling acknowledges an update (by the next offset)
only once the runtime has it, and a webhook update is answered only when its hand-over ended
(with an error when it failed, so Telegram redelivers). A button press (a callback query) is a
`button_pressed` event, answered with answerCallbackQuery carrying what the runtime tells the
presser.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from botweave.adapter import Adapter
from botweave.mime import clean_mime
from botweave.tasks import failure_line
from botweave.types import (
    META_MENTIONS_BOT,
    META_REPLY_TO_BOT,
    META_SCOPE,
    BotChannel,
    BotMessage,
    BotUser,
    ChannelType,
    MessageType,
    PlatformEvent,
    PressAnswer,
    QuotedRef,
)
from telegram import (
    Chat,
    ChatMember,
    ChatMemberUpdated,
    Contact,
    Location,
    Message,
    MessageEntity,
    MessageReactionUpdated,
    ReactionType,
    Update,
    User,
    Venue,
)
from telegram.ext import Application, ContextTypes

log = logging.getLogger(__name__)

PLATFORM = "telegram"
HANDOVER_TIMEOUT_S = 30.0  # longest a poll, or a webhook answer, waits for the runtime to take updates

#: Member statuses that mean "inside the chat" (restricted members may or may not be).
_PRESENT = {ChatMember.OWNER, ChatMember.ADMINISTRATOR, ChatMember.MEMBER}


# --- identities --------------------------------------------------------------------------


def user_of(user: User) -> BotUser:
    return BotUser(
        user_id=str(user.id),
        username=user.username or "",
        display_name=user.full_name or "",
        is_bot=bool(user.is_bot),
    )


def sender_of(message: Message) -> BotUser:
    """The author; channel posts and anonymous admins speak as a chat, not a user."""
    if message.sender_chat is not None:
        chat = message.sender_chat
        return BotUser(user_id=str(chat.id), username=chat.username or "", display_name=chat.title or "")
    if message.from_user is not None:
        return user_of(message.from_user)
    return BotUser(user_id=str(message.chat.id))


def channel_type_of(chat: Chat) -> ChannelType:
    if chat.type == Chat.PRIVATE:
        return "dm"
    if chat.type == Chat.CHANNEL:
        return "channel"
    return "group"  # group and supergroup (forums included; topics go to thread_id)


def channel_of(chat: Chat) -> BotChannel:
    title = chat.title or chat.full_name or chat.username or ""
    return BotChannel(channel_id=str(chat.id), channel_type=channel_type_of(chat), title=title)


def thread_of(message: Message) -> str | None:
    """Only forum-topic messages belong to a thread; plain reply chains also carry an id."""
    if message.is_topic_message and message.message_thread_id is not None:
        return str(message.message_thread_id)
    return None


# --- content -----------------------------------------------------------------------------


#: What a file is when Telegram does not say (or says something that is not a MIME type): a
#: voice note is always OGG/Opus, whatever else is unknown.
_DEFAULT_MIME = {"voice": "audio/ogg"}


def _file(kind: str, media: Any, *, mime: str | None = None, filename: str | None = None) -> dict[str, Any]:
    declared = mime if mime is not None else clean_mime(getattr(media, "mime_type", None))
    attachment: dict[str, Any] = {
        "type": kind,
        "file_id": media.file_id,
        "file_unique_id": media.file_unique_id,
        "mime": declared or _DEFAULT_MIME.get(kind),
        "size": getattr(media, "file_size", None),
        "filename": filename if filename is not None else getattr(media, "file_name", None),
    }
    for extra in ("width", "height", "duration"):
        value = getattr(media, extra, None)
        if value is not None:
            attachment[extra] = value.total_seconds() if hasattr(value, "total_seconds") else value
    return attachment


def _location(loc: Location, venue: Venue | None) -> tuple[dict[str, Any], str]:
    attachment: dict[str, Any] = {"type": "location", "latitude": loc.latitude, "longitude": loc.longitude}
    description = f"Location: {loc.latitude}, {loc.longitude}"
    if venue is not None:
        attachment.update(type="venue", title=venue.title, address=venue.address)
        description = f"Venue: {venue.title}, {venue.address} ({loc.latitude}, {loc.longitude})"
    return attachment, description


def _contact(contact: Contact) -> tuple[dict[str, Any], str]:
    name = " ".join(p for p in (contact.first_name, contact.last_name) if p)
    attachment = {
        "type": "contact",
        "phone_number": contact.phone_number,
        "first_name": contact.first_name,
        "last_name": contact.last_name,
        "user_id": str(contact.user_id) if contact.user_id else None,
        "vcard": contact.vcard,
        "mime": "text/vcard" if contact.vcard else None,
    }
    return attachment, f"Contact: {name} {contact.phone_number}".strip()


def media_of(message: Message) -> tuple[MessageType, list[dict[str, Any]], str]:
    """Message type, attachments, and a description for content that has no text of its own.

    Animation is checked before document: Telegram sends both for GIFs, for old clients.
    """
    if message.photo:
        largest = max(message.photo, key=lambda p: (p.width * p.height, p.file_size or 0))
        return MessageType.IMAGE, [_file("photo", largest, mime="image/jpeg")], ""
    if message.animation:
        return MessageType.VIDEO, [_file("animation", message.animation)], ""
    if message.video:
        return MessageType.VIDEO, [_file("video", message.video)], ""
    if message.video_note:
        return MessageType.VIDEO, [_file("video_note", message.video_note, mime="video/mp4")], ""
    if message.voice:
        return MessageType.AUDIO, [_file("voice", message.voice)], ""
    if message.audio:
        return MessageType.AUDIO, [_file("audio", message.audio)], ""
    if message.sticker:
        sticker = message.sticker
        mime = "video/webm" if sticker.is_video else "application/x-tgsticker" if sticker.is_animated else "image/webp"
        attachment = _file("sticker", sticker, mime=mime)
        attachment["emoji"] = sticker.emoji
        return MessageType.STICKER, [attachment], sticker.emoji or ""
    if message.document:
        return MessageType.FILE, [_file("document", message.document)], ""
    if message.venue is not None:
        attachment, description = _location(message.venue.location, message.venue)
        return MessageType.LOCATION, [attachment], description
    if message.location is not None:
        attachment, description = _location(message.location, None)
        return MessageType.LOCATION, [attachment], description
    if message.contact is not None:
        attachment, description = _contact(message.contact)
        return MessageType.FILE, [attachment], description
    return MessageType.TEXT, [], ""


def _entities(message: Message) -> dict[MessageEntity, str]:
    """Each entity of the text (or caption) with the text it covers.

    Like PTB's `parse_entities`, but an entity whose offsets do not fit the text (past its
    end, or splitting a character in two) covers what it can instead of raising.
    """
    if message.text is not None:
        text, entities = message.text, message.entities
    elif message.caption is not None:
        text, entities = message.caption, message.caption_entities
    else:
        return {}
    units = text.encode("utf-16-le", "surrogatepass")
    found = {}
    for entity in entities:
        start, length = max(0, entity.offset), max(0, entity.length)
        found[entity] = units[2 * start : 2 * (start + length)].decode("utf-16-le", "replace")
    return found


def is_command(message: Message) -> bool:
    return any(
        entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0 for entity in _entities(message)
    )


# --- replies and quotes ------------------------------------------------------------------


def real_reply(message: Message) -> Message | None:
    """The message replied to, ignoring the topic header every forum message points at."""
    replied = message.reply_to_message
    if replied is None:
        return None
    if replied.forum_topic_created is not None and replied.message_id == message.message_thread_id:
        return None
    return replied


def _untrusted(message: Message) -> bool:
    """Content that is not a person's direct instruction may not run commands."""
    author = message.from_user
    return bool(
        message.forward_origin is not None
        or message.is_automatic_forward
        or message.via_bot is not None
        or (author is not None and author.is_bot)
    )


# --- messages ----------------------------------------------------------------------------


def is_service(message: Message) -> bool:
    """Join/leave/topic notices and similar: they become events (or nothing), never turns."""
    return bool(
        message.new_chat_members
        or message.left_chat_member
        or message.forum_topic_created
        or message.pinned_message
        or message.migrate_to_chat_id
        or message.migrate_from_chat_id
        or message.group_chat_created
        or message.supergroup_chat_created
        or message.new_chat_title
        or message.new_chat_photo
        or message.delete_chat_photo
    )


# --- events ------------------------------------------------------------------------------


def _reaction_key(reaction: ReactionType) -> str:
    """Unicode emoji as themselves, custom emoji by id, paid reactions as `paid`."""
    emoji = getattr(reaction, "emoji", None)
    if emoji:
        return str(emoji)
    custom = getattr(reaction, "custom_emoji_id", None)
    if custom:
        return f"custom:{custom}"
    return str(reaction.type)


def _reactor(change: MessageReactionUpdated) -> str:
    """Who reacted: a user, or the chat itself for anonymous admins and channels."""
    if change.user is not None:
        return str(change.user.id)
    if change.actor_chat is not None:
        return str(change.actor_chat.id)
    return ""


def reaction_events(update: Update) -> list[PlatformEvent]:
    """One event per emoji that appeared or disappeared between old and new reaction lists."""
    change: MessageReactionUpdated | None = update.message_reaction
    if change is None:
        return []
    old = [_reaction_key(r) for r in change.old_reaction]
    new = [_reaction_key(r) for r in change.new_reaction]
    changes = [("reaction_removed", e) for e in old if e not in new]
    changes += [("reaction_added", e) for e in new if e not in old]
    return [
        PlatformEvent(
            kind=kind,  # type: ignore[arg-type]
            platform=PLATFORM,
            chat_id=str(change.chat.id),
            user_id=_reactor(change),
            message_id=str(change.message_id),
            emoji=emoji,
            event_id=f"u{update.update_id}:{kind}:{emoji}",
            raw=change,
        )
        for kind, emoji in changes
    ]


def edit_event(update: Update) -> PlatformEvent | None:
    message = update.edited_message or update.edited_channel_post
    if message is None:
        return None
    stamp = int(message.edit_date.timestamp()) if message.edit_date else update.update_id
    return PlatformEvent(
        kind="message_edited",
        platform=PLATFORM,
        chat_id=str(message.chat.id),
        user_id=sender_of(message).user_id,
        message_id=str(message.message_id),
        new_text=message.text if message.text is not None else (message.caption or ""),
        thread_id=thread_of(message),
        event_id=f"edit:{message.message_id}:{stamp}",
        raw=message,
    )


def _member_event(kind: str, chat: Chat, user: User, stamp: int, raw: Any) -> PlatformEvent:
    """Keyed on (kind, user, second) so a join seen both as a service message and as a
    `chat_member` update is reported once by the runtime's dedup."""
    return PlatformEvent(
        kind=kind,  # type: ignore[arg-type]
        platform=PLATFORM,
        chat_id=str(chat.id),
        user_id=str(user.id),
        event_id=f"{kind}:{user.id}:{stamp}",
        raw=raw,
    )


def service_events(message: Message) -> list[PlatformEvent]:
    """Join, leave and new-topic notices carried as service messages."""
    stamp = int(message.date.timestamp())
    events = [_member_event("member_joined", message.chat, user, stamp, message) for user in message.new_chat_members]
    if message.left_chat_member is not None:
        events.append(_member_event("member_left", message.chat, message.left_chat_member, stamp, message))
    if message.forum_topic_created is not None:
        events.append(
            PlatformEvent(
                kind="thread_created",
                platform=PLATFORM,
                chat_id=str(message.chat.id),
                user_id=sender_of(message).user_id,
                message_id=str(message.message_id),
                new_text=message.forum_topic_created.name,  # the topic's title
                thread_id=str(message.message_thread_id or message.message_id),
                event_id=f"topic:{message.message_id}",
                raw=message,
            )
        )
    return events


def _is_present(member: ChatMember) -> bool:
    if member.status in _PRESENT:
        return True
    return member.status == ChatMember.RESTRICTED and bool(getattr(member, "is_member", False))


def membership_event(update: Update) -> PlatformEvent | None:
    """`chat_member` / `my_chat_member`: a join or leave when presence flips."""
    change: ChatMemberUpdated | None = update.chat_member or update.my_chat_member
    if change is None:
        return None
    before, after = _is_present(change.old_chat_member), _is_present(change.new_chat_member)
    if before == after:
        return None
    kind = "member_joined" if after else "member_left"
    stamp = int(change.date.timestamp())
    return _member_event(kind, change.chat, change.new_chat_member.user, stamp, change)


# --- who the bot is, and the hand-over ---------------------------------------------------


class _Handover:
    """The outcome of handing one webhook update to the runtime."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: BaseException | None = None


class TelegramInbound:
    """Normalises updates with the bot's identity and hands them to the adapter's runtime."""

    def __init__(self, adapter: Adapter, *, answer_callback: Callable[[str, PressAnswer], Awaitable[None]]) -> None:
        self._adapter = adapter
        self._answer_callback = answer_callback  # answerCallbackQuery: stops the button's spinner
        self._unhanded: set[int] = set()  # fetched update ids not yet handed to the runtime
        self._all_handed = asyncio.Event()
        self._handovers: dict[int, _Handover] = {}  # id(update) → outcome, for webhook updates

    # --- the rules that need the bot's identity -----------------------------------------------

    def _is_me(self, user: User | None) -> bool:
        return user is not None and self._adapter.is_self(user.id)

    def mentions_me(self, message: Message) -> bool:
        """An @username mention or a text_mention (users without a username) of this bot."""
        me = self._adapter.self_user
        handle = f"@{me.username}".lower() if me is not None else None
        for entity, text in _entities(message).items():
            if entity.type == MessageEntity.MENTION and text.lower() == handle:
                return True
            if entity.type == MessageEntity.TEXT_MENTION and self._is_me(entity.user):
                return True
        return False

    def quoted(self, message: Message) -> QuotedRef | None:
        """What the user replied to: the part they quoted if any, else the whole message."""
        partial = message.quote.text if message.quote is not None else ""
        replied = real_reply(message)
        if replied is not None:
            author = "bot" if self._is_me(replied.from_user) else "user"
            text = partial or replied.text or replied.caption or ""
            files = tuple(a for a in media_of(replied)[1] if a.get("file_id"))
            return QuotedRef(message_id=str(replied.message_id), text=text, author=author, attachments=files)
        external = message.external_reply
        if external is not None:
            message_id = str(external.message_id) if external.message_id is not None else ""
            return QuotedRef(message_id=message_id, text=partial, author="user")
        return None

    def message(self, message: Message) -> BotMessage | None:
        """A turn for the agent, or None for messages that carry nothing we can represent."""
        if is_service(message):
            return None
        media_type, attachments, description = media_of(message)
        text = message.text if message.text is not None else (message.caption or description)
        if not text and not attachments:
            log.debug("telegram: ignoring message %s with no supported content", message.message_id)
            return None
        message_type = MessageType.COMMAND if is_command(message) else media_type
        replied = real_reply(message)
        metadata: dict[str, Any] = {
            META_MENTIONS_BOT: self.mentions_me(message),
            META_REPLY_TO_BOT: replied is not None and self._is_me(replied.from_user),
            META_SCOPE: str(message.chat.id),
        }
        if message.forward_origin is not None:
            metadata["forwarded"] = True
        if message.chat.is_forum:
            metadata["forum"] = True
        return BotMessage(
            message_id=str(message.message_id),
            content=text,
            sender=sender_of(message),
            channel=channel_of(message.chat),
            message_type=message_type,
            timestamp=message.date,
            reply_to=str(replied.message_id) if replied is not None else None,
            thread_id=thread_of(message),
            attachments=attachments,
            quoted=self.quoted(message),
            metadata=metadata,
            allow_control=not _untrusted(message),
            platform=PLATFORM,
        )

    def press(self, update: Update) -> PlatformEvent | None:
        """An inline-button press on one of our messages: a `button_pressed` event whose
        action is the button's `callback_data`. None for what carries no data or no message
        we can name (a game button, an inline-mode message)."""
        query = update.callback_query
        if query is None or query.data is None or query.message is None:
            return None
        origin = query.message
        thread_id = thread_of(origin) if isinstance(origin, Message) else None
        return PlatformEvent(
            kind="button_pressed",
            platform=PLATFORM,
            chat_id=str(origin.chat.id),
            user_id=str(query.from_user.id),
            message_id=str(origin.message_id),
            thread_id=thread_id,
            event_id=f"cb:{query.id}",
            action_id=query.data,
        )

    def normalise(self, update: Update) -> list[BotMessage | PlatformEvent]:
        """Everything the runtime should hear about one update, in order."""
        message = update.message or update.channel_post
        if message is not None:
            items: list[BotMessage | PlatformEvent] = list(service_events(message))
            turn = self.message(message)
            if turn is not None:
                items.append(turn)
            return items
        if update.callback_query is not None:
            return [m for m in (self.press(update),) if m is not None]
        if update.message_reaction is not None:
            return list(reaction_events(update))
        found: Iterable[PlatformEvent | None] = (edit_event(update), membership_event(update))
        return [item for item in found if item is not None]

    # --- the hand-over ------------------------------------------------------------------------

    def polled(self, updates: Sequence[Update]) -> None:
        """A polled batch: each of its updates is owed a hand-over before the next poll."""
        self._unhanded.update(update.update_id for update in updates)

    async def handed_over(self) -> None:
        """Wait (bounded) until every fetched update reached the runtime, so the offset that
        acknowledges them to Telegram is sent only once they are recorded."""
        if not self._unhanded:
            return
        self._all_handed.clear()
        try:
            await asyncio.wait_for(self._all_handed.wait(), timeout=HANDOVER_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("telegram: %d update(s) still not handed over; polling on", len(self._unhanded))
            self._unhanded.clear()

    async def process_webhook_update(self, application: Application, update: Update) -> None:
        """Run a webhook update through the application's handlers (via the update processor,
        so a chat's updates stay in order while other chats run concurrently) and return once
        the runtime has it; raise if the hand-over failed, so Telegram is answered 500."""
        handover = self._handovers[id(update)] = _Handover()
        try:
            await application.update_processor.process_update(update, application.process_update(update))
        finally:
            self._handovers.pop(id(update), None)
        if handover.error is not None:
            raise RuntimeError(f"hand-over failed: {handover.error!r}") from handover.error

    async def on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """PTB's handler for every update."""
        handover = self._handovers.get(id(update))
        try:
            await self._handle(update, strict=handover is not None)
        except Exception as exc:
            if handover is not None:  # PTB passes it to the error handlers; the webhook answers 500
                handover.error = exc
            raise
        finally:
            self._unhanded.discard(update.update_id)
            if not self._unhanded:
                self._all_handed.set()

    async def _handle(self, update: Update, *, strict: bool) -> None:
        """Normalise and dispatch. `strict` (webhook updates) raises when the runtime did not
        accept an item, so the webhook answers with an error and Telegram redelivers."""
        if self._adapter.self_user is None:
            if strict:
                raise RuntimeError("the Telegram adapter is not logged in")
            return
        query = update.callback_query
        if query is not None:
            await self._pressed(query.id, update, strict=strict)
            return
        try:
            items = self.normalise(update)
        except Exception as exc:  # boundary: telegram's receive path, per update (updates are sanitised first): one line
            log.error("telegram: skipped update %s that could not be normalised (%s)", update.update_id,
                      failure_line(exc))
            return
        for item in items:
            if not await self._adapter.dispatch(item) and strict:
                raise RuntimeError("the runtime did not accept the update")

    async def _pressed(self, query_id: str, update: Update, *, strict: bool) -> None:
        """A press is answered (answerCallbackQuery, with what the runtime tells the presser)
        and dispatched; one that names nothing we can use is only answered, so its spinner
        stops."""
        try:
            event = self.press(update)
        except Exception:  # boundary: telegram's receive path, per press: one that cannot be read is only answered
            log.exception("telegram: skipped a button press that could not be read")
            event = None

        async def acknowledge(answer: PressAnswer) -> None:
            await self._answer_callback(query_id, answer)

        if event is None:
            await acknowledge(PressAnswer())
            return
        if not await self._adapter.pressed(event, acknowledge) and strict:
            raise RuntimeError("the runtime did not accept the update")
