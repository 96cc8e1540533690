"""Outbound Bot API calls, and Telegram's errors read as typed outcomes.

Every call runs under the pacer (pacing.py: per-chat order, rate limits, safe retries) and
follows a group that became a supergroup (its new id is remembered). Text goes out as
rendered markdown with plain text as the fallback (format.py).

Files go up as multipart uploads: pictures by sendPhoto (shown inline), OGG voice notes by
sendVoice (played as voice), anything else by sendDocument. Files people sent are read with
getFile and the Bot API's file endpoint, whose URL contains the bot token: it is used here
and nowhere else.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from botweave.adapter import ActionError, ByteLimit, FileTooLarge, Outbound, Outcome
from botweave.files import http_chunks
from botweave.types import ActionStatus, Button, OutboundFile
from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    MessageEntity,
    ReactionTypeCustomEmoji,
    ReactionTypeEmoji,
    ReplyParameters,
)
from telegram.constants import ReactionEmoji
from telegram.error import BadRequest, ChatMigrated, Forbidden, RetryAfter, TelegramError

from .client import TolerantBot
from .format import TELEGRAM_MAX_CAPTION_UTF16, Formatted, description
from .pacing import Pacer, surely_unsent, transient

log = logging.getLogger(__name__)

T = TypeVar("T")

REACTION_EMOJI = {str(e.value) for e in ReactionEmoji}
#: What sendPhoto shows as a picture; other images (GIFs, large ones) go as documents.
PHOTO_MIMES = frozenset({"image/jpeg", "image/png", "image/webp"})
MAX_PHOTO_BYTES = 10 * 1024 * 1024
#: The most the cloud Bot API hands a bot through getFile.
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024

# Bot API descriptions (lower-cased fragments) and what they mean for the caller.
_NOT_FOUND = (
    "message to edit not found",
    "message to delete not found",
    "message to react not found",
    "message_id_invalid",
    "chat not found",
    "message thread not found",
    "topic_deleted",
    "topic not found",
)


def status_for(exc: TelegramError) -> ActionStatus:
    """`no_route` when the target is gone or unknown, `failed` for any other refusal."""
    text = description(exc)
    if isinstance(exc, Forbidden):
        return "no_route" if "chat not found" in text else "failed"
    if isinstance(exc, BadRequest) and any(fragment in text for fragment in _NOT_FOUND):
        return "no_route"
    return "failed"


def not_modified(exc: TelegramError) -> bool:
    return isinstance(exc, BadRequest) and "message is not modified" in description(exc)


class TelegramOutbound(Outbound):
    """sendMessage, editMessageText, deleteMessage, setMessageReaction and sendChatAction,
    each under the pacer and following migrated groups."""

    def __init__(self, bot: TolerantBot, pacer: Pacer) -> None:
        self.bot = bot
        self.pacer = pacer
        self._migrated: dict[str, str] = {}

    def _target(self, chat_id: str) -> str:
        return self._migrated.get(chat_id, chat_id)

    async def _paced(
        self, chat_id: str, call: Callable[[str], Awaitable[T]], *, idempotent: bool, new_message: bool = False
    ) -> T:
        """`call` for the chat's current id, under the pacer; a group that became a supergroup
        is followed once and remembered."""
        target = self._target(chat_id)
        try:
            return await self.pacer.call(target, lambda: call(target), idempotent=idempotent, new_message=new_message)
        except ChatMigrated as exc:
            new_id = str(exc.new_chat_id)
            log.info("telegram: chat %s migrated to %s", chat_id, new_id)
            self._migrated[chat_id] = new_id
            return await self.pacer.call(new_id, lambda: call(new_id), idempotent=idempotent, new_message=new_message)

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str:
        """Post one chunk; rendered markdown first, plain text if Telegram rejects the entities."""
        return await self._post(chat_id, text, thread_id=thread_id, reply_to=reply_to, markup=None)

    async def send_buttons(
        self, chat_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None, reply_to: str | None
    ) -> str:
        """A message with an inline keyboard: one row of buttons, each button's id as its
        `callback_data` (which Telegram limits to 64 bytes)."""
        return await self._post(chat_id, text, thread_id=thread_id, reply_to=reply_to, markup=keyboard(buttons))

    async def _post(
        self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None, markup: InlineKeyboardMarkup | None
    ) -> str:
        formatted = Formatted(text, self.bot)
        reply_id = _as_int(reply_to)
        reply = ReplyParameters(message_id=reply_id, allow_sending_without_reply=True) if reply_id else None

        async def post(target: str) -> Any:
            return await formatted.apply(
                lambda body, entities: self.bot.call(
                    "sendMessage",
                    chat_id=_as_chat(target),
                    text=body,
                    entities=entities,
                    message_thread_id=_as_int(thread_id),
                    reply_parameters=reply,
                    reply_markup=markup,
                )
            )

        sent = await self._paced(chat_id, post, idempotent=False, new_message=True)
        return str(sent["message_id"])

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str:
        """One multipart upload: sendPhoto, sendVoice or sendDocument (see the module docstring),
        with the caption rendered like a message and plain if Telegram rejects its entities."""
        method = upload_method(file)
        formatted = Formatted(caption, self.bot, TELEGRAM_MAX_CAPTION_UTF16) if caption.strip() else None
        reply_id = _as_int(reply_to)
        reply = ReplyParameters(message_id=reply_id, allow_sending_without_reply=True) if reply_id else None

        async def post(target: str) -> Any:
            async def upload(body: str, entities: list[MessageEntity] | None) -> Any:
                options: dict[str, Any] = {
                    "chat_id": _as_chat(target),
                    "caption": body or None,
                    "caption_entities": entities,
                    "message_thread_id": _as_int(thread_id),
                    "reply_parameters": reply,
                    "filename": file.filename,
                    "write_timeout": 60.0,
                }
                if method == "photo":
                    return await self.bot.send_photo(photo=file.data, **options)
                if method == "voice":
                    return await self.bot.send_voice(voice=file.data, **options)
                return await self.bot.send_document(document=file.data, **options)

            return await (formatted.apply(upload) if formatted is not None else upload("", None))

        message = await self._paced(chat_id, post, idempotent=False, new_message=True)
        return str(message.message_id)

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        """getFile (which declares the size), then the file endpoint."""
        file_id = str(ref.get("file_id") or "")
        if not file_id:
            raise ActionError("failed", "the attachment has no Telegram file id")
        try:
            found = await self.bot.get_file(file_id)
        except BadRequest as exc:
            if "too big" in description(exc):
                raise FileTooLarge(
                    ref.get("size") if isinstance(ref.get("size"), int) else None,
                    min(limit.max_bytes, MAX_DOWNLOAD_BYTES),
                    "Telegram hands bots files up to 20 MB",
                ) from None
            raise
        limit.declared(found.file_size)
        if not found.file_path:
            raise ActionError("failed", "Telegram gave no path for the file")
        async for chunk in http_chunks(found.file_path, limit):
            yield chunk

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        """Replace a message's text; 'not modified' counts as success (the text is there).
        Telegram drops an inline keyboard that an edit does not repeat."""
        await self._edit(chat_id, message_id, text, None)

    async def edit_buttons(
        self, chat_id: str, message_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None
    ) -> None:
        await self._edit(chat_id, message_id, text, keyboard(buttons) if buttons else None)

    async def _edit(self, chat_id: str, message_id: str, text: str, markup: InlineKeyboardMarkup | None) -> None:
        number = _message_number(message_id, "edit")
        formatted = Formatted(text, self.bot)

        async def change(target: str) -> Any:
            return await formatted.apply(
                lambda body, entities: self.bot.call(
                    "editMessageText",
                    chat_id=_as_chat(target), message_id=number, text=body, entities=entities, reply_markup=markup,
                )
            )

        await self._paced(chat_id, change, idempotent=True)

    async def delete(self, chat_id: str, message_id: str) -> None:
        number = _message_number(message_id, "delete")
        await self._paced(
            chat_id, lambda target: self.bot.delete_message(chat_id=_as_chat(target), message_id=number), idempotent=True
        )

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        """setMessageReaction; emoji outside Telegram's reaction set are `unsupported`."""
        reaction = _reaction(emoji)
        if reaction is None:
            raise ActionError("unsupported", f"react: Telegram does not allow {emoji!r} as a reaction")
        number = _message_number(message_id, "react")
        await self._paced(
            chat_id,
            lambda target: self.bot.set_message_reaction(
                chat_id=_as_chat(target), message_id=number, reaction=reaction
            ),
            idempotent=True,
        )

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None) -> str:
        """A forum topic (createForumTopic). Only forum supergroups have topics, so anywhere
        else this is `unsupported`; Telegram does not start topics from a message, so
        `message_id` is not used."""

        async def create(target: str) -> Any:
            return await self.bot.create_forum_topic(chat_id=_as_chat(target), name=name[:128])

        try:
            topic = await self._paced(chat_id, create, idempotent=False, new_message=True)
        except TelegramError as exc:
            if "not a forum" in exc.message.lower() or "chat_not_forum" in exc.message.lower():
                raise ActionError("unsupported", f"create_thread: {exc.message}") from exc
            raise
        return str(topic.message_thread_id)

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        """Skipped while the chat is cooling down from a 429: no typing spam into it."""
        target = self._target(chat_id)
        if self.pacer.gate.cooling(target):
            return
        await self.bot.send_chat_action(chat_id=_as_chat(target), action="typing", message_thread_id=_as_int(thread_id))

    def retryable(self, exc: Exception) -> bool:
        return not isinstance(exc, TelegramError) or transient(exc)

    def classify(self, exc: Exception, action: str) -> Outcome:
        """Telegram's own message for each refusal, as the status it means."""
        if not isinstance(exc, TelegramError):
            return "failed", f"{action}: {type(exc).__name__}: {exc}"
        if isinstance(exc, ChatMigrated):
            return "no_route", f"{action}: chat migrated to {exc.new_chat_id}"
        if isinstance(exc, RetryAfter):
            return "failed", f"{action}: still rate limited ({exc.message})"
        if action == "edit" and not_modified(exc):
            return "ok", "edit: message is not modified"
        if action == "send" and transient(exc) and not surely_unsent(exc):
            return "failed", f"send: outcome unknown ({exc.message})"
        return status_for(exc), f"{action}: {exc.message}"


def keyboard(buttons: Sequence[Button]) -> InlineKeyboardMarkup:
    """One row of callback buttons (Telegram shows no colours, so `style` is not drawn)."""
    return InlineKeyboardMarkup([[InlineKeyboardButton(b.label, callback_data=b.action_id) for b in buttons]])


def upload_method(file: OutboundFile) -> str:
    """photo, voice or document: how Telegram should show the file."""
    mime = file.mime.split(";", 1)[0].strip().lower()
    if mime in PHOTO_MIMES and file.size <= MAX_PHOTO_BYTES:
        return "photo"
    if file.kind == "voice":
        return "voice"
    return "document"


def _as_chat(chat_id: str) -> int | str:
    """Numeric ids go out as ints; `@channelname` targets are passed through."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


def _as_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _message_number(message_id: str, action: str) -> int:
    number = _as_int(message_id)
    if number is None:
        raise ActionError("no_route", f"{action}: {message_id!r} is not a Telegram message id")
    return number


def _reaction(emoji: str) -> ReactionTypeEmoji | ReactionTypeCustomEmoji | None:
    """Telegram accepts only its fixed reaction set (and custom emoji by id)."""
    if emoji.startswith("custom:") and len(emoji) > len("custom:"):
        return ReactionTypeCustomEmoji(emoji[len("custom:"):])
    if emoji in REACTION_EMOJI:
        return ReactionTypeEmoji(emoji)
    bare = emoji.replace("\ufe0f", "")
    for allowed in REACTION_EMOJI:
        if allowed.replace("\ufe0f", "") == bare:
            return ReactionTypeEmoji(allowed)
    return None
