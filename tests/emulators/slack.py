"""A Slack emulator on 127.0.0.1 for the adapter tests (SPEC §13).

It speaks Slack's real wire formats so slack_sdk / slack-bolt run unmodified against it:

* the Web API (`POST|GET /api/<method>`, form, query or JSON parameters, bearer tokens,
  `{"ok": false, "error": ...}` answers, HTTP 429 with `Retry-After`), keeping a small
  workspace (users, channels, messages, reactions) so answers are consistent;
* Socket Mode: `apps.connections.open` hands out a `ws://127.0.0.1/...` URL; the socket sends
  `hello`, then event envelopes, and records the acks (`{"envelope_id": ...}`) it receives;
* signed Events API requests (`X-Slack-Signature`, `X-Slack-Request-Timestamp`,
  `X-Slack-Retry-Num`) posted to an app's HTTP endpoint.

Every Web API call is recorded in `calls`, so tests assert what a user would have seen.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import ClientSession, WSMsgType, web

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


@dataclass
class Envelope:
    envelope_id: str
    body: dict[str, Any]
    acked: asyncio.Event = field(default_factory=asyncio.Event)


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
        self.connections = 0
        self._sockets: list[web.WebSocketResponse] = []
        self._connected = asyncio.Event()
        self._ts = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.add_user(BOT_USER_ID, BOT_NAME, is_bot=True)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket_mode)
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

    def add_channel(self, channel_id: str, kind: str = "channel") -> None:
        self.channels[channel_id] = kind
        self.messages.setdefault(channel_id, [])

    def next_ts(self) -> str:
        return f"{1_700_000_000 + next(self._ts)}.{next(self._ts):06d}"

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
        if not str(params.get("text", "")).strip():
            return {"ok": False, "error": "no_text"}
        message = {"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "text": params["text"], "ts": self.next_ts()}
        thread_ts = params.get("thread_ts")
        if thread_ts:
            root = self.find(channel, str(thread_ts))
            if root is None:
                return {"ok": False, "error": "thread_not_found"}
            message["thread_ts"] = str(thread_ts)
            self._note_reply(root, BOT_USER_ID)
        self.messages[channel].append(message)
        if self.echo_posts and self._sockets:
            event = dict(message, channel=channel, channel_type=self.channels[channel], event_ts=message["ts"])
            self.echoes.append(asyncio.create_task(self.send_envelope(event_callback(event))))
        return {"ok": True, "channel": channel, "ts": message["ts"], "message": message}

    def _own_message(self, params: dict[str, Any], not_ours: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
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
        message["text"] = params.get("text", "")
        return {"ok": True, "channel": params["channel"], "ts": message["ts"], "text": message["text"]}

    def _m_chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        message, error = self._own_message(params, "cant_delete_message")
        if error:
            return error
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

    def _m_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = str(params.get("channel", ""))
        ts = str(params.get("ts", ""))
        root = self.find(channel, ts)
        if root is None:
            return {"ok": False, "error": "thread_not_found"}
        thread = [root] + [m for m in self.messages[channel] if m.get("thread_ts") == ts and m["ts"] != ts]
        limit = int(params.get("limit") or 1000)
        return {"ok": True, "messages": thread[:limit], "has_more": len(thread) > limit}

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
        """Deliver an event over the Socket Mode connection and wait for its ack."""
        await self.wait_connected(timeout)
        envelope = Envelope(envelope_id=str(uuid.uuid4()), body=body)
        self.envelopes[envelope.envelope_id] = envelope
        kind = "slash_commands" if "command" in body and "event" not in body else "events_api"
        await self._sockets[-1].send_json(
            {
                "envelope_id": envelope.envelope_id,
                "payload": body,
                "type": kind,
                "accepts_response_payload": kind != "events_api",
                "retry_attempt": retry_attempt,
                "retry_reason": retry_reason,
            }
        )
        await asyncio.wait_for(envelope.acked.wait(), timeout)
        return envelope


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

    async def settled(self, timeout: float = 5.0) -> None:
        stats = self.adapter.inbound_stats
        await wait_for(lambda: stats["settled"] >= stats["received"], timeout)


# --- agent identities (rooms): custom username and icon on chat.postMessage ---------------------


class IdentitySlackEmulator(SlackEmulator):
    """The emulator with Slack's message authorship fields, for rooms (issue 7 part 3).

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
