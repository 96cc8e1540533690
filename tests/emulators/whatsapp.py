"""A WhatsApp Cloud API emulator on 127.0.0.1: the Graph API the bot calls, and Meta's side
of the webhook (signed notifications in the 2026 payload shapes).

Graph API (every call needs `Authorization: Bearer <token>`; errors in Graph's shape,
`{"error": {"message", "type", "code", "error_subcode", "error_data", "fbtrace_id"}}`):

- `GET /{version}/{phone-number-id}`: the number (`display_phone_number`, `verified_name`, `id`).
- `POST /{version}/{phone-number-id}/messages`: `text`, `template`, `interactive` (button and
  list), `reaction`, `image` / `document` / `audio` / `video` by media id; a `status: read`
  body is a read receipt (with `typing_indicator`, the typing indicator). The recipient is
  `to` (a phone number) or `recipient` (a business-scoped user id); `to` wins when both are
  given, as Meta documents. A free-form message to someone whose last message is more than
  24 hours old is refused with code 131047, as Meta does; a template is not.
- `POST /{version}/{phone-number-id}/media` (multipart `file`, `type`, `messaging_product`).
- `GET /{version}/{media-id}`: `url`, `mime_type`, `sha256`, `file_size`, `id`.
- `GET /media/{media-id}` (what `url` points at): the bytes, for the bearer token only.

Webhook: `Person` is someone writing to the business; `notification(...)` builds Meta's
envelope (`object`, `entry[].changes[].value` with `metadata`, `contacts`, `messages` /
`statuses`), `person_message(...)` one message in the shape the person's ids call for (a
phone number in `from` and `contacts[].wa_id`, a business-scoped id in `from_user_id` and
`contacts[].user_id`, either or both), and `deliver(...)` POSTs it to the bot's webhook
signed with `X-Hub-Signature-256` (or forged, or unsigned), answering Meta's way.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.emulators.serving import client_gone

VERSION = "v21.0"
TOKEN = "EAAG-whatsapp-test-token-0123456789"
APP_SECRET = "whatsapp-app-secret-for-tests"
VERIFY_TOKEN = "verify-me-please"
PHONE_NUMBER_ID = "106540352242922"
DISPLAY_PHONE = "15550783881"
WABA_ID = "102290129340398"
BOT_NAME = "Botweave Test"
WINDOW_S = 24 * 3600


@dataclass(frozen=True)
class Person:
    """Someone writing to the business: a phone number, a business-scoped user id (the 2026
    ids), or both."""

    name: str
    wa_id: str | None = None
    user_id: str | None = None
    username: str | None = None

    def contact(self) -> dict[str, Any]:
        profile: dict[str, Any] = {"name": self.name}
        if self.username:
            profile["username"] = self.username
        entry: dict[str, Any] = {"profile": profile}
        if self.wa_id:
            entry["wa_id"] = self.wa_id
        if self.user_id:
            entry["user_id"] = self.user_id
        return entry

    @property
    def address(self) -> str:
        """How the bot should address them: the number when it has one."""
        return self.wa_id or self.user_id or ""


ANN = Person("Ann", wa_id="16505551234", user_id="US.13491208655302741918")
#: Someone from before the business-scoped ids: no `user_id` anywhere in the payload.
BOB = Person("Bob", wa_id="447700900123")
#: Someone with a username whose number Meta does not share: only the business-scoped id.
CARO = Person("Caro", user_id="US.88812345678901234567", username="@caro")


@dataclass
class Sent:
    """A message the bot sent (as the Graph API recorded it)."""

    id: str
    to: str  # the address it went to (`to`, else `recipient`)
    body: dict[str, Any]
    at: float = field(default_factory=time.time)

    @property
    def type(self) -> str:
        return str(self.body.get("type"))

    @property
    def text(self) -> str:
        """What the person reads: a text's body, an interactive message's body, a caption,
        or a template's parameters."""
        kind = self.type
        if kind == "text":
            return str(self.body["text"]["body"])
        if kind == "interactive":
            return str(self.body["interactive"]["body"]["text"])
        if kind == "template":
            params = [p.get("text", "") for c in self.body["template"].get("components", []) for p in c["parameters"]]
            return " ".join(params)
        if kind in ("image", "document", "video"):
            return str(self.body[kind].get("caption", ""))
        return ""


@dataclass
class Upload:
    id: str
    data: bytes
    filename: str
    mime: str


@dataclass
class Delivery:
    """A webhook POST the emulator made and the bot's answer."""

    status: int
    body: dict[str, Any]
    text: str


class WhatsAppEmulator:
    def __init__(self, *, token: str = TOKEN, app_secret: str = APP_SECRET) -> None:
        self.token = token
        self.app_secret = app_secret
        self.calls: list[tuple[str, str]] = []  # (method, path) of every Graph API call
        self.unauthorised: list[str] = []  # paths called without the right bearer token
        self.sent: list[Sent] = []
        self.refused: list[dict[str, Any]] = []  # message bodies the API refused, with the error code
        self.reactions: dict[str, list[str]] = {}  # message id -> the bot's reactions, in order
        self.read: list[str] = []  # message ids marked read
        self.typing: list[str] = []  # message ids the typing indicator was shown on
        self.uploads: dict[str, Upload] = {}
        self.media: dict[str, tuple[bytes, str, int | None]] = {}  # inbound media: bytes, mime, declared size
        self.media_fetches: list[tuple[str, bool]] = []  # (media id, authorised) of each download
        self.last_inbound: dict[str, float] = {}  # address -> when they last wrote
        self.people_messages: dict[str, dict[str, Any]] = {}  # id -> a person's message as sent
        self.webhook_url = ""
        #: Report each accepted message's `sent` status to the webhook, as Meta does (with the
        #: message's `biz_opaque_callback_data`), signed.
        self.report_statuses = False
        self.status_reports: list[asyncio.Task[Delivery]] = []
        #: Sends to carry out and then hang up on before answering: the message went out, the
        #: bot cannot know it (the case a send must not be repeated for).
        self.hang_up_sends = 0
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> WhatsAppEmulator:
        app = web.Application(client_max_size=200 * 1024 * 1024, middlewares=[client_gone])
        app.router.add_get(f"/{VERSION}/{{node}}", self._get_node)
        app.router.add_post(f"/{VERSION}/{{number}}/messages", self._messages)
        app.router.add_post(f"/{VERSION}/{{number}}/media", self._upload)
        app.router.add_get("/media/{media_id}", self._download)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._session = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        for task in self.status_reports:
            task.cancel()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{VERSION}"

    def section(self, webhook_port: int = 0, **overrides: Any) -> dict[str, Any]:
        """A `platforms.whatsapp` mapping pointing the adapter at this emulator."""
        return {
            "phone_number_id": PHONE_NUMBER_ID,
            "access_token": self.token,
            "app_secret": self.app_secret,
            "verify_token": VERIFY_TOKEN,
            "api_base_url": self.api_base_url,
            "listen": f"127.0.0.1:{webhook_port}",
            "path": "/whatsapp",
            **overrides,
        }

    def _new_id(self) -> str:
        return "wamid.HBgL" + hashlib.sha256(str(next(self._ids)).encode()).hexdigest()[:32].upper() + "="

    # --- Graph API ---------------------------------------------------------------------------

    def _authorised(self, request: web.Request) -> bool:
        if request.headers.get("Authorization") == f"Bearer {self.token}":
            return True
        self.unauthorised.append(request.path)
        return False

    @staticmethod
    def error(status: int, code: int, message: str, details: str = "", subcode: int | None = None) -> web.Response:
        error: dict[str, Any] = {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "AbCdEf"}
        if subcode is not None:
            error["error_subcode"] = subcode
        if details:
            error["error_data"] = {"messaging_product": "whatsapp", "details": details}
        return web.json_response({"error": error}, status=status)

    def _unauthorised(self) -> web.Response:
        return self.error(401, 190, "Invalid OAuth access token - Cannot parse access token")

    async def _get_node(self, request: web.Request) -> web.Response:
        self.calls.append(("GET", request.path))
        if not self._authorised(request):
            return self._unauthorised()
        node = request.match_info["node"]
        if node == PHONE_NUMBER_ID:
            return web.json_response(
                {"verified_name": BOT_NAME, "display_phone_number": "+1 555-078-3881", "id": PHONE_NUMBER_ID,
                 "quality_rating": "GREEN"}
            )
        held = self.media.get(node)
        upload = self.uploads.get(node)
        if held is None and upload is not None:
            held = (upload.data, upload.mime, len(upload.data))
        if held is None:
            return self.error(400, 100, f"Unsupported get request. Object with ID '{node}' does not exist")
        data, mime, declared = held
        answer: dict[str, Any] = {
            "messaging_product": "whatsapp", "url": f"http://127.0.0.1:{self.port}/media/{node}",
            "mime_type": mime, "sha256": hashlib.sha256(data).hexdigest(), "id": node,
        }
        if declared is not None:
            answer["file_size"] = declared
        return web.json_response(answer)

    async def _download(self, request: web.Request) -> web.Response:
        media_id = request.match_info["media_id"]
        authorised = self._authorised(request)
        self.media_fetches.append((media_id, authorised))
        if not authorised:
            return web.Response(status=404, text="<html>Not found</html>", content_type="text/html")
        held = self.media.get(media_id)
        if held is None and media_id in self.uploads:
            held = (self.uploads[media_id].data, self.uploads[media_id].mime, None)
        if held is None:
            return web.Response(status=404)
        return web.Response(body=held[0], content_type=held[1].split(";")[0])

    async def _upload(self, request: web.Request) -> web.Response:
        self.calls.append(("POST", request.path))
        if not self._authorised(request):
            return self._unauthorised()
        if request.match_info["number"] != PHONE_NUMBER_ID:
            return self.error(400, 100, "Invalid parameter")
        form = await request.post()
        file = form.get("file")
        if form.get("messaging_product") != "whatsapp" or not isinstance(file, web.FileField):
            return self.error(400, 100, "(#100) The parameter messaging_product is required.")
        media_id = str(9_000_000 + next(self._ids))
        mime = str(form.get("type") or file.content_type)
        self.uploads[media_id] = Upload(media_id, file.file.read(), file.filename, mime)
        return web.json_response({"id": media_id})

    async def _messages(self, request: web.Request) -> web.Response:
        self.calls.append(("POST", request.path))
        if not self._authorised(request):
            return self._unauthorised()
        if request.match_info["number"] != PHONE_NUMBER_ID:
            return self.error(400, 100, "Invalid parameter")
        body = await request.json()
        if body.get("messaging_product") != "whatsapp":
            return self.error(400, 100, "(#100) The parameter messaging_product is required.")
        if body.get("status") == "read":
            return self._mark_read(body)
        to = str(body.get("to") or body.get("recipient") or "")
        if not to or (not to.isdigit() and "." not in to):
            return self._refuse(body, 400, 100, "(#100) Invalid parameter", "to / recipient is not a WhatsApp user")
        kind = body.get("type", "text")
        problem = self._problem(body, kind)
        if problem is not None:
            return self._refuse(body, 400, 100, "(#100) Invalid parameter", problem)
        if kind != "template" and not self.window_open(to):
            return self._refuse(
                body, 400, 131047, "Re-engagement message",
                "Message failed to send because more than 24 hours have passed since the customer last replied "
                "to this number.",
            )
        if kind == "reaction":
            target = body["reaction"]["message_id"]
            if not any(s.id == target for s in self.sent) and target not in self.people_messages:
                return self._refuse(body, 400, 131009, "(#131009) Parameter value is not valid",
                                    "message_id is not a valid message")
            emoji = body["reaction"].get("emoji", "")
            self.reactions[target] = [emoji] if emoji else []
        context = body.get("context")
        if context is not None and not isinstance(context, dict):
            return self._refuse(body, 400, 100, "(#100) Invalid parameter", "context must be an object")
        sent = Sent(self._new_id(), to, body)
        self.sent.append(sent)
        if self.report_statuses and self.webhook_url:
            extra = {"biz_opaque_callback_data": body["biz_opaque_callback_data"]} if "biz_opaque_callback_data" in body else {}
            person = Person("", wa_id=to) if body.get("to") else Person("", user_id=to)
            report = self.notification(statuses=[self.status(sent.id, person, "sent", **extra)])
            self.status_reports.append(asyncio.get_running_loop().create_task(self.deliver(report)))
        if self.hang_up_sends > 0:
            self.hang_up_sends -= 1
            if request.transport is not None:
                request.transport.abort()
        contact = {"input": to, "wa_id": to} if body.get("to") else {"input": to, "user_id": to}
        return web.json_response(
            {"messaging_product": "whatsapp", "contacts": [contact], "messages": [{"id": sent.id}]}
        )

    def _refuse(self, body: dict[str, Any], status: int, code: int, message: str, details: str) -> web.Response:
        self.refused.append({**body, "error_code": code})
        return self.error(status, code, message, details)

    def _problem(self, body: dict[str, Any], kind: str) -> str | None:
        """Why Meta would refuse the body, or None."""
        if kind == "text":
            text = body.get("text", {}).get("body")
            if not isinstance(text, str) or not text:
                return "text.body is required"
            if len(text) > 4096:
                return "text.body is longer than 4096 characters"
        elif kind == "interactive":
            interactive = body.get("interactive", {})
            body_text = interactive.get("body", {}).get("text", "")
            if not body_text or len(body_text) > 1024:
                return "interactive.body.text must be 1 to 1024 characters"
            action = interactive.get("action", {})
            if interactive.get("type") == "button":
                buttons = action.get("buttons", [])
                if not 1 <= len(buttons) <= 3:
                    return "a reply-button message holds 1 to 3 buttons"
                if any(len(b["reply"]["title"]) > 20 or len(b["reply"]["id"]) > 256 for b in buttons):
                    return "button titles hold 20 characters, ids 256"
            elif interactive.get("type") == "list":
                rows = [r for s in action.get("sections", []) for r in s.get("rows", [])]
                if not 1 <= len(rows) <= 10 or any(len(r["title"]) > 24 for r in rows):
                    return "a list holds 1 to 10 rows with titles of 24 characters"
                if not action.get("button"):
                    return "a list needs its button text"
            else:
                return f"interactive type {interactive.get('type')!r} not supported here"
        elif kind in ("image", "document", "audio", "video"):
            media = body.get(kind, {})
            if media.get("id") not in self.uploads and not media.get("link"):
                return f"{kind}.id names no uploaded media"
            if kind == "audio" and "caption" in media:
                return "audio messages carry no caption"
            if len(media.get("caption", "")) > 1024:
                return "a caption holds 1024 characters"
        elif kind == "template":
            template = body.get("template", {})
            if not template.get("name") or not template.get("language", {}).get("code"):
                return "a template needs its name and language code"
            for component in template.get("components", []):
                for parameter in component.get("parameters", []):
                    text = parameter.get("text", "")
                    if "\n" in text or "\t" in text or "     " in text:
                        return "Param text cannot have new-line/tab characters or more than 4 consecutive spaces"
        elif kind != "reaction":
            return f"type {kind!r} not supported here"
        return None

    def _mark_read(self, body: dict[str, Any]) -> web.Response:
        message_id = body.get("message_id")
        if message_id not in self.people_messages:
            return self.error(400, 100, "(#100) Invalid parameter", "message_id is not a received message")
        self.read.append(message_id)
        if isinstance(body.get("typing_indicator"), dict):
            self.typing.append(message_id)
        return web.json_response({"success": True})

    # --- what people see ------------------------------------------------------------------

    def window_open(self, address: str) -> bool:
        last = self.last_inbound.get(address)
        return last is not None and time.time() - last < WINDOW_S

    def age(self, person: Person, hours: float) -> None:
        """Pretend `person` last wrote `hours` ago."""
        for address in filter(None, (person.wa_id, person.user_id)):
            self.last_inbound[address] = time.time() - hours * 3600

    def sent_to(self, person: Person) -> list[Sent]:
        """Messages that reached `person` (by their number or their business-scoped id)."""
        return [s for s in self.sent if s.to in (person.wa_id, person.user_id)]

    def texts_to(self, person: Person) -> list[str]:
        return [s.text for s in self.sent_to(person) if s.type != "reaction"]

    def message(self, message_id: str) -> Sent | None:
        return next((s for s in self.sent if s.id == message_id), None)

    # --- Meta's side of the webhook ---------------------------------------------------------

    def person_message(
        self,
        person: Person,
        kind: str = "text",
        *,
        text: str = "",
        content: dict[str, Any] | None = None,
        reply_to: str | None = None,
        message_id: str | None = None,
        timestamp: float | None = None,
    ) -> dict[str, Any]:
        """One message from `person` as Meta puts it in `messages[]`, and noted as theirs."""
        message: dict[str, Any] = {"id": message_id or self._new_id(), "timestamp": str(int(timestamp or time.time()))}
        if person.wa_id:
            message["from"] = person.wa_id
        if person.user_id:
            message["from_user_id"] = person.user_id
        if reply_to is not None:
            quoted = self.people_messages.get(reply_to)
            author = quoted.get("from", DISPLAY_PHONE) if quoted else DISPLAY_PHONE
            message["context"] = {"from": author, "id": reply_to}
        message["type"] = kind
        message[kind] = content if content is not None else {"body": text}
        self.people_messages[message["id"]] = message
        for address in filter(None, (person.wa_id, person.user_id)):
            self.last_inbound[address] = max(self.last_inbound.get(address, 0.0), float(message["timestamp"]))
        return message

    def media_message(
        self, person: Person, kind: str, data: bytes, mime: str, *, caption: str = "", filename: str | None = None,
        declared_size: int | None = None, voice: bool = False,
    ) -> dict[str, Any]:
        """A person's image / document / audio / video: the bytes held under a new media id."""
        media_id = str(7_000_000 + next(self._ids))
        self.media[media_id] = (data, mime, len(data) if declared_size is None else declared_size)
        content: dict[str, Any] = {"id": media_id, "mime_type": mime, "sha256": hashlib.sha256(data).hexdigest()}
        if caption and kind != "audio":
            content["caption"] = caption
        if filename and kind == "document":
            content["filename"] = filename
        if kind == "audio":
            content["voice"] = voice
        return self.person_message(person, kind, content=content)

    @staticmethod
    def status(message_id: str, person: Person, status: str = "delivered", **extra: Any) -> dict[str, Any]:
        """A status of one of the bot's messages, in the 2026 shape."""
        entry: dict[str, Any] = {"id": message_id, "status": status, "timestamp": str(int(time.time()))}
        if person.wa_id:
            entry["recipient_id"] = person.wa_id
        if person.user_id:
            entry["recipient_user_id"] = person.user_id
        if status == "failed":
            entry["errors"] = [{"code": 131026, "title": "Message undeliverable", "message": "Message undeliverable"}]
        else:
            entry["conversation"] = {"id": "c0ffee", "origin": {"type": "service"}}
            entry["pricing"] = {"billable": False, "pricing_model": "PMP", "category": "service", "type": "free_customer_service"}
        entry.update(extra)
        return entry

    @staticmethod
    def notification(
        *,
        messages: list[dict[str, Any]] = (),  # type: ignore[assignment]
        contacts: list[dict[str, Any]] = (),  # type: ignore[assignment]
        statuses: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> dict[str, Any]:
        """Meta's envelope around messages / statuses (a `messages` field change)."""
        value: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": DISPLAY_PHONE, "phone_number_id": PHONE_NUMBER_ID},
        }
        if contacts:
            value["contacts"] = list(contacts)
        if messages:
            value["messages"] = list(messages)
        if statuses:
            value["statuses"] = list(statuses)
        return {"object": "whatsapp_business_account",
                "entry": [{"id": WABA_ID, "changes": [{"value": value, "field": "messages"}]}]}

    def signature(self, raw: bytes) -> str:
        return "sha256=" + hmac.new(self.app_secret.encode(), raw, hashlib.sha256).hexdigest()

    async def deliver(self, body: dict[str, Any] | bytes, *, signing: str = "valid") -> Delivery:
        """POST a notification to the bot's webhook: `signing` is `valid`, `forged` (signed
        with another secret), `tampered` (signed, then the body changed) or `none`."""
        assert self._session is not None and self.webhook_url, "set webhook_url first"
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if signing == "valid":
            headers["X-Hub-Signature-256"] = self.signature(raw)
        elif signing == "forged":
            headers["X-Hub-Signature-256"] = "sha256=" + hmac.new(b"not-the-secret", raw, hashlib.sha256).hexdigest()
        elif signing == "tampered":
            headers["X-Hub-Signature-256"] = self.signature(raw)
            raw = raw.replace(b"}", b" }", 1)
        async with self._session.post(self.webhook_url, data=raw, headers=headers) as response:
            return Delivery(response.status, body if isinstance(body, dict) else {}, await response.text())

    async def says(self, person: Person, text: str, **kwargs: Any) -> tuple[dict[str, Any], Delivery]:
        """`person` writes `text`; Meta delivers it (signed)."""
        message = self.person_message(person, text=text, **kwargs)
        delivered = await self.deliver(self.notification(messages=[message], contacts=[person.contact()]))
        return message, delivered

    async def verify(self, token: str, challenge: str = "1158201444", mode: str = "subscribe") -> tuple[int, str]:
        """Meta's subscription check: GET with hub.mode, hub.verify_token and hub.challenge."""
        assert self._session is not None
        params = {"hub.mode": mode, "hub.verify_token": token, "hub.challenge": challenge}
        async with self._session.get(self.webhook_url, params=params) as response:
            return response.status, await response.text()
