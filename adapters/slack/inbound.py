"""Slack Events API payloads -> `BotMessage` / `PlatformEvent`, delivered once each.

Everything Slack-specific about *reading* lives here: which message subtypes are messages,
how threads map to `thread_id` and a quoted root, when a message counts as addressed to the
bot (a `<@BOT>` mention, a reply in a thread the bot started or replied in), and which
happenings become platform events.

Receiving itself is bolt's job (signature and timestamp checks, `url_verification`); bolt hands
every event and slash command to `on_event` / `on_command`. Slack may deliver one post several
times (retries with `X-Slack-Retry-Num`, Socket Mode redeliveries, and the `message` +
`app_mention` pair of one post), so each is handed on once, keyed on (channel, ts) for posts
and on the Events API `event_id` for other events; and it is acknowledged only once the runtime
has it, but within Slack's 3 seconds. The bot's own posts are read (to learn which threads it
is in) and then dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable
from datetime import datetime, timezone
from typing import Any

from botweave.adapter import Adapter
from botweave.mime import clean_mime
from botweave.payload import clean_text
from botweave.tasks import TaskOwner, failure_line
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
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond

from ..cache import BoundedCache
from .directory import SlackDirectory, channel_type_from_slack
from .format import mentioned_user_ids, reaction_to_emoji, to_plain_text
from .schema import sanitise_event

log = logging.getLogger(__name__)

PLATFORM = "slack"
ACK_DEADLINE_S = 2.0  # Slack wants an ack within 3 s
#: `message` subtypes that are something a person (or another bot) said.
MESSAGE_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "bot_message", "me_message"})
_MEMBER_KINDS = {"member_joined_channel": "member_joined", "member_left_channel": "member_left"}


class SlackInbound:
    def __init__(
        self,
        adapter: Adapter,
        directory: SlackDirectory,
        *,
        bot_id: str | None,
        stats: Counter[str],
        reply_in_thread: bool = False,
    ) -> None:
        self._adapter = adapter
        self._directory = directory
        self._bot_id = bot_id  # what Slack puts on the bot's posts made under another name
        self._reply_in_thread = reply_in_thread
        self._bot_threads: BoundedCache[tuple[str, str], bool] = BoundedCache(4096)
        self._seen: BoundedCache[tuple[str, ...], bool] = BoundedCache(4096)
        self._accepting = TaskOwner("slack: inbound")  # events still being recorded after their ack
        #: (received, duplicate, dispatched, settled): how an operator or a test tells "Slack
        #: never sent it" from "we dropped it".
        self.stats = stats

    @property
    def _my_id(self) -> str | None:
        me = self._adapter.self_user
        return me.user_id if me is not None else None

    def _authored(self, message: dict[str, Any]) -> bool:
        """The bot's own post: by its user, or by its bot id (posts under an agent's name)."""
        if self._adapter.is_self(message.get("user") or None):
            return True
        return bool(self._bot_id) and message.get("bot_id") == self._bot_id

    # --- receiving ------------------------------------------------------------------------

    async def on_event(self, ack: AsyncAck, body: dict[str, Any], event: dict[str, Any]) -> None:
        """Every Events API event: dedup, normalise, dispatch, then acknowledge."""
        self.stats["received"] += 1
        await self._record_then_ack(self._accept(event, body), ack)

    async def on_command(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """Slash commands: recorded, acknowledged, then run as a turn."""
        self.stats["received"] += 1
        await self._record_then_ack(self._accept_command(body), ack)

    async def on_action(self, ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
        """A `block_actions` payload (a button pressed on one of our messages): a
        `button_pressed` event, acknowledged within Slack's three seconds; what the presser
        is told goes back through the payload's response_url as an ephemeral message."""
        self.stats["received"] += 1
        try:
            event = self.press(body)

            async def acknowledge(answer: PressAnswer) -> None:
                await ack()
                if answer.text:
                    await respond(text=answer.text, response_type="ephemeral", replace_original=False)

            if event is None:
                self.stats["skipped"] += 1
                await ack()
                return
            self.stats["dispatched"] += 1
            await self._adapter.pressed(event, acknowledge)
        finally:
            self.stats["settled"] += 1

    def press(self, body: dict[str, Any]) -> PlatformEvent | None:
        """The first button of a `block_actions` payload as a press; None for other payloads
        (a select menu, a press on a message that is gone)."""
        actions = body.get("actions") or []
        action = actions[0] if actions else {}
        if body.get("type") != "block_actions" or action.get("type") != "button":
            return None
        container = body.get("container") or {}
        message = body.get("message") or {}
        # `channel` and `user` come as an object with an id, or (in some payloads) as the id
        channel = _id_of(body.get("channel")) or str(container.get("channel_id") or "")
        ts = str(container.get("message_ts") or message.get("ts") or "")
        if not channel or not ts:
            return None
        thread_ts = message.get("thread_ts")
        return PlatformEvent(
            kind="button_pressed",
            platform=PLATFORM,
            chat_id=channel,
            user_id=_id_of(body.get("user")),
            message_id=ts,
            thread_id=str(thread_ts) if thread_ts and thread_ts != ts else None,
            event_id=f"action:{action.get('action_ts') or body.get('trigger_id') or ''}",
            action_id=str(action.get("action_id") or ""),
            raw=body,
        )

    async def _record_then_ack(self, accept: Awaitable[None], ack: AsyncAck) -> None:
        """Acknowledge once the event reached the runtime, so Slack redelivers anything a
        crash lost; but never later than ACK_DEADLINE_S (slow look-ups finish after it)."""

        async def settle() -> None:
            try:
                await accept
            finally:
                self.stats["settled"] += 1

        task = self._accepting.spawn(settle(), name="record an event")
        await asyncio.wait({task}, timeout=ACK_DEADLINE_S)
        await ack()

    async def _accept(self, raw_event: Any, raw_body: Any) -> None:
        event, body = sanitise_event(raw_event), _envelope(raw_body)
        if event is None:
            self.stats["skipped"] += 1
            log.warning("slack: skipped an event that is not an object with a type")
            return
        key = _dedup_key(event, body)
        if key is not None and not self._seen.add_if_new(key, True):
            self.stats["duplicate"] += 1
            log.debug("slack: duplicate delivery of %s dropped", key)
            return
        try:
            item = await self._normalise(event, body)
        except Exception as exc:  # boundary: slack's receive path, per event; one line, and Slack's retry may try again
            if key is not None:
                self._seen.discard(key)
            self.stats["unreadable"] += 1
            log.error("slack: could not read a %s event (%s)", event.get("type"), failure_line(exc))
            return
        if item is not None:
            self.stats["dispatched"] += 1
            await self._adapter.dispatch(item)

    async def _accept_command(self, body: dict[str, Any]) -> None:
        trigger = _text(body, "trigger_id")
        if trigger and not self._seen.add_if_new(("command", trigger), True):
            self.stats["duplicate"] += 1
            return
        self.stats["dispatched"] += 1
        await self._adapter.dispatch(await self.command(body))

    async def close(self) -> None:
        """Let events still being recorded after their ack finish, briefly; then stop them."""
        await self._accepting.close(timeout=ACK_DEADLINE_S)

    async def normalise(self, event: Any, body: Any) -> BotMessage | PlatformEvent | None:
        """Any event payload as a message, a platform event or None (skipped), never an
        exception: it is sanitised first (`schema.sanitise_event`), so every field read below
        is absent or of Slack's type."""
        clean_event = sanitise_event(event)
        if clean_event is None:
            return None
        return await self._normalise(clean_event, _envelope(body))

    async def _normalise(self, event: dict[str, Any], body: dict[str, Any]) -> BotMessage | PlatformEvent | None:
        kind = event.get("type")
        if kind == "message":
            return await self.message_event(event, body)
        if kind == "app_mention":
            return await self.message(event, body, via_mention=True)
        if kind in ("reaction_added", "reaction_removed"):
            return self.reaction(event, body)
        if kind in ("member_joined_channel", "member_left_channel"):
            return self.membership(event, body)
        return None

    def note_own_post(self, chat_id: str, ts: str, thread_id: str | None, text: str) -> None:
        """A post of ours (from this process): its thread addresses the bot, and it is a root
        whose text a reply in its thread quotes without asking Slack."""
        if thread_id:
            self._bot_threads.put((chat_id, thread_id), True)
        if ts and self._my_id is not None:
            self._directory.remember_root(chat_id, ts, {"ts": ts, "text": text, "user": self._my_id})

    # --- messages ------------------------------------------------------------------------

    async def message_event(
        self, event: dict[str, Any], body: dict[str, Any]
    ) -> BotMessage | PlatformEvent | None:
        """A `message` event of any subtype; None for what is neither a message nor an event."""
        subtype = event.get("subtype")
        if subtype == "message_changed":
            return await self.edited(event, body)
        if subtype == "message_deleted":
            return self.deleted(event, body)
        if subtype not in MESSAGE_SUBTYPES:
            return None
        return await self.message(event, body, via_mention=False)

    async def message(
        self, event: dict[str, Any], body: dict[str, Any], *, via_mention: bool
    ) -> BotMessage | None:
        """A post (or an `app_mention` of one) as a BotMessage; the bot's own posts are None.

        The bot's own posts still teach us something: a post in a thread means the bot is
        part of that thread, whichever process of the bot posted it.
        """
        if self._authored(event):
            self._note_echo(event)
            return None
        channel_id, ts = _text(event, "channel"), _text(event, "ts")
        if not channel_id or not ts:
            return None
        channel_type = await self._channel_type(channel_id, event.get("channel_type"))
        raw_text = event.get("text") or ""
        thread_ts = event.get("thread_ts")
        in_thread = bool(thread_ts) and thread_ts != ts
        quoted, reply_to_bot = (None, False)
        if in_thread:
            quoted, reply_to_bot = await self._thread_context(channel_id, str(thread_ts), event)
        thread_id = str(thread_ts) if in_thread else (ts if self._reply_in_thread else None)
        attachments = _attachments(event.get("files") or [])
        is_bot = event.get("subtype") == "bot_message" or bool(event.get("bot_id"))
        return BotMessage(
            message_id=ts,
            content=await to_plain_text(raw_text, self._my_id, self._directory.display_name),
            sender=await self._sender(event, is_bot),
            channel=BotChannel(channel_id=channel_id, channel_type=channel_type),
            message_type=_message_type(attachments),
            timestamp=_ts_to_datetime(ts),
            reply_to=str(thread_ts) if in_thread else None,
            thread_id=thread_id,
            attachments=attachments,
            quoted=quoted,
            metadata={
                META_MENTIONS_BOT: via_mention or any(map(self._adapter.is_self, mentioned_user_ids(raw_text))),
                META_REPLY_TO_BOT: reply_to_bot,
                META_SCOPE: _team(event, body),
                "slack_subtype": event.get("subtype"),
            },
            allow_control=not is_bot,
            platform=PLATFORM,
        )

    async def command(self, payload: dict[str, Any]) -> BotMessage:
        """A slash command (`/new args`) as a command message; always addressed to this bot."""
        channel_id, channel_name = _text(payload, "channel_id"), _text(payload, "channel_name")
        channel_type: ChannelType
        if channel_name == "directmessage":
            channel_type = "dm"
        elif channel_name == "privategroup" or channel_name.startswith("mpdm-"):
            channel_type = "group"
        else:
            channel_type = await self._directory.channel_type(channel_id)
        args = await to_plain_text(_text(payload, "text"), self._my_id, self._directory.display_name)
        user_id = _text(payload, "user_id")
        return BotMessage(
            message_id=_text(payload, "trigger_id") or _text(payload, "command_ts"),
            content=f"{_text(payload, 'command')} {args}".strip(),
            sender=await self._sender({"user": user_id}, False),
            channel=BotChannel(channel_id=channel_id, channel_type=channel_type, title=channel_name),
            message_type=MessageType.COMMAND,
            metadata={META_MENTIONS_BOT: True, META_REPLY_TO_BOT: False, META_SCOPE: _text(payload, "team_id") or None},
            platform=PLATFORM,
        )

    async def _channel_type(self, channel_id: str, slack_type: str | None) -> ChannelType:
        mapped = channel_type_from_slack(slack_type)
        if mapped is None:
            return await self._directory.channel_type(channel_id)
        self._directory.remember_channel(channel_id, mapped)
        return mapped

    async def _sender(self, event: dict[str, Any], is_bot: bool) -> BotUser:
        user_id = str(event.get("user") or event.get("bot_id") or "")
        if is_bot and not event.get("user"):
            name = (event.get("bot_profile") or {}).get("name") or event.get("username") or user_id
            return BotUser(user_id=user_id, username=name, display_name=name, is_bot=True)
        profile = await self._directory.user(user_id) if user_id else None
        display = await self._directory.display_name(user_id) if profile else ""
        return BotUser(
            user_id=user_id,
            username=_text(profile or {}, "name"),
            display_name=display,
            is_bot=is_bot or bool((profile or {}).get("is_bot")),
        )

    async def _thread_context(
        self, channel_id: str, thread_ts: str, event: dict[str, Any]
    ) -> tuple[QuotedRef | None, bool]:
        """The thread root as a quote, and whether the thread is one the bot is part of."""
        root = event.get("root")
        if isinstance(root, dict):  # thread_broadcast carries its root
            self._directory.remember_root(channel_id, thread_ts, root)
        else:
            root = await self._directory.thread_root(channel_id, thread_ts)
        root_is_ours = self._adapter.is_self(event.get("parent_user_id")) or (root is not None and self._authored(root))
        replied_in = (channel_id, thread_ts) in self._bot_threads or self._replied_in(root)
        quoted = None
        if root is not None:
            quoted = QuotedRef(
                message_id=thread_ts,
                text=await to_plain_text(root.get("text") or "", self._my_id, self._directory.display_name),
                author="bot" if root_is_ours else "user",
                attachments=tuple(_attachments(root.get("files") or [])),
            )
        return quoted, root_is_ours or replied_in

    def _note_echo(self, event: dict[str, Any]) -> None:
        """Our post as Slack delivers it back, whichever process of the bot posted it."""
        thread_ts, channel = _text(event, "thread_ts"), _text(event, "channel")
        if thread_ts and channel:
            self._bot_threads.put((channel, thread_ts), True)

    def _replied_in(self, root: dict[str, Any] | None) -> bool:
        return any(map(self._adapter.is_self, (root or {}).get("reply_users") or []))

    # --- platform events -----------------------------------------------------------------

    async def edited(self, event: dict[str, Any], body: dict[str, Any]) -> PlatformEvent | None:
        """`message_changed` whose text changed; unfurls and our own edits are not edits."""
        new = event.get("message") or {}
        previous = event.get("previous_message")
        if self._authored(new):
            return None
        if isinstance(previous, dict) and (previous.get("text") or "") == (new.get("text") or ""):
            return None
        ts = str(new.get("ts") or "")
        thread_ts = new.get("thread_ts")
        return PlatformEvent(
            kind="message_edited",
            platform=PLATFORM,
            chat_id=_text(event, "channel"),
            user_id=str(new.get("user") or new.get("bot_id") or ""),
            message_id=ts or None,
            new_text=await to_plain_text(new.get("text") or "", self._my_id, self._directory.display_name),
            thread_id=str(thread_ts) if thread_ts and thread_ts != ts else None,
            event_id=body.get("event_id"),
            raw=event,
        )

    def deleted(self, event: dict[str, Any], body: dict[str, Any]) -> PlatformEvent | None:
        """`message_deleted`; Slack does not say who deleted, so the author stands in."""
        previous = event.get("previous_message") or {}
        if self._authored(previous):
            return None
        thread_ts = previous.get("thread_ts")
        deleted_ts = event.get("deleted_ts") or previous.get("ts")
        return PlatformEvent(
            kind="message_deleted",
            platform=PLATFORM,
            chat_id=_text(event, "channel"),
            user_id=str(previous.get("user") or previous.get("bot_id") or ""),
            message_id=str(deleted_ts) if deleted_ts else None,
            thread_id=str(thread_ts) if thread_ts and thread_ts != deleted_ts else None,
            event_id=body.get("event_id"),
            raw=event,
        )

    def reaction(self, event: dict[str, Any], body: dict[str, Any]) -> PlatformEvent | None:
        """`reaction_added` / `reaction_removed` on a message (file reactions are ignored)."""
        item = event.get("item") or {}
        if item.get("type") != "message" or self._adapter.is_self(event.get("user")):
            return None
        return PlatformEvent(
            kind=event["type"],
            platform=PLATFORM,
            chat_id=str(item.get("channel", "")),
            user_id=str(event.get("user", "")),
            message_id=str(item.get("ts", "")) or None,
            emoji=reaction_to_emoji(str(event.get("reaction", ""))),
            event_id=body.get("event_id"),
            raw=event,
        )

    def membership(self, event: dict[str, Any], body: dict[str, Any]) -> PlatformEvent | None:
        kind = _MEMBER_KINDS.get(event.get("type", ""))
        if kind is None:
            return None
        return PlatformEvent(
            kind=kind,  # type: ignore[arg-type]
            platform=PLATFORM,
            chat_id=_text(event, "channel"),
            user_id=str(event.get("user", "")),
            event_id=body.get("event_id"),
            raw=event,
        )


def _dedup_key(event: dict[str, Any], body: dict[str, Any]) -> tuple[str, ...] | None:
    """One key per post (shared by its `message` and `app_mention`), else per event id."""
    kind = event.get("type")
    is_post = kind == "app_mention" or (kind == "message" and event.get("subtype") in MESSAGE_SUBTYPES)
    channel, ts = _text(event, "channel"), _text(event, "ts")
    if is_post and channel and ts:
        return ("post", channel, ts)
    event_id = body.get("event_id")
    return ("event", str(event_id)) if event_id else None


def _attachments(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Slack file objects as attachments; `url_private` needs the bot token to fetch."""
    return [
        {
            "url": f.get("url_private") or f.get("url_private_download"),
            "file_id": f.get("id"),
            "mime": clean_mime(f.get("mimetype")),
            "size": f.get("size"),
            "filename": f.get("name"),
        }
        for f in files
        if isinstance(f, dict)
    ]


def _message_type(attachments: list[dict[str, Any]]) -> MessageType:
    if not attachments:
        return MessageType.TEXT
    mimes = [str(a.get("mime") or "") for a in attachments]
    if all(m.startswith("image/") for m in mimes):
        return MessageType.IMAGE
    if all(m.startswith("audio/") for m in mimes):
        return MessageType.AUDIO
    if all(m.startswith("video/") for m in mimes):
        return MessageType.VIDEO
    return MessageType.FILE


def _ts_to_datetime(ts: str) -> datetime:
    try:
        return datetime.fromtimestamp(float(ts), timezone.utc)
    except (ValueError, OverflowError, OSError):  # not a time, or past the calendar's end
        return datetime.now(timezone.utc)


def _team(event: dict[str, Any], body: dict[str, Any]) -> str | None:
    return _text(event, "team") or body.get("team_id")


def _text(payload: dict[str, Any], key: str) -> str:
    """A string field, or "" when it is absent or not a string (an id given as an object)."""
    value = payload.get(key)
    return value if isinstance(value, str) else ""


def _envelope(body: Any) -> dict[str, Any]:
    """The envelope fields the normaliser reads, each a string or absent."""
    if not isinstance(body, dict):
        return {}
    fields = {key: body.get(key) for key in ("event_id", "team_id")}
    return {key: clean_text(value) for key, value in fields.items() if isinstance(value, str)}


def _id_of(value: Any) -> str:
    """The id of a reference Slack sends as an object with an `id` or as the bare id."""
    if isinstance(value, dict):
        value = value.get("id")
    return value if isinstance(value, str) else ""
