"""/sync responses -> `BotMessage` / `PlatformEvent`, and the invitations and encrypted rooms
that never become either.

Everything Matrix-specific about *reading* lives here: which events are messages (`m.text`,
`m.notice`, `m.emote`, media), how a reply (`m.in_reply_to`) becomes a quote (the quoted event
comes from what this process saw, else from the homeserver: a reply without the quoting
fallback in its body still shows the model what it answers), how a thread (`m.thread`) becomes
`thread_id`, when a message is addressed to the bot (`m.mentions`, its id or name in the text, a
reply to it), and which happenings are platform events: `m.replace` edits, reactions
(`m.annotation`), redactions, members joining and leaving.

An invitation is accepted only when the runtime's access rules admit the person who sent it
(`Adapter.admits`); anyone else's is left unanswered: no join, nothing reaches a model.
An end-to-end encrypted room cannot be read yet: the first time the bot meets one it says so
in one log line and one notice in the room, and its encrypted events are skipped.

`m.notice` is what Matrix bots post (the spec asks automated senders to use it so that bots do
not answer each other), so its sender is read as a bot: with `allow_bots` off it never starts a
turn.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from botweave.adapter import Adapter
from botweave.mime import clean_mime
from botweave.payload import clean_text
from botweave.types import (
    META_MENTIONS_BOT,
    META_REPLY_TO_BOT,
    BotChannel,
    BotMessage,
    BotUser,
    ChannelType,
    MessageType,
    PlatformEvent,
    QuotedRef,
)

from ..cache import BoundedCache
from .outbound import REQUEST_ERRORS

log = logging.getLogger(__name__)

PLATFORM = "matrix"
TEXT_TYPES = frozenset({"m.text", "m.notice", "m.emote"})
MEDIA_TYPES = {"m.image": MessageType.IMAGE, "m.audio": MessageType.AUDIO, "m.video": MessageType.VIDEO,
               "m.file": MessageType.FILE}
ENCRYPTED_NOTICE = (
    "This room is end-to-end encrypted, and I cannot read encrypted messages yet. "
    "Talk to me in a room without encryption."
)

#: Fetches one event from the homeserver: (room, event id) -> the event as JSON.
FetchEvent = Callable[[str, str], Awaitable[dict[str, Any]]]
#: Joins a room; raises when the homeserver refuses.
Join = Callable[[str], Awaitable[None]]
#: Posts the encrypted-room notice into a room once (the store remembers it was said).
Notice = Callable[[str], Awaitable[None]]
#: The events of a room between two sync tokens, oldest first: (room, from, back to).
PageBack = Callable[[str, str, str], Awaitable[list[dict[str, Any]]]]


@dataclass
class RoomView:
    """What this process knows of a room from its state: who is in it, what they are called,
    whether it is encrypted."""

    members: dict[str, str] = field(default_factory=dict)  # joined user -> display name
    encrypted: bool = False
    name: str = ""

    def channel_type(self) -> ChannelType:
        return "dm" if len(self.members) <= 2 else "group"


@dataclass(frozen=True)
class Seen:
    """An event kept for quoting and for telling what a later redaction removed."""

    sender: str
    text: str
    kind: str  # message | reaction
    attachments: tuple[dict[str, Any], ...] = ()
    target: str = ""  # what a reaction reacted to
    key: str = ""  # a reaction's emoji
    thread_id: str | None = None


class MatrixInbound:
    def __init__(
        self, adapter: Adapter, *, fetch_event: FetchEvent, join: Join, notice: Notice, page_back: PageBack
    ) -> None:
        self._adapter = adapter
        self._page_back = page_back
        self._fetch_event = fetch_event
        self._join = join
        self._notice = notice
        self.rooms: dict[str, RoomView] = {}
        self._seen: BoundedCache[str, Seen] = BoundedCache(4096)
        self._threads_with_bot: BoundedCache[tuple[str, str], bool] = BoundedCache(4096)

    @property
    def _me(self) -> str:
        me = self._adapter.self_user
        return me.user_id if me is not None else ""

    def note_own(self, room_id: str, event_id: str, content: dict[str, Any]) -> None:
        """An event this process sent: a later reply to it is a reply to the bot, quoting its
        newest text (an edit updates the message it replaces), and a thread it posted in is
        one the bot is part of."""
        relates = _mapping(content.get("m.relates_to"))
        target = relates.get("event_id")
        if relates.get("rel_type") == "m.replace" and isinstance(target, str):
            earlier = self._seen.get(target)
            text = _body(_mapping(content.get("m.new_content")))
            self._seen.put(target, Seen(self._me, text, "message", thread_id=earlier.thread_id if earlier else None))
            return
        thread_id = target if relates.get("rel_type") == "m.thread" and isinstance(target, str) else None
        if thread_id:
            self._threads_with_bot.put((room_id, thread_id), True)
        self._seen.put(event_id, Seen(self._me, _body(content), "message", tuple(_attachments(content)), thread_id=thread_id))

    # --- one sync response --------------------------------------------------------------------

    async def read(self, data: dict[str, Any], *, since: str | None, backlog: bool) -> bool:
        """Hand on everything one /sync response holds; with `backlog`, the timelines are only
        read for what they say about the rooms (the first start skips what came before it).
        A room's timeline the homeserver cut short (`limited`: more came since `since` than
        one sync gives) is completed by paging back to `since` first, so nothing that arrived
        while the bot was away is skipped. False when an item was not taken (or a gap could
        not be filled): the caller reads the same batch again."""
        rooms = _mapping(data.get("rooms"))
        taken = True
        for room_id, invited in _mapping(rooms.get("invite")).items():
            await self.invited(str(room_id), _mapping(invited))
        for room_id, joined in _mapping(rooms.get("join")).items():
            room_id = str(room_id)
            joined = _mapping(joined)
            view = self.rooms.setdefault(room_id, RoomView())
            for event in _events(joined.get("state")):
                self._learn(view, event)
            timeline = _events(joined.get("timeline"))
            cut = _mapping(joined.get("timeline"))
            if since and not backlog and cut.get("limited") is True and isinstance(cut.get("prev_batch"), str):
                try:
                    timeline = await self._page_back(room_id, cut["prev_batch"], since) + timeline
                except REQUEST_ERRORS as exc:  # read the batch again rather than skip a gap
                    log.warning("matrix: could not fetch the messages missed in %s (%s)", room_id, type(exc).__name__)
                    return False
            for event in timeline:
                self._learn(view, event)
            if view.encrypted:
                await self._notice(room_id)
            if backlog:
                for event in timeline:
                    self._remember(room_id, event)
                continue
            for event in timeline:
                try:
                    item = await self.normalise(room_id, event)
                except (LookupError, TypeError, ValueError, AttributeError) as exc:  # one unreadable event never stops the room
                    log.warning("matrix: skipped an event in %s that could not be read (%s)", room_id, type(exc).__name__)
                    continue
                if item is not None and not await self._adapter.dispatch(item):
                    taken = False
        return taken

    async def invited(self, room_id: str, invited: dict[str, Any]) -> None:
        """Join when the access rules admit the inviter; otherwise leave the invitation be."""
        state = _events(invited.get("invite_state"))
        invite = next(
            (e for e in state if e.get("type") == "m.room.member" and e.get("state_key") == self._me), None
        )
        inviter = str((invite or {}).get("sender") or "")
        if not inviter:
            log.warning("matrix: an invitation to %s names nobody who sent it; ignored", room_id)
            return
        direct = bool(_mapping((invite or {}).get("content")).get("is_direct"))
        members = {str(e.get("state_key")) for e in state if e.get("type") == "m.room.member"}
        as_if = BotMessage(
            message_id=f"invite:{room_id}",
            content="",
            sender=BotUser(user_id=inviter),
            channel=BotChannel(channel_id=room_id, channel_type="dm" if direct or len(members) <= 2 else "group"),
            platform=PLATFORM,
            allow_control=False,
        )
        admits = self._adapter.admits
        if admits is None or not await admits(as_if):
            log.info("matrix: invitation to %s from %s ignored: the access rules do not admit them", room_id, inviter)
            return
        await self._join(room_id)
        log.info("matrix: joined %s, invited by %s", room_id, inviter)

    # --- events -------------------------------------------------------------------------------

    def _learn(self, view: RoomView, event: dict[str, Any]) -> None:
        kind, content = event.get("type"), _mapping(event.get("content"))
        if kind == "m.room.member" and isinstance(event.get("state_key"), str):
            user = event["state_key"]
            if content.get("membership") == "join":
                view.members[user] = str(content.get("displayname") or view.members.get(user) or "")
            else:
                view.members.pop(user, None)
        elif kind == "m.room.encryption":
            view.encrypted = True
        elif kind == "m.room.encrypted":
            view.encrypted = True
        elif kind == "m.room.name":
            view.name = str(content.get("name") or "")

    def _remember(self, room_id: str, event: dict[str, Any]) -> None:
        event_id = event.get("event_id")
        if isinstance(event_id, str) and event.get("type") == "m.room.message":
            content = _mapping(event.get("content"))
            self._seen.put(event_id, Seen(str(event.get("sender") or ""), _body(content), "message",
                                          tuple(_attachments(content))))

    async def normalise(self, room_id: str, event: dict[str, Any]) -> BotMessage | PlatformEvent | None:
        kind = event.get("type")
        event_id, sender = event.get("event_id"), event.get("sender")
        if not isinstance(event_id, str) or not isinstance(sender, str) or not event_id:
            return None
        if kind == "m.room.encrypted":
            return None  # the room's notice said it once; nothing of it can be read
        if kind == "m.room.message":
            return await self.message(room_id, event)
        if kind == "m.reaction":
            return self.reaction(room_id, event)
        if kind == "m.room.redaction":
            return self.redaction(room_id, event)
        if kind == "m.room.member" and sender != self._me and event.get("state_key") == sender:
            membership = _mapping(event.get("content")).get("membership")
            member_kind = {"join": "member_joined", "leave": "member_left"}.get(str(membership))
            if member_kind is not None:
                return PlatformEvent(kind=member_kind, platform=PLATFORM, chat_id=room_id, user_id=sender,  # type: ignore[arg-type]
                                     event_id=event_id, raw=event)
        return None

    async def message(self, room_id: str, event: dict[str, Any]) -> BotMessage | PlatformEvent | None:
        event_id, sender = str(event["event_id"]), str(event["sender"])
        content = _mapping(event.get("content"))
        relates = _mapping(content.get("m.relates_to"))
        if relates.get("rel_type") == "m.replace":
            return self.edited(room_id, event, relates)
        msgtype = content.get("msgtype")
        attachments = _attachments(content)
        if msgtype not in TEXT_TYPES and not attachments:
            return None
        thread_id = str(relates["event_id"]) if relates.get("rel_type") == "m.thread" and relates.get("event_id") else None
        quoted_id = _reply_target(relates)
        text = _body(content)
        if quoted_id is not None:
            text = strip_reply_fallback(text)
        if self._adapter.is_self(sender):
            if thread_id:
                self._threads_with_bot.put((room_id, thread_id), True)
            if event_id not in self._seen:  # posted by another process; ours know their newest text
                self._seen.put(event_id, Seen(sender, text, "message", tuple(attachments), thread_id=thread_id))
            return None  # the bot's own post, echoed back by the sync
        self._seen.put(event_id, Seen(sender, text, "message", tuple(attachments), thread_id=thread_id))
        if msgtype == "m.emote":
            text = f"* {text}"
        quoted = await self._quote(room_id, quoted_id) if quoted_id else None
        if quoted is None and thread_id:
            quoted = await self._quote(room_id, thread_id)  # the thread's root is what it is about
        view = self.rooms.setdefault(room_id, RoomView())
        reply_to_bot = (quoted is not None and quoted.author == "bot") or (
            thread_id is not None and (room_id, thread_id) in self._threads_with_bot
        )
        return BotMessage(
            message_id=event_id,
            content=text,
            message_type=_message_type(msgtype, attachments),
            sender=BotUser(user_id=sender, username=_localpart(sender), display_name=view.members.get(sender) or "",
                           is_bot=msgtype == "m.notice"),
            channel=BotChannel(channel_id=room_id, channel_type=view.channel_type(), title=view.name),
            timestamp=_timestamp(event.get("origin_server_ts")),
            reply_to=quoted_id,
            thread_id=thread_id,
            attachments=attachments,
            quoted=quoted,
            metadata={META_MENTIONS_BOT: self._mentions_me(content, text), META_REPLY_TO_BOT: reply_to_bot},
            allow_control=msgtype != "m.notice",
            platform=PLATFORM,
        )

    def edited(self, room_id: str, event: dict[str, Any], relates: dict[str, Any]) -> PlatformEvent | None:
        sender = str(event["sender"])
        if self._adapter.is_self(sender):
            return None
        new = _mapping(_mapping(event.get("content")).get("m.new_content"))
        target = relates.get("event_id")
        seen = self._seen.get(str(target)) if isinstance(target, str) else None
        return PlatformEvent(
            kind="message_edited", platform=PLATFORM, chat_id=room_id, user_id=sender,
            message_id=str(target) if isinstance(target, str) else None, new_text=clean_text(_body(new)),
            thread_id=seen.thread_id if seen is not None else None, event_id=str(event["event_id"]), raw=event,
        )

    def reaction(self, room_id: str, event: dict[str, Any]) -> PlatformEvent | None:
        sender = str(event["sender"])
        relates = _mapping(_mapping(event.get("content")).get("m.relates_to"))
        target, key = relates.get("event_id"), relates.get("key")
        if relates.get("rel_type") != "m.annotation" or not isinstance(target, str) or not isinstance(key, str):
            return None
        self._seen.put(str(event["event_id"]), Seen(sender, "", "reaction", target=target, key=key))
        if self._adapter.is_self(sender):
            return None
        return PlatformEvent(kind="reaction_added", platform=PLATFORM, chat_id=room_id, user_id=sender,
                             message_id=target, emoji=key, event_id=str(event["event_id"]), raw=event)

    def redaction(self, room_id: str, event: dict[str, Any]) -> PlatformEvent | None:
        """A redaction of a reaction this process saw is its removal; of a message, a deletion."""
        sender = str(event["sender"])
        redacts = event.get("redacts") or _mapping(event.get("content")).get("redacts")
        seen = self._seen.get(str(redacts)) if isinstance(redacts, str) else None
        if seen is None or self._adapter.is_self(sender):
            return None
        if seen.kind == "reaction":
            return PlatformEvent(kind="reaction_removed", platform=PLATFORM, chat_id=room_id, user_id=seen.sender,
                                 message_id=seen.target, emoji=seen.key, event_id=str(event["event_id"]), raw=event)
        return PlatformEvent(kind="message_deleted", platform=PLATFORM, chat_id=room_id, user_id=sender,
                             message_id=str(redacts), thread_id=seen.thread_id, event_id=str(event["event_id"]),
                             raw=event)

    async def _quote(self, room_id: str, event_id: str) -> QuotedRef | None:
        """The replied-to event as a quote: from what this process saw, else fetched."""
        seen = self._seen.get(event_id)
        if seen is None or (not seen.text and not seen.attachments and seen.sender != self._me):
            try:
                event = await self._fetch_event(room_id, event_id)
            except REQUEST_ERRORS as exc:  # a message without its quote beats no message
                log.info("matrix: could not fetch the quoted event in %s (%s)", room_id, type(exc).__name__)
                return QuotedRef(message_id=event_id) if seen is None else QuotedRef(
                    message_id=event_id, author="bot" if seen.sender == self._me else "user")
            content = _mapping(event.get("content"))
            # the homeserver hands the newest edit with the event it replaced (m.relations)
            edit = _mapping(_mapping(_mapping(event.get("unsigned")).get("m.relations")).get("m.replace"))
            newest = _mapping(_mapping(edit.get("content")).get("m.new_content")) or content
            seen = Seen(str(event.get("sender") or ""), strip_reply_fallback(_body(newest)), "message",
                        tuple(_attachments(content)))
            self._seen.put(event_id, seen)
        return QuotedRef(
            message_id=event_id, text=seen.text, author="bot" if self._adapter.is_self(seen.sender) else "user",
            attachments=seen.attachments,
        )

    def _mentions_me(self, content: dict[str, Any], text: str) -> bool:
        """Addressed to the bot: named in `m.mentions`, its user id in the text or in a mention
        pill's link, or its name at the start of the text (`Name: …`, how clients address people)."""
        me = self._me
        ids = _mapping(content.get("m.mentions")).get("user_ids")
        if isinstance(ids, list) and me in ids:
            return True
        formatted = content.get("formatted_body")
        if me and (me in text or (isinstance(formatted, str) and me in formatted)):
            return True
        own = self._adapter.self_user
        names = {n.lower() for n in (own.display_name, own.username) if n} if own is not None else set()
        head, sep, _ = text.partition(":")
        return bool(sep) and head.strip().lower() in names


def strip_reply_fallback(body: str) -> str:
    """A reply's body without the quoting fallback older clients put in front (`> <@who> …`
    lines, then a blank line); the quote itself comes with the message as `quoted`."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    index = 0
    while index < len(lines) and lines[index].startswith(">"):
        index += 1
    if index < len(lines) and lines[index] == "":
        index += 1
    return "\n".join(lines[index:])


def _reply_target(relates: dict[str, Any]) -> str | None:
    """The event a message replies to; a thread's fallback reply (`is_falling_back`) is none."""
    if relates.get("rel_type") == "m.thread" and relates.get("is_falling_back") is True:
        return None
    target = _mapping(relates.get("m.in_reply_to")).get("event_id")
    return target if isinstance(target, str) and target else None


def _attachments(content: dict[str, Any]) -> list[dict[str, Any]]:
    url = content.get("url")
    if content.get("msgtype") not in MEDIA_TYPES or not isinstance(url, str) or not url.startswith("mxc://"):
        return []
    info = _mapping(content.get("info"))
    size = info.get("size")
    filename = content.get("filename") if isinstance(content.get("filename"), str) else content.get("body")
    return [{
        "url": url,
        "file_id": url,
        "mime": clean_mime(info.get("mimetype")),
        "size": size if isinstance(size, int) and not isinstance(size, bool) else None,
        "filename": str(filename or "file"),
    }]


def _body(content: dict[str, Any]) -> str:
    """The text of a message; for media, the caption only (a body that is just the file's
    name says nothing)."""
    body = content.get("body")
    text = clean_text(body) if isinstance(body, str) else ""
    if content.get("msgtype") in MEDIA_TYPES:
        filename = content.get("filename")
        return text if isinstance(filename, str) and filename and text != filename else ""
    return text


def _message_type(msgtype: Any, attachments: list[dict[str, Any]]) -> MessageType:
    if attachments:
        return MEDIA_TYPES.get(str(msgtype), MessageType.FILE)
    return MessageType.TEXT


def _localpart(user_id: str) -> str:
    return user_id[1:].split(":", 1)[0] if user_id.startswith("@") else user_id


def _timestamp(value: Any) -> datetime:
    try:
        return datetime.fromtimestamp(float(value) / 1000, timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return datetime.now(timezone.utc)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _events(section: Any) -> list[dict[str, Any]]:
    events = _mapping(section).get("events")
    return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []
