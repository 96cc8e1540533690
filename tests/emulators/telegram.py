"""A Telegram Bot API emulator on 127.0.0.1 for tests driving the real python-telegram-bot.

It speaks the Bot API wire format (`POST /bot<token>/<method>` with form or JSON parameters,
`{"ok": true, "result": ...}` / `{"ok": false, "error_code", "description", "parameters"}`),
keeps a little chat state (messages per chat, edits, deletions, reactions, inline keyboards),
long-polls `getUpdates` with offsets like Telegram, pushes updates to a webhook when one is set,
records every call, and can be told to fail: 429 with `retry_after`, 400s with Telegram's own
descriptions, 409 conflicts, or "delivered but the connection dropped".

Forum topics: `topic` scripts one a person opened; `createForumTopic` opens one for the bot
(forum supergroups only, as on Telegram).

Files work like Telegram's: inbound photos, documents, voice, audio and video carry file ids
whose bytes the emulator keeps; `getFile` hands out a `file_path` served under
`/file/bot<token>/<file_path>`. A file can declare a size other than what is served, so size
limits can be tested on both sides. Uploads (`sendPhoto`, `sendDocument`, `sendVoice`,
`sendAudio`, `sendVideo`, `sendAnimation`) take multipart parts as python-telegram-bot sends
them, or a file id, or a URL; they are recorded in `uploads` and become messages in the chat.

Buttons: inline keyboards are checked (callback_data is 1-64 bytes) and stored on messages;
`press` / `push_callback_query` deliver a button press, and `callback_answers` records each
`answerCallbackQuery` with how long after delivery it came. Like Telegram, updates of a kind
the bot's `allowed_updates` leaves out never reach it (they land in `filtered_updates`), so a
bot that forgets to ask for button presses finds out here rather than in production.

Tests script users and chats with the builders (`user`, `private_chat`, `group`,
`push_message`, `push_photo`, `press`, ...), then assert on `calls`, `sent`, `uploads`,
`callback_answers` and the chat state.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import mimetypes
import re
import secrets
import struct
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.emulators.serving import client_gone

BOT_ID = 4242
BOT_USERNAME = "ThisBot"
TOKEN = "123:abc"
MAX_TEXT_UTF16 = 4096
MAX_CAPTION_UTF16 = 1024
MAX_CALLBACK_DATA = 64  # bytes
MAX_BUTTONS = 100
MAX_DOWNLOAD = 20 * 1024 * 1024  # what getFile hands out to bots on the cloud Bot API
MAX_UPLOAD = 50 * 1024 * 1024
MAX_PHOTO_UPLOAD = 10 * 1024 * 1024
MAX_BODY = 128 * 1024 * 1024

_STRING_PARAMS = {
    "text", "url", "secret_token", "action", "file_id", "callback_query_id", "caption", "emoji",
    "photo", "document", "voice", "audio", "video", "animation", "video_note", "sticker", "thumbnail",
    "parse_mode", "title", "performer", "inline_message_id", "name",
}
#: Upload methods and the parameter (and message field) each one carries its file in.
MEDIA_METHODS = {
    "sendPhoto": "photo", "sendDocument": "document", "sendVoice": "voice", "sendAudio": "audio",
    "sendVideo": "video", "sendAnimation": "animation",
}
SEND_METHODS = ("sendMessage", *MEDIA_METHODS)
_FOLDERS = {"photo": "photos", "document": "documents", "voice": "voice", "audio": "music", "video": "videos",
            "animation": "animations"}
#: File path extensions as Telegram's servers choose them (voice notes are .oga there).
_EXTENSIONS = {"audio/ogg": ".oga", "image/jpeg": ".jpg", "audio/mpeg": ".mp3", "video/mp4": ".mp4",
               "application/pdf": ".pdf", "text/plain": ".txt"}
_VOICE_MIMES = {"audio/ogg", "audio/mpeg", "audio/mp4", "audio/x-m4a", "audio/m4a"}
_BUTTON_ACTIONS = ("url", "callback_data", "web_app", "login_url", "switch_inline_query",
                   "switch_inline_query_current_chat", "switch_inline_query_chosen_chat", "copy_text",
                   "callback_game", "pay")
_ENTITY_TYPES = {
    "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number", "bold", "italic",
    "underline", "strikethrough", "spoiler", "blockquote", "expandable_blockquote", "code", "pre",
    "text_link", "text_mention", "custom_emoji", "date_time",
}
_REACTIONS = {"👍", "👎", "❤", "🔥", "🥰", "👏", "😁", "🤔", "🤯", "😱", "🤬", "😢", "🎉", "🤩", "🤮", "💩",
              "🙏", "👌", "🕊", "🤡", "🥱", "🥴", "😍", "🐳", "❤‍🔥", "🌚", "🌭", "💯", "🤣", "⚡", "🍌",
              "🏆", "💔", "🤨", "😐", "🍓", "🍾", "💋", "🖕", "😈", "😴", "😭", "🤓", "👻", "👨‍💻", "👀",
              "🎃", "🙈", "😇", "😨", "🤝", "✍", "🤗", "🫡", "🎅", "🎄", "☃", "💅", "🤪", "🗿", "🆒",
              "💘", "🙉", "🦄", "😘", "💊", "🙊", "😎", "👾", "🤷‍♂", "🤷", "🤷‍♀", "😡"}
_MENTION = re.compile(r"(?<![\w@])@([A-Za-z0-9_]{3,32})")
_COMMAND = re.compile(r"^/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")

CONFLICT_POLLING = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
CONFLICT_WEBHOOK = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are exactly "
    "the same as a current content and reply markup of the message"
)
CAPTION_TOO_LONG = "Bad Request: message caption is too long"
BUTTON_DATA_INVALID = "Bad Request: BUTTON_DATA_INVALID"
BUTTON_URL_INVALID = "Bad Request: BUTTON_URL_INVALID"
TEXT_BUTTON_INLINE = "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
MARKUP_TOO_LONG = "Bad Request: REPLY_MARKUP_TOO_LONG"
QUERY_TOO_OLD = "Bad Request: query is too old and response timeout expired or query ID is invalid"
WRONG_FILE_ID = "Bad Request: wrong file identifier/HTTP URL specified"
FILE_TYPE_MISMATCH = "Bad Request: type of file mismatch"
URL_CONTENT_FAILED = "Bad Request: failed to get HTTP URL content"
FILE_TOO_BIG = "Bad Request: file is too big"
IMAGE_PROCESS_FAILED = "Bad Request: IMAGE_PROCESS_FAILED"
PHOTO_INVALID_DIMENSIONS = "Bad Request: PHOTO_INVALID_DIMENSIONS"
PHOTO_TOO_BIG = "Bad Request: PHOTO_SAVE_FILE_INVALID"
NO_TEXT_TO_EDIT = "Bad Request: there is no text in the message to edit"
NO_CAPTION_TO_EDIT = "Bad Request: there is no caption in the message to edit"
#: Update kinds Telegram leaves out unless a bot asks for them by name.
_OPT_IN_UPDATES = {"chat_member", "message_reaction", "message_reaction_count"}


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _utf16_offset(text: str, index: int) -> int:
    return utf16_len(text[:index])


def auto_entities(text: str) -> list[dict[str, Any]]:
    """What Telegram's clients attach to typed text: a leading /command and @mentions."""
    entities = []
    command = _COMMAND.match(text)
    if command:
        entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command.group(0))})
    for match in _MENTION.finditer(text):
        start = _utf16_offset(text, match.start())
        entities.append({"type": "mention", "offset": start, "length": utf16_len(match.group(0))})
    return entities


def image_info(data: bytes) -> tuple[str, int, int] | None:
    """(mime, width, height) of a PNG, JPEG, GIF or WebP image, or None for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "image/png", width, height
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return "image/gif", width, height
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8 ":
            width, height = struct.unpack("<HH", data[26:30])
            return "image/webp", width & 0x3FFF, height & 0x3FFF
        if chunk == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return "image/webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if chunk == b"VP8X":
            return "image/webp", int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    if data[:2] == b"\xff\xd8":
        index = 2
        while index + 9 < len(data):
            if data[index] != 0xFF:
                return None
            marker = data[index + 1]
            length = int.from_bytes(data[index + 2:index + 4], "big")
            if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
                height, width = struct.unpack(">HH", data[index + 5:index + 9])
                return "image/jpeg", width, height
            index += 2 + length
    return None


def png_bytes(width: int = 4, height: int = 3, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A real (tiny, solid-colour) PNG, for uploads Telegram would accept as a photo."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    row = b"\x00" + bytes(rgb) * width
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def _guess_mime(filename: str | None, default: str = "application/octet-stream") -> str:
    return (mimetypes.guess_type(filename or "", strict=False)[0] if filename else None) or default


class ApiError(Exception):
    """A Bot API method refusing the request, with Telegram's status code and description."""

    def __init__(self, code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.description = description


@dataclass
class Call:
    """One Bot API request as the emulator saw it."""

    method: str
    params: dict[str, Any]
    at: float
    status: int = 200
    result: Any = None


@dataclass
class Fault:
    code: int
    description: str
    retry_after: int | None = None
    times: int = 1
    chat_id: int | str | None = None
    deliver_then_drop: bool = False
    parameters: dict[str, Any] | None = None


@dataclass
class Chat:
    data: dict[str, Any]
    topics: set[int] = field(default_factory=set)
    blocked: bool = False

    @property
    def id(self) -> int:
        return int(self.data["id"])


@dataclass
class StoredFile:
    """A file Telegram holds: what getFile reports and what the file endpoint serves.

    `file_size` is the size declared in messages and getFile (defaults to the real size);
    `served` replaces what the download endpoint returns (to serve more than declared), and
    `chunked` serves it without a Content-Length, so only counting the bytes reveals the size.
    """

    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes
    kind: str = "document"
    file_size: int | None = None
    served: bytes | None = None
    chunked: bool = False
    mime_type: str | None = None
    file_name: str | None = None

    def __post_init__(self) -> None:
        if self.file_size is None:
            self.file_size = len(self.data)

    @property
    def body(self) -> bytes:
        return self.data if self.served is None else self.served


@dataclass
class UploadedPart:
    """One multipart file part of a request (a parameter's value when a file was uploaded)."""

    filename: str | None
    content_type: str | None
    data: bytes


@dataclass
class Upload:
    """A file the bot sent with one of the upload methods, as the emulator received it."""

    method: str
    kind: str
    chat_id: int
    data: bytes
    filename: str | None
    mime_type: str | None
    caption: str | None
    caption_entities: list[dict[str, Any]] | None
    #: "upload" (multipart), "file_id" or "url".
    source: str
    message: dict[str, Any]
    reply_markup: dict[str, Any] | None = None


@dataclass
class CallbackAnswer:
    """An answerCallbackQuery; times are time.monotonic(), `delivered` when the bot got the press."""

    query_id: str
    text: str | None
    show_alert: bool
    url: str | None
    cache_time: int | None
    at: float
    delivered: float | None

    @property
    def latency(self) -> float | None:
        """Seconds from handing the press to the bot to its answer (None if never delivered)."""
        return None if self.delivered is None else self.at - self.delivered



class TelegramEmulator:
    """See the module docstring. Start with `await emu.start()`; stop with `await emu.stop()`."""

    def __init__(self, token: str = TOKEN, *, bot_id: int = BOT_ID, bot_username: str = BOT_USERNAME) -> None:
        self.token = token
        self.bot = {
            "id": bot_id,
            "is_bot": True,
            "first_name": "This Bot",
            "username": bot_username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }
        self.calls: list[Call] = []
        self.chats: dict[int, Chat] = {}
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self.deleted: list[tuple[int, int]] = []
        self.reactions: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self.webhook: dict[str, Any] | None = None
        self.webhook_deliveries: list[tuple[int, int]] = []  # (update_id, HTTP status)
        self.files: dict[str, StoredFile] = {}
        #: What a URL passed to an upload method downloads to (Telegram fetches URLs itself):
        #: url -> (bytes, mime type). Loopback URLs not listed here are fetched for real.
        self.web_files: dict[str, tuple[bytes, str]] = {}
        #: File paths requested from the file endpoint, in order (404s included).
        self.downloads: list[str] = []
        self.uploads: list[Upload] = []
        self.callback_answers: list[CallbackAnswer] = []
        #: getFile refuses files declared larger than this ("file is too big"); None: no limit,
        #: like a self-hosted Bot API server in --local mode.
        self.download_limit: int | None = MAX_DOWNLOAD
        #: sendPhoto checks the bytes are an image within Telegram's dimensions, as Telegram does.
        self.validate_images = True
        #: Answers to a button press later than this many seconds after its delivery fail the way
        #: Telegram's do; None never expires them.
        self.callback_query_ttl: float | None = None
        #: Updates the bot never saw because its allowed_updates left their kind out.
        self.filtered_updates: list[dict[str, Any]] = []
        self.delivered_at: dict[int, float] = {}
        self.allowed_updates: list[str] | None = None
        self._callbacks: dict[str, dict[str, Any]] = {}
        self._callback_ids = itertools.count(4_700_000_000_000_000_001)
        self._file_numbers = itertools.count(1)
        self._pending: list[dict[str, Any]] = []
        self._update_ids = itertools.count(1000)
        self._message_ids: dict[int, itertools.count[int]] = defaultdict(lambda: itertools.count(1))
        self._faults: dict[str, list[Fault]] = defaultdict(list)
        self._conflicts = 0
        self._new_update = asyncio.Event()
        self._closing = asyncio.Event()
        self._deliveries: set[asyncio.Task[Any]] = set()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> TelegramEmulator:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[client_gone])
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        # Benchmarks open hundreds of connections at once; a short backlog would drop SYNs.
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=2048)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        self._closing.set()
        self._new_update.set()
        for task in list(self._deliveries):
            task.cancel()
        await asyncio.gather(*self._deliveries, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def file_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file/bot"

    # --- scripting: people, chats, messages ----------------------------------------------

    @staticmethod
    def user(user_id: int, first_name: str = "Ann", username: str | None = None, *, is_bot: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"id": user_id, "is_bot": is_bot, "first_name": first_name}
        if username:
            data["username"] = username
        return data

    def private_chat(self, user: dict[str, Any]) -> dict[str, Any]:
        data = {"id": user["id"], "type": "private", "first_name": user["first_name"]}
        if "username" in user:
            data["username"] = user["username"]
        self.chats[user["id"]] = Chat(data)
        return data

    def group(self, chat_id: int, title: str = "Team", *, kind: str = "supergroup", forum: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {"id": chat_id, "type": kind, "title": title}
        if forum:
            data["is_forum"] = True
        self.chats[chat_id] = Chat(data)
        return data

    def channel(self, chat_id: int, title: str = "News", username: str | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {"id": chat_id, "type": "channel", "title": title}
        if username:
            data["username"] = username
        self.chats[chat_id] = Chat(data)
        return data

    def _chat(self, chat_id: int | str) -> Chat:
        try:
            key = int(chat_id)
        except (TypeError, ValueError):  # Telegram's answer for an id that names no chat
            raise ApiError(400, "Bad Request: chat not found") from None
        if key not in self.chats:  # a chat the tests never introduced: guess like Telegram ids do
            if key > 0:
                self.chats[key] = Chat({"id": key, "type": "private", "first_name": "User"})
            else:
                self.chats[key] = Chat({"id": key, "type": "supergroup", "title": "Group"})
        return self.chats[key]

    def next_message_id(self, chat_id: int) -> int:
        return next(self._message_ids[int(chat_id)])

    def message(
        self,
        chat: dict[str, Any],
        sender: dict[str, Any] | None,
        text: str | None = None,
        *,
        reply_to: dict[str, Any] | None = None,
        thread_id: int | None = None,
        entities: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A message as Telegram would put it in an update; it also joins the chat's history.

        In a forum topic, a message that replies to nothing points at the topic's creation
        message, as Telegram does.
        """
        message_id = self.next_message_id(chat["id"])
        data: dict[str, Any] = {"message_id": message_id, "date": int(time.time()), "chat": chat}
        if sender is not None:
            data["from"] = sender
        if text is not None:
            data["text"] = text
            found = auto_entities(text) if entities is None else entities
            if found:
                data["entities"] = found
        if thread_id is not None:
            data["message_thread_id"] = thread_id
            data["is_topic_message"] = True
            if reply_to is None:
                header = self.messages.get((chat["id"], thread_id))
                if header is not None:
                    reply_to = header
        if reply_to is not None:
            data["reply_to_message"] = {k: v for k, v in reply_to.items() if k != "reply_to_message"}
        data.update(extra)
        self.messages[(chat["id"], message_id)] = data
        return data

    def topic(self, chat: dict[str, Any], creator: dict[str, Any], name: str = "Topic") -> dict[str, Any]:
        """A forum topic's creation service message; its id is the topic's thread id."""
        message_id = self.next_message_id(chat["id"])
        data = {
            "message_id": message_id,
            "message_thread_id": message_id,
            "date": int(time.time()),
            "chat": chat,
            "from": creator,
            "forum_topic_created": {"name": name, "icon_color": 7322096},
            "is_topic_message": True,
        }
        self.messages[(chat["id"], message_id)] = data
        self._chat(chat["id"]).topics.add(message_id)
        return data

    # --- scripting: files and media messages -------------------------------------------

    def _new_file_ids(self, kind: str) -> tuple[str, str, int]:
        number = next(self._file_numbers)
        prefix = {"photo": "AgACAgI", "document": "BQACAgI", "voice": "AwACAgI", "audio": "CQACAgI",
                  "video": "BAACAgI", "animation": "CgACAgI"}.get(kind, "BQACAgI")
        return f"{prefix}{number:06d}{secrets.token_hex(8)}", f"AQAD{number:06d}{secrets.token_hex(4)}", number

    def store_file(
        self,
        data: bytes,
        *,
        kind: str = "document",
        file_id: str | None = None,
        file_path: str | None = None,
        file_size: int | None = None,
        served: bytes | None = None,
        chunked: bool = False,
        mime_type: str | None = None,
        file_name: str | None = None,
    ) -> StoredFile:
        """Keep `data` as a Telegram file and return its record (ids, path, declared size)."""
        new_id, unique_id, number = self._new_file_ids(kind)
        if file_path is None:
            extension = _EXTENSIONS.get(mime_type or "") or (mimetypes.guess_extension(mime_type) or "" if mime_type else "")
            if file_name and "." in file_name:
                extension = "." + file_name.rsplit(".", 1)[1]
            if kind == "photo":
                extension = ".jpg" if not extension or mime_type in (None, "image/jpeg") else extension
            file_path = f"{_FOLDERS.get(kind, 'documents')}/file_{number}{extension}"
        stored = StoredFile(
            file_id or new_id, unique_id, file_path, data, kind, file_size, served, chunked, mime_type, file_name
        )
        self.files[stored.file_id] = stored
        return stored

    def add_file(self, file_id: str, path: str, content: bytes = b"data", **options: Any) -> StoredFile:
        """A file known by `file_id` at `path` (options as in `store_file`)."""
        options.setdefault("kind", "document")
        return self.store_file(content, file_id=file_id, file_path=path, **options)

    @staticmethod
    def _file_fields(stored: StoredFile) -> dict[str, Any]:
        return {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id, "file_size": stored.file_size}

    def photo(
        self, data: bytes, *, width: int | None = None, height: int | None = None, file_size: int | None = None,
        served: bytes | None = None, chunked: bool = False,
    ) -> list[dict[str, Any]]:
        """A message's `photo` field: PhotoSize entries, smallest first, the last the original.

        Dimensions come from the image itself when it is one (else 1280x960); a thumbnail entry
        is added for pictures larger than 90 px, serving the same bytes.
        """
        info = image_info(data)
        width = width or (info[1] if info else 1280)
        height = height or (info[2] if info else 960)
        sizes = []
        if max(width, height) > 90:
            scale = 90 / max(width, height)
            thumb = self.store_file(data, kind="photo", mime_type="image/jpeg")
            sizes.append({**self._file_fields(thumb), "width": max(1, round(width * scale)),
                          "height": max(1, round(height * scale))})
        full = self.store_file(data, kind="photo", file_size=file_size, served=served, chunked=chunked,
                               mime_type="image/jpeg")
        sizes.append({**self._file_fields(full), "width": width, "height": height})
        return sizes

    def document(
        self, data: bytes, *, file_name: str = "file.bin", mime_type: str | None = None, file_size: int | None = None,
        served: bytes | None = None, chunked: bool = False,
    ) -> dict[str, Any]:
        mime_type = mime_type or _guess_mime(file_name)
        stored = self.store_file(data, kind="document", file_size=file_size, served=served, chunked=chunked,
                                 mime_type=mime_type, file_name=file_name)
        return {**self._file_fields(stored), "file_name": file_name, "mime_type": mime_type}

    def voice(
        self, data: bytes, *, duration: int = 2, mime_type: str = "audio/ogg", file_size: int | None = None,
        served: bytes | None = None, chunked: bool = False,
    ) -> dict[str, Any]:
        stored = self.store_file(data, kind="voice", file_size=file_size, served=served, chunked=chunked,
                                 mime_type=mime_type)
        return {**self._file_fields(stored), "duration": duration, "mime_type": mime_type}

    def audio(
        self, data: bytes, *, file_name: str = "audio.mp3", mime_type: str | None = None, duration: int = 30,
        title: str | None = None, performer: str | None = None, file_size: int | None = None,
        served: bytes | None = None, chunked: bool = False,
    ) -> dict[str, Any]:
        mime_type = mime_type or _guess_mime(file_name, "audio/mpeg")
        stored = self.store_file(data, kind="audio", file_size=file_size, served=served, chunked=chunked,
                                 mime_type=mime_type, file_name=file_name)
        fields: dict[str, Any] = {**self._file_fields(stored), "duration": duration, "file_name": file_name,
                                  "mime_type": mime_type}
        if title is not None:
            fields["title"] = title
        if performer is not None:
            fields["performer"] = performer
        return fields

    def video(
        self, data: bytes, *, file_name: str = "video.mp4", mime_type: str | None = None, width: int = 640,
        height: int = 360, duration: int = 5, file_size: int | None = None, served: bytes | None = None,
        chunked: bool = False,
    ) -> dict[str, Any]:
        mime_type = mime_type or _guess_mime(file_name, "video/mp4")
        stored = self.store_file(data, kind="video", file_size=file_size, served=served, chunked=chunked,
                                 mime_type=mime_type, file_name=file_name)
        return {**self._file_fields(stored), "width": width, "height": height, "duration": duration,
                "file_name": file_name, "mime_type": mime_type}

    def media_message(
        self,
        chat: dict[str, Any],
        sender: dict[str, Any] | None,
        kind: str,
        data: bytes,
        caption: str | None = None,
        *,
        caption_entities: list[dict[str, Any]] | None = None,
        reply_to: dict[str, Any] | None = None,
        thread_id: int | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        """A message carrying one file (`kind`: photo, document, voice, audio, video) and an
        optional caption; `options` go to the matching builder (`file_name`, `file_size`,
        `served`, `mime_type`, `duration`, ...). It joins the chat's history, not yet pushed."""
        builders: dict[str, Callable[..., Any]] = {
            "photo": self.photo, "document": self.document, "voice": self.voice, "audio": self.audio,
            "video": self.video,
        }
        extra: dict[str, Any] = {kind: builders[kind](data, **options)}
        if caption is not None:
            extra["caption"] = caption
            found = auto_entities(caption) if caption_entities is None else caption_entities
            if found:
                extra["caption_entities"] = found
        return self.message(chat, sender, None, reply_to=reply_to, thread_id=thread_id, **extra)

    def push_media(
        self, chat: dict[str, Any], sender: dict[str, Any] | None, kind: str, data: bytes, caption: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        message = self.media_message(chat, sender, kind, data, caption, **options)
        self.push("channel_post" if chat["type"] == "channel" else "message", message)
        return message

    def push_photo(self, chat: dict[str, Any], sender: dict[str, Any] | None, data: bytes, caption: str | None = None,
                   **options: Any) -> dict[str, Any]:
        return self.push_media(chat, sender, "photo", data, caption, **options)

    def push_document(self, chat: dict[str, Any], sender: dict[str, Any] | None, data: bytes,
                      caption: str | None = None, **options: Any) -> dict[str, Any]:
        return self.push_media(chat, sender, "document", data, caption, **options)

    def push_voice(self, chat: dict[str, Any], sender: dict[str, Any] | None, data: bytes, caption: str | None = None,
                   **options: Any) -> dict[str, Any]:
        return self.push_media(chat, sender, "voice", data, caption, **options)

    def push_audio(self, chat: dict[str, Any], sender: dict[str, Any] | None, data: bytes, caption: str | None = None,
                   **options: Any) -> dict[str, Any]:
        return self.push_media(chat, sender, "audio", data, caption, **options)

    def push_video(self, chat: dict[str, Any], sender: dict[str, Any] | None, data: bytes, caption: str | None = None,
                   **options: Any) -> dict[str, Any]:
        return self.push_media(chat, sender, "video", data, caption, **options)

    # --- scripting: button presses -------------------------------------------------------

    def push_callback_query(
        self,
        message: dict[str, Any],
        user: dict[str, Any],
        data: str | None,
        *,
        query_id: str | None = None,
        chat_instance: str | None = None,
    ) -> str:
        """`user` presses a button carrying `data` on `message` (a bot message); returns the
        query id. The update carries the message as it is now, or an inaccessible-message stub
        when it was deleted, as Telegram does."""
        chat_id, message_id = message["chat"]["id"], message["message_id"]
        current = self.messages.get((chat_id, message_id))
        query: dict[str, Any] = {
            "id": query_id or str(next(self._callback_ids)),
            "from": user,
            "chat_instance": chat_instance or str(-(abs(int(chat_id)) * 7919 + 13)),
            "message": current if current is not None else {"chat": message["chat"], "message_id": message_id, "date": 0},
        }
        if data is not None:
            query["data"] = data
        self.push("callback_query", query)
        return str(query["id"])

    def press(self, message: dict[str, Any] | tuple[int, int], user: dict[str, Any], button: str) -> str:
        """`user` presses the inline button labelled `button` (or whose callback_data is
        `button`) on the current state of `message` (a message dict or a (chat_id,
        message_id) pair); returns the query id."""
        if isinstance(message, tuple):
            found = self.messages.get(message)
            if found is None:
                raise LookupError(f"no message {message}")
            message = found
        for candidate in self.buttons(message["chat"]["id"], message["message_id"]):
            if button in (candidate.get("text"), candidate.get("callback_data")):
                if "callback_data" not in candidate:
                    raise LookupError(f"button {button!r} carries no callback_data: {candidate}")
                return self.push_callback_query(message, user, candidate["callback_data"])
        raise LookupError(f"no button {button!r} on message {message['message_id']}")

    # --- scripting: updates --------------------------------------------------------------

    def push(self, kind: str, payload: Any) -> int:
        """Queue one update (`{"update_id": n, kind: payload}`); returns its id."""
        return self.push_raw({kind: payload})

    def push_raw(self, update: dict[str, Any]) -> int:
        """Queue an update exactly as given (an update_id is added if missing)."""
        update = dict(update)
        update.setdefault("update_id", next(self._update_ids))
        self._register_callback(update)
        if self.webhook is not None:
            if not self._allowed(update, self.webhook.get("allowed_updates")):
                self.filtered_updates.append(update)
                return int(update["update_id"])
            task = asyncio.ensure_future(self._deliver(update))
            self._deliveries.add(task)
            task.add_done_callback(self._deliveries.discard)
        else:
            self._pending.append(update)
            self._new_update.set()
        return int(update["update_id"])

    def push_message(self, chat: dict[str, Any], sender: dict[str, Any] | None, text: str | None = None, **kwargs: Any) -> dict[str, Any]:
        kind = "channel_post" if chat["type"] == "channel" else "message"
        message = self.message(chat, sender, text, **kwargs)
        self.push(kind, message)
        return message

    def push_edit(self, message: dict[str, Any], new_text: str) -> None:
        edited = dict(message, text=new_text, edit_date=int(time.time()))
        edited["entities"] = auto_entities(new_text)
        self.messages[(message["chat"]["id"], message["message_id"])] = edited
        self.push("edited_message", edited)

    def push_reaction(
        self, message: dict[str, Any], user: dict[str, Any], old: list[str], new: list[str]
    ) -> None:
        def as_types(values: list[str]) -> list[dict[str, Any]]:
            return [
                {"type": "custom_emoji", "custom_emoji_id": v[len("custom:"):]} if v.startswith("custom:")
                else {"type": "emoji", "emoji": v}
                for v in values
            ]

        self.push(
            "message_reaction",
            {
                "chat": message["chat"],
                "message_id": message["message_id"],
                "user": user,
                "date": int(time.time()),
                "old_reaction": as_types(old),
                "new_reaction": as_types(new),
            },
        )

    def push_chat_member(self, chat: dict[str, Any], user: dict[str, Any], old: str, new: str) -> None:
        def member(status: str) -> dict[str, Any]:
            data: dict[str, Any] = {"status": status, "user": user}
            if status == "kicked":
                data["until_date"] = 0
            if status == "administrator":
                data.update(
                    can_be_edited=False, is_anonymous=False, can_manage_chat=True, can_delete_messages=True,
                    can_manage_video_chats=False, can_restrict_members=True, can_promote_members=False,
                    can_change_info=False, can_invite_users=True, can_post_stories=False,
                    can_edit_stories=False, can_delete_stories=False,
                )
            return data

        self.push(
            "chat_member",
            {"chat": chat, "from": user, "date": int(time.time()), "old_chat_member": member(old), "new_chat_member": member(new)},
        )

    def _register_callback(self, update: dict[str, Any]) -> None:
        query = update.get("callback_query")
        if isinstance(query, dict) and "id" in query:
            self._callbacks[str(query["id"])] = {"update_id": int(update["update_id"]), "answered": False}

    @staticmethod
    def _allowed(update: dict[str, Any], allowed: list[str] | None) -> bool:
        """Whether a bot asking for `allowed` update kinds gets this update (None: not known,
        so everything; [] : Telegram's default, without the opt-in kinds)."""
        if allowed is None:
            return True
        kind = next((k for k in update if k != "update_id"), None)
        return kind in allowed if allowed else kind not in _OPT_IN_UPDATES

    @property
    def pending(self) -> list[dict[str, Any]]:
        """Updates not yet confirmed by a getUpdates offset."""
        return list(self._pending)

    # --- scripting: faults ---------------------------------------------------------------

    def fail(
        self,
        method: str,
        *,
        code: int = 400,
        description: str = "Bad Request: something is wrong",
        retry_after: int | None = None,
        times: int = 1,
        chat_id: int | str | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        """The next `times` calls of `method` (optionally only for one chat) fail like this."""
        self._faults[method].append(Fault(code, description, retry_after, times, chat_id, parameters=parameters))

    def rate_limit(self, method: str, retry_after: int = 1, *, times: int = 1, chat_id: int | str | None = None) -> None:
        self.fail(
            method, code=429, description=f"Too Many Requests: retry after {retry_after}",
            retry_after=retry_after, times=times, chat_id=chat_id,
        )

    def drop_after_delivery(self, method: str = "sendMessage", *, times: int = 1) -> None:
        """Process the call, then close the connection without answering (outcome unknown)."""
        self._faults[method].append(Fault(0, "", None, times, None, deliver_then_drop=True))

    def conflict(self, times: int = 1) -> None:
        """The next `times` getUpdates calls report another instance polling."""
        self._conflicts += times

    def _take_fault(self, method: str, params: dict[str, Any]) -> Fault | None:
        for fault in self._faults.get(method, []):
            if fault.chat_id is not None and str(params.get("chat_id")) != str(fault.chat_id):
                continue
            fault.times -= 1
            if fault.times <= 0:
                self._faults[method].remove(fault)
            return fault
        return None

    # --- queries for assertions ----------------------------------------------------------

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def sent(self, chat_id: int | None = None) -> list[dict[str, Any]]:
        """Messages the bot successfully sent (in order), as Telegram stored them."""
        return [
            c.result for c in self.calls
            if c.method == "sendMessage" and c.status == 200 and isinstance(c.result, dict)
            and (chat_id is None or c.result["chat"]["id"] == chat_id)
        ]

    def sent_texts(self, chat_id: int | None = None) -> list[str]:
        return [m["text"] for m in self.sent(chat_id)]

    def current(self, chat_id: int, message_id: int) -> dict[str, Any] | None:
        return self.messages.get((chat_id, message_id))

    def outgoing(self, chat_id: int | None = None) -> list[dict[str, Any]]:
        """Every message the bot successfully sent, text or file, in order, as first stored."""
        return [
            c.result for c in self.calls
            if c.method in SEND_METHODS and c.status == 200 and isinstance(c.result, dict)
            and (chat_id is None or c.result["chat"]["id"] == chat_id)
        ]

    def sent_media(self, chat_id: int | None = None, kind: str | None = None) -> list[Upload]:
        """Files the bot sent (optionally to one chat, of one kind: photo, document, voice, ...)."""
        return [u for u in self.uploads if (chat_id is None or u.chat_id == chat_id) and (kind is None or u.kind == kind)]

    def keyboard(self, chat_id: int, message_id: int) -> list[list[dict[str, Any]]]:
        """The inline keyboard rows a message carries now (empty when it has none)."""
        message = self.messages.get((chat_id, message_id)) or {}
        return list((message.get("reply_markup") or {}).get("inline_keyboard") or [])

    def buttons(self, chat_id: int, message_id: int) -> list[dict[str, Any]]:
        return [button for row in self.keyboard(chat_id, message_id) for button in row]

    def callback_answer(self, query_id: str) -> CallbackAnswer | None:
        return next((a for a in self.callback_answers if a.query_id == str(query_id)), None)

    def file(self, file_id: str) -> StoredFile | None:
        return self.files.get(file_id)

    # --- HTTP ----------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        raw: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            for key, value in (await request.post()).items():
                if isinstance(value, str):
                    raw[key] = value
                else:  # a file part, as multipart/form-data uploads carry it
                    raw[key] = UploadedPart(value.filename, value.content_type, value.file.read())
        params: dict[str, Any] = {}
        for key, value in raw.items():
            if key in _STRING_PARAMS or isinstance(value, UploadedPart):
                params[key] = value
                continue
            try:
                params[key] = json.loads(value)
            except ValueError:
                params[key] = value
        return params

    @staticmethod
    def _error(
        code: int, description: str, retry_after: int | None = None, parameters: dict[str, Any] | None = None
    ) -> web.Response:
        body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
        extra = dict(parameters or {})
        if retry_after is not None:
            extra["retry_after"] = retry_after
        if extra:
            body["parameters"] = extra
        return web.json_response(body, status=code)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await self._params(request)
        call = Call(method, params, time.monotonic())
        self.calls.append(call)
        if request.match_info["token"] != self.token:
            call.status = 401
            return self._error(401, "Unauthorized")
        fault = self._take_fault(method, params)
        if fault is not None and not fault.deliver_then_drop:
            call.status = fault.code
            return self._error(fault.code, fault.description, fault.retry_after, fault.parameters)
        handler = getattr(self, f"_api_{method}", None)
        if handler is None:
            call.status = 404
            return self._error(404, "Not Found")
        try:
            result = await handler(params)
        except ApiError as exc:
            call.status = exc.code
            return self._error(exc.code, exc.description)
        call.result = result
        if fault is not None:  # processed, but the client never hears about it
            call.status = 0
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=200)
        return web.json_response({"ok": True, "result": result})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        self.downloads.append(path)
        if request.match_info["token"] != self.token:
            return web.json_response({"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401)
        stored = next((f for f in self.files.values() if f.file_path == path), None)
        if stored is None:
            return web.json_response({"ok": False, "error_code": 404, "description": "Not Found"}, status=404)
        if not stored.chunked:
            return web.Response(body=stored.body, content_type="application/octet-stream")
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        body = stored.body
        for start in range(0, len(body), 64 * 1024):
            await response.write(body[start:start + 64 * 1024])
        await response.write_eof()
        return response

    async def _deliver(self, update: dict[str, Any]) -> None:
        assert self.webhook is not None
        headers = {"Content-Type": "application/json"}
        if self.webhook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook["secret_token"]
        self.delivered_at.setdefault(int(update["update_id"]), time.monotonic())
        status = await self.post_to_webhook(update, headers=headers)
        self.webhook_deliveries.append((int(update["update_id"]), status))

    async def post_to_webhook(self, update: dict[str, Any], *, headers: dict[str, str] | None = None) -> int:
        """POST an update to the registered webhook URL (tests use this to forge requests)."""
        assert self.webhook is not None, "no webhook is set"
        if "update_id" in update:
            self._register_callback(update)
            self.delivered_at.setdefault(int(update["update_id"]), time.monotonic())
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.post(
            self.webhook["url"], data=json.dumps(update), headers=headers or {"Content-Type": "application/json"}
        ) as response:
            return response.status

    # --- Bot API methods -----------------------------------------------------------------

    async def _api_getMe(self, params: dict[str, Any]) -> Any:
        return self.bot

    async def _api_getUpdates(self, params: dict[str, Any]) -> Any:
        if self.webhook is not None:
            raise ApiError(409, CONFLICT_WEBHOOK)
        if self._conflicts > 0:
            self._conflicts -= 1
            raise ApiError(409, CONFLICT_POLLING)
        if "allowed_updates" in params:
            self.allowed_updates = params["allowed_updates"]
        offset = int(params.get("offset") or 0)
        if offset:
            self._pending = [u for u in self._pending if u["update_id"] >= offset]
        limit = int(params.get("limit") or 100)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        while True:
            unwanted = [u for u in self._pending if not self._allowed(u, self.allowed_updates)]
            if unwanted:
                self.filtered_updates.extend(unwanted)
                self._pending = [u for u in self._pending if self._allowed(u, self.allowed_updates)]
            ready = [u for u in self._pending if u["update_id"] >= offset][:limit]
            remaining = deadline - time.monotonic()
            if ready or remaining <= 0 or self._closing.is_set():
                now = time.monotonic()
                for update in ready:
                    self.delivered_at.setdefault(int(update["update_id"]), now)
                return ready
            self._new_update.clear()
            try:
                await asyncio.wait_for(self._new_update.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> Any:
        self.webhook = None
        if params.get("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _api_setWebhook(self, params: dict[str, Any]) -> Any:
        url = params.get("url") or ""
        if not url:
            self.webhook = None
            return True
        if not url.startswith(("http://", "https://")):
            raise ApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        self.webhook = {"url": url, "secret_token": params.get("secret_token"),
                        "allowed_updates": params.get("allowed_updates")}
        if params.get("drop_pending_updates"):
            self._pending.clear()
        return True

    async def _api_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        return {"url": self.webhook["url"] if self.webhook else "", "has_custom_certificate": False,
                "pending_update_count": len(self._pending)}

    @staticmethod
    def _check_entities(text: str, entities: Any) -> None:
        size = utf16_len(text)
        for entity in entities or []:
            if entity.get("type") not in _ENTITY_TYPES:
                raise ApiError(400, f"Bad Request: can't parse entities: unsupported entity type {entity.get('type')!r}")
            if entity["offset"] < 0 or entity["length"] <= 0 or entity["offset"] + entity["length"] > size:
                raise ApiError(400, "Bad Request: can't parse entities: entity is out of the text bounds")

    def _check_text(self, text: Any, entities: Any) -> None:
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_TEXT_UTF16:
            raise ApiError(400, "Bad Request: message is too long")
        self._check_entities(text, entities)

    def _check_caption(self, caption: Any, entities: Any) -> None:
        if caption is None:
            return
        if utf16_len(str(caption)) > MAX_CAPTION_UTF16:
            raise ApiError(400, CAPTION_TOO_LONG)
        self._check_entities(str(caption), entities)

    @staticmethod
    def _check_markup(markup: Any) -> dict[str, Any] | None:
        """The inline keyboard to store on the message (None for none), refused like Telegram
        refuses it; other keyboards (reply keyboards, force_reply) are accepted, not stored."""
        if markup is None:
            return None
        if not isinstance(markup, dict):
            raise ApiError(400, "Bad Request: can't parse reply keyboard markup JSON object")
        if "inline_keyboard" not in markup:
            return None
        rows = markup["inline_keyboard"]
        if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
            raise ApiError(400, "Bad Request: can't parse inline keyboard button: InlineKeyboardButton must be an Object")
        count = 0
        for row in rows:
            for button in row:
                count += 1
                if not isinstance(button, dict) or not isinstance(button.get("text"), str):
                    raise ApiError(400, "Bad Request: can't parse inline keyboard button: Field \"text\" must be of type String")
                if not any(action in button for action in _BUTTON_ACTIONS):
                    raise ApiError(400, TEXT_BUTTON_INLINE)
                if "callback_data" in button:
                    data = button["callback_data"]
                    if not isinstance(data, str) or not 1 <= len(data.encode()) <= MAX_CALLBACK_DATA:
                        raise ApiError(400, BUTTON_DATA_INVALID)
                if "url" in button and not re.match(r"^(https?|tg)://[^\s]+$", str(button["url"])):
                    raise ApiError(400, BUTTON_URL_INVALID)
        if count > MAX_BUTTONS:
            raise ApiError(400, MARKUP_TOO_LONG)
        return markup if count else None

    def _new_message(self, chat: Chat, params: dict[str, Any], **content: Any) -> dict[str, Any]:
        """A bot message in `chat` honouring thread, reply and keyboard parameters; stored."""
        if chat.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        thread_id = params.get("message_thread_id")
        if thread_id is not None and chat.data.get("is_forum") and int(thread_id) not in chat.topics:
            raise ApiError(400, "Bad Request: message thread not found")
        reply = params.get("reply_parameters") or {}
        replied = None
        if reply:
            replied = self.messages.get((chat.id, int(reply["message_id"])))
            if replied is None and not reply.get("allow_sending_without_reply"):
                raise ApiError(400, "Bad Request: message to be replied not found")
        markup = self._check_markup(params.get("reply_markup"))
        message_id = self.next_message_id(chat.id)
        message: dict[str, Any] = {"message_id": message_id, "from": self.bot, "chat": chat.data, "date": int(time.time())}
        message.update({k: v for k, v in content.items() if v is not None and v != []})
        if thread_id is not None:
            message["message_thread_id"] = int(thread_id)
            message["is_topic_message"] = bool(chat.data.get("is_forum"))
        if replied is not None:
            message["reply_to_message"] = {k: v for k, v in replied.items() if k != "reply_to_message"}
        if markup is not None:
            message["reply_markup"] = markup
        self.messages[(chat.id, message_id)] = message
        return message

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        chat = self._chat(params["chat_id"])
        if chat.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        text, entities = params.get("text"), params.get("entities")
        self._check_text(text, entities)
        return self._new_message(chat, params, text=text, entities=entities)

    def _own_message(self, params: dict[str, Any], missing: str) -> tuple[Chat, dict[str, Any]]:
        chat = self._chat(params["chat_id"])
        message = self.messages.get((chat.id, int(params["message_id"])))
        if message is None:
            raise ApiError(400, f"Bad Request: {missing}")
        return chat, message

    def _editable(self, params: dict[str, Any]) -> tuple[Chat, dict[str, Any]]:
        if params.get("inline_message_id"):
            raise ApiError(400, "Bad Request: MESSAGE_ID_INVALID")
        chat, message = self._own_message(params, "message to edit not found")
        if message.get("from", {}).get("id") != self.bot["id"]:
            raise ApiError(400, "Bad Request: message can't be edited")
        return chat, message

    def _store_edit(self, chat: Chat, message: dict[str, Any], changes: dict[str, Any], markup: Any) -> dict[str, Any]:
        """Apply an edit; without a reply_markup parameter the inline keyboard goes, as on Telegram."""
        keyboard = self._check_markup(markup)
        edited = dict(message, **{k: v for k, v in changes.items() if v is not None and v != []})
        for key, value in changes.items():
            if value is None or value == []:
                edited.pop(key, None)
        edited.pop("reply_markup", None)
        if keyboard is not None:
            edited["reply_markup"] = keyboard
        unchanged = {k: v for k, v in edited.items() if k != "edit_date"} == {
            k: v for k, v in message.items() if k != "edit_date"
        }
        if unchanged:
            raise ApiError(400, NOT_MODIFIED)
        edited["edit_date"] = int(time.time())
        self.messages[(chat.id, message["message_id"])] = edited
        return edited

    async def _api_editMessageText(self, params: dict[str, Any]) -> Any:
        chat, message = self._editable(params)
        if "text" not in message:
            raise ApiError(400, NO_TEXT_TO_EDIT)
        text, entities = params.get("text"), params.get("entities")
        self._check_text(text, entities)
        return self._store_edit(chat, message, {"text": text, "entities": entities}, params.get("reply_markup"))

    async def _api_editMessageCaption(self, params: dict[str, Any]) -> Any:
        chat, message = self._editable(params)
        if not any(kind in message for kind in MEDIA_METHODS.values()):
            raise ApiError(400, NO_CAPTION_TO_EDIT)
        caption, entities = params.get("caption"), params.get("caption_entities")
        self._check_caption(caption, entities)
        return self._store_edit(
            chat, message, {"caption": caption or None, "caption_entities": entities}, params.get("reply_markup")
        )

    async def _api_editMessageReplyMarkup(self, params: dict[str, Any]) -> Any:
        chat, message = self._editable(params)
        return self._store_edit(chat, message, {}, params.get("reply_markup"))

    # --- uploads -------------------------------------------------------------------------

    async def _fetch_url(self, url: str) -> tuple[bytes, str]:
        """Telegram downloads URLs itself; here only registered or loopback URLs resolve."""
        if url in self.web_files:
            return self.web_files[url]
        if re.match(r"^https?://(127\.0\.0\.1|localhost)(:\d+)?/", url):
            if self._session is None:
                self._session = aiohttp.ClientSession()
            try:
                async with self._session.get(url) as response:
                    if response.status == 200:
                        return await response.read(), response.content_type
            except aiohttp.ClientError:
                pass
        raise ApiError(400, URL_CONTENT_FAILED)

    async def _resolve_file(
        self, kind: str, params: dict[str, Any]
    ) -> tuple[bytes, str | None, str | None, str, StoredFile | None]:
        """(bytes, filename, mime, source, already stored file) for the file parameter `kind`."""
        value = params.get(kind)
        if isinstance(value, str) and value.startswith("attach://"):
            value = params.get(value[len("attach://"):])
        if isinstance(value, UploadedPart):
            if len(value.data) > MAX_UPLOAD:
                raise ApiError(413, "Request Entity Too Large")
            mime = value.content_type if value.content_type not in (None, "application/octet-stream") else None
            return value.data, value.filename, mime or _guess_mime(value.filename), "upload", None
        if not isinstance(value, str) or not value:
            raise ApiError(400, f"Bad Request: there is no {kind} in the request")
        if re.match(r"^https?://", value):
            data, mime = await self._fetch_url(value)
            return data, value.rsplit("/", 1)[-1].split("?")[0] or None, mime, "url", None
        stored = self.files.get(value)
        if stored is None:
            raise ApiError(400, WRONG_FILE_ID)
        if stored.kind != kind and not (kind == "document" and stored.kind in ("audio", "voice")):
            raise ApiError(400, FILE_TYPE_MISMATCH)
        return stored.data, stored.file_name, stored.mime_type, "file_id", stored

    async def _send_media(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        kind = MEDIA_METHODS[method]
        chat = self._chat(params["chat_id"])
        if chat.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        caption, entities = params.get("caption"), params.get("caption_entities")
        self._check_caption(caption, entities)
        self._check_markup(params.get("reply_markup"))
        data, filename, mime, source, reused = await self._resolve_file(kind, params)
        field_kind, fields = kind, {}
        if kind == "photo":
            fields = self._outgoing_photo(data, source, reused)
        else:
            if kind == "voice" and (mime or "").split(";")[0] not in _VOICE_MIMES:
                field_kind = "document"  # Telegram sends other formats as a plain file
            stored = reused or self.store_file(data, kind=field_kind, mime_type=mime, file_name=filename)
            fields = {**self._file_fields(stored), "mime_type": stored.mime_type}
            if field_kind in ("document", "audio", "video", "animation") and stored.file_name:
                fields["file_name"] = stored.file_name
            if field_kind in ("voice", "audio", "video", "animation"):
                fields["duration"] = int(params.get("duration") or 1)
            if field_kind == "audio":
                fields.update({k: params[k] for k in ("title", "performer") if params.get(k)})
            if field_kind in ("video", "animation"):
                fields.update(width=int(params.get("width") or 640), height=int(params.get("height") or 360))
        content: dict[str, Any] = {field_kind: fields, "caption": caption or None, "caption_entities": entities}
        if kind == "photo" and params.get("has_spoiler"):
            content["has_media_spoiler"] = True
        if params.get("show_caption_above_media"):
            content["show_caption_above_media"] = True
        message = self._new_message(chat, params, **content)
        self.uploads.append(Upload(
            method, field_kind, chat.id, data, filename, mime, caption, entities, source, message,
            message.get("reply_markup"),
        ))
        return message

    def _outgoing_photo(self, data: bytes, source: str, reused: StoredFile | None) -> list[dict[str, Any]]:
        if source == "upload" and len(data) > MAX_PHOTO_UPLOAD:
            raise ApiError(400, PHOTO_TOO_BIG)
        if reused is not None:
            info = image_info(data)
            width, height = (info[1], info[2]) if info else (1280, 960)
            return [{**self._file_fields(reused), "width": width, "height": height}]
        info = image_info(data)
        if self.validate_images:
            if info is None:
                raise ApiError(400, IMAGE_PROCESS_FAILED)
            _, width, height = info
            if width + height > 10000 or max(width, height) > 20 * max(1, min(width, height)):
                raise ApiError(400, PHOTO_INVALID_DIMENSIONS)
        return self.photo(data)

    async def _api_sendPhoto(self, params: dict[str, Any]) -> Any:
        return await self._send_media("sendPhoto", params)

    async def _api_sendDocument(self, params: dict[str, Any]) -> Any:
        return await self._send_media("sendDocument", params)

    async def _api_sendVoice(self, params: dict[str, Any]) -> Any:
        return await self._send_media("sendVoice", params)

    async def _api_sendAudio(self, params: dict[str, Any]) -> Any:
        return await self._send_media("sendAudio", params)

    async def _api_sendVideo(self, params: dict[str, Any]) -> Any:
        return await self._send_media("sendVideo", params)

    async def _api_sendAnimation(self, params: dict[str, Any]) -> Any:
        return await self._send_media("sendAnimation", params)

    async def _api_deleteMessage(self, params: dict[str, Any]) -> Any:
        chat, message = self._own_message(params, "message to delete not found")
        del self.messages[(chat.id, message["message_id"])]
        self.deleted.append((chat.id, message["message_id"]))
        return True

    async def _api_setMessageReaction(self, params: dict[str, Any]) -> Any:
        chat, message = self._own_message(params, "message to react not found")
        reaction = params.get("reaction") or []
        for item in reaction:
            if item.get("type") == "emoji" and item.get("emoji") not in _REACTIONS:
                raise ApiError(400, "Bad Request: REACTION_INVALID")
        self.reactions[(chat.id, message["message_id"])] = reaction
        return True

    async def _api_createForumTopic(self, params: dict[str, Any]) -> Any:
        """A topic in a forum supergroup; its id is that of the service message announcing it."""
        chat = self._chat(params["chat_id"])
        if not chat.data.get("is_forum"):
            raise ApiError(400, "Bad Request: the chat is not a forum")
        name = str(params.get("name") or "")
        if not 1 <= len(name) <= 128:
            raise ApiError(400, "Bad Request: TOPIC_TITLE_EMPTY" if not name else "Bad Request: TOPIC_TITLE_TOO_LONG")
        color = int(params.get("icon_color") or 7322096)
        message_id = self.next_message_id(chat.id)
        self.messages[(chat.id, message_id)] = {
            "message_id": message_id,
            "message_thread_id": message_id,
            "date": int(time.time()),
            "chat": chat.data,
            "from": self.bot,
            "forum_topic_created": {"name": name, "icon_color": color},
            "is_topic_message": True,
        }
        chat.topics.add(message_id)
        return {"message_thread_id": message_id, "name": name, "icon_color": color}

    async def _api_sendChatAction(self, params: dict[str, Any]) -> Any:
        self._chat(params["chat_id"])
        if params.get("action") not in {"typing", "upload_photo", "record_video", "upload_video", "record_voice",
                                        "upload_voice", "upload_document", "choose_sticker", "find_location",
                                        "record_video_note", "upload_video_note"}:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        now = time.monotonic()
        query_id = str(params.get("callback_query_id") or "")
        known = self._callbacks.get(query_id)
        if known is None or known["answered"]:
            raise ApiError(400, QUERY_TOO_OLD)
        delivered = self.delivered_at.get(known["update_id"])
        if self.callback_query_ttl is not None and delivered is not None and now - delivered > self.callback_query_ttl:
            raise ApiError(400, QUERY_TOO_OLD)
        known["answered"] = True
        cache_time = params.get("cache_time")
        self.callback_answers.append(CallbackAnswer(
            query_id, params.get("text"), bool(params.get("show_alert")), params.get("url"),
            None if cache_time is None else int(cache_time), now, delivered,
        ))
        return True

    async def _api_getFile(self, params: dict[str, Any]) -> Any:
        file_id = params.get("file_id", "")
        stored = self.files.get(file_id)
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        if self.download_limit is not None and (stored.file_size or 0) > self.download_limit:
            raise ApiError(400, FILE_TOO_BIG)
        return {"file_id": stored.file_id, "file_unique_id": stored.file_unique_id, "file_size": stored.file_size,
                "file_path": stored.file_path}


# --- test helpers --------------------------------------------------------------------------


async def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll `predicate` until it is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


def adapter_config(emu: TelegramEmulator, **overrides: Any) -> dict[str, Any]:
    """A TelegramConfig mapping pointing python-telegram-bot at the emulator."""
    return {"token": emu.token, "api_base_url": emu.api_base_url, "poll_timeout": 2, **overrides}
