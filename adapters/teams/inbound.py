"""Teams activities -> `BotMessage` / `PlatformEvent`, each handed on once.

Everything Teams-specific about *reading* lives here:

* conversations: `personal` chats are `dm`, `groupChat` is `group`, `channel` is `channel`.
  Every channel post is the root of a thread of its own (the activity's conversation id ends
  in `;messageid=<root>`), so a channel message's `thread_id` is its root and the answer goes
  into that thread, never to the channel's top level;
* addressing: a mention entity naming the bot (`mentioned.id` is the activity's recipient)
  sets `mentions_bot`, and the `<at>…</at>` of the bot is taken out of the text (other
  people's mentions read as `@Name`); a thread the bot posted in counts as addressed;
* Adaptive Card `Action.Submit` presses arrive as message activities whose `value` is the
  button's data and whose `replyToId` is the card: they become `button_pressed`;
* quotes: a `quotedReply` entity (or, in a channel thread, the thread's root) is looked up
  among the messages this process has seen, since the Bot Connector has no way to read a
  message back;
* files: `file.download.info` attachments (personal chats; a pre-authorised `downloadUrl`)
  and inline images (`contentUrl` on the Bot Connector's host, fetched with the bot's token).

The Bot Connector retries a request it got no answer to, so each activity is handed on once,
keyed on its conversation and id (an edit also on its new text).
"""

from __future__ import annotations

import logging
import mimetypes
import re
from collections import Counter
from datetime import datetime, timezone
from typing import Any

from botweave.adapter import Adapter
from botweave.mime import clean_mime
from botweave.payload import clean_text
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
from microsoft_agents.activity import Activity

from ..cache import BoundedCache
from .references import Reference, References

log = logging.getLogger(__name__)

PLATFORM = "teams"
CARD = "application/vnd.microsoft.card.adaptive"
FILE_DOWNLOAD = "application/vnd.microsoft.teams.file.download.info"
#: The key of a button's data on the wire: what a press of one of our buttons carries back.
ACTION_KEY = "botweave_action"
_KINDS: dict[str, ChannelType] = {"personal": "dm", "groupChat": "group", "channel": "channel"}
_AT = re.compile(r"<at>(.*?)</at>", re.S)
#: Teams' reaction types and the emoji people see.
REACTIONS = {"like": "👍", "heart": "❤️", "laugh": "😆", "surprised": "😮", "sad": "😢", "angry": "😡"}


def split_conversation(conversation_id: str) -> tuple[str, str | None]:
    """A conversation id as (base, thread root): `19:x@thread.tacv2;messageid=17` -> (`19:x@…`, `17`)."""
    base, sep, rest = conversation_id.partition(";messageid=")
    return base, (rest or None) if sep else None


class Seen:
    """What the messages of a conversation said, as far as this process saw them (people's
    and the bot's own), for quotes and for telling which threads the bot is in."""

    def __init__(self) -> None:
        self._messages: BoundedCache[tuple[str, str], QuotedRef] = BoundedCache(4096)
        self._bot_threads: BoundedCache[tuple[str, str], bool] = BoundedCache(4096)

    def note(self, chat_id: str, message_id: str, quoted: QuotedRef, thread_id: str | None) -> None:
        self._messages.put((chat_id, message_id), quoted)
        if quoted.author == "bot":
            self._bot_threads.put((chat_id, thread_id or message_id), True)

    def get(self, chat_id: str, message_id: str) -> QuotedRef | None:
        found = self._messages.get((chat_id, message_id))
        return found if isinstance(found, QuotedRef) else None

    def bot_in_thread(self, chat_id: str, thread_id: str) -> bool:
        return (chat_id, thread_id) in self._bot_threads


class TeamsInbound:
    def __init__(self, adapter: Adapter, references: References, seen: Seen, *, stats: Counter[str]) -> None:
        self._adapter = adapter
        self._references = references
        self._seen = seen
        self._handled: BoundedCache[tuple[str, ...], bool] = BoundedCache(4096)
        self.stats = stats

    @property
    def _bot_id(self) -> str:
        me = self._adapter.self_user
        return me.user_id if me is not None else ""

    async def accept(self, activity: Activity) -> bool:
        """One verified activity: its reference kept, then handed on once. False when the
        runtime did not take it (the endpoint then answers so that Teams retries)."""
        self.stats["received"] += 1
        conversation = activity.conversation
        if conversation is None or not conversation.id or not activity.service_url:
            self.stats["skipped"] += 1
            log.warning("teams: skipped a %s activity without a conversation or service URL", activity.type)
            return True
        base, _ = split_conversation(conversation.id)
        sender = activity.from_property.id if activity.from_property is not None else ""
        await self._references.remember(self._reference(activity, base), person_id=sender or "")
        key = _dedup_key(activity, base)
        if key is not None and not self._handled.add_if_new(key, True):
            self.stats["duplicate"] += 1
            return True
        try:
            handed = await self._hand_on(activity, base)
        except Exception:
            if key is not None:
                self._handled.discard(key)  # Teams' retry may get it through
            raise
        if not handed and key is not None:
            self._handled.discard(key)
        return handed

    def _reference(self, activity: Activity, base: str) -> Reference:
        conversation = activity.conversation
        assert conversation is not None
        kind = str(conversation.conversation_type or "personal")
        tenant = str(conversation.tenant_id or _tenant(activity.channel_data) or "")
        person = activity.from_property.id if kind == "personal" and activity.from_property is not None else ""
        return Reference(base, str(activity.service_url), kind, tenant, str(person or ""))

    async def _hand_on(self, activity: Activity, base: str) -> bool:
        kind = activity.type
        if kind == "message":
            press = self.press(activity, base)
            if press is not None:
                self.stats["dispatched"] += 1
                return await self._adapter.pressed(press, self._acknowledge(press))
            item: BotMessage | PlatformEvent | None = self.message(activity, base)
        elif kind == "messageUpdate":
            item = self.edited(activity, base)
        elif kind == "messageDelete":
            item = self._event("message_deleted", activity, base, message_id=activity.id)
        elif kind == "messageReaction":
            return await self._reactions(activity, base)
        elif kind == "conversationUpdate":
            return await self._membership(activity, base)
        else:
            item = None  # installationUpdate, invoke, typing...: the reference is all we keep
        if item is None:
            self.stats["skipped"] += 1
            return True
        self.stats["dispatched"] += 1
        return await self._adapter.dispatch(item)

    # --- messages ------------------------------------------------------------------------

    def message(self, activity: Activity, base: str) -> BotMessage | None:
        """A message a person (or another bot) posted; the bot's own are None."""
        sender = activity.from_property
        if sender is None or not sender.id or not activity.id:
            return None
        if self._adapter.is_self(sender.id):
            return None
        conversation = activity.conversation
        assert conversation is not None
        channel_type = _KINDS.get(str(conversation.conversation_type or "personal"), "dm")
        _, root = split_conversation(conversation.id)
        thread_id = (root or activity.id) if channel_type == "channel" else None
        text, mentioned = self._text(activity)
        attachments = _attachments(activity.attachments or [], str(activity.service_url or ""))
        quoted = self._quote(activity, base, thread_id)
        in_thread = thread_id is not None and thread_id != activity.id
        reply_to_bot = bool(quoted is not None and quoted.author == "bot") or (
            in_thread and self._seen.bot_in_thread(base, str(thread_id))
        )
        self._seen.note(base, activity.id, QuotedRef(activity.id, text, "user", tuple(attachments)), thread_id)
        return BotMessage(
            message_id=activity.id,
            content=text,
            sender=BotUser(user_id=sender.id, username=sender.name or "", display_name=sender.name or ""),
            channel=BotChannel(channel_id=base, channel_type=channel_type, title=str(conversation.name or "")),
            message_type=_message_type(attachments),
            timestamp=_timestamp(activity.timestamp),
            reply_to=quoted.message_id if quoted is not None else None,
            thread_id=thread_id,
            attachments=attachments,
            quoted=quoted,
            metadata={
                META_MENTIONS_BOT: mentioned,
                META_REPLY_TO_BOT: reply_to_bot,
                META_SCOPE: str(conversation.tenant_id or _tenant(activity.channel_data) or "") or None,
            },
            allow_control=str(getattr(sender, "role", "") or "") != "bot",
            platform=PLATFORM,
        )

    def _text(self, activity: Activity) -> tuple[str, bool]:
        """The text as people read it, without the bot's own `<at>` mention; whether the bot
        was mentioned (by a mention entity naming it)."""
        raw = str(activity.text or "")
        recipient = activity.recipient.id if activity.recipient is not None else ""
        bot_ids = {i for i in (recipient, self._bot_id) if i}
        mentioned = False
        for entity in activity.entities or []:
            if getattr(entity, "type", None) != "mention":
                continue
            data = entity.model_dump(by_alias=True)
            who = (data.get("mentioned") or {}).get("id")
            if who in bot_ids:
                mentioned = True
                at = str(data.get("text") or "")
                if at:
                    raw = raw.replace(at, " ", 1)
        text = _AT.sub(lambda m: "@" + m.group(1), raw)
        return clean_text(re.sub(r"[ \t]{2,}", " ", text).strip()), mentioned

    def _quote(self, activity: Activity, base: str, thread_id: str | None) -> QuotedRef | None:
        """The message this one answers: a quoted reply's, else (in a channel thread) the root's."""
        for entity in activity.entities or []:
            if getattr(entity, "type", None) != "quotedReply":
                continue
            data = (entity.model_dump(by_alias=True).get("quotedReply") or {})
            message_id = str(data.get("messageId") or "")
            if not message_id:
                continue
            known = self._seen.get(base, message_id)
            if known is not None:
                return known
            author = "bot" if self._adapter.is_self(data.get("senderId")) else "user"
            return QuotedRef(message_id, clean_text(str(data.get("preview") or "")), author)
        if activity.reply_to_id:
            known = self._seen.get(base, str(activity.reply_to_id))
            if known is not None:
                return known
        if thread_id is not None and thread_id != activity.id:
            return self._seen.get(base, thread_id) or QuotedRef(thread_id)
        return None

    def edited(self, activity: Activity, base: str) -> PlatformEvent | None:
        text, _ = self._text(activity)
        return self._event("message_edited", activity, base, message_id=activity.id, new_text=text)

    # --- presses -------------------------------------------------------------------------

    def press(self, activity: Activity, base: str) -> PlatformEvent | None:
        """An `Action.Submit` of one of our cards: a message whose value carries our key."""
        value = activity.value
        if not isinstance(value, dict) or not isinstance(value.get(ACTION_KEY), str):
            return None
        if activity.from_property is None or not activity.reply_to_id:
            return None
        conversation = activity.conversation
        assert conversation is not None
        _, root = split_conversation(conversation.id)
        return PlatformEvent(
            kind="button_pressed",
            platform=PLATFORM,
            chat_id=base,
            user_id=str(activity.from_property.id or ""),
            message_id=str(activity.reply_to_id),
            thread_id=root if root and root != activity.reply_to_id else None,
            event_id=f"press:{activity.id}",
            action_id=str(value[ACTION_KEY]),
            raw=activity.model_dump(by_alias=True, exclude_none=True),
        )

    def _acknowledge(self, press: PlatformEvent) -> Any:
        """Teams has no private answer to a press: the HTTP 200 is the acknowledgement, and the
        card itself is updated with the decision. An answer people must not miss (the button
        is not theirs, it expired) is posted as a reply to the card."""

        async def acknowledge(answer: PressAnswer) -> None:
            if answer.text and answer.alert:
                await self._adapter.send(press.chat_id, answer.text, thread_id=press.thread_id, reply_to=press.message_id)

        return acknowledge

    # --- events --------------------------------------------------------------------------

    def _event(self, kind: Any, activity: Activity, base: str, **fields: Any) -> PlatformEvent | None:
        sender = activity.from_property
        if sender is None or self._adapter.is_self(sender.id):
            return None
        conversation = activity.conversation
        assert conversation is not None
        _, root = split_conversation(conversation.id)
        return PlatformEvent(
            kind=kind,
            platform=PLATFORM,
            chat_id=base,
            user_id=str(sender.id or ""),
            thread_id=root if root and root != fields.get("message_id") else None,
            event_id=f"{activity.type}:{activity.id}",
            raw=activity.model_dump(by_alias=True, exclude_none=True),
            **fields,
        )

    async def _reactions(self, activity: Activity, base: str) -> bool:
        handed = True
        for kind, reactions in (("reaction_added", activity.reactions_added), ("reaction_removed", activity.reactions_removed)):
            for reaction in reactions or []:
                name = str(getattr(reaction, "type", "") or "")
                event = self._event(kind, activity, base, message_id=activity.reply_to_id, emoji=REACTIONS.get(name, name))
                if event is not None:
                    handed = await self._adapter.dispatch(event) and handed
        return handed

    async def _membership(self, activity: Activity, base: str) -> bool:
        handed = True
        for kind, members in (("member_joined", activity.members_added), ("member_left", activity.members_removed)):
            for member in members or []:
                if not member.id or self._adapter.is_self(member.id):
                    continue  # the bot's own arrival: the reference kept above is what matters
                event = PlatformEvent(
                    kind=kind,  # type: ignore[arg-type]
                    platform=PLATFORM,
                    chat_id=base,
                    user_id=member.id,
                    event_id=f"{kind}:{activity.id}:{member.id}",
                )
                handed = await self._adapter.dispatch(event) and handed
        return handed


def _dedup_key(activity: Activity, base: str) -> tuple[str, ...] | None:
    if not activity.id:
        return None
    if activity.type == "messageUpdate":
        return (str(activity.type), base, activity.id, str(activity.text or ""))
    return (str(activity.type), base, activity.id)


def _tenant(channel_data: Any) -> str:
    if isinstance(channel_data, dict):
        tenant = channel_data.get("tenant")
        if isinstance(tenant, dict) and isinstance(tenant.get("id"), str):
            return str(tenant["id"])
    return ""


def _attachments(attachments: list[Any], service_url: str) -> list[dict[str, Any]]:
    """Files people attached: `file.download.info` (a pre-authorised download URL, no token
    sent) and inline images (on the Bot Connector's host, fetched with the bot's token: the
    service URL they came with says which host that is). Cards and the HTML rendering of the
    text are not files."""
    found: list[dict[str, Any]] = []
    for attachment in attachments:
        kind = str(attachment.content_type or "")
        name = str(attachment.name or "")
        if kind == FILE_DOWNLOAD and isinstance(attachment.content, dict):
            url = attachment.content.get("downloadUrl")
            if isinstance(url, str) and url:
                found.append({"url": url, "filename": name, "mime": _mime_for(name), "auth": "none"})
        elif kind.startswith("image/") and isinstance(attachment.content_url, str) and attachment.content_url:
            if attachment.content_url.startswith("http"):
                found.append({"url": attachment.content_url, "filename": name or "image", "mime": clean_mime(kind),
                              "auth": "bot", "service_url": service_url})
    return found


def _mime_for(name: str) -> str:
    return clean_mime(mimetypes.guess_type(name)[0]) or "application/octet-stream"


def _message_type(attachments: list[dict[str, Any]]) -> MessageType:
    if not attachments:
        return MessageType.TEXT
    mimes = [str(a.get("mime") or "") for a in attachments]
    if all(m.startswith("image/") for m in mimes):
        return MessageType.IMAGE
    if all(m.startswith("audio/") for m in mimes):
        return MessageType.AUDIO
    return MessageType.FILE


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return datetime.now(timezone.utc)
