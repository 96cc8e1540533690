"""Outbound Cloud API calls: text, buttons, reactions, files, read receipts and typing.

- Text goes out as it is cut by the runtime (4096 characters a message), Markdown emphasis
  written WhatsApp's way (format.py). A reply quotes the message it answers (`context`).
- Buttons: up to three as reply buttons (titles cut to 20 characters), more as a list (up
  to ten rows). The interactive body holds 1024 characters; a longer text goes first as a
  message of its own. A press comes back as a `button_pressed` with the button's id.
- Reactions are messages of type `reaction`; WhatsApp has no edits and no deletions for
  business messages, so those are `unsupported` (a streaming agent sends its final text once).
- Files are uploaded (`POST /{phone-number-id}/media`) and sent by their media id: JPEG and
  PNG as images, MP4/3GPP as videos, audio as audio (which carries no caption: the caption
  follows as a message), anything else as a document with its file name.
- Files people sent are read in two steps: the media id gives a URL (`GET /{media-id}`,
  with the size Meta knows, checked against the limit before a byte is fetched), and the
  URL gives the bytes, with the bearer token; neither the URL nor the token leaves here.
- The customer-service window: a free-form message may go to someone only within 24 hours
  of their last message. Outside it (a schedule, a room, a notification to someone who has
  not written lately) a text goes out as the configured `template`, or is refused with an
  error that says why and what to set; a file, buttons or a reaction are refused there.
  Meta's own refusal (code 131047, its clock against ours) reads the same way.
- Sends have no idempotency key, but a keyed send carries its chunk key as
  `biz_opaque_callback_data`, which Meta hands back in the message's statuses: the inbound
  side notes it (memory.py), and `find_sent` answers from that note when delivery asks
  whether a send whose answer was lost went out. A status that has not arrived yet cannot
  say so, and the chunk is sent again: at least once; see docs/delivery.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

import aiohttp
from botweave.adapter import ActionError, ByteLimit, Outbound, Outcome
from botweave.files import http_chunks
from botweave.types import Button, OutboundFile

from .config import TemplateConfig, WhatsAppConfig
from .format import cut, one_line, to_whatsapp
from .graph import NOT_FOUND_CODES, GraphClient, GraphError
from .memory import Memory, Remembered, now, window_open

log = logging.getLogger(__name__)

MAX_BUTTONS = 3
MAX_LIST_ROWS = 10
BODY_LIMIT = 1024
TEMPLATE_PARAMETER_LIMIT = 1024
IMAGE_MIMES = frozenset({"image/jpeg", "image/png"})
VIDEO_MIMES = frozenset({"video/mp4", "video/3gpp"})


def address(chat_id: str) -> dict[str, str]:
    """Who a message goes to: a phone number as `to`, a business-scoped user id as `recipient`."""
    if chat_id.lstrip("+").isdigit():
        return {"recipient_type": "individual", "to": chat_id.lstrip("+")}
    return {"recipient_type": "individual", "recipient": chat_id}


def media_kind(mime: str) -> str:
    if mime in IMAGE_MIMES:
        return "image"
    if mime in VIDEO_MIMES:
        return "video"
    if mime.startswith("audio/"):
        return "audio"
    return "document"


class OutsideWindow(ActionError):
    def __init__(self, chat_id: str, last: float | None, what: str) -> None:
        if last is None:
            since = "has not written to the bot (as far as it knows)"
        else:
            since = f"last wrote {(now() - last) / 3600:.0f} hours ago"
        super().__init__(
            "failed",
            f"whatsapp: {chat_id} {since}: outside the 24-hour customer-service window WhatsApp allows "
            f"{what} only as a template; set platforms.whatsapp.template to an approved template",
        )


class WhatsAppOutbound(Outbound):
    def __init__(self, graph: GraphClient, memory: Memory, settings: Callable[[], WhatsAppConfig]) -> None:
        self._graph = graph
        self._memory = memory
        #: The section as it is now: a reload's new `template` or `window_hours` applies at once.
        self._settings = settings

    @property
    def _template(self) -> TemplateConfig | None:
        return self._settings().template

    @property
    def _window_hours(self) -> float:
        return self._settings().window_hours

    # --- the window ----------------------------------------------------------------------

    async def _last_inbound(self, chat_id: str) -> float | None:
        last = await self._memory.last_inbound(chat_id)
        return last[0] if last is not None else None

    async def _window(self, chat_id: str, what: str) -> None:
        """Refuse a free-form-only message outside the window."""
        last = await self._last_inbound(chat_id)
        if not window_open(last, now(), self._window_hours):
            raise OutsideWindow(chat_id, last, what)

    async def _post(self, chat_id: str, body: dict[str, Any], reply_to: str | None) -> str:
        payload = {**address(chat_id), **body}
        if reply_to:
            payload["context"] = {"message_id": reply_to}
        try:
            return await self._graph.send_message(payload)
        except GraphError as exc:
            if exc.outside_window:
                raise OutsideWindow(chat_id, await self._last_inbound(chat_id), "this message") from None
            raise

    # --- text ----------------------------------------------------------------------------

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str | None:
        return await self._text(chat_id, text, reply_to, None)

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        return await self._text(chat_id, text, reply_to, key)

    async def find_sent(self, chat_id: str, key: str, *, thread_id: str | None, since: float) -> str | None:
        return await self._memory.sent_under(key)

    async def _text(self, chat_id: str, text: str, reply_to: str | None, key: str | None) -> str:
        last = await self._last_inbound(chat_id)
        if window_open(last, now(), self._window_hours):
            body: dict[str, Any] = {"type": "text", "text": {"body": to_whatsapp(text), "preview_url": False}}
        elif self._template is not None:
            body, reply_to = self._template_body(text), None
        else:
            raise OutsideWindow(chat_id, last, "a message")
        try:
            message_id = await self._post(chat_id, self._keyed(body, key), reply_to)
        except OutsideWindow:
            if self._template is None or body["type"] == "template":
                raise
            # Meta's clock closed the window before ours did: the template it allows instead
            message_id = await self._post(chat_id, self._keyed(self._template_body(text), key), None)
        await self._memory.remember(message_id, Remembered(text, "bot"))
        return message_id

    @staticmethod
    def _keyed(body: dict[str, Any], key: str | None) -> dict[str, Any]:
        return body if key is None else {**body, "biz_opaque_callback_data": key[:512]}

    def _template_body(self, text: str) -> dict[str, Any]:
        template = self._template
        assert template is not None
        body: dict[str, Any] = {"name": template.name, "language": {"code": template.language}}
        if template.text_parameter:
            parameter = {"type": "text", "text": one_line(text, TEMPLATE_PARAMETER_LIMIT)}
            body["components"] = [{"type": "body", "parameters": [parameter]}]
        return {"type": "template", "template": body}

    # --- buttons -------------------------------------------------------------------------

    async def send_buttons(
        self, chat_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        await self._window(chat_id, "buttons")
        body_text = to_whatsapp(text)
        if len(body_text) > BODY_LIMIT:  # the interactive body is shorter than a message
            await self.send(chat_id, text, thread_id=thread_id, reply_to=reply_to)
            body_text, reply_to = "Choose:", None
        if len(buttons) <= MAX_BUTTONS:
            action: dict[str, Any] = {
                "buttons": [{"type": "reply", "reply": {"id": b.action_id, "title": cut(b.label, 20)}} for b in buttons]
            }
            interactive: dict[str, Any] = {"type": "button", "body": {"text": body_text}, "action": action}
        else:
            if len(buttons) > MAX_LIST_ROWS:
                raise ActionError("failed", f"whatsapp: a list holds at most {MAX_LIST_ROWS} choices, not {len(buttons)}")
            rows = [{"id": b.action_id, "title": cut(b.label, 24)} for b in buttons]
            for row, button in zip(rows, buttons):
                if len(" ".join(button.label.split())) > 24:
                    row["description"] = cut(button.label, 72)
            action = {"button": "Choose", "sections": [{"title": "Choices", "rows": rows}]}
            interactive = {"type": "list", "body": {"text": body_text}, "action": action}
        message_id = await self._post(chat_id, {"type": "interactive", "interactive": interactive}, reply_to)
        await self._memory.remember(message_id, Remembered(text, "bot"))
        return message_id

    # --- reactions -----------------------------------------------------------------------

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        await self._window(chat_id, "a reaction")
        await self._post(chat_id, {"type": "reaction", "reaction": {"message_id": message_id, "emoji": emoji}}, None)

    # --- files ---------------------------------------------------------------------------

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        await self._window(chat_id, "a file")
        media_id = await self._graph.upload(file.data, file.filename, file.mime)
        kind = media_kind(file.mime)
        media: dict[str, Any] = {"id": media_id}
        if kind != "audio" and caption:
            media["caption"] = to_whatsapp(caption)
        if kind == "document":
            media["filename"] = file.filename
        message_id = await self._post(chat_id, {"type": kind, kind: media}, reply_to)
        attachment = {"file_id": media_id, "mime": file.mime, "size": len(file.data), "filename": file.filename}
        await self._memory.remember(message_id, Remembered(caption, "bot", (attachment,)))
        if kind == "audio" and caption.strip():
            await self.send(chat_id, caption, thread_id=thread_id, reply_to=None)
        return message_id

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        media_id = str(ref.get("file_id") or "")
        if not media_id:
            raise ActionError("failed", "the attachment names no media id")
        info = await self._graph.media(media_id)
        size = info.get("file_size")
        limit.declared(int(size) if isinstance(size, str) and size.isdigit() else size)
        url = info.get("url")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise ActionError("failed", "the Graph API gave no download address for the file")
        # A redirect is followed; aiohttp drops the Authorization header when it leads to
        # another origin, so the token only ever goes where Meta's answer pointed.
        async for chunk in http_chunks(url, limit, headers=self._graph.auth_header, refuse_html=True):
            yield chunk

    # --- receipts and typing ---------------------------------------------------------------

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        """The typing indicator hangs on the person's latest message (which it marks read)."""
        last = await self._memory.last_inbound(chat_id)
        if last is None or not window_open(last[0], now(), self._window_hours):
            return
        await self._graph.mark_read(last[1], typing=True)

    async def whose_direct_chat(self, chat_id: str) -> str | None:
        return chat_id  # every chat is one person's

    # --- outcomes ------------------------------------------------------------------------

    def retryable(self, exc: Exception) -> bool:
        if isinstance(exc, GraphError):
            return exc.transient
        return not isinstance(exc, ActionError)

    def classify(self, exc: Exception, action: str) -> Outcome:
        if isinstance(exc, GraphError):
            if exc.code in NOT_FOUND_CODES:
                return "failed", f"whatsapp: {action}: {exc.message} (no such message, file or recipient)"
            return "failed", f"whatsapp: {action}: {exc}"
        if isinstance(exc, (aiohttp.ClientError, asyncio.TimeoutError)):
            return "failed", f"whatsapp: {action}: no answer from the Graph API ({type(exc).__name__})"
        return "failed", f"whatsapp: {action}: {type(exc).__name__}: {exc}"
