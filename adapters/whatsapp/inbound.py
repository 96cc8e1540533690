"""Meta's `messages` notifications → `BotMessage` / `PlatformEvent`.

A notification (`object: whatsapp_business_account`) holds entries, each with changes; a
`messages` change's `value` carries `messages` (what people sent), `statuses` (what became of
the bot's own messages) and `contacts` (who wrote). Each is read defensively: a field of the
wrong type is absent, a message that cannot be read is skipped with one line, and nothing in
a payload can stop the rest of the batch.

- Who wrote: the phone number (`from`, `contacts[].wa_id`) when the payload has one, else the
  business-scoped user id (`from_user_id`, `contacts[].user_id`, the 2026 ids that replace the
  number for people with a username). Once both were seen together the id is remembered
  as that number, so a person keeps one identity (and one conversation) when Meta later
  sends only the new id. Payloads from before the new ids (no `user_id` anywhere) work the
  same way.
- Messages: text; a reply (`context.id`) carries the quoted message as the bot remembers
  it (memory.py); images, documents, audio, voice, video and stickers become attachments
  named by their media id (the bytes are fetched on demand with the token, outbound.py);
  reactions become `reaction_added` / `reaction_removed`; a reply button or list row
  pressed (`interactive`) becomes `button_pressed` with the button's id; a template's
  quick-reply button (`button`) is the text it shows. Other kinds (location, contacts,
  orders, system notices) are read as what they say where that is short, else skipped.
- Statuses (sent, delivered, read, failed) never start a turn; one carrying a keyed send's
  key (`biz_opaque_callback_data`) is noted, so delivery can tell that send went out; a
  failed one is logged with Meta's reason.
- Meta delivers at least once and may send a message again in a different envelope (a
  new batch, other statuses beside it), so a repeat is recognised by the message id, not by
  the body; the runtime's dedup (by platform, chat and message id, in the store) catches
  repeats across processes and restarts, and the adapter drops one already in hand.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timezone
from typing import Any, Protocol

from botweave.adapter import Acknowledge
from botweave.mime import clean_mime
from botweave.payload import clean_text
from botweave.types import (
    BotChannel,
    BotMessage,
    BotUser,
    MessageActionResult,
    MessageType,
    PlatformEvent,
    PressAnswer,
    QuotedRef,
)

from ..cache import BoundedCache
from .memory import Memory, Remembered, now

log = logging.getLogger(__name__)


class Receiving(Protocol):
    """The adapter, as its inbound part uses it (a protocol, so the two modules do not import
    each other)."""

    display_phone: str

    async def dispatch(self, item: BotMessage | PlatformEvent) -> bool: ...

    async def pressed(self, event: PlatformEvent, acknowledge: Acknowledge) -> bool: ...

    async def send(self, chat_id: str, text: str, *, reply_to: str | None = None) -> MessageActionResult: ...

    def taken(self, chat_id: str, message_id: str) -> None: ...

PLATFORM = "whatsapp"
MEDIA_KINDS = ("image", "document", "audio", "video", "sticker")


def _text(payload: Any, key: str) -> str:
    """A string field (numbers accepted, Meta sends ids and timestamps as either), or ""."""
    if not isinstance(payload, dict):
        return ""
    value = payload.get(key)
    if isinstance(value, bool):
        return ""
    if isinstance(value, (int, float)):
        return str(int(value))
    return value if isinstance(value, str) else ""


def _dict(payload: Any, key: str) -> dict[str, Any]:
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, dict) else {}


def _list(payload: Any, key: str) -> list[Any]:
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, list) else []


def _timestamp(message: dict[str, Any]) -> datetime:
    try:
        return datetime.fromtimestamp(float(_text(message, "timestamp")), timezone.utc)
    except (ValueError, OverflowError, OSError):
        return datetime.now(timezone.utc)


def sender_ids(message: dict[str, Any], contacts: list[Any]) -> tuple[str, str, dict[str, Any]]:
    """(phone number, business-scoped id, contact) of a message's sender, each "" / {} when
    the payload does not carry it. The contact is the one naming the same person, else the
    only one."""
    phone, user_id = _text(message, "from"), _text(message, "from_user_id")
    people = [c for c in contacts if isinstance(c, dict)]
    contact = next(
        (c for c in people if (phone and _text(c, "wa_id") == phone) or (user_id and _text(c, "user_id") == user_id)),
        people[0] if len(people) == 1 else {},
    )
    if not phone:
        phone = _text(contact, "wa_id")
    if not user_id:
        user_id = _text(contact, "user_id")
    if phone and not phone.lstrip("+").isdigit():  # `from` holding a BSUID (no number shared)
        user_id, phone = user_id or phone, ""
    return phone.lstrip("+"), user_id, contact


class WhatsAppInbound:
    def __init__(self, adapter: Receiving, memory: Memory, *, phone_number_id: str) -> None:
        self._adapter = adapter
        self._memory = memory
        self._phone_number_id = phone_number_id
        #: Message ids in hand (being handed over, or handed over): a repeat inside one
        #: process is dropped here without a store round trip.
        self._seen: BoundedCache[str, bool] = BoundedCache(8192)
        #: received, duplicate, dispatched, status, skipped: how an operator or a test tells
        #: "Meta never sent it" from "we dropped it".
        self.stats: Counter[str] = Counter()

    async def notification(self, body: dict[str, Any]) -> None:
        """Hand over everything a signed notification holds; raises when the runtime did not
        take some of it, so the webhook answers 500 and Meta delivers it again."""
        if body.get("object") not in (None, "whatsapp_business_account"):
            log.info("whatsapp: skipped a notification for %r", str(body.get("object"))[:40])
            return
        refused = 0
        for entry in _list(body, "entry"):
            for change in _list(entry, "changes"):
                if _text(change, "field") not in ("messages", ""):
                    continue
                value = _dict(change, "value")
                number = _text(_dict(value, "metadata"), "phone_number_id")
                if number and self._phone_number_id and number != self._phone_number_id:
                    log.warning("whatsapp: skipped a notification for phone number id %s, not this bot's %s",
                                number[:40], self._phone_number_id)
                    continue
                for status in _list(value, "statuses"):
                    await self._status(status)
                contacts = _list(value, "contacts")
                for message in _list(value, "messages"):
                    if isinstance(message, dict) and not await self._message(message, contacts):
                        refused += 1
        if refused:
            raise RuntimeError(f"the runtime did not take {refused} message(s)")

    async def _status(self, status: Any) -> None:
        """A status of one of the bot's messages: counted, never a turn. One that carries a
        chunk key tells delivery the chunk went out; a failure is logged."""
        self.stats["status"] += 1
        state, key, message_id = _text(status, "status"), _text(status, "biz_opaque_callback_data"), _text(status, "id")
        if key and message_id and state in ("sent", "delivered", "read"):
            await self._memory.reported_sent(key, message_id)
        if state == "failed":
            errors = [e for e in _list(status, "errors") if isinstance(e, dict)]
            reason = "; ".join(f"{_text(e, 'code')} {_text(e, 'title')}".strip() for e in errors) or "no reason given"
            log.warning("whatsapp: message %s could not be delivered: %s", _text(status, "id")[:80], reason[:300])

    async def _message(self, message: dict[str, Any], contacts: list[Any]) -> bool:
        """One message; False only when the runtime did not take it."""
        message_id = _text(message, "id")
        kind = _text(message, "type")
        self.stats["received"] += 1
        if not message_id or kind in ("system", "unsupported", "ephemeral", "errors"):
            self.stats["skipped"] += 1
            if kind == "unsupported":
                log.info("whatsapp: skipped a message of a kind the Cloud API does not pass on")
            return True
        if _text(message, "group_id"):
            self.stats["skipped"] += 1
            log.info("whatsapp: skipped a group message (groups are not handled)")
            return True
        phone, user_id, contact = sender_ids(message, contacts)
        chat = await self._identity(phone, user_id)
        if not chat:
            self.stats["skipped"] += 1
            log.warning("whatsapp: skipped message %s: it names no sender", message_id[:80])
            return True
        if not self._seen.add_if_new(message_id, True):
            self.stats["duplicate"] += 1
            log.debug("whatsapp: message %s delivered again; already in hand", message_id[:80])
            return True
        try:
            taken = await self._hand_over(message, message_id, kind, chat, contact)
        except Exception:
            self._seen.discard(message_id)
            raise
        if not taken:
            self._seen.discard(message_id)  # Meta delivers it again; then it is new
        return taken

    async def _identity(self, phone: str, user_id: str) -> str:
        if phone:
            if user_id:
                await self._memory.link(user_id, phone)
            return phone
        if user_id:
            return await self._memory.phone_of(user_id) or user_id
        return ""

    async def _hand_over(
        self, message: dict[str, Any], message_id: str, kind: str, chat: str, contact: dict[str, Any]
    ) -> bool:
        profile = _dict(contact, "profile")
        name = clean_text(_text(profile, "name") or _text(profile, "username") or chat)[:200]
        sender = BotUser(user_id=chat, username=_text(profile, "username") or chat, display_name=name)
        at = _timestamp(message)
        await self._memory.person_wrote(chat, message_id, min(at.timestamp(), now()))
        context = _dict(message, "context")
        replied_to = _text(context, "id")

        if kind == "reaction":
            reaction = _dict(message, "reaction")
            emoji = _text(reaction, "emoji")
            target = _text(reaction, "message_id")
            if not target:
                return True
            self.stats["dispatched"] += 1
            return await self._adapter.dispatch(
                PlatformEvent(
                    kind="reaction_added" if emoji else "reaction_removed",
                    platform=PLATFORM, chat_id=chat, user_id=chat, message_id=target,
                    emoji=emoji or None, event_id=message_id,
                )
            )
        if kind == "interactive":
            interactive = _dict(message, "interactive")
            reply = _dict(interactive, "button_reply") or _dict(interactive, "list_reply")
            if reply:
                return await self._press(chat, message_id, replied_to, reply)
            self.stats["skipped"] += 1
            log.info("whatsapp: skipped an interactive reply of type %r", _text(interactive, "type")[:40])
            return True

        text, attachments, message_type = self._content(message, kind)
        if text is None:
            self.stats["skipped"] += 1
            log.info("whatsapp: skipped a %r message", kind[:40])
            return True
        quoted = None
        if replied_to:
            remembered = await self._memory.recall(replied_to)
            if remembered is not None:
                quoted = QuotedRef(replied_to, remembered.text, remembered.author, remembered.attachments)
            else:  # older than the bot remembers: who wrote it is all the payload tells
                ours = _text(context, "from") in (self._adapter.display_phone, "")
                quoted = QuotedRef(replied_to, "", "bot" if ours else "user")
        await self._memory.remember(message_id, Remembered(text, "user", tuple(attachments)))
        forwarded = context.get("forwarded") is True or context.get("frequently_forwarded") is True
        item = BotMessage(
            message_id=message_id,
            content=text,
            message_type=message_type,
            sender=sender,
            channel=BotChannel(channel_id=chat, channel_type="dm", title=name),
            timestamp=at,
            reply_to=replied_to or None,
            attachments=attachments,
            quoted=quoted,
            metadata={"forwarded": True} if forwarded else {},
            allow_control=not forwarded,  # forwarded words are someone else's, not an instruction
            platform=PLATFORM,
        )
        self.stats["dispatched"] += 1
        taken = await self._adapter.dispatch(item)
        if taken:
            self._adapter.taken(chat, message_id)
        return taken

    def _content(self, message: dict[str, Any], kind: str) -> tuple[str | None, list[dict[str, Any]], MessageType]:
        """(text, attachments, type) of a message; text None for a kind that is not read."""
        if kind == "text":
            return clean_text(_text(_dict(message, "text"), "body")), [], MessageType.TEXT
        if kind == "button":  # a template's quick reply: what it says is the person's answer
            button = _dict(message, "button")
            return clean_text(_text(button, "text") or _text(button, "payload")), [], MessageType.TEXT
        if kind in MEDIA_KINDS:
            media = _dict(message, kind)
            media_id = _text(media, "id")
            if not media_id:
                return None, [], MessageType.TEXT
            mime = clean_mime(_text(media, "mime_type")) or ("image/webp" if kind == "sticker" else None)
            attachment: dict[str, Any] = {"file_id": media_id, "mime": mime, "size": None}
            filename = _text(media, "filename")
            if filename:
                attachment["filename"] = clean_text(filename)[:200]
            if kind == "audio" and media.get("voice") is True:
                attachment["type"] = "voice"
            types = {"image": MessageType.IMAGE, "audio": MessageType.AUDIO, "video": MessageType.VIDEO,
                     "sticker": MessageType.STICKER, "document": MessageType.FILE}
            return clean_text(_text(media, "caption")), [attachment], types[kind]
        if kind == "location":
            place = _dict(message, "location")
            words = ", ".join(p for p in (_text(place, "name"), _text(place, "address")) if p)
            where = f"{place.get('latitude')}, {place.get('longitude')}"
            return clean_text(f"[location {where}{' — ' + words if words else ''}]"), [], MessageType.LOCATION
        return None, [], MessageType.TEXT

    async def _press(self, chat: str, message_id: str, on_message: str, reply: dict[str, Any]) -> bool:
        """A reply button or list row pressed: `button_pressed`, its id as the action."""
        action = _text(reply, "id")
        if not action or not on_message:
            self.stats["skipped"] += 1
            return True
        event = PlatformEvent(
            kind="button_pressed", platform=PLATFORM, chat_id=chat, user_id=chat, message_id=on_message,
            event_id=message_id, action_id=action, value=_text(reply, "title") or None,
        )

        async def acknowledge(answer: PressAnswer) -> None:
            # WhatsApp has no toast for a press: only an answer the presser must not miss
            # (expired, not theirs) becomes a message; "Approved." shows in what follows.
            if answer.text and answer.alert:
                await self._adapter.send(chat, answer.text, reply_to=message_id)

        self.stats["dispatched"] += 1
        return await self._adapter.pressed(event, acknowledge)
