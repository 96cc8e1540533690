"""A Discord emulator on 127.0.0.1: REST API v10 + gateway WebSocket, in Discord's wire format.

discord.py talks to it exactly as to Discord: `Authorization: Bot <token>` REST calls under
`/api/v10`, and a gateway that says HELLO, answers IDENTIFY with READY + GUILD_CREATE, ACKs
heartbeats, and then carries whatever dispatches a test scripts. It keeps the messages it
created so tests can assert what a user would see, echoes the bot's own actions back over the
gateway like Discord does, and can answer 429 with `retry_after`.

Channel webhooks (rooms post through them) are emulated too: list and create a channel's
webhooks, look one up, and execute one (`?wait=true`, `thread_id`) with a per-message username
and avatar. An executed webhook's message has `webhook_id` set and its author is the webhook
under the given username, as on Discord, and it is echoed over the gateway. The message carries
no `application_id`: the client has to recognise its own webhook by id. `deny_webhooks`
answers every webhook route with 403 Missing Permissions, as for a bot without Manage Webhooks.

Two details of the real API that discord.py depends on: JSON responses carry a Content-Type of
exactly `application/json` (discord.py parses nothing else as JSON), and a 429 carries a `Via`
header (without it discord.py takes the 429 for a Cloudflare ban and gives up).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import unquote

from aiohttp import WSMsgType, web

GUILD_ID = "1000"
CHANNEL_ID = "2000"  # #general, a guild text channel
THREAD_ID = "2100"  # a public thread under #general
FORUM_ID = "2200"  # a forum channel
FORUM_POST_ID = "2300"  # a forum post (a thread under the forum)
DM_CHANNEL_ID = "3000"
BOT_ID = "9000"  # also the application id, as for real bots
BOT_ROLE_ID = "5000"  # the bot's managed role
ROLE_ID = "5001"  # an ordinary role, "mods"
ALICE_ID = "7001"
BOB_ID = "7002"
OTHER_BOT_ID = "8001"
TOKEN = "emulated-bot-token"

INTENT_MEMBERS = 1 << 1
_BODY = web.RequestKey("body", object)  # the parsed JSON body, read once by the middleware
_DISCORD_EPOCH_MS = 1420070400000


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


def user(user_id: str, username: str, *, bot: bool = False, global_name: str | None = None) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": username,
        "discriminator": "0",
        "global_name": global_name,
        "avatar": None,
        "bot": bot,
    }


def _role(role_id: str, name: str, position: int, *, bot_id: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": role_id,
        "name": name,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": position,
        "permissions": "0",
        "managed": bot_id is not None,
        "mentionable": True,
        "flags": 0,
    }
    if bot_id is not None:
        data["tags"] = {"bot_id": bot_id}
    return data


def _member(user_data: dict[str, Any], roles: list[str] | None = None) -> dict[str, Any]:
    return {
        "user": user_data,
        "nick": None,
        "avatar": None,
        "roles": roles or [],
        "joined_at": _now_iso(),
        "deaf": False,
        "mute": False,
        "flags": 0,
        "pending": False,
    }


def _text_channel(channel_id: str, name: str, *, kind: int = 0) -> dict[str, Any]:
    return {
        "id": channel_id,
        "type": kind,
        "guild_id": GUILD_ID,
        "name": name,
        "position": 0,
        "permission_overwrites": [],
        "nsfw": False,
        "parent_id": None,
        "topic": None,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "flags": 0,
        "available_tags": [],
        "default_reaction_emoji": None,
        "default_sort_order": None,
        "default_forum_layout": 0,
    }


def thread(thread_id: str, parent_id: str, name: str, owner_id: str, *, newly_created: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": thread_id,
        "type": 11,
        "guild_id": GUILD_ID,
        "parent_id": parent_id,
        "owner_id": owner_id,
        "name": name,
        "last_message_id": None,
        "message_count": 0,
        "member_count": 1,
        "rate_limit_per_user": 0,
        "flags": 0,
        "applied_tags": [],
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": _now_iso(),
            "locked": False,
        },
    }
    if newly_created:
        data["newly_created"] = True
    return data


@dataclass
class _FailRule:
    method: str
    path: re.Pattern[str]
    status: int
    retry_after: float
    remaining: int


@dataclass
class Request:
    """One REST call as the emulator received it."""

    method: str
    path: str
    json: Any
    status: int = 0
    at: float = field(default_factory=time.monotonic)


@dataclass
class DiscordEmulator:
    token: str = TOKEN
    #: When False, IDENTIFY with the members intent is refused with close code 4014.
    allow_privileged: bool = True
    #: Echo the bot's own sends/edits/deletes/reactions back over the gateway, as Discord does.
    echo_own: bool = True
    #: When True, the webhook routes answer 403 Missing Permissions (no Manage Webhooks).
    deny_webhooks: bool = False
    port: int = 0
    requests: list[Request] = field(default_factory=list)
    messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    identify: dict[str, Any] | None = None
    webhooks: dict[str, dict[str, Any]] = field(default_factory=dict)
    _runner: web.AppRunner | None = None
    _ws: web.WebSocketResponse | None = None
    _seq: int = 0
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _fail_rules: list[_FailRule] = field(default_factory=list)
    _send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    # --- the world ---------------------------------------------------------------------------

    def __post_init__(self) -> None:
        self.bot = user(BOT_ID, "weaver", bot=True, global_name="Weaver")
        self.alice = user(ALICE_ID, "alice", global_name="Alice")
        self.bob = user(BOB_ID, "bob", global_name="Bob")
        self.other_bot = user(OTHER_BOT_ID, "otherbot", bot=True)
        self.channels: dict[str, dict[str, Any]] = {
            CHANNEL_ID: _text_channel(CHANNEL_ID, "general"),
            FORUM_ID: _text_channel(FORUM_ID, "ideas", kind=15),
        }
        self.threads: dict[str, dict[str, Any]] = {
            THREAD_ID: thread(THREAD_ID, CHANNEL_ID, "planning", ALICE_ID),
            FORUM_POST_ID: thread(FORUM_POST_ID, FORUM_ID, "Feature: dark mode", ALICE_ID),
        }

    def guild_payload(self) -> dict[str, Any]:
        members = [
            _member(self.bot, [BOT_ROLE_ID]),
            _member(self.alice),
            _member(self.bob, [ROLE_ID]),
            _member(self.other_bot),
        ]
        return {
            "id": GUILD_ID,
            "name": "Weave HQ",
            "icon": None,
            "owner_id": ALICE_ID,
            "roles": [
                _role(GUILD_ID, "@everyone", 0),
                _role(BOT_ROLE_ID, "Weaver", 1, bot_id=BOT_ID),
                _role(ROLE_ID, "mods", 2),
            ],
            "emojis": [],
            "stickers": [],
            "features": [],
            "member_count": len(members),
            "members": members,
            "channels": list(self.channels.values()),
            "threads": list(self.threads.values()),
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "unavailable": False,
            "large": False,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "system_channel_id": None,
            "joined_at": _now_iso(),
        }

    def _guild_of(self, channel_id: str) -> str | None:
        return GUILD_ID if channel_id in self.channels or channel_id in self.threads else None

    def next_id(self) -> str:
        """A snowflake: milliseconds since the Discord epoch in the high bits, a counter below."""
        millis = int(time.time() * 1000) - _DISCORD_EPOCH_MS
        return str((millis << 22) | (next(self._ids) & 0xFFF))

    def message(
        self,
        content: str,
        *,
        channel_id: str = CHANNEL_ID,
        author: dict[str, Any] | None = None,
        mentions: list[dict[str, Any]] | None = None,
        mention_roles: list[str] | None = None,
        reply_to: dict[str, Any] | str | None = None,
        include_referenced: bool = True,
        attachments: list[dict[str, Any]] | None = None,
        webhook_id: str | None = None,
        store: bool = True,
        **extra: Any,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload (a message object plus guild_id/member), stored for fetches.

        `reply_to` is a stored message (or its id); `include_referenced=False` leaves out
        `referenced_message`, as the gateway sometimes does, so the client has to fetch it.
        """
        author = author or self.alice
        guild_id = self._guild_of(channel_id)
        data: dict[str, Any] = {
            "id": self.next_id(),
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": "@everyone" in content,
            "mentions": [dict(m) for m in (mentions or [])],
            "mention_roles": list(mention_roles or []),
            "attachments": list(attachments or []),
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
        if guild_id is not None:
            data["guild_id"] = guild_id
            if webhook_id is None:
                data["member"] = {k: v for k, v in _member(author).items() if k != "user"}
        if webhook_id is not None:
            data["webhook_id"] = webhook_id
        data.update(extra)  # any other message field, e.g. application_id
        if reply_to is not None:
            ref = self.messages[reply_to] if isinstance(reply_to, str) else reply_to
            data["type"] = 19
            data["message_reference"] = {
                "type": 0,
                "message_id": ref["id"],
                "channel_id": ref["channel_id"],
                **({"guild_id": guild_id} if guild_id else {}),
            }
            if include_referenced:
                data["referenced_message"] = {k: v for k, v in ref.items() if k != "referenced_message"}
        if store:
            self.messages[data["id"]] = data
        return data

    def attachment(self, filename: str, content_type: str, size: int = 1234) -> dict[str, Any]:
        attachment_id = self.next_id()
        url = f"https://cdn.discordapp.com/attachments/{CHANNEL_ID}/{attachment_id}/{filename}"
        return {
            "id": attachment_id,
            "filename": filename,
            "size": size,
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }

    # --- what the bot did (assert on these) --------------------------------------------------

    def bot_messages(self, channel_id: str | None = None) -> list[dict[str, Any]]:
        """Messages the bot posted and that still exist, oldest first."""
        return [
            m
            for m in self.messages.values()
            if m["author"]["id"] == BOT_ID and (channel_id is None or m["channel_id"] == channel_id)
        ]

    def webhook_messages(self, channel_id: str | None = None) -> list[dict[str, Any]]:
        """Messages posted through webhooks and still there, oldest first (`author.username` is
        the name users see, `sent_with` what the client asked for)."""
        return [
            m
            for m in self.messages.values()
            if m.get("webhook_id") is not None
            and m["webhook_id"] in self.webhooks
            and (channel_id is None or m["channel_id"] == channel_id)
        ]

    def webhook_executions(self) -> list[Request]:
        """Every execute-webhook call, refused ones included."""
        return self.calls("POST", r"/webhooks/\d+/[^/]+")

    def add_webhook(self, channel_id: str, name: str, *, creator: dict[str, Any] | None = None) -> dict[str, Any]:
        """A webhook that already exists in a channel (made by `creator`, default a person)."""
        creator = creator or self.alice
        data: dict[str, Any] = {
            "id": self.next_id(),
            "type": 1,
            "guild_id": GUILD_ID,
            "channel_id": channel_id,
            "name": name,
            "avatar": None,
            "token": f"wh-token-{len(self.webhooks) + 1}",
            "application_id": BOT_ID if creator["id"] == BOT_ID else None,
            "user": creator,
        }
        self.webhooks[data["id"]] = data
        return data

    def calls(self, method: str, pattern: str) -> list[Request]:
        rx = re.compile(pattern)
        return [r for r in self.requests if r.method == method and rx.fullmatch(r.path)]

    def fail_next(self, method: str, pattern: str, *, status: int = 429, retry_after: float = 0.05, times: int = 1) -> None:
        """Answer the next `times` matching calls with `status` (429: rate limited)."""
        self._fail_rules.append(_FailRule(method, re.compile(pattern), status, retry_after, times))

    # --- server ------------------------------------------------------------------------------

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    async def start(self) -> DiscordEmulator:
        app = web.Application(middlewares=[self._middleware])
        app.router.add_get("/gateway", self._gateway)
        api = "/api/v10"
        routes: list[tuple[str, str, Callable[..., Any]]] = [
            ("GET", "/gateway/bot", self._gateway_bot),
            ("GET", "/gateway", self._gateway_info),
            ("GET", "/users/@me", self._me),
            ("POST", "/users/@me/channels", self._open_dm),
            ("GET", "/oauth2/applications/@me", self._application),
            ("GET", "/applications/@me", self._application),
            ("POST", "/channels/{channel}/messages", self._create_message),
            ("GET", "/channels/{channel}/messages/{message}", self._get_message),
            ("PATCH", "/channels/{channel}/messages/{message}", self._edit_message),
            ("DELETE", "/channels/{channel}/messages/{message}", self._delete_message),
            ("PUT", "/channels/{channel}/messages/{message}/reactions/{emoji}/@me", self._add_reaction),
            ("POST", "/channels/{channel}/typing", self._typing),
            ("GET", "/channels/{channel}/webhooks", self._channel_webhooks),
            ("POST", "/channels/{channel}/webhooks", self._create_webhook),
            ("GET", "/webhooks/{webhook}", self._get_webhook),
            ("POST", "/webhooks/{webhook}/{token}", self._execute_webhook),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, api + path, handler)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._ws is not None and not self._ws.closed:
            await self._ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @staticmethod
    def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        return web.Response(body=json.dumps(data).encode(), status=status, headers=all_headers)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        if request.path == "/gateway":
            return await handler(request)
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
        path = unquote(request.path.removeprefix("/api/v10"))
        record = Request(request.method, path, body)
        self.requests.append(record)
        response = self._auth_or_rule(request, record)
        if response is None:
            request[_BODY] = body
            response = await handler(request)
        record.status = response.status
        return response

    def _auth_or_rule(self, request: web.Request, record: Request) -> web.Response | None:
        # executing a webhook is authorised by the webhook's token in the URL, not the bot's
        executes_webhook = record.method == "POST" and re.fullmatch(r"/webhooks/\d+/[^/]+", record.path)
        if not executes_webhook and request.headers.get("Authorization") != f"Bot {self.token}":
            return self._json({"message": "401: Unauthorized", "code": 0}, 401)
        for rule in self._fail_rules:
            if rule.remaining > 0 and rule.method == record.method and rule.path.fullmatch(record.path):
                rule.remaining -= 1
                if rule.status == 429:
                    body = {"message": "You are being rate limited.", "retry_after": rule.retry_after, "global": False}
                    headers = {"Via": "1.1 google", "Retry-After": str(max(1, round(rule.retry_after)))}
                    return self._json(body, 429, headers)
                return self._json({"message": "Emulated failure", "code": 0}, rule.status)
        return None

    # --- REST handlers -----------------------------------------------------------------------

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        return self._json(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1},
            }
        )

    async def _gateway_info(self, request: web.Request) -> web.Response:
        return self._json({"url": self.gateway_url})

    async def _me(self, request: web.Request) -> web.Response:
        return self._json({**self.bot, "verified": True, "mfa_enabled": False, "flags": 0})

    async def _application(self, request: web.Request) -> web.Response:
        return self._json(
            {
                "id": BOT_ID,
                "name": "Weaver",
                "icon": None,
                "description": "",
                "bot_public": True,
                "bot_require_code_grant": False,
                "owner": self.alice,
                "verify_key": "00" * 32,
                "flags": 0,
                "team": None,
            }
        )

    async def _open_dm(self, request: web.Request) -> web.Response:
        """Create DM: the one DM channel here is Alice's."""
        if str((request[_BODY] or {}).get("recipient_id")) != ALICE_ID:
            return self._not_found("User", 10013)
        return self._json({"id": DM_CHANNEL_ID, "type": 1, "last_message_id": None, "recipients": [self.alice]})

    def _not_found(self, what: str, code: int) -> web.Response:
        return self._json({"message": f"Unknown {what}", "code": code}, 404)

    def _known_channel(self, channel_id: str) -> bool:
        return channel_id in self.channels or channel_id in self.threads or channel_id == DM_CHANNEL_ID

    async def _create_message(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel"]
        if not self._known_channel(channel_id):
            return self._not_found("Channel", 10003)
        body = request[_BODY] or {}
        refused = self._too_long(body.get("content", ""))
        if refused is not None:
            return refused
        ref = body.get("message_reference")
        if ref:  # clients may send snowflakes as numbers; Discord's own form is a string
            ref = {k: str(v) if k.endswith("_id") and v is not None else v for k, v in ref.items()}
        referenced = self.messages.get(str(ref["message_id"])) if ref else None
        data = self.message(
            body.get("content", ""), channel_id=channel_id, author=self.bot, reply_to=referenced, store=True
        )
        data["sent_with"] = {"allowed_mentions": body.get("allowed_mentions"), "message_reference": ref}
        if self.echo_own and self.connected:
            await self.dispatch("MESSAGE_CREATE", _public(data))
        return self._json(_public(data))

    async def _get_message(self, request: web.Request) -> web.Response:
        data = self.messages.get(request.match_info["message"])
        if data is None or data["channel_id"] != request.match_info["channel"]:
            return self._not_found("Message", 10008)
        return self._json(_public(data))

    async def _edit_message(self, request: web.Request) -> web.Response:
        data = self.messages.get(request.match_info["message"])
        if data is None:
            return self._not_found("Message", 10008)
        body = request[_BODY] or {}
        if "content" in body:
            data["content"] = body["content"]
        data["edited_timestamp"] = _now_iso()
        data.setdefault("edits", []).append(data["content"])
        if self.echo_own and self.connected:
            await self.dispatch("MESSAGE_UPDATE", _public(data))
        return self._json(_public(data))

    async def _delete_message(self, request: web.Request) -> web.Response:
        data = self.messages.pop(request.match_info["message"], None)
        if data is None:
            return self._not_found("Message", 10008)
        if self.echo_own and self.connected:
            payload = {"id": data["id"], "channel_id": data["channel_id"]}
            if "guild_id" in data:
                payload["guild_id"] = data["guild_id"]
            await self.dispatch("MESSAGE_DELETE", payload)
        return web.Response(status=204)

    async def _add_reaction(self, request: web.Request) -> web.Response:
        data = self.messages.get(request.match_info["message"])
        if data is None:
            return self._not_found("Message", 10008)
        emoji = unquote(request.match_info["emoji"])
        data.setdefault("bot_reactions", []).append(emoji)
        if self.echo_own and self.connected:
            await self.dispatch("MESSAGE_REACTION_ADD", self.reaction(data, self.bot, emoji))
        return web.Response(status=204)

    async def _typing(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    # --- webhooks ----------------------------------------------------------------------------

    def _too_long(self, content: str) -> web.Response | None:
        """Discord refuses message content over 2000 characters (code points) outright."""
        if len(content) <= 2000:
            return None
        errors = {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}
        return self._json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)

    def _missing_permissions(self) -> web.Response:
        return self._json({"message": "Missing Permissions", "code": 50013}, 403)

    async def _channel_webhooks(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel"]
        if channel_id == DM_CHANNEL_ID:
            return self._json({"message": "Cannot execute action on a DM channel", "code": 50003}, 400)
        if channel_id not in self.channels:
            return self._not_found("Channel", 10003)
        if self.deny_webhooks:
            return self._missing_permissions()
        return self._json([dict(w) for w in self.webhooks.values() if w["channel_id"] == channel_id])

    async def _create_webhook(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel"]
        if channel_id == DM_CHANNEL_ID:
            return self._json({"message": "Cannot execute action on a DM channel", "code": 50003}, 400)
        if channel_id not in self.channels:
            return self._not_found("Channel", 10003)
        if self.deny_webhooks:
            return self._missing_permissions()
        body = request[_BODY] or {}
        return self._json(dict(self.add_webhook(channel_id, body.get("name", ""), creator=self.bot)))

    async def _get_webhook(self, request: web.Request) -> web.Response:
        data = self.webhooks.get(request.match_info["webhook"])
        if data is None:
            return self._not_found("Webhook", 10015)
        if self.deny_webhooks and data["application_id"] != BOT_ID:
            return self._missing_permissions()  # only the owning application may look without the permission
        return self._json(dict(data))

    async def _execute_webhook(self, request: web.Request) -> web.StreamResponse:
        data = self.webhooks.get(request.match_info["webhook"])
        if data is None:
            return self._not_found("Webhook", 10015)
        if data["token"] != request.match_info["token"]:
            return self._json({"message": "Invalid Webhook Token", "code": 50027}, 401)
        if self.deny_webhooks:
            return self._missing_permissions()
        channel_id = data["channel_id"]
        thread_id = request.query.get("thread_id")
        if thread_id:
            if self.threads.get(thread_id, {}).get("parent_id") != channel_id:
                return self._not_found("Channel", 10003)
            channel_id = thread_id
        body = request[_BODY] or {}
        refused = self._too_long(body.get("content", ""))
        if refused is not None:
            return refused
        author = user(data["id"], body.get("username") or data["name"], bot=True)
        author["discriminator"] = "0000"
        message = self.message(body.get("content", ""), channel_id=channel_id, author=author, webhook_id=data["id"])
        message["sent_with"] = {
            "username": body.get("username"),
            "avatar_url": body.get("avatar_url"),
            "allowed_mentions": body.get("allowed_mentions"),
        }
        if self.echo_own and self.connected:
            await self.dispatch("MESSAGE_CREATE", _public(message))
        if request.query.get("wait", "").lower() in ("true", "1"):
            return self._json(_public(message))
        return web.Response(status=204)

    def reaction(self, message: dict[str, Any], by: dict[str, Any], emoji: str) -> dict[str, Any]:
        """A MESSAGE_REACTION_ADD/REMOVE payload; `emoji` is unicode or `name:id` for custom."""
        if ":" in emoji:
            name, emoji_id = emoji.split(":", 1)
            emoji_data: dict[str, Any] = {"id": emoji_id, "name": name, "animated": False}
        else:
            emoji_data = {"id": None, "name": emoji}
        data: dict[str, Any] = {
            "user_id": by["id"],
            "channel_id": message["channel_id"],
            "message_id": message["id"],
            "message_author_id": message["author"]["id"],
            "emoji": emoji_data,
            "burst": False,
            "type": 0,
        }
        if "guild_id" in message:
            data["guild_id"] = message["guild_id"]
        return data

    # --- gateway -----------------------------------------------------------------------------

    async def wait_ready(self, timeout: float = 5.0) -> None:
        """Until a client identified and got READY + GUILD_CREATE."""
        await asyncio.wait_for(self._ready.wait(), timeout)

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send one DISPATCH (op 0) to the connected client."""
        self._seq += 1
        await self.send_raw(json.dumps({"op": 0, "t": event, "s": self._seq, "d": data}))

    async def send_raw(self, text: str) -> None:
        ws = self._ws
        if ws is None or ws.closed:
            raise RuntimeError("no gateway client connected")
        async with self._send_lock:
            await ws.send_str(text)

    @property
    def connected(self) -> bool:
        return self._ws is not None and not self._ws.closed

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._ws = ws
        self._ready.clear()
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None}))
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                continue
            payload = json.loads(msg.data)
            op = payload.get("op")
            if op == 1:
                await self.send_raw(json.dumps({"op": 11, "d": None, "s": None, "t": None}))
            elif op == 2:
                await self._on_identify(ws, payload["d"])
            elif op == 6:
                await self.dispatch("RESUMED", {})
        if self._ws is ws:
            self._ws = None
        return ws

    async def _on_identify(self, ws: web.WebSocketResponse, data: dict[str, Any]) -> None:
        self.identify = data
        if data.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return
        if data.get("intents", 0) & INTENT_MEMBERS and not self.allow_privileged:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        ready = {
            "v": 10,
            "user": {**self.bot, "verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": GUILD_ID, "unavailable": True}],
            "session_id": "emulated-session",
            "resume_gateway_url": self.gateway_url,
            "application": {"id": BOT_ID, "flags": 0},
            "private_channels": [],
        }
        await self.dispatch("READY", ready)
        await self.dispatch("GUILD_CREATE", self.guild_payload())
        self._ready.set()


def _public(data: dict[str, Any]) -> dict[str, Any]:
    """A stored message without the emulator's own bookkeeping keys."""
    return {k: v for k, v in data.items() if k not in ("sent_with", "edits", "bot_reactions")}
