"""Platform-neutral message and event types.

Every adapter translates its SDK's objects into these, so the pipeline, policies, rooms and
tests never need to know which platform a message came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Literal

QUOTE_SNIPPET_MAX = 500
_WS = re.compile(r"\s+")
_COMMAND = re.compile(r"^/([A-Za-z0-9_]+)(?:@([A-Za-z0-9_]+))?(?:\s+(.*))?$", re.DOTALL)

ChannelType = Literal["dm", "group", "channel", "thread"]

# Keys adapters put into BotMessage.metadata so group gating can be decided once,
# in the pipeline, from what each platform reports.
META_MENTIONS_BOT = "mentions_bot"
META_REPLY_TO_BOT = "reply_to_bot"
META_SCOPE = "scope"  # admission scope: Telegram chat, Discord guild, Slack team
# Set by the runtime when it receives an item: when (Unix time) this process got it, which
# orders a conversation's messages for turn control and dates them for staleness.
META_RECEIVED_AT = "received_at"
# A message answered again after its author edited it: the how-manieth answer this is (1 for
# the first re-run), so each answer has its own turn marker and outbox keys.
META_REVISION = "revision"
# Set by a platform whose chats are conversations of their own whatever their type (a web
# session is one person's, yet each session has its own history): the conversation's key.
META_CONVERSATION = "conversation"
# Set by a platform where the person chose who answers (a web session's agent): that agent.
META_AGENT = "agent"


def revision_suffix(msg: BotMessage) -> str:
    """What tells an edited message's later answers apart in keys ("" for the first one)."""
    revision = msg.metadata.get(META_REVISION)
    return f"~{revision}" if revision else ""


class MessageType(str, Enum):
    """What kind of message arrived; text, or the kind of file it mainly carries."""

    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    FILE = "file"
    LOCATION = "location"
    STICKER = "sticker"
    COMMAND = "command"
    CALLBACK = "callback"
    REACTION = "reaction"
    REPLY = "reply"
    EDIT = "edit"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class BotUser:
    """A person (or bot) on a platform, the same shape whichever platform they are on."""

    user_id: str
    username: str = ""
    display_name: str = ""
    is_bot: bool = False

    @property
    def name(self) -> str:
        """The best human-readable name, used to attribute group turns."""
        return self.display_name or self.username or self.user_id

    def to_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "username": self.username,
            "display_name": self.display_name,
            "is_bot": self.is_bot,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BotUser:
        return cls(
            user_id=str(data.get("user_id", "")),
            username=data.get("username", ""),
            display_name=data.get("display_name", ""),
            is_bot=bool(data.get("is_bot", False)),
        )


@dataclass(frozen=True, slots=True)
class BotChannel:
    """Where a message was written: a direct message, a group, a channel or a thread."""

    channel_id: str
    channel_type: ChannelType = "dm"
    title: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"channel_id": self.channel_id, "channel_type": self.channel_type, "title": self.title}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BotChannel:
        return cls(
            channel_id=str(data.get("channel_id", "")),
            channel_type=data.get("channel_type", "dm"),
            title=data.get("title", ""),
        )


@dataclass(frozen=True, slots=True)
class QuotedRef:
    """What the user replied to or quoted; context for the agent, never an instruction.

    `attachments` are the quoted message's files, in the same form as `BotMessage.attachments`,
    so a reply to a photo can show the agent that photo."""

    message_id: str = ""
    text: str = ""
    author: str = ""  # "bot" when the quoted message is ours, else "user"
    attachments: tuple[dict[str, Any], ...] = field(default=(), hash=False)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"message_id": self.message_id, "text": self.text, "author": self.author}
        if self.attachments:
            data["attachments"] = [dict(a) for a in self.attachments]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QuotedRef:
        return cls(
            message_id=str(data.get("message_id", "") or ""),
            text=str(data.get("text", "") or ""),
            author=str(data.get("author", "") or ""),
            attachments=tuple(dict(a) for a in data.get("attachments") or () if isinstance(a, dict)),
        )


def quote_snippet(text: str) -> str:
    """Collapse whitespace and cap the quote so a huge quoted message cannot swamp the prompt."""
    collapsed = _WS.sub(" ", text).strip()
    if len(collapsed) > QUOTE_SNIPPET_MAX:
        collapsed = collapsed[: QUOTE_SNIPPET_MAX - 3] + "…"
    return collapsed


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(slots=True)
class BotMessage:
    """A message as every part of botweave sees it, whichever platform it came from: hooks,
    commands, tools (`ToolContext.origin`) and routes all read this one shape."""

    message_id: str
    content: str | dict[str, Any]
    sender: BotUser
    channel: BotChannel
    message_type: MessageType = MessageType.TEXT
    timestamp: datetime = field(default_factory=_utcnow)
    reply_to: str | None = None
    thread_id: str | None = None
    attachments: list[dict[str, Any]] = field(default_factory=list)
    quoted: QuotedRef | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    allow_control: bool = True
    platform: str = ""

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        value = self.content.get("text", "")
        return value if isinstance(value, str) else ""

    @property
    def prompt_text(self) -> str:
        """The user turn as the agent sees it, with the quoted message as a context block."""
        text = self.text
        if self.quoted is None or not self.quoted.text.strip():
            return text
        block = f'[In reply to: "{quote_snippet(self.quoted.text)}"]'
        return f"{block}\n{text}" if text else block

    def _command_match(self) -> re.Match[str] | None:
        return _COMMAND.match(self.text.strip())

    @property
    def is_command(self) -> bool:
        return self._command_match() is not None

    @property
    def command(self) -> str | None:
        """The command name, lower-cased, without the slash or the `@botname` suffix."""
        match = self._command_match()
        return match.group(1).lower() if match else None

    @property
    def command_target(self) -> str | None:
        """The `@botname` a command is addressed to, if any."""
        match = self._command_match()
        return match.group(2) if match else None

    @property
    def command_args(self) -> list[str]:
        match = self._command_match()
        if not match or not match.group(3):
            return []
        return match.group(3).split()

    @property
    def is_group(self) -> bool:
        return self.channel.channel_type != "dm"

    def to_dict(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "content": self.content,
            "message_type": self.message_type.value,
            "sender": self.sender.to_dict(),
            "channel": self.channel.to_dict(),
            "timestamp": self.timestamp.isoformat(),
            "reply_to": self.reply_to,
            "thread_id": self.thread_id,
            "attachments": [dict(a) for a in self.attachments],
            "quoted": self.quoted.to_dict() if self.quoted else None,
            "metadata": dict(self.metadata),
            "allow_control": self.allow_control,
            "platform": self.platform,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BotMessage:
        quoted = data.get("quoted")
        timestamp = data.get("timestamp")
        return cls(
            message_id=str(data["message_id"]),
            content=data.get("content", ""),
            message_type=MessageType(data.get("message_type", "text")),
            sender=BotUser.from_dict(data.get("sender") or {}),
            channel=BotChannel.from_dict(data.get("channel") or {}),
            timestamp=datetime.fromisoformat(timestamp) if timestamp else _utcnow(),
            reply_to=data.get("reply_to"),
            thread_id=data.get("thread_id"),
            attachments=list(data.get("attachments") or []),
            quoted=QuotedRef.from_dict(quoted) if quoted is not None else None,
            metadata=dict(data.get("metadata") or {}),
            allow_control=bool(data.get("allow_control", True)),
            platform=data.get("platform", ""),
        )


EventKind = Literal[
    "reaction_added",
    "reaction_removed",
    "message_edited",
    "message_deleted",
    "member_joined",
    "member_left",
    "thread_created",
    "button_pressed",
]
EVENT_KINDS: frozenset[str] = frozenset(EventKind.__args__)  # type: ignore[attr-defined]
HOOK_NEW_TEXT_MAX = 500


@dataclass(slots=True)
class PlatformEvent:
    """An inbound happening that is not a message: reactions, edits, deletions, membership,
    button presses (`message_id` is then the message that carried the button)."""

    kind: EventKind
    platform: str
    chat_id: str
    user_id: str
    message_id: str | None = None
    emoji: str | None = None
    new_text: str | None = None
    thread_id: str | None = None
    event_id: str | None = None  # the platform's own id, when it has one, for dedup
    #: A press (`button_pressed`): the action of the button, and the value it carried.
    action_id: str | None = None
    value: str | None = None
    raw: Any = None

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"unknown PlatformEvent kind {self.kind!r}; one of {sorted(EVENT_KINDS)}")

    @property
    def hook_event(self) -> str:
        if self.kind in ("reaction_added", "reaction_removed"):
            return "reaction_received"
        return self.kind

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "platform": self.platform,
            "chat_id": self.chat_id,
            "user_id": self.user_id,
            "message_id": self.message_id,
            "emoji": self.emoji,
            "new_text": self.new_text,
            "thread_id": self.thread_id,
            "event_id": self.event_id,
            "action_id": self.action_id,
            "value": self.value,
        }

    def hook_payload(self) -> dict[str, Any]:
        payload = self.to_dict()
        if payload["new_text"] is not None:
            payload["new_text"] = payload["new_text"][:HOOK_NEW_TEXT_MAX]
        return payload


ButtonStyle = Literal["default", "primary", "danger"]


@dataclass(frozen=True, slots=True)
class Button:
    """A button on a message the bot posts: what people read (`label`), what a press means
    (`action_id`, with an optional `value`), and how prominent it looks where the platform
    can show that. A press comes back as a `button_pressed` PlatformEvent with the same
    `action_id` and `value`, whatever the platform could carry on its wire."""

    label: str
    action_id: str
    value: str = ""
    style: ButtonStyle = "default"

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "action_id": self.action_id, "value": self.value, "style": self.style}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Button:
        style: ButtonStyle = "default"
        if data.get("style") == "primary":
            style = "primary"
        elif data.get("style") == "danger":
            style = "danger"
        return cls(
            label=str(data.get("label", "")),
            action_id=str(data.get("action_id", "")),
            value=str(data.get("value") or ""),
            style=style,
        )


@dataclass(frozen=True, slots=True)
class PressAnswer:
    """What the person who pressed a button is told, in the press's own answer (a Telegram
    callback answer, an ephemeral reply on Discord and Slack). `alert` marks an answer they
    must not miss (the button is not theirs, the request expired); an empty text only
    acknowledges the press."""

    text: str = ""
    alert: bool = False


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """How an agent appears when it posts as itself (rooms): a name and, where the platform
    can show one, an avatar (Discord webhooks, Slack `icon_url`) or an emoji (Slack)."""

    name: str
    avatar_url: str | None = None
    icon_emoji: str | None = None


ActionStatus = Literal["ok", "unsupported", "failed", "no_route"]


@dataclass(frozen=True, slots=True)
class MessageActionResult:
    """The outcome of an outbound action; reactions, edits and deletes report, never raise."""

    status: ActionStatus
    target: str = ""
    detail: str = ""
    message_id: str | None = None  # the platform id of a message that was sent
    message_ids: tuple[str, ...] = ()  # every message a post used (a long text is several)
    thread_id: str | None = None  # the thread a `create_thread` opened
    retryable: bool = False  # failed without a refusal from the platform: another try may work

    @property
    def ok(self) -> bool:
        return self.status == "ok"


LengthUnit = Literal["chars", "utf16"]


@dataclass(frozen=True, slots=True)
class PlatformCapabilities:
    """What a platform can do (message length, edits, threads, reactions, buttons), so the
    shared delivery code adapts to each one instead of asking which platform it is."""

    max_message_length: int | None = None  # None: no limit
    length_unit: LengthUnit = "chars"
    #: The longest caption a file may carry (Telegram: 1024); None: as long as a message.
    max_caption_length: int | None = None
    can_edit: bool = True
    can_delete: bool = True
    can_react: bool = True
    threads: bool = False
    typing: bool = False
    markdown: str = "none"  # the dialect replies are rendered to: none, telegram, discord, slack
    buttons: bool = False  # messages can carry buttons whose presses come back
    edit_floor_ms: int = 0  # the platform's minimum time between edits of one message
    group_edit_floor_ms: int | None = None  # a stricter floor in groups (Telegram), if any

    @property
    def caption_limit(self) -> int | None:
        return self.max_caption_length if self.max_caption_length is not None else self.max_message_length

    def edit_floor_for(self, channel_type: str) -> int:
        if channel_type != "dm" and self.group_edit_floor_ms is not None:
            return self.group_edit_floor_ms
        return self.edit_floor_ms


#: Image types every vision model and every platform takes as a picture.
PHOTO_MIMES = frozenset({"image/jpeg", "image/png", "image/webp", "image/gif"})


@dataclass(frozen=True, slots=True)
class OutboundFile:
    """A file the bot posts: its bytes, the name people see, and its MIME type. The bytes are
    whole here: a file is loaded within `media.max_bytes` before it is posted."""

    data: bytes = field(repr=False)
    filename: str
    mime: str = "application/octet-stream"

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def kind(self) -> Literal["image", "voice", "document"]:
        """How platforms show it: a picture, a voice note (OGG), or a file to download."""
        mime = self.mime.split(";", 1)[0].strip().lower()
        if mime in PHOTO_MIMES:
            return "image"
        if mime in ("audio/ogg", "audio/opus"):
            return "voice"
        return "document"
