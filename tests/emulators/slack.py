"""A Slack emulator on 127.0.0.1 for the adapter tests.

It speaks Slack's real wire formats so slack_sdk / slack-bolt run unmodified against it:

* the Web API (`POST|GET /api/<method>`, form, query or JSON parameters, bearer tokens,
  `{"ok": false, "error": ...}` answers, HTTP 429 with `Retry-After`), keeping a small
  workspace (users, channels, messages, reactions) so answers are consistent;
* Socket Mode: `apps.connections.open` hands out a `ws://127.0.0.1/...` URL; the socket sends
  `hello`, then event envelopes, and records the acks (`{"envelope_id": ...}`) it receives;
* signed Events API requests (`X-Slack-Signature`, `X-Slack-Request-Timestamp`,
  `X-Slack-Retry-Num`) posted to an app's HTTP endpoint.

Every Web API call is recorded in `calls`, so tests assert what a user would have seen.

What delivery guarantees, buttons, approvals and media are tested with:

* `chat.postMessage` / `chat.update` keep Block Kit `blocks` (checked against Slack's limits;
  a missing `block_id`/`action_id` is filled in as Slack does) and message `metadata`;
  `conversations.history` / `conversations.replies` return the metadata only with
  `include_all_metadata`, and page with `limit`, `oldest`, `latest`, `inclusive`, `cursor`;
* interactivity: `block_actions` builds the payload of a button press on a stored message;
  `send_interactive` delivers it over Socket Mode (envelope type `interactive`) and
  `post_interactive` over HTTP (form-encoded `payload=`, signed), both recording the ack time
  in `interactive`; POSTs to the payload's `response_url` are kept in `responses` and act like
  Slack's (replace or delete the original, post in the channel, or show an ephemeral);
  `chat.postEphemeral` is kept in `ephemerals`;
* files: `add_file` makes a file whose `url_private(_download)` the emulator serves only with
  the bot token (without it: a redirect to an HTML sign-in page, as Slack does); uploads go
  through `files.getUploadURLExternal`, a POST of the bytes to the upload URL and
  `files.completeUploadExternal`, which shares them as a message (all kept in `uploads`);
* `edit_as_user` / `delete_as_user` build the `message_changed` / `message_deleted` events for
  stored messages.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import email.parser
import email.policy
import hashlib
import hmac
import itertools
import json
import mimetypes
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from aiohttp import ClientSession, WSMsgType, web

from tests.emulators.serving import client_gone

BOT_TOKEN = "xoxb-emulator-bot-token"
APP_TOKEN = "xapp-emulator-app-token"
SIGNING_SECRET = "emulator-signing-secret"
TEAM_ID = "T0EMU"
APP_ID = "A0EMU"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
BOT_NAME = "weaver"


@dataclass
class ApiCall:
    method: str
    params: dict[str, Any]
    status: int = 200
    at: float = field(default_factory=time.monotonic)


#: Payload types Slack delivers as Socket Mode envelopes of type `interactive`.
INTERACTIVE_TYPES = (
    "block_actions",
    "block_suggestion",
    "view_submission",
    "view_closed",
    "shortcut",
    "message_action",
)


@dataclass
class Envelope:
    envelope_id: str
    body: dict[str, Any]
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    sent_at: float = field(default_factory=time.monotonic)
    acked_at: float | None = None
    #: The `payload` the client put in its ack, if any (slash commands, view submissions).
    ack_payload: dict[str, Any] | None = None

    @property
    def ack_seconds(self) -> float | None:
        return None if self.acked_at is None else self.acked_at - self.sent_at


@dataclass
class InteractiveDelivery:
    """One interaction payload delivered to the app, and when and how it was acknowledged."""

    payload: dict[str, Any]
    mode: str  # "socket" or "http"
    sent_at: float = field(default_factory=time.monotonic)
    acked_at: float | None = None
    status: int | None = None  # the HTTP status of the ack (http mode)
    response: Any = None  # the ack's body: the envelope's payload, or the HTTP response text

    @property
    def ack_seconds(self) -> float | None:
        """Seconds from delivery to ack; None when no ack came."""
        return None if self.acked_at is None else self.acked_at - self.sent_at


@dataclass
class ResponseUrlPost:
    """One POST to a `response_url` handed out with an interaction."""

    action_user: str
    channel: str
    message_ts: str
    body: dict[str, Any]
    status: int = 200
    at: float = field(default_factory=time.monotonic)


@dataclass
class Upload:
    """One file the app uploaded with the external-upload flow."""

    file_id: str
    filename: str
    length: int  # as declared to files.getUploadURLExternal
    data: bytes | None = None  # what was POSTed to the upload URL
    content_type: str = ""  # of that POST
    completed: bool = False
    title: str = ""
    channel: str | None = None
    initial_comment: str = ""
    thread_ts: str | None = None
    message_ts: str | None = None  # the message that shared it



class SlackEmulator:
    def __init__(self) -> None:
        self.calls: list[ApiCall] = []
        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, str] = {}  # id -> channel | group | mpim | im
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.rate_limits: dict[str, list[int]] = {}  # method -> Retry-After of each 429 to answer
        self.drop_after: dict[str, int] = {}  # method -> how many calls to carry out, then hang up
        self.delays: dict[str, float] = {}  # method -> seconds to wait before answering
        #: Deliver the bot's own posts back over Socket Mode as `message` events, as Slack does
        #: for an app subscribed to message.* events.
        self.echo_posts = False
        self.echoes: list[asyncio.Task[Envelope]] = []
        self.envelopes: dict[str, Envelope] = {}
        self.bad_acks: list[dict[str, Any]] = []
        self.channel_names: dict[str, str] = {}
        #: Interaction payloads delivered (both modes), with their ack times.
        self.interactive: list[InteractiveDelivery] = []
        #: POSTs to response_urls, in order.
        self.responses: list[ResponseUrlPost] = []
        #: Ephemeral messages (chat.postEphemeral and ephemeral response_url answers).
        self.ephemerals: list[dict[str, Any]] = []
        #: Files by id (inbound and uploaded) and their bytes.
        self.files: dict[str, dict[str, Any]] = {}
        self.file_data: dict[str, bytes] = {}
        #: Every GET of a file URL: (file id, authorised, status).
        self.file_fetches: list[tuple[str, bool, int]] = []
        #: What an unauthorised file GET gets: "redirect" (to an HTML sign-in page, as Slack
        #: does), "html" (that page directly) or "401".
        self.file_auth_failure = "redirect"
        self.uploads: dict[str, Upload] = {}
        self._upload_keys: dict[str, str] = {}  # upload URL key -> file id
        self._response_urls: dict[str, dict[str, Any]] = {}  # key -> action context and uses
        self._ids = itertools.count(1)
        self.connections = 0
        self._sockets: list[web.WebSocketResponse] = []
        self._connected = asyncio.Event()
        self._ts = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.add_user(BOT_USER_ID, BOT_NAME, is_bot=True)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=1024**3, middlewares=[client_gone])
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket_mode)
        app.router.add_get("/files-pri/{ident}/{tail:.+}", self._serve_file)
        app.router.add_get("/", self._sign_in_page)
        app.router.add_post("/upload/v1/{key}", self._receive_upload)
        app.router.add_post("/actions/{team}/{number}/{key}", self._response_url)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for task in self.echoes:
            task.cancel()
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    # --- workspace -----------------------------------------------------------------------------

    def add_user(self, user_id: str, name: str, *, display_name: str = "", is_bot: bool = False) -> None:
        self.users[user_id] = {
            "id": user_id,
            "team_id": TEAM_ID,
            "name": name.lower(),
            "real_name": name,
            "is_bot": is_bot,
            "profile": {"display_name": display_name or name, "real_name": name},
        }

    def add_channel(self, channel_id: str, kind: str = "channel", *, name: str | None = None) -> None:
        self.channels[channel_id] = kind
        self.messages.setdefault(channel_id, [])
        self.channel_names[channel_id] = name or ("directmessage" if kind == "im" else channel_id.lower())

    def next_ts(self) -> str:
        """Like Slack's: the current Unix time, made unique (and increasing) by its fraction."""
        return f"{int(time.time())}.{next(self._ts):06d}"

    def find(self, channel: str, ts: str) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel, []) if m["ts"] == ts), None)

    def post_as_user(
        self,
        channel: str,
        user: str,
        text: str,
        *,
        thread_ts: str | None = None,
        subtype: str | None = None,
        files: list[dict[str, Any]] | None = None,
        bot_id: str | None = None,
    ) -> dict[str, Any]:
        """Store a message someone posted and return its `message` event as Slack sends it."""
        message: dict[str, Any] = {"type": "message", "text": text, "ts": self.next_ts(), "team": TEAM_ID}
        if user:
            message["user"] = user
        if bot_id:
            message["bot_id"] = bot_id
            message["bot_profile"] = {"id": bot_id, "name": "otherbot"}
        if subtype:
            message["subtype"] = subtype
        if files:
            message["files"] = files
        if thread_ts:
            message["thread_ts"] = thread_ts
            root = self.find(channel, thread_ts)
            if root is not None:
                message["parent_user_id"] = root.get("user", "")
                self._note_reply(root, user or bot_id or "")
        self.messages.setdefault(channel, []).append(message)
        event = dict(message, channel=channel, event_ts=message["ts"])
        event["channel_type"] = self.channels.get(channel, "channel")
        if subtype == "thread_broadcast" and thread_ts:
            root = self.find(channel, thread_ts)
            if root is not None:
                event["root"] = dict(root)
        return event

    @staticmethod
    def _note_reply(root: dict[str, Any], user: str) -> None:
        root.setdefault("thread_ts", root["ts"])
        root["reply_count"] = root.get("reply_count", 0) + 1
        users = root.setdefault("reply_users", [])
        if user and user not in users:
            users.append(user)

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method and c.status == 200]

    def posted(self) -> list[dict[str, Any]]:
        """The params of every chat.postMessage that was answered ok (what users saw posted)."""
        return [c.params for c in self.calls_to("chat.postMessage")]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- builders: files, edits, deletes, button presses ---------------------------------------

    def add_file(
        self,
        name: str,
        data: bytes,
        *,
        mimetype: str | None = None,
        size: int | None = None,
        user: str = "",
        title: str | None = None,
    ) -> dict[str, Any]:
        """A file someone uploaded, as Slack describes it in a message's `files`.

        Its `url_private` / `url_private_download` serve `data` only with the bot token.
        `size` is what Slack declares (default: the real length), for limit checks.
        """
        file_id = f"F{next(self._ids):010d}"
        mimetype = mimetype or mimetypes.guess_type(name)[0] or "application/octet-stream"
        self.file_data[file_id] = data
        self.files[file_id] = self._file_object(
            file_id, name, mimetype, len(data) if size is None else size, user, title
        )
        return self.files[file_id]

    def _file_object(
        self, file_id: str, name: str, mimetype: str, size: int, user: str, title: str | None
    ) -> dict[str, Any]:
        path = f"/files-pri/{TEAM_ID}-{file_id}"
        filetype = name.rsplit(".", 1)[-1].lower() if "." in name else "binary"
        return {
            "id": file_id,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": name,
            "title": name if title is None else title,
            "mimetype": mimetype,
            "filetype": filetype,
            "pretty_type": filetype.upper(),
            "user": user,
            "user_team": TEAM_ID,
            "editable": False,
            "size": size,
            "mode": "hosted",
            "is_external": False,
            "external_type": "",
            "is_public": True,
            "public_url_shared": False,
            "display_as_bot": False,
            "username": "",
            "url_private": f"{self.base_url}{path}/{quote(name)}",
            "url_private_download": f"{self.base_url}{path}/download/{quote(name)}",
            "permalink": f"https://emulator.slack.com/files/{user or BOT_USER_ID}/{file_id}/{quote(name)}",
            "permalink_public": f"https://slack-files.com/{TEAM_ID}-{file_id}-0000000000",
            "has_rich_preview": False,
            "file_access": "visible",
        }

    def edit_as_user(self, channel: str, ts: str, text: str) -> dict[str, Any]:
        """Someone edited their message: it changes in the store and the `message_changed`
        event Slack sends for it is returned."""
        message = self.find(channel, ts)
        assert message is not None, f"no message {ts} in {channel}"
        previous = copy.deepcopy(message)
        now = self.next_ts()
        message["text"] = text
        message["edited"] = {"user": message.get("user", ""), "ts": now}
        event: dict[str, Any] = {
            "type": "message",
            "subtype": "message_changed",
            "hidden": True,
            "message": self._view(message, metadata=False),
            "channel": channel,
            "previous_message": self._view(previous, metadata=False),
            "event_ts": now,
            "ts": now,
            "channel_type": self.channels.get(channel, "channel"),
        }
        return event

    def delete_as_user(self, channel: str, ts: str) -> dict[str, Any]:
        """Someone deleted a message: it leaves the store and the `message_deleted` event is returned."""
        message = self.find(channel, ts)
        assert message is not None, f"no message {ts} in {channel}"
        self.messages[channel].remove(message)
        now = self.next_ts()
        return {
            "type": "message",
            "subtype": "message_deleted",
            "hidden": True,
            "deleted_ts": ts,
            "channel": channel,
            "previous_message": self._view(message, metadata=False),
            "event_ts": now,
            "ts": now,
            "channel_type": self.channels.get(channel, "channel"),
        }

    def block_actions(
        self,
        channel: str,
        ts: str,
        action_id: str,
        *,
        user: str,
        value: str | None = None,
        block_id: str | None = None,
    ) -> dict[str, Any]:
        """The `block_actions` payload of `user` pressing the button `action_id` on a stored message.

        The button's block_id, text, value and style are taken from the message's blocks (a
        `value` given here wins); its `response_url` points at the emulator.
        """
        message = self.find(channel, ts)
        assert message is not None, f"no message {ts} in {channel}"
        element, found_block = _find_element(message.get("blocks") or [], action_id, block_id)
        action: dict[str, Any] = {
            "type": element.get("type", "button"),
            "action_id": action_id,
            "block_id": block_id or found_block,
            "action_ts": f"{time.time():.6f}",
        }
        if "text" in element:
            action["text"] = element["text"]
        if value is not None or "value" in element:
            action["value"] = element.get("value") if value is None else value
        if "style" in element:
            action["style"] = element["style"]
        key = uuid.uuid4().hex[:24]
        self._response_urls[key] = {"user": user, "channel": channel, "ts": ts, "uses": 0}
        person = self.users.get(user, {"name": user.lower()})
        container: dict[str, Any] = {"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": False}
        if message.get("thread_ts"):
            container["thread_ts"] = message["thread_ts"]
        return {
            "type": "block_actions",
            "user": {"id": user, "username": person["name"], "name": person["name"], "team_id": TEAM_ID},
            "api_app_id": APP_ID,
            "token": "legacy-verification-token",
            "container": container,
            "trigger_id": f"{next(self._ids)}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:32]}",
            "team": {"id": TEAM_ID, "domain": "emulator"},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {"id": channel, "name": self.channel_names.get(channel, channel.lower())},
            "message": self._view(message, metadata=False),
            "state": {"values": {}},
            "response_url": f"{self.base_url}/actions/{TEAM_ID}/{next(self._ids)}/{key}",
            "actions": [action],
        }

    async def send_interactive(self, payload: dict[str, Any], *, timeout: float = 5.0) -> InteractiveDelivery:
        """Deliver an interaction payload over Socket Mode and wait (up to `timeout`) for its ack.

        The record is returned either way; `ack_seconds` is None when no ack came.
        """
        delivery = InteractiveDelivery(payload, "socket")
        self.interactive.append(delivery)
        await self.wait_connected(timeout)
        envelope = await self._send(payload)
        delivery.sent_at = envelope.sent_at
        try:
            await asyncio.wait_for(envelope.acked.wait(), timeout)
        except asyncio.TimeoutError:
            return delivery
        delivery.acked_at = envelope.acked_at
        delivery.response = envelope.ack_payload
        return delivery

    async def post_interactive(
        self, url: str, payload: dict[str, Any], *, secret: str = SIGNING_SECRET, timeout: float = 10.0
    ) -> InteractiveDelivery:
        """Deliver an interaction payload to an app's HTTP endpoint as Slack does: a signed
        form-encoded `payload=<json>`. The HTTP answer is the ack."""
        delivery = InteractiveDelivery(payload, "http")
        self.interactive.append(delivery)
        status, text = await asyncio.wait_for(
            post_signed(url, {"payload": json.dumps(payload)}, secret=secret, form=True), timeout
        )
        delivery.acked_at = time.monotonic()
        delivery.status = status
        delivery.response = text
        return delivery

    # --- views of stored messages --------------------------------------------------------------

    @staticmethod
    def _view(message: dict[str, Any], *, metadata: bool) -> dict[str, Any]:
        """A stored message as the Web API shows it: reactions as Slack lists them, metadata
        only when asked for."""
        view = copy.deepcopy(message)
        if not metadata:
            view.pop("metadata", None)
        listed = [{"name": n, "users": list(u), "count": len(u)} for n, u in view.pop("reactions", {}).items() if u]
        if listed:
            view["reactions"] = listed
        return view

    # --- Web API -------------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                params.update(await request.json())
            else:
                params.update(dict(await request.post()))
        token = request.headers.get("Authorization", "").removeprefix("Bearer ") or params.pop("token", "")
        pending = self.rate_limits.get(method)
        if pending:
            retry_after = pending.pop(0)
            self.calls.append(ApiCall(method, params, status=429))
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": str(retry_after)}
            )
        self.calls.append(ApiCall(method, params))
        if method in self.delays:
            await asyncio.sleep(self.delays[method])
        expected = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token != expected:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        answer = handler(params)
        if self.drop_after.get(method):
            # The call took effect but the connection dies before the answer: the client
            # cannot know whether it worked (the case where a post must not be resent).
            self.drop_after[method] -= 1
            if request.transport is not None:
                request.transport.abort()
        return web.json_response(answer)

    def _m_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://emulator.slack.com/",
            "team": "Emulator",
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": BOT_ID,
            "is_enterprise_install": False,
        }

    def _m_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={uuid.uuid4()}&app_id={APP_ID}"}

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        extras = _message_extras(params)
        if "error" in extras:
            return extras
        text = str(params.get("text") or "")
        if not text.strip() and not extras.get("blocks") and not params.get("attachments"):
            return {"ok": False, "error": "no_text"}
        message = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "text": text, "ts": self.next_ts()}
        message.update(extras)
        thread_ts = params.get("thread_ts")
        if thread_ts:
            root = self.find(channel, str(thread_ts))
            if root is None:
                return {"ok": False, "error": "thread_not_found"}
            message["thread_ts"] = str(thread_ts)
            self._note_reply(root, BOT_USER_ID)
        self.messages[channel].append(message)
        self._echo(channel, message)
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": message}

    def _echo(self, channel: str, message: dict[str, Any]) -> None:
        if self.echo_posts and self._sockets:
            event = dict(message, channel=channel, channel_type=self.channels[channel], event_ts=message["ts"])
            event.pop("metadata", None)
            self.echoes.append(asyncio.create_task(self.send_envelope(event_callback(event))))

    def _m_chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        user = str(params.get("user", ""))
        if user not in self.users:
            return {"ok": False, "error": "user_not_in_channel"}
        extras = _message_extras(params)
        if "error" in extras:
            return extras
        text = str(params.get("text") or "")
        if not text.strip() and not extras.get("blocks"):
            return {"ok": False, "error": "no_text"}
        ts = self.next_ts()
        self.ephemerals.append(
            {
                "via": "chat.postEphemeral",
                "channel": channel,
                "user": user,
                "text": text,
                "blocks": extras.get("blocks"),
                "thread_ts": params.get("thread_ts"),
                "ts": ts,
            }
        )
        return {"ok": True, "message_ts": ts}

    def _own_message(
        self, params: dict[str, Any], not_ours: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        channel = str(params.get("channel", ""))
        if channel not in self.channels:
            return None, {"ok": False, "error": "channel_not_found"}
        message = self.find(channel, str(params.get("ts", "")))
        if message is None:
            return None, {"ok": False, "error": "message_not_found"}
        if message.get("user") != BOT_USER_ID:
            return None, {"ok": False, "error": not_ours}
        return message, None

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        message, error = self._own_message(params, "cant_update_message")
        if error:
            return error
        assert message is not None
        extras = _message_extras(params)
        if "error" in extras:
            return extras
        if "text" in params or "blocks" not in extras:
            message["text"] = params.get("text") or ""
        for key in ("blocks", "metadata"):
            if key in extras:
                message[key] = extras[key]
        answer = {"ok": True, "channel": params["channel"], "ts": message["ts"], "text": message["text"]}
        if "blocks" in message:
            answer["message"] = self._view(message, metadata=False)
        return answer

    def _m_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        message, error = self._own_message(params, "cant_delete_message")
        if error:
            return error
        assert message is not None
        self.messages[str(params["channel"])].remove(message)
        return {"ok": True, "channel": params["channel"], "ts": params["ts"]}

    def _m_reactions_add(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        message = self.find(channel, str(params.get("timestamp", "")))
        if message is None:
            return {"ok": False, "error": "message_not_found" if channel in self.channels else "channel_not_found"}
        name = str(params.get("name", ""))
        reactions = message.setdefault("reactions", {})
        if BOT_USER_ID in reactions.get(name, []):
            return {"ok": False, "error": "already_reacted"}
        reactions.setdefault(name, []).append(BOT_USER_ID)
        return {"ok": True}

    def _m_reactions_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        message = self.find(channel, str(params.get("timestamp", "")))
        if message is None:
            return {"ok": False, "error": "message_not_found" if channel in self.channels else "channel_not_found"}
        users = message.get("reactions", {}).get(str(params.get("name", "")), [])
        if BOT_USER_ID not in users:
            return {"ok": False, "error": "no_reaction"}
        users.remove(BOT_USER_ID)
        return {"ok": True}

    def _m_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        ts = str(params.get("ts", ""))
        root = self.find(channel, ts)
        if root is None:
            return {"ok": False, "error": "thread_not_found"}
        thread = [root] + [m for m in self.messages[channel] if m.get("thread_ts") == ts and m["ts"] != ts]
        # the root always leads; the replies are paged oldest first like Slack
        page, more, cursor = _page(thread, params, default_limit=1000, newest_first=False)
        metadata = _truthy(params.get("include_all_metadata"))
        answer: dict[str, Any] = {
            "ok": True,
            "messages": [self._view(m, metadata=metadata) for m in page],
            "has_more": more,
        }
        if cursor:
            answer["response_metadata"] = {"next_cursor": cursor}
        return answer

    def _m_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """A channel's top-level messages (thread replies only when broadcast), newest first."""
        channel = str(params.get("channel", ""))
        if channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        top = [
            m
            for m in self.messages[channel]
            if not m.get("thread_ts") or m["thread_ts"] == m["ts"] or m.get("subtype") == "thread_broadcast"
        ]
        page, more, cursor = _page(top, params, default_limit=100, newest_first=True)
        metadata = _truthy(params.get("include_all_metadata"))
        return {
            "ok": True,
            "messages": [self._view(m, metadata=metadata) for m in page],
            "has_more": more,
            "pin_count": 0,
            "channel_actions_ts": None,
            "channel_actions_count": 0,
            "response_metadata": {"next_cursor": cursor},
        }

    # --- files ---------------------------------------------------------------------------------

    def _m_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        filename = str(params.get("filename") or "")
        try:
            length = int(params.get("length") or 0)
        except (TypeError, ValueError):
            length = 0
        if not filename or length <= 0:
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{next(self._ids):010d}"
        key = uuid.uuid4().hex
        self._upload_keys[key] = file_id
        self.uploads[file_id] = Upload(file_id, filename, length)
        return {"ok": True, "upload_url": f"{self.base_url}/upload/v1/{key}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        files = _json_param(params.get("files"))
        if not isinstance(files, list) or not files:
            return {"ok": False, "error": "invalid_arguments"}
        uploads: list[tuple[Upload, dict[str, Any]]] = []
        for item in files:
            upload = self.uploads.get(str(item.get("id", "")))
            if upload is None or upload.data is None or upload.completed:
                return {"ok": False, "error": "file_not_found"}
            uploads.append((upload, item))
        targets = [str(params["channel_id"])] if params.get("channel_id") else []
        targets += [c for c in str(params.get("channels") or "").split(",") if c]
        for channel in targets:
            if channel not in self.channels:
                return {"ok": False, "error": "channel_not_found"}
        thread_ts = str(params["thread_ts"]) if params.get("thread_ts") else None
        if thread_ts and (len(targets) != 1 or self.find(targets[0], thread_ts) is None):
            return {"ok": False, "error": "invalid_thread_ts"}
        shared: list[dict[str, Any]] = []
        for upload, item in uploads:
            assert upload.data is not None
            mimetype = mimetypes.guess_type(upload.filename)[0] or "application/octet-stream"
            title = str(item.get("title") or upload.filename)
            info = self._file_object(upload.file_id, upload.filename, mimetype, len(upload.data), BOT_USER_ID, title)
            info["shares"] = {}
            self.files[upload.file_id] = info
            self.file_data[upload.file_id] = upload.data
            upload.completed, upload.title, upload.thread_ts = True, title, thread_ts
            upload.initial_comment = str(params.get("initial_comment") or "")
            shared.append(info)
        for channel in targets:
            message: dict[str, Any] = {
                "type": "message",
                "subtype": "file_share",
                "user": BOT_USER_ID,
                "bot_id": BOT_ID,
                "text": str(params.get("initial_comment") or ""),
                "files": [copy.deepcopy(f) for f in shared],
                "upload": True,
                "display_as_bot": False,
                "ts": self.next_ts(),
            }
            if thread_ts:
                message["thread_ts"] = thread_ts
                root = self.find(channel, thread_ts)
                assert root is not None
                self._note_reply(root, BOT_USER_ID)
            self.messages[channel].append(message)
            for upload, _ in uploads:
                upload.channel, upload.message_ts = channel, message["ts"]
                scope = "public" if self.channels[channel] == "channel" else "private"
                share = {"ts": message["ts"], "channel_name": self.channel_names.get(channel, ""), "team_id": TEAM_ID}
                self.files[upload.file_id]["shares"].setdefault(scope, {}).setdefault(channel, []).append(share)
            self._echo(channel, message)
        return {"ok": True, "files": [self.files[u.file_id] for u, _ in uploads]}

    def _m_files_info(self, params: dict[str, Any]) -> dict[str, Any]:
        info = self.files.get(str(params.get("file", "")))
        return {"ok": True, "file": info} if info else {"ok": False, "error": "file_not_found"}

    def _m_conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        kind = self.channels.get(channel)
        if kind is None:
            return {"ok": False, "error": "channel_not_found"}
        return {
            "ok": True,
            "channel": {
                "id": channel,
                "is_channel": kind == "channel",
                "is_group": kind == "group",
                "is_im": kind == "im",
                "is_mpim": kind == "mpim",
                "is_private": kind in ("group", "mpim", "im"),
                # a DM opened here is "D" + the person's id without its "U"
                **({"user": "U" + channel.removeprefix("D")} if kind == "im" else {}),
            },
        }

    def _m_conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        user = str(params.get("users", ""))
        if user not in self.users:
            return {"ok": False, "error": "user_not_found"}
        channel = "D" + user.removeprefix("U")
        self.add_channel(channel, "im")
        return {"ok": True, "channel": {"id": channel}}

    def _m_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(params.get("user", "")))
        return {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"}

    # --- Socket Mode -----------------------------------------------------------------------------

    async def _socket_mode(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        self._sockets.append(ws)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets),
                "debug_info": {"host": "emulator", "approximate_connection_time": 18060},
                "connection_info": {"app_id": APP_ID},
            }
        )
        self._connected.set()
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._on_ack(json.loads(msg.data))
        finally:
            self._sockets.remove(ws)
            if not self._sockets:
                self._connected.clear()
        return ws

    def _on_ack(self, data: dict[str, Any]) -> None:
        envelope = self.envelopes.get(str(data.get("envelope_id", "")))
        if envelope is None:
            self.bad_acks.append(data)
        else:
            if envelope.acked_at is None:
                envelope.acked_at = time.monotonic()
                envelope.ack_payload = data.get("payload")
            envelope.acked.set()

    @property
    def open_sockets(self) -> int:
        return len(self._sockets)

    async def wait_connected(self, timeout: float = 5.0) -> None:
        await asyncio.wait_for(self._connected.wait(), timeout)

    async def request_reconnect(self) -> None:
        """Slack's periodic `disconnect` message: the client must fetch a new URL and reconnect."""
        await self.wait_connected()
        await self._sockets[-1].send_json(
            {"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "emulator"}}
        )

    async def send_envelope(
        self, body: dict[str, Any], *, retry_attempt: int = 0, retry_reason: str = "", timeout: float = 5.0
    ) -> Envelope:
        """Deliver an event (or a slash command, or an interaction payload) over the Socket Mode
        connection and wait for its ack."""
        await self.wait_connected(timeout)
        envelope = await self._send(body, retry_attempt=retry_attempt, retry_reason=retry_reason)
        await asyncio.wait_for(envelope.acked.wait(), timeout)
        return envelope

    async def _send(self, body: dict[str, Any], *, retry_attempt: int = 0, retry_reason: str = "") -> Envelope:
        envelope = Envelope(envelope_id=str(uuid.uuid4()), body=body)
        self.envelopes[envelope.envelope_id] = envelope
        if body.get("type") in INTERACTIVE_TYPES:
            kind = "interactive"
            # Slack takes a response payload in the ack only where one can change the UI
            accepts = body["type"] in ("view_submission", "block_suggestion")
        elif "command" in body and "event" not in body:
            kind, accepts = "slash_commands", True
        else:
            kind, accepts = "events_api", False
        envelope.sent_at = time.monotonic()
        await self._sockets[-1].send_json(
            {
                "envelope_id": envelope.envelope_id,
                "payload": body,
                "type": kind,
                "accepts_response_payload": accepts,
                "retry_attempt": retry_attempt,
                "retry_reason": retry_reason,
            }
        )
        return envelope

    # --- files, uploads and response_urls over plain HTTP ----------------------------------------

    async def _serve_file(self, request: web.Request) -> web.Response:
        """A file's bytes, only for the bot token (what url_private demands)."""
        file_id = request.match_info["ident"].removeprefix(f"{TEAM_ID}-")
        authorised = request.headers.get("Authorization", "") == f"Bearer {BOT_TOKEN}"
        data = self.file_data.get(file_id)
        if not authorised:
            if self.file_auth_failure == "401":
                status, response = 401, web.Response(status=401, text="not_authed")
            elif self.file_auth_failure == "html":
                status, response = 200, self._sign_in_response()
            else:
                status = 302
                response = web.Response(status=302, headers={"Location": f"/?redir={quote(request.path_qs, safe='')}"})
        elif data is None:
            status, response = 404, web.Response(status=404, text="file_not_found")
        else:
            status = 200
            response = web.Response(body=data, headers={"Content-Type": self.files[file_id]["mimetype"]})
        self.file_fetches.append((file_id, authorised, status))
        return response

    async def _sign_in_page(self, request: web.Request) -> web.Response:
        return self._sign_in_response()

    @staticmethod
    def _sign_in_response() -> web.Response:
        page = "<!DOCTYPE html><html><head><title>Slack</title></head><body><h1>Sign in to Emulator</h1></body></html>"
        return web.Response(text=page, content_type="text/html")

    async def _receive_upload(self, request: web.Request) -> web.Response:
        """The upload URL: raw bytes or a multipart form with the file, as Slack accepts both."""
        file_id = self._upload_keys.get(request.match_info["key"])
        if file_id is None:
            return web.Response(status=404, text="upload_url_not_found")
        raw = await request.read()
        upload = self.uploads[file_id]
        upload.content_type = request.content_type
        upload.data = (
            _multipart_file(request.headers.get("Content-Type", ""), raw)
            if request.content_type.startswith("multipart/")
            else raw
        )
        return web.Response(text=f"OK - {len(upload.data)}", content_type="text/plain")

    async def _response_url(self, request: web.Request) -> web.Response:
        """A POST to an interaction's response_url: replace or delete the original message, post
        in the channel (`response_type: in_channel`) or show an ephemeral (the default). Slack
        allows five uses."""
        context = self._response_urls.get(request.match_info["key"])
        if context is None:
            return web.Response(status=404, text="no_service")
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = json.loads(parse_qs(raw.decode()).get("payload", ["{}"])[0])  # a form-encoded payload=
        post = ResponseUrlPost(context["user"], context["channel"], context["ts"], body)
        self.responses.append(post)
        context["uses"] += 1
        if context["uses"] > 5:
            post.status = 404
            return web.Response(status=404, text="used_url")
        channel, original = context["channel"], self.find(context["channel"], context["ts"])
        extras = _message_extras(body)
        if "error" in extras:
            post.status = 400
            return web.Response(status=400, text=str(extras["error"]))
        if _truthy(body.get("delete_original")):
            if original is not None:
                self.messages[channel].remove(original)
        elif _truthy(body.get("replace_original")):
            if original is None:
                post.status = 404
                return web.Response(status=404, text="message_not_found")
            original["text"] = str(body.get("text") or "")
            original["blocks"] = extras.get("blocks", [])
        elif body.get("response_type") == "in_channel":
            message = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "text": str(body.get("text") or "")}
            message.update(extras, ts=self.next_ts())
            if body.get("thread_ts"):
                message["thread_ts"] = str(body["thread_ts"])
            self.messages[channel].append(message)
            self._echo(channel, message)
        else:
            self.ephemerals.append(
                {
                    "via": "response_url",
                    "channel": channel,
                    "user": context["user"],
                    "text": str(body.get("text") or ""),
                    "blocks": extras.get("blocks"),
                    "thread_ts": body.get("thread_ts"),
                    "ts": self.next_ts(),
                }
            )
        return web.Response(text="ok", content_type="text/plain")


# --- Block Kit, metadata, paging --------------------------------------------------------------------


def _json_param(value: Any) -> Any:
    """A structured parameter: as JSON sent, or a JSON string from a form or query."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true")


def _message_extras(params: dict[str, Any]) -> dict[str, Any]:
    """`blocks` and `metadata` of a post, checked and normalised as Slack stores them, or an error answer."""
    extras: dict[str, Any] = {}
    if params.get("blocks") not in (None, ""):
        blocks = _json_param(params["blocks"])
        problems: list[str] = []
        normalised = _normalise_blocks(blocks, problems)
        if problems:
            return {
                "ok": False,
                "error": "invalid_blocks",
                "errors": problems,
                "response_metadata": {"messages": [f"[ERROR] {p}" for p in problems]},
            }
        extras["blocks"] = normalised
    if params.get("metadata") not in (None, ""):
        metadata = _json_param(params["metadata"])
        if (
            not isinstance(metadata, dict)
            or not isinstance(metadata.get("event_type"), str)
            or not metadata["event_type"]
            or not isinstance(metadata.get("event_payload"), dict)
        ):
            return {"ok": False, "error": "invalid_metadata_format"}
        extras["metadata"] = {"event_type": metadata["event_type"], "event_payload": metadata["event_payload"]}
    return extras


def _short_id() -> str:
    return uuid.uuid4().hex[:5]


def _normalise_element(element: Any, where: str, problems: list[str], action_ids: set[str]) -> dict[str, Any]:
    if not isinstance(element, dict) or "type" not in element:
        problems.append(f"missing required field: type [json-pointer:{where}]")
        return {}
    element = copy.deepcopy(element)
    if element["type"] == "button":
        text = element.get("text")
        if not isinstance(text, dict) or text.get("type") != "plain_text" or not str(text.get("text") or ""):
            problems.append(f"must provide a plain_text text object [json-pointer:{where}/text]")
        elif len(str(text["text"])) > 75:
            problems.append(f"must be less than 76 characters [json-pointer:{where}/text/text]")
        if len(str(element.get("value") or "")) > 2000:
            problems.append(f"must be less than 2001 characters [json-pointer:{where}/value]")
        if element.get("style") not in (None, "primary", "danger"):
            problems.append(f"must be one of primary, danger [json-pointer:{where}/style]")
    if "action_id" in element or element["type"] in ("button", "static_select", "overflow", "datepicker"):
        action_id = str(element.setdefault("action_id", _short_id()))
        if not action_id or len(action_id) > 255:
            problems.append(f"must be 1 to 255 characters [json-pointer:{where}/action_id]")
        elif action_id in action_ids:
            problems.append(f"action_id already exists: {action_id} [json-pointer:{where}/action_id]")
        action_ids.add(action_id)
    return element


def _normalise_blocks(blocks: Any, problems: list[str]) -> list[dict[str, Any]]:
    """Slack's checks on `blocks` (a list of at most 50, unique block_ids, actions of 1-25
    elements, button text/value/style limits) and the ids it fills in."""
    if not isinstance(blocks, list) or len(blocks) > 50:
        problems.append("must be an array of at most 50 blocks [json-pointer:/blocks]")
        return []
    out: list[dict[str, Any]] = []
    block_ids: set[str] = set()
    for b, block in enumerate(blocks):
        where = f"/blocks/{b}"
        if not isinstance(block, dict) or "type" not in block:
            problems.append(f"missing required field: type [json-pointer:{where}]")
            continue
        block = copy.deepcopy(block)
        block_id = str(block.setdefault("block_id", _short_id()))
        if block_id in block_ids:
            problems.append(f"block_id already exists: {block_id} [json-pointer:{where}/block_id]")
        block_ids.add(block_id)
        action_ids: set[str] = set()
        if block["type"] == "actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 25:
                problems.append(f"must provide 1 to 25 elements [json-pointer:{where}/elements]")
            else:
                block["elements"] = [
                    _normalise_element(e, f"{where}/elements/{i}", problems, action_ids) for i, e in enumerate(elements)
                ]
        elif "accessory" in block:
            block["accessory"] = _normalise_element(block["accessory"], f"{where}/accessory", problems, action_ids)
        out.append(block)
    return out


def _find_element(blocks: list[dict[str, Any]], action_id: str, block_id: str | None) -> tuple[dict[str, Any], str]:
    """The interactive element `action_id` (in `block_id` when given) and its block's id."""
    for block in blocks:
        if block_id is not None and block.get("block_id") != block_id:
            continue
        for element in list(block.get("elements") or []) + [block.get("accessory") or {}]:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return element, str(block.get("block_id", ""))
    return {"type": "button"}, block_id or _short_id()


def _ts_key(ts: str) -> tuple[int, int]:
    whole, _, frac = str(ts).partition(".")
    return int(whole or 0), int((frac or "0").ljust(6, "0")[:6])


def _page(
    messages: list[dict[str, Any]], params: dict[str, Any], *, default_limit: int, newest_first: bool
) -> tuple[list[dict[str, Any]], bool, str]:
    """One page of `messages` (stored oldest first): `oldest`/`latest` bounds (exclusive unless
    `inclusive`), `limit`, and an opaque `cursor` naming where the next page starts."""
    inclusive = _truthy(params.get("inclusive"))
    oldest = _ts_key(str(params["oldest"])) if params.get("oldest") else None
    latest = _ts_key(str(params["latest"])) if params.get("latest") else None

    def within(m: dict[str, Any]) -> bool:
        key = _ts_key(m["ts"])
        if oldest is not None and (key < oldest or (key == oldest and not inclusive)):
            return False
        return latest is None or key < latest or (key == latest and inclusive)

    selected = [m for m in messages if within(m)]
    if newest_first:
        selected.reverse()
    start = 0
    if params.get("cursor"):
        try:
            start = int(base64.b64decode(str(params["cursor"])).decode().removeprefix("next_index:"))
        except ValueError:
            start = len(selected)
    try:
        limit = int(params.get("limit") or default_limit)
    except ValueError:
        limit = default_limit
    limit = max(1, min(limit, 999))
    page = selected[start : start + limit]
    more = start + limit < len(selected)
    cursor = base64.b64encode(f"next_index:{start + limit}".encode()).decode() if more else ""
    return page, more, cursor


def _multipart_file(content_type: str, raw: bytes) -> bytes:
    """The first file part of a multipart form (or the first part, if none names a file)."""
    parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw
    )
    parts = list(parsed.iter_parts())
    chosen = next((p for p in parts if p.get_filename() is not None), parts[0] if parts else None)
    data = chosen.get_payload(decode=True) if chosen is not None else b""
    return data if isinstance(data, bytes) else b""


# --- payload builders ----------------------------------------------------------------------------


def event_callback(event: dict[str, Any], *, event_id: str | None = None) -> dict[str, Any]:
    """Wrap an event the way the Events API delivers it (HTTP body or Socket Mode payload)."""
    return {
        "token": "legacy-verification-token",
        "team_id": TEAM_ID,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "authorizations": [
            {"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True, "is_enterprise_install": False}
        ],
        "is_ext_shared_channel": False,
    }


def app_mention_of(message_event: dict[str, Any]) -> dict[str, Any]:
    """The `app_mention` event Slack sends alongside a message that mentions the bot."""
    keys = ("user", "text", "ts", "channel", "event_ts", "thread_ts", "team", "files")
    return {"type": "app_mention", **{k: message_event[k] for k in keys if k in message_event}}


def slash_command(command: str, text: str, *, user: str, channel: str, channel_name: str) -> dict[str, Any]:
    return {
        "token": "legacy-verification-token",
        "team_id": TEAM_ID,
        "api_app_id": APP_ID,
        "channel_id": channel,
        "channel_name": channel_name,
        "user_id": user,
        "command": command,
        "text": text,
        "response_url": "https://hooks.slack.com/commands/emulated",
        "trigger_id": f"{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex[:8]}",
    }


def sign(body: str, timestamp: int, secret: str = SIGNING_SECRET) -> str:
    """Slack's v0 request signature: HMAC-SHA256 over `v0:<timestamp>:<body>`."""
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:{body}".encode(), hashlib.sha256).hexdigest()
    return f"v0={digest}"


async def post_signed(
    url: str,
    body: dict[str, Any],
    *,
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
    retry_num: int | None = None,
    signature: str | None = None,
    form: bool = False,
) -> tuple[int, str]:
    """POST an Events API request (JSON) or a slash command (`form=True`) the way Slack does.

    Returns (status, response text).
    """
    raw = urlencode(body) if form else json.dumps(body)
    ts = int(time.time()) if timestamp is None else timestamp
    headers = {
        "Content-Type": "application/x-www-form-urlencoded" if form else "application/json",
        "X-Slack-Request-Timestamp": str(ts),
        "X-Slack-Signature": signature or sign(raw, ts, secret),
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    async with ClientSession() as session:
        async with session.post(url, data=raw, headers=headers) as response:
            return response.status, await response.text()


async def wait_for(predicate: Any, timeout: float = 5.0, interval: float = 0.01) -> None:
    """Poll until `predicate()` is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %.1fs" % timeout)
        await asyncio.sleep(interval)


# --- harness: the emulator plus a botweave App (or a bare adapter) in one delivery mode --------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def slack_section(emulator: SlackEmulator, mode: str, **overrides: Any) -> dict[str, Any]:
    """A `platforms.slack` config section pointed at the emulator."""
    section: dict[str, Any] = {
        "bot_token": BOT_TOKEN,
        "mode": mode,
        "api_base_url": emulator.api_base_url,
        "unknown_user_policy": "allow",
    }
    if mode == "socket":
        section["app_token"] = APP_TOKEN
    else:
        section.update(signing_secret=SIGNING_SECRET, http_host="127.0.0.1", http_port=free_port())
    section.update(overrides)
    return section


class EventDelivery:
    """Delivers Events API bodies to a running adapter the way Slack would in its mode."""

    def __init__(self, emulator: SlackEmulator, adapter: Any, mode: str) -> None:
        self.emulator = emulator
        self.adapter = adapter
        self.mode = mode

    @property
    def url(self) -> str:
        config = self.adapter.config
        return f"http://127.0.0.1:{self.adapter.http_port}{config.http_path}"

    async def deliver(self, body: dict[str, Any], *, retry: int = 0) -> None:
        """Send one delivery and wait until it was acknowledged (HTTP 200 / envelope ack)."""
        if self.mode == "socket":
            await self.emulator.send_envelope(body, retry_attempt=retry, retry_reason="timeout" if retry else "")
        else:
            is_command = "command" in body and "event" not in body
            status, text = await post_signed(self.url, body, retry_num=retry or None, form=is_command)
            assert status == 200, (status, text)

    async def deliver_all(self, *bodies: dict[str, Any], retry: int = 0) -> None:
        """Deliver, then wait until the adapter has finished reading every delivery.

        Bolt starts the listener task before it acknowledges, and the adapter counts an event
        as received in that task's first step; by the time the ack has come back over the
        network that step has run. An event bolt itself filtered (the bot's own) is never
        received, so "everything received has settled" is the condition to wait for.
        """
        for body in bodies:
            await self.deliver(body, retry=retry)
        for _ in range(3):
            await asyncio.sleep(0)
        await self.settled()

    async def deliver_action(self, payload: dict[str, Any]) -> InteractiveDelivery:
        """Deliver an interaction payload (e.g. `block_actions`) in this mode; the returned
        record carries the ack time (`ack_seconds`)."""
        if self.mode == "socket":
            return await self.emulator.send_interactive(payload)
        return await self.emulator.post_interactive(self.url, payload)

    async def settled(self, timeout: float = 5.0) -> None:
        stats = self.adapter.inbound_stats
        await wait_for(lambda: stats["settled"] >= stats["received"], timeout)


# --- agent identities (rooms): custom username and icon on chat.postMessage ---------------------


class IdentitySlackEmulator(SlackEmulator):
    """The emulator with Slack's message authorship fields, for rooms.

    `chat.postMessage` honours `username`, `icon_emoji` and `icon_url` the way Slack does for
    an app with `chat:write.customize`: the message becomes a `bot_message` carrying the bot's
    `bot_id`, the `username` and an `icons` object (and no `user`), and its echo — when
    `echo_posts` is on — is that message as a `message` event. With `deny_customize` set the
    token lacks the scope, and a post that asks for a custom `username` is refused with
    `missing_scope`, needed `chat:write.customize`, and nothing is stored.
    """

    def __init__(self) -> None:
        super().__init__()
        self.deny_customize = False

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        username = str(params.get("username") or "")
        if username and self.deny_customize:
            return {
                "ok": False,
                "error": "missing_scope",
                "needed": "chat:write.customize",
                "provided": "chat:write,channels:history,app_mentions:read",
            }
        if not username:
            return super()._m_chat_postMessage(params)
        echo, self.echo_posts = self.echo_posts, False  # echo the message once it carries the identity
        try:
            answer = super()._m_chat_postMessage(params)
        finally:
            self.echo_posts = echo
        if not answer.get("ok"):
            return answer
        message = answer["message"]  # the stored message itself
        message.pop("user", None)
        message.update(subtype="bot_message", username=username, icons=_icons(params))
        channel = str(answer["channel"])
        if self.echo_posts and self._sockets:
            event = dict(message, channel=channel, channel_type=self.channels[channel], event_ts=message["ts"])
            self.echoes.append(asyncio.create_task(self.send_envelope(event_callback(event))))
        return answer

    def identity_posts(self, channel: str) -> list[dict[str, Any]]:
        """The stored messages of `channel` that carry a custom username, oldest first."""
        return [m for m in self.messages.get(channel, []) if m.get("username")]


def _icons(params: dict[str, Any]) -> dict[str, str]:
    """The `icons` object Slack stores for a post: the emoji wins over the image URL."""
    if params.get("icon_emoji"):
        return {"emoji": str(params["icon_emoji"])}
    if params.get("icon_url"):
        url = str(params["icon_url"])
        return {"image_36": url, "image_48": url, "image_72": url}
    return {}
