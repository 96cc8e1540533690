"""Outbound Client-Server API calls through mautrix's `ClientAPI`: messages, `m.replace` edits,
redactions, `m.annotation` reactions, media, direct chats.

Every event goes out as `PUT /rooms/{room}/send/{type}/{txnId}`, and the homeserver keeps one
event per transaction id of a device: a repeat of the id answers the first event's id and
stores nothing. So a send whose answer never came (the connection dropped after the server
stored it) is retried here with the *same* id, and the homeserver keeps one copy. The id is
made for the content it carries and never reused for anything else: a keyed chunk of a reply
(`send_keyed`) gets an id derived from its key, its room and its whole content, so a
later attempt of the same chunk, in this process or after a takeover by another, carries the
same id; any other send gets a fresh random one, used for all retries of that one send.
A reaction's id is derived from what it says (room, message, emoji), so reacting twice is
one reaction.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import aiohttp
from botweave.adapter import ActionError, ByteLimit, Outbound, Outcome
from botweave.files import http_chunks
from botweave.metrics import RATE_LIMIT_WAIT
from botweave.types import OutboundFile
from markdown_it import MarkdownIt
from mautrix.api import Method, Path
from mautrix.client import ClientAPI
from mautrix.errors import (
    MatrixConnectionError,
    MatrixError,
    MatrixRequestError,
    MForbidden,
    MLimitExceeded,
    MNotFound,
)

from ..cache import BoundedCache

log = logging.getLogger(__name__)

# What a request to the homeserver can raise: mautrix's errors (a refusal, no connection, an
# answer it could not read), aiohttp's and a timeout, ValueError for an id or body that is not
# what Matrix allows, and ActionError for an answer that is not what was asked.
REQUEST_ERRORS: tuple[type[Exception], ...] = (
    MatrixError, aiohttp.ClientError, asyncio.TimeoutError, ValueError, ActionError
)

#: Pauses before the same transaction is tried again after no answer, or a 5xx or 429 one.
RETRY_PAUSES_S = (0.5, 1.5, 4.0)
#: Told about every event of ours: (room, event id, its content).
SentHook = Callable[[str, str, dict[str, Any]], None]


def keyed_txn_id(key: str, room_id: str, event_type: str, content: Mapping[str, Any]) -> str:
    """The transaction id of a keyed send: the same for every attempt of the same content in
    the same room, and different for anything else (a hash of all of it)."""
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256("\n".join((key, room_id, event_type, canonical)).encode()).hexdigest()
    return f"bw{digest[:40]}"


def fresh_txn_id() -> str:
    return f"bw{time.time_ns():x}{secrets.token_hex(6)}"


#: Markdown as clients show it (`org.matrix.custom.html`); HTML in the text itself is
#: escaped, never passed on, so nothing a model wrote becomes markup it did not ask for.
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["strikethrough", "table"])


def text_content(text: str) -> dict[str, Any]:
    """An `m.text` message: the text as written in `body` (what notifications and clients
    without HTML show) and, when its Markdown makes any difference, as HTML beside it."""
    content: dict[str, Any] = {"msgtype": "m.text", "body": text}
    rendered = _MARKDOWN.render(text).strip()
    if "<" in rendered.removeprefix("<p>").removesuffix("</p>"):
        content.update(format="org.matrix.custom.html", formatted_body=rendered)
    return content


def relation(thread_id: str | None, reply_to: str | None) -> dict[str, Any] | None:
    """`m.relates_to` for a post into a thread (a reply inside it when `reply_to` is given,
    else the thread's fallback reply to its latest known event, its root) or a plain reply."""
    if thread_id:
        return {
            "rel_type": "m.thread",
            "event_id": thread_id,
            "is_falling_back": reply_to is None,
            "m.in_reply_to": {"event_id": reply_to or thread_id},
        }
    if reply_to:
        return {"m.in_reply_to": {"event_id": reply_to}}
    return None


def _event_id(value: str) -> str:
    """An event id as the homeserver writes them; anything else names no message."""
    if not value.startswith("$") or len(value) < 2 or "/" in value:
        raise ActionError("no_route", f"{value[:40]!r} is not a Matrix event id")
    return value


def _room_id(value: str) -> str:
    if not value.startswith("!") or ":" not in value:
        raise ActionError("no_route", f"{value[:60]!r} is not a Matrix room id")
    return value


class MatrixOutbound(Outbound):
    def __init__(self, client: ClientAPI, *, sent: SentHook) -> None:
        self._client = client
        self._sent = sent
        self._direct: BoundedCache[str, str] = BoundedCache(1024)  # user -> room
        self._whose: BoundedCache[str, str] = BoundedCache(1024)  # room -> its person ("" none)

    # --- the one way an event goes out --------------------------------------------------------

    async def put_event(self, room_id: str, event_type: str, content: dict[str, Any], txn_id: str) -> str:
        """Send one event under `txn_id`, trying the same transaction again while no answer
        came back or the homeserver failed on its side; the event's id."""
        room_id = _room_id(room_id)
        path = Path.v3.rooms[room_id].send[event_type][txn_id]
        for pause in (*RETRY_PAUSES_S, None):
            try:
                response = await self._client.api.request(Method.PUT, path, content, metrics_method="sendMessageEvent")
            except MLimitExceeded:
                if pause is None:
                    raise
                RATE_LIMIT_WAIT.labels("matrix").inc(pause)
            except MatrixRequestError as exc:
                if pause is None or exc.http_status < 500:
                    raise
            except (MatrixConnectionError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if pause is None:
                    raise
                log.info("matrix: no answer to transaction %s (%s); sending it again", txn_id, type(exc).__name__)
            else:
                event_id = str(response.get("event_id") or "")
                if not event_id:
                    raise ActionError("failed", "the homeserver answered without an event id")
                self._sent(room_id, event_id, content)
                return event_id
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def fetch_event(self, room_id: str, event_id: str) -> dict[str, Any]:
        """One event as the homeserver holds it (`GET /rooms/{room}/event/{id}`), unparsed."""
        path = Path.v3.rooms[_room_id(room_id)].event[_event_id(event_id)]
        event = await self._client.api.request(Method.GET, path, metrics_method="getEvent")
        if not isinstance(event, dict):
            raise ActionError("failed", "the homeserver answered with something that is not an event")
        return event

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str | None:
        return await self.put_event(chat_id, "m.room.message", _message(text, thread_id, reply_to), fresh_txn_id())

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        content = _message(text, thread_id, reply_to)
        return await self.put_event(chat_id, "m.room.message", content, keyed_txn_id(key, chat_id, "m.room.message", content))

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        """An `m.replace` edit: `m.new_content` holds the whole new text (clients show it in
        place of the original); the outer body is the fallback older clients show."""
        content = {
            "msgtype": "m.text",
            "body": f"* {text}",
            "m.new_content": text_content(text),
            "m.relates_to": {"rel_type": "m.replace", "event_id": _event_id(message_id)},
        }
        await self.put_event(chat_id, "m.room.message", content, fresh_txn_id())

    async def delete(self, chat_id: str, message_id: str) -> None:
        """A redaction. One already redacted is reported, not redacted again (a homeserver
        would accept that and change nothing)."""
        event = await self.fetch_event(chat_id, message_id)
        if (event.get("unsigned") or {}).get("redacted_because") is not None:
            raise ActionError("failed", "the message was already deleted")
        await self._client.redact(chat_id, message_id)  # type: ignore[arg-type]

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": _event_id(message_id), "key": emoji}}
        await self.put_event(chat_id, "m.reaction", content, keyed_txn_id("react", chat_id, "m.reaction", content))

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None) -> str:
        """A Matrix thread hangs under an event: the thread's name is posted as a new message,
        whose id is the thread's, and posts into `matrix:<room>:<id>` go in under it."""
        return await self.put_event(chat_id, "m.room.message", text_content(f"🧵 {name}"), fresh_txn_id())

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        """Upload to the media repository, then an `m.image` / `m.audio` / `m.video` / `m.file`
        event; the caption is the body, with `filename` next to it (Matrix media captions)."""
        _room_id(chat_id)
        uri = await self._client.upload_media(file.data, mime_type=file.mime, filename=file.filename)
        content: dict[str, Any] = {
            "msgtype": _msgtype(file.mime),
            "body": caption if caption.strip() else file.filename,
            "filename": file.filename,
            "url": str(uri),
            "info": {"mimetype": file.mime, "size": len(file.data)},
        }
        relates = relation(thread_id, reply_to)
        if relates:
            content["m.relates_to"] = relates
        return await self.put_event(chat_id, "m.room.message", content, fresh_txn_id())

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        """The bytes of an `mxc://` URI from the authenticated media endpoint
        (`/_matrix/client/v1/media/download`), with the bot's token sent to its own homeserver only."""
        uri = str(ref.get("url") or "")
        if not uri.startswith("mxc://"):
            raise ActionError("failed", "the file has no mxc:// address")
        try:
            url = self._client.api.get_download_url(uri, authenticated=True)
        except ValueError:
            raise ActionError("failed", "the file's mxc:// address cannot be read") from None
        headers = {"Authorization": f"Bearer {self._client.api.token}"}
        async for chunk in http_chunks(str(url), limit, headers=headers, follow_redirects=False):
            yield chunk

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        await self._client.set_typing(_room_id(chat_id), timeout=5000)  # type: ignore[arg-type]

    async def direct_chat(self, user_id: str) -> str:
        """The bot's direct room with a person: the one `m.direct` account data names, else a
        new private room the person is invited to (and recorded in `m.direct`)."""
        cached = self._direct.get(user_id)
        if cached is not None:
            return cached
        direct = await self._direct_map()
        joined = set(await self._client.get_joined_rooms())
        room = next((r for r in direct.get(user_id, []) if r in joined), None)
        if room is None:
            room = str(await self._client.create_room(invitees=[user_id], is_direct=True))  # type: ignore[list-item]
            direct.setdefault(user_id, []).append(room)
            await self._client.set_account_data("m.direct", direct)  # type: ignore[arg-type]
        self._direct.put(user_id, room)
        self._whose.put(room, user_id)
        return room

    async def whose_direct_chat(self, chat_id: str) -> str | None:
        """The person of a room that holds the bot and exactly one other person."""
        cached = self._whose.get(chat_id)
        if cached is not None:
            return cached or None
        members = await self._client.get_joined_members(_room_id(chat_id))  # type: ignore[arg-type]
        others = [str(user) for user in members if str(user) != str(self._client.mxid)]
        person = others[0] if len(others) == 1 else ""
        self._whose.put(chat_id, person)
        return person or None

    async def _direct_map(self) -> dict[str, list[str]]:
        try:
            data = await self._client.get_account_data("m.direct")
        except MNotFound:
            return {}
        return {str(k): [str(r) for r in v] for k, v in (data or {}).items() if isinstance(v, list)}

    def retryable(self, exc: Exception) -> bool:
        """A refusal the homeserver spelled out (4xx other than 429) would only come again."""
        if isinstance(exc, MatrixRequestError):
            return exc.http_status >= 500 or isinstance(exc, MLimitExceeded)
        return True

    def classify(self, exc: Exception, action: str) -> Outcome:
        if isinstance(exc, MatrixRequestError):
            code = str(getattr(exc, "errcode", "") or exc.http_status)
            if isinstance(exc, MNotFound):
                return "no_route", code
            if isinstance(exc, MForbidden):
                return "failed", f"{code}: {exc.message or 'forbidden'}"[:200]
            return "failed", f"{code}: {getattr(exc, 'message', '') or ''}".strip(": ")[:200]
        log.warning("matrix: %s failed: %s", action, type(exc).__name__)
        if action == "send":
            return "failed", f"{type(exc).__name__}; may have been delivered"
        return "failed", type(exc).__name__


def _message(text: str, thread_id: str | None, reply_to: str | None) -> dict[str, Any]:
    content = text_content(text)
    relates = relation(thread_id, reply_to)
    if relates:
        content["m.relates_to"] = relates
    return content


def _msgtype(mime: str) -> str:
    for prefix, msgtype in (("image/", "m.image"), ("audio/", "m.audio"), ("video/", "m.video")):
        if mime.startswith(prefix):
            return msgtype
    return "m.file"
