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

Beyond plain messages it carries what delivery guarantees, buttons, approvals and media are
tested with:

* idempotent sends: a create with `nonce` + `enforce_nonce` that repeats a nonce the same author
  used within `nonce_window_seconds` answers with the earlier message and creates nothing;
  every create is kept in `sends` (`duplicate` marks the repeats), and `drop_next` lets a call
  take effect while the connection dies before the answer, so the client cannot know;
* files: multipart creates and edits (`payload_json` + `files[n]`, as discord.py sends them) are
  kept in `uploads`, and every attachment, uploaded or built with `attachment(data=...)`, is
  served by the emulator's CDN (`/attachments/...`, no bot token needed, like Discord's CDN);
* components: action rows with buttons on creates and edits are checked against Discord's
  limits and stored on the message (`buttons()` lists them);
* interactions: `button_press` builds an INTERACTION_CREATE for a button on a stored message;
  the callback (`POST /interactions/{id}/{token}/callback`) and the follow-up webhook calls
  are kept on its `Interaction` record with their delay after the dispatch, and an answer
  later than `interaction_deadline` is refused with Unknown interaction, as on Discord;
* user edits and deletes (`user_edit`, `user_delete` build MESSAGE_UPDATE / MESSAGE_DELETE),
  channel history (`GET /channels/{id}/messages`), threads (with and without a starter
  message, forum posts) and removing the bot's own reactions.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import itertools
import json
import mimetypes
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import quote, unquote

from aiohttp import WSMsgType, web

from tests.emulators.serving import client_gone

GUILD_ID = "1000"
CHANNEL_ID = "2000"  # #general, a guild text channel
THREAD_ID = "2100"  # a public thread under #general
FORUM_ID = "2200"  # a forum channel
FORUM_POST_ID = "2300"  # a forum post (a thread under the forum)
DM_CHANNEL_ID = "3000"  # Alice's DM with the bot
BOB_DM_CHANNEL_ID = "3001"
_DM_CHANNELS = (DM_CHANNEL_ID, BOB_DM_CHANNEL_ID)
BOT_ID = "9000"  # also the application id, as for real bots
BOT_ROLE_ID = "5000"  # the bot's managed role
ROLE_ID = "5001"  # an ordinary role, "mods"
ALICE_ID = "7001"
BOB_ID = "7002"
OTHER_BOT_ID = "8001"
TOKEN = "emulated-bot-token"

APPLICATION_ID = BOT_ID
INTENT_MEMBERS = 1 << 1
_BODY: web.RequestKey[Any] = web.RequestKey("body", object)  # the parsed JSON body, read once by the middleware
_FILES: web.RequestKey[Any] = web.RequestKey("files", list)  # the file parts of a multipart body
_RECORD: web.RequestKey[Any] = web.RequestKey("record", object)  # the Request the middleware recorded
_DISCORD_EPOCH_MS = 1420070400000
_FLAG_HAS_THREAD = 1 << 5
_FLAG_EPHEMERAL = 1 << 6
_FLAG_LOADING = 1 << 7
_MEMBER_PERMISSIONS = "2248473465835073"  # what a member of the emulated guild may do
#: Interaction callback types (Discord's InteractionResponseType).
PONG, CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 1, 4, 5, 6, 7
#: Bookkeeping keys on stored messages that Discord itself would never send.
_PRIVATE_KEYS = ("sent_with", "edits", "bot_reactions")


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
class FilePart:
    """One file of a multipart request (`files[n]`), as the client sent it."""

    name: str  # the form field, e.g. "files[0]"
    filename: str
    content_type: str  # the part's own Content-Type (discord.py sends application/octet-stream)
    data: bytes


@dataclass
class Send:
    """One create-message call that reached the channel (after auth and scripted failures)."""

    channel_id: str
    message_id: str  # the message answered with: the new one, or the earlier one for a repeat
    nonce: str | None
    enforce_nonce: bool
    duplicate: bool  # True when an earlier message was returned and nothing was created
    payload: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class Upload:
    """One file the bot uploaded with a message (create, edit, interaction answer, webhook)."""

    channel_id: str
    message_id: str
    filename: str
    content_type: str  # as sent on the part
    data: bytes
    attachment: dict[str, Any]  # the attachment object the message carries for it


@dataclass
class InteractionCallback:
    """One `POST /interactions/{id}/{token}/callback`, refused ones included."""

    type: int  # 4 message, 5 deferred message, 6 deferred update, 7 update message, ...
    data: dict[str, Any]
    delay: float  # seconds between the INTERACTION_CREATE dispatch and this call's arrival
    status: int
    files: list[FilePart] = field(default_factory=list)

    @property
    def ephemeral(self) -> bool:
        return bool(int(self.data.get("flags") or 0) & _FLAG_EPHEMERAL)


@dataclass
class Interaction:
    """An interaction the emulator handed out, and everything the bot answered to it."""

    id: str
    token: str
    payload: dict[str, Any]  # the INTERACTION_CREATE payload
    channel_id: str
    message_id: str | None  # the message whose component was used
    dispatched_at: float | None = None  # monotonic time of the dispatch
    callbacks: list[InteractionCallback] = field(default_factory=list)
    #: Follow-up webhook calls made with this interaction's token (method, path, body).
    followups: list[Request] = field(default_factory=list)
    #: The message `@original` stands for (the answer, or the component's message for 6/7).
    original_id: str | None = None
    ephemeral_ids: list[str] = field(default_factory=list)

    @property
    def responded(self) -> bool:
        return self.response is not None

    @property
    def response(self) -> InteractionCallback | None:
        """The accepted callback, if any."""
        return next((c for c in self.callbacks if 0 < c.status < 300), None)

    @property
    def response_delay(self) -> float | None:
        """Seconds from the dispatch to the first callback that arrived (accepted or not)."""
        return self.callbacks[0].delay if self.callbacks else None



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
    #: Every IDENTIFY a client sent, in order (a RESUME is not one): a new session each.
    identifies: list[dict[str, Any]] = field(default_factory=list)
    webhooks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: A repeated nonce within this many seconds returns the earlier message (Discord: minutes).
    nonce_window_seconds: float = 300.0
    #: A callback later than this after the dispatch is refused with Unknown interaction.
    interaction_deadline: float = 3.0
    #: Total upload size a bot may attach to one message (Discord's default: 10 MiB).
    upload_limit: int = 10 * 1024 * 1024
    sends: list[Send] = field(default_factory=list)
    uploads: list[Upload] = field(default_factory=list)
    interactions: dict[str, Interaction] = field(default_factory=dict)
    #: Ephemeral messages (interaction answers only their user sees), by id; never in `messages`.
    ephemeral_messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Bytes the CDN serves, by path (`/attachments/{channel}/{id}/{filename}`).
    cdn: dict[str, bytes] = field(default_factory=dict)
    #: Every CDN GET: (path, status).
    cdn_fetches: list[tuple[str, int]] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _ws: web.WebSocketResponse | None = None
    _seq: int = 0
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _fail_rules: list[_FailRule] = field(default_factory=list)
    _drop_rules: list[_FailRule] = field(default_factory=list)
    _nonces: dict[tuple[str, str], tuple[dict[str, Any], float]] = field(default_factory=dict)
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

    def attachment(
        self,
        filename: str,
        content_type: str | None = None,
        size: int | None = None,
        *,
        data: bytes | None = None,
        channel_id: str = CHANNEL_ID,
    ) -> dict[str, Any]:
        """An attachment object for `message(attachments=[...])`.

        With `data` the file lives on the emulator's CDN (its `url` serves those bytes) and
        `size` defaults to their length; a different `size` declares what Discord would claim,
        for limit checks against a lying or changed file. Without `data` the url points at
        Discord's real CDN and is never fetched.
        """
        attachment_id = self.next_id()
        if content_type is None:
            content_type = _guess_type(filename)
        if data is None:
            url = f"https://cdn.discordapp.com/attachments/{channel_id}/{attachment_id}/{filename}"
            return {
                "id": attachment_id,
                "filename": filename,
                "size": 1234 if size is None else size,
                "url": url,
                "proxy_url": url,
                "content_type": content_type,
            }
        return self._store_attachment(channel_id, attachment_id, filename, content_type, data, size)

    def _store_attachment(
        self, channel_id: str, attachment_id: str, filename: str, content_type: str, data: bytes, size: int | None
    ) -> dict[str, Any]:
        path = f"/attachments/{channel_id}/{attachment_id}/{quote(filename)}"
        self.cdn[path] = data
        # signed-URL parameters as Discord adds them (expiry, issued, hash); the CDN ignores them
        url = f"{self.cdn_base}{path}?ex=6a000000&is=69f00000&hm={attachment_id[-8:]}"
        return {
            "id": attachment_id,
            "filename": filename,
            "size": len(data) if size is None else size,
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }

    def user_edit(self, message: dict[str, Any] | str, content: str) -> dict[str, Any]:
        """A person edited their message: the stored message changes and the MESSAGE_UPDATE
        payload (the full message, as the gateway sends it) is returned for `dispatch`."""
        data = self.messages[message] if isinstance(message, str) else self.messages[message["id"]]
        data["content"] = content
        data["edited_timestamp"] = _now_iso()
        return _public(data)

    def user_delete(self, message: dict[str, Any] | str) -> dict[str, Any]:
        """A person deleted a message: it leaves the store and the MESSAGE_DELETE payload is
        returned for `dispatch`."""
        message_id = message if isinstance(message, str) else message["id"]
        data = self.messages.pop(message_id)
        payload = {"id": data["id"], "channel_id": data["channel_id"]}
        if "guild_id" in data:
            payload["guild_id"] = data["guild_id"]
        return payload

    def button_press(
        self,
        message: dict[str, Any] | str,
        custom_id: str,
        *,
        by: dict[str, Any] | None = None,
        component_type: int = 2,
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE (type 3, message component) for pressing `custom_id` on a
        stored message, by `by` (default Alice). The interaction is registered, so its
        callback and follow-ups are accepted and recorded; `dispatch` it to deliver it."""
        by = by or self.alice
        source = self.messages[message] if isinstance(message, str) else message
        source = self.messages.get(source["id"], source)
        channel_id = source["channel_id"]
        guild_id = self._guild_of(channel_id)
        interaction_id = self.next_id()
        token = f"interaction-token-{interaction_id}"
        payload: dict[str, Any] = {
            "id": interaction_id,
            "application_id": APPLICATION_ID,
            "type": 3,
            "data": {"custom_id": custom_id, "component_type": component_type},
            "channel_id": channel_id,
            "channel": self._channel_object(channel_id, by),
            "token": token,
            "version": 1,
            "message": {k: v for k, v in _public(source).items() if k != "member"},
            "app_permissions": _MEMBER_PERMISSIONS,
            "locale": "en-US",
            "entitlements": [],
            "attachment_size_limit": self.upload_limit,
        }
        if guild_id is not None:
            payload["guild_id"] = guild_id
            payload["guild"] = {"id": guild_id, "locale": "en-US", "features": []}
            payload["guild_locale"] = "en-US"
            payload["member"] = {**_member(by), "permissions": _MEMBER_PERMISSIONS}
            payload["authorizing_integration_owners"] = {"0": guild_id}
            payload["context"] = 0
        else:
            payload["user"] = by
            payload["authorizing_integration_owners"] = {"0": "0"}
            payload["context"] = 1
        self.interactions[interaction_id] = Interaction(interaction_id, token, payload, channel_id, source["id"])
        return payload

    async def press(
        self, message: dict[str, Any] | str, custom_id: str, *, by: dict[str, Any] | None = None
    ) -> Interaction:
        """Build and dispatch a button press; its record fills in as the bot answers."""
        payload = self.button_press(message, custom_id, by=by)
        await self.dispatch("INTERACTION_CREATE", payload)
        return self.interactions[payload["id"]]

    async def wait_response(self, interaction: Interaction, timeout: float = 5.0) -> InteractionCallback:
        """Until the bot answered `interaction` (any callback, refused ones included)."""
        deadline = time.monotonic() + timeout
        while not interaction.callbacks:
            if time.monotonic() > deadline:
                raise AssertionError("no interaction callback within %.1fs" % timeout)
            await asyncio.sleep(0.01)
        return interaction.callbacks[0]

    def _channel_object(self, channel_id: str, person: dict[str, Any]) -> dict[str, Any]:
        if channel_id in self.channels:
            return dict(self.channels[channel_id])
        if channel_id in self.threads:
            return dict(self.threads[channel_id])
        return {"id": channel_id, "type": 1, "recipients": [person], "last_message_id": None, "flags": 0}

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

    def buttons(self, message: dict[str, Any] | str) -> list[dict[str, Any]]:
        """The buttons a message shows now (stored or ephemeral), row by row, in order."""
        message_id = message if isinstance(message, str) else message["id"]
        data = self.messages.get(message_id) or self.ephemeral_messages[message_id]
        return [c for row in data.get("components") or [] for c in row.get("components", []) if c.get("type") == 2]

    def duplicate_sends(self) -> list[Send]:
        """Creates answered with an earlier message because their nonce repeated."""
        return [s for s in self.sends if s.duplicate]

    def bot_threads(self) -> list[dict[str, Any]]:
        """Threads the bot created, oldest first."""
        return [t for t in self.threads.values() if t.get("owner_id") == BOT_ID]

    def drop_next(self, method: str, pattern: str, *, times: int = 1) -> None:
        """The next `times` matching calls take effect, then the connection is cut before the
        answer: the client cannot tell whether the call worked."""
        self._drop_rules.append(_FailRule(method, re.compile(pattern), 0, 0.0, times))

    def calls(self, method: str, pattern: str) -> list[Request]:
        rx = re.compile(pattern)
        return [r for r in self.requests if r.method == method and rx.fullmatch(r.path)]

    def fail_next(
        self, method: str, pattern: str, *, status: int = 429, retry_after: float = 0.05, times: int = 1
    ) -> None:
        """Answer the next `times` matching calls with `status` (429: rate limited)."""
        self._fail_rules.append(_FailRule(method, re.compile(pattern), status, retry_after, times))

    # --- server ------------------------------------------------------------------------------

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def cdn_base(self) -> str:
        """Where attachments are served (stands for https://cdn.discordapp.com)."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> DiscordEmulator:
        app = web.Application(middlewares=[client_gone, self._middleware], client_max_size=4 * self.upload_limit)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/attachments/{tail:.+}", self._cdn)
        api = "/api/v10"
        routes: list[tuple[str, str, Callable[..., Any]]] = [
            ("GET", "/gateway/bot", self._gateway_bot),
            ("GET", "/gateway", self._gateway_info),
            ("GET", "/users/@me", self._me),
            ("POST", "/users/@me/channels", self._open_dm),
            ("GET", "/oauth2/applications/@me", self._application),
            ("GET", "/applications/@me", self._application),
            ("POST", "/channels/{channel}/messages", self._create_message),
            ("GET", "/channels/{channel}", self._get_channel),
            ("GET", "/channels/{channel}/messages/{message}", self._get_message),
            ("PATCH", "/channels/{channel}/messages/{message}", self._edit_message),
            ("DELETE", "/channels/{channel}/messages/{message}", self._delete_message),
            ("GET", "/channels/{channel}/messages", self._history),
            ("PUT", "/channels/{channel}/messages/{message}/reactions/{emoji}/@me", self._add_reaction),
            ("DELETE", "/channels/{channel}/messages/{message}/reactions/{emoji}/@me", self._remove_reaction),
            ("POST", "/channels/{channel}/messages/{message}/threads", self._thread_from_message),
            ("POST", "/channels/{channel}/threads", self._create_thread),
            ("POST", "/channels/{channel}/typing", self._typing),
            ("GET", "/channels/{channel}/webhooks", self._channel_webhooks),
            ("POST", "/channels/{channel}/webhooks", self._create_webhook),
            ("GET", "/webhooks/{webhook}", self._get_webhook),
            ("POST", "/webhooks/{webhook}/{token}", self._execute_webhook),
            ("GET", "/webhooks/{webhook}/{token}/messages/{message}", self._webhook_message),
            ("PATCH", "/webhooks/{webhook}/{token}/messages/{message}", self._webhook_message),
            ("DELETE", "/webhooks/{webhook}/{token}/messages/{message}", self._webhook_message),
            ("POST", "/interactions/{interaction}/{token}/callback", self._interaction_callback),
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
        if not request.path.startswith("/api/"):  # the gateway and the CDN
            return await handler(request)
        body: Any = None
        files: list[FilePart] = []
        if request.can_read_body:
            raw = await request.read()
            if request.content_type == "multipart/form-data":
                body, files = _parse_multipart(request.headers.get("Content-Type", ""), raw)
            else:
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
            request[_FILES] = files
            request[_RECORD] = record
            response = await handler(request)
            for rule in self._drop_rules:
                if rule.remaining > 0 and rule.method == record.method and rule.path.fullmatch(record.path):
                    # the call took effect; the answer never arrives
                    rule.remaining -= 1
                    record.status = -1
                    if request.transport is not None:
                        request.transport.abort()
                    return response
        record.status = response.status
        return response

    def _auth_or_rule(self, request: web.Request, record: Request) -> web.Response | None:
        # webhooks (executing one, its messages) and interaction answers are authorised by the
        # token in the URL, not the bot's
        by_url_token = re.fullmatch(
            r"/webhooks/\d+/[^/]+(/messages/[^/]+)?|/interactions/\d+/[^/]+/callback", record.path
        )
        if not by_url_token and request.headers.get("Authorization") != f"Bot {self.token}":
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
        """Create DM: Alice and Bob each have one with the bot; nobody else is known."""
        recipient = str((request[_BODY] or {}).get("recipient_id"))
        people = {ALICE_ID: (DM_CHANNEL_ID, self.alice), BOB_ID: (BOB_DM_CHANNEL_ID, self.bob)}
        if recipient not in people:
            return self._not_found("User", 10013)
        channel_id, person = people[recipient]
        return self._json({"id": channel_id, "type": 1, "last_message_id": None, "recipients": [person]})

    def _not_found(self, what: str, code: int) -> web.Response:
        return self._json({"message": f"Unknown {what}", "code": code}, 404)

    def _known_channel(self, channel_id: str) -> bool:
        return channel_id in self.channels or channel_id in self.threads or channel_id in _DM_CHANNELS

    async def _create_message(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel"]
        if not self._known_channel(channel_id):
            return self._not_found("Channel", 10003)
        body = request[_BODY] or {}
        files: list[FilePart] = request[_FILES]
        refused = self._refuse_message(body, files)
        if refused is not None:
            return refused
        nonce = body.get("nonce")
        nonce = str(nonce) if nonce is not None else None
        enforce = bool(body.get("enforce_nonce")) and nonce is not None
        if enforce:
            assert nonce is not None
            if len(nonce) > 25:
                return self._invalid_form("nonce", "BASE_TYPE_MAX_LENGTH", "Must be 25 or fewer in length.")
            earlier = self._nonces.get((BOT_ID, nonce))
            if earlier is not None and time.monotonic() - earlier[1] <= self.nonce_window_seconds:
                original = self.messages.get(earlier[0]["id"], earlier[0])
                self.sends.append(Send(channel_id, original["id"], nonce, True, True, body))
                return self._json({**_public(original), "nonce": nonce})
        ref = body.get("message_reference")
        if ref:  # clients may send snowflakes as numbers; Discord's own form is a string
            ref = {k: str(v) if k.endswith("_id") and v is not None else v for k, v in ref.items()}
        referenced = self.messages.get(str(ref["message_id"])) if ref else None
        data = self.message(
            body.get("content", ""), channel_id=channel_id, author=self.bot, reply_to=referenced, store=True
        )
        data["sent_with"] = {"allowed_mentions": body.get("allowed_mentions"), "message_reference": ref, "nonce": nonce}
        self._apply_fields(data, body, files)
        if enforce:
            assert nonce is not None
            self._nonces[(BOT_ID, nonce)] = (_public(data), time.monotonic())
        self.sends.append(Send(channel_id, data["id"], nonce, enforce, False, body))
        answer = {**_public(data), **({"nonce": nonce} if nonce is not None else {})}
        if self.echo_own and self.connected:
            await self.dispatch("MESSAGE_CREATE", answer)
        return self._json(answer)

    def _refuse_message(
        self, body: dict[str, Any], files: list[FilePart], *, edit: bool = False
    ) -> web.Response | None:
        """Discord's checks on a message body: length, components, upload size, not empty."""
        content = body.get("content") or ""
        refused = self._too_long(content)
        if refused is None and body.get("components") is not None:
            refused = _check_components(body["components"])
        if refused is None and sum(len(f.data) for f in files) > self.upload_limit:
            refused = self._json({"message": "Request entity too large", "code": 40005}, 413)
        if (
            refused is None
            and not edit
            and not (
                content.strip()
                or body.get("embeds")
                or files
                or body.get("components")
                or body.get("sticker_ids")
                or body.get("poll")
            )
        ):
            refused = self._json({"message": "Cannot send an empty message", "code": 50006}, 400)
        return refused

    def _apply_fields(self, data: dict[str, Any], body: dict[str, Any], files: list[FilePart]) -> None:
        """Components, embeds, flags and attachments of a create or edit body onto a message.

        `attachments` in the body lists what the message keeps: existing attachments by id, new
        files by their index in `files[n]`; without it an edit keeps what was there and adds files.
        """
        for key in ("components", "embeds"):
            if key in body and body[key] is not None:
                data[key] = body[key]
        if "flags" in body and body["flags"] is not None:
            data["flags"] = int(body["flags"]) & ~_FLAG_LOADING
        by_field = {f.name: f for f in files}
        listed = body.get("attachments")
        kept = list(data.get("attachments") or [])
        new: list[dict[str, Any]] = []
        if listed is not None:
            existing = {a["id"]: a for a in kept}
            kept = []
            for item in listed:
                key = str(item.get("id"))
                part = by_field.get(f"files[{key}]")
                if part is not None:
                    new.append(self._upload(data, part, item))
                elif key in existing:
                    kept.append(existing[key])
            listed_ids = {str(item.get("id")) for item in listed}
            for name, part in by_field.items():  # files the list did not mention
                if name.removeprefix("files[").rstrip("]") not in listed_ids:
                    new.append(self._upload(data, part, {}))
        else:
            new = [self._upload(data, part, {}) for part in files]
        if listed is not None or files:
            data["attachments"] = kept + new

    def _upload(self, message: dict[str, Any], part: FilePart, item: dict[str, Any]) -> dict[str, Any]:
        filename = str(item.get("filename") or part.filename)
        attachment = self._store_attachment(
            message["channel_id"], self.next_id(), filename, _guess_type(filename), part.data, None
        )
        if item.get("description"):
            attachment["description"] = item["description"]
        self.uploads.append(
            Upload(message["channel_id"], message["id"], filename, part.content_type, part.data, attachment)
        )
        return attachment

    def _invalid_form(self, key: str, code: str, message: str) -> web.Response:
        errors = {key: {"_errors": [{"code": code, "message": message}]}}
        return self._json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)

    async def _get_channel(self, request: web.Request) -> web.Response:
        """Get Channel: a guild channel or thread, or the one DM channel here (Alice's)."""
        channel_id = request.match_info["channel"]
        if not self._known_channel(channel_id):
            return self._not_found("Channel", 10003)
        return self._json(self._channel_object(channel_id, self.alice))

    async def _get_message(self, request: web.Request) -> web.Response:
        data = self.messages.get(request.match_info["message"])
        if data is None or data["channel_id"] != request.match_info["channel"]:
            return self._not_found("Message", 10008)
        return self._json(_public(data))

    async def _history(self, request: web.Request) -> web.Response:
        """Channel history as Discord pages it: newest first, `limit` (1-100, default 50) and one
        of `before`, `after` (the oldest `limit` after it) or `around`."""
        channel_id = request.match_info["channel"]
        if not self._known_channel(channel_id):
            return self._not_found("Channel", 10003)
        query = request.query
        try:
            limit = int(query.get("limit", "50"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            return self._invalid_form("limit", "NUMBER_TYPE_MAX", "int value should be between 1 and 100.")
        ordered = sorted(
            (m for m in self.messages.values() if m["channel_id"] == channel_id), key=lambda m: int(m["id"])
        )
        if "around" in query:
            pivot = int(query["around"])
            older = [m for m in ordered if int(m["id"]) < pivot]
            rest = [m for m in ordered if int(m["id"]) >= pivot]
            page = (older[-(limit // 2) :] if limit // 2 else []) + rest[: limit - min(len(older), limit // 2)]
        elif "after" in query:
            page = [m for m in ordered if int(m["id"]) > int(query["after"])][:limit]
        else:
            before = int(query["before"]) if "before" in query else None
            page = [m for m in ordered if before is None or int(m["id"]) < before][-limit:]
        return self._json([_public(m) for m in reversed(page)])

    async def _edit_message(self, request: web.Request) -> web.Response:
        data = self.messages.get(request.match_info["message"])
        if data is None:
            return self._not_found("Message", 10008)
        if data["author"]["id"] != BOT_ID:
            return self._json({"message": "Cannot edit a message authored by another user", "code": 50005}, 403)
        body = request[_BODY] or {}
        files: list[FilePart] = request[_FILES]
        refused = self._refuse_message(body, files, edit=True)
        if refused is not None:
            return refused
        return self._json(await self._edit(data, body, files))

    async def _edit(self, data: dict[str, Any], body: dict[str, Any], files: list[FilePart]) -> dict[str, Any]:
        if "content" in body:
            data["content"] = body["content"] or ""
        self._apply_fields(data, body, files)
        data["edited_timestamp"] = _now_iso()
        data.setdefault("edits", []).append(data["content"])
        if self.echo_own and self.connected and data["id"] in self.messages:
            await self.dispatch("MESSAGE_UPDATE", _public(data))
        return _public(data)

    async def _delete_message(self, request: web.Request) -> web.Response:
        data = self.messages.pop(request.match_info["message"], None)
        if data is None:
            return self._not_found("Message", 10008)
        await self._echo_delete(data)
        return web.Response(status=204)

    async def _echo_delete(self, data: dict[str, Any]) -> None:
        if self.echo_own and self.connected:
            payload = {"id": data["id"], "channel_id": data["channel_id"]}
            if "guild_id" in data:
                payload["guild_id"] = data["guild_id"]
            await self.dispatch("MESSAGE_DELETE", payload)

    async def _add_reaction(self, request: web.Request) -> web.Response:
        data = self.messages.get(request.match_info["message"])
        if data is None:
            return self._not_found("Message", 10008)
        emoji = unquote(request.match_info["emoji"])
        data.setdefault("bot_reactions", []).append(emoji)
        if self.echo_own and self.connected:
            await self.dispatch("MESSAGE_REACTION_ADD", self.reaction(data, self.bot, emoji))
        return web.Response(status=204)

    async def _remove_reaction(self, request: web.Request) -> web.Response:
        data = self.messages.get(request.match_info["message"])
        if data is None:
            return self._not_found("Message", 10008)
        emoji = unquote(request.match_info["emoji"])
        mine = data.get("bot_reactions", [])
        if emoji in mine:
            mine.remove(emoji)
            if self.echo_own and self.connected:
                await self.dispatch("MESSAGE_REACTION_REMOVE", self.reaction(data, self.bot, emoji))
        return web.Response(status=204)

    # --- threads -----------------------------------------------------------------------------

    def _thread_name(self, body: dict[str, Any]) -> str | web.Response:
        name = str(body.get("name") or "")
        if not 1 <= len(name) <= 100:
            return self._invalid_form("name", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
        return name

    async def _add_thread(self, thread_data: dict[str, Any]) -> None:
        self.threads[thread_data["id"]] = thread_data
        if self.echo_own and self.connected:
            await self.dispatch("THREAD_CREATE", {**thread_data, "newly_created": True})

    async def _create_thread(self, request: web.Request) -> web.Response:
        """A thread with no starter message in a text channel, or a post in a forum (which
        carries its first message under `message`)."""
        channel_id = request.match_info["channel"]
        if channel_id in _DM_CHANNELS:
            return self._json({"message": "Cannot execute action on a DM channel", "code": 50003}, 400)
        parent = self.channels.get(channel_id)
        if parent is None:
            if channel_id in self.threads:
                return self._json({"message": "Cannot execute action on this channel type", "code": 50024}, 400)
            return self._not_found("Channel", 10003)
        body = request[_BODY] or {}
        name = self._thread_name(body)
        if isinstance(name, web.Response):
            return name
        if parent["type"] != 15:
            data = thread(self.next_id(), channel_id, name, BOT_ID)
            if body.get("type") == 12:
                data["type"] = 12
            await self._add_thread(data)
            return self._json(data)
        first = body.get("message") or {}
        files: list[FilePart] = request[_FILES]
        refused = self._refuse_message(first, files)
        if refused is not None:
            return refused
        data = thread(self.next_id(), channel_id, name, BOT_ID)  # a post's starter message has its id
        data["applied_tags"] = [str(t) for t in body.get("applied_tags") or []]
        await self._add_thread(data)
        message = self.message(first.get("content", ""), channel_id=data["id"], author=self.bot, id=data["id"])
        self._apply_fields(message, first, files)
        if self.echo_own and self.connected:
            await self.dispatch("MESSAGE_CREATE", _public(message))
        return self._json({**data, "message": _public(message)})

    async def _thread_from_message(self, request: web.Request) -> web.Response:
        """A thread started from a message: it takes the message's id, and the message is marked."""
        channel_id = request.match_info["channel"]
        source = self.messages.get(request.match_info["message"])
        if source is None or source["channel_id"] != channel_id:
            return self._not_found("Message", 10008)
        if channel_id not in self.channels:
            return self._json({"message": "Cannot execute action on this channel type", "code": 50024}, 400)
        if source["id"] in self.threads:
            return self._json({"message": "A thread has already been created for this message", "code": 160004}, 400)
        name = self._thread_name(request[_BODY] or {})
        if isinstance(name, web.Response):
            return name
        data = thread(source["id"], channel_id, name, BOT_ID)
        source["flags"] = int(source.get("flags") or 0) | _FLAG_HAS_THREAD
        source["thread"] = data
        await self._add_thread(data)
        return self._json(data)

    # --- the CDN -----------------------------------------------------------------------------

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        """Attachment bytes by path; the query (Discord's signature) is ignored."""
        path = request.raw_path.split("?", 1)[0]
        data = self.cdn.get(path)
        if data is None:
            data = self.cdn.get(f"/attachments/{quote(unquote(request.match_info['tail']))}")
        if data is None:
            self.cdn_fetches.append((path, 404))
            return web.Response(status=404, text="This content is no longer available.")
        self.cdn_fetches.append((path, 200))
        filename = unquote(path.rsplit("/", 1)[-1])
        return web.Response(body=data, headers={"Content-Type": _guess_type(filename)})

    async def _typing(self, request: web.Request) -> web.Response:
        return web.Response(status=204)

    # --- webhooks ----------------------------------------------------------------------------

    def _too_long(self, content: str) -> web.Response | None:
        """Discord refuses message content over 2000 characters (code points) outright."""
        if len(content) <= 2000:
            return None
        errors = {
            "content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}
        }
        return self._json({"message": "Invalid Form Body", "code": 50035, "errors": errors}, 400)

    def _missing_permissions(self) -> web.Response:
        return self._json({"message": "Missing Permissions", "code": 50013}, 403)

    async def _channel_webhooks(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel"]
        if channel_id in _DM_CHANNELS:
            return self._json({"message": "Cannot execute action on a DM channel", "code": 50003}, 400)
        if channel_id not in self.channels:
            return self._not_found("Channel", 10003)
        if self.deny_webhooks:
            return self._missing_permissions()
        return self._json([dict(w) for w in self.webhooks.values() if w["channel_id"] == channel_id])

    async def _create_webhook(self, request: web.Request) -> web.Response:
        channel_id = request.match_info["channel"]
        if channel_id in _DM_CHANNELS:
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
        interaction = self._interaction_by_url(request)
        if interaction is not None:
            return await self._followup(request, interaction)
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
        refused = self._refuse_message(body, request[_FILES])
        if refused is not None:
            return refused
        author = user(data["id"], body.get("username") or data["name"], bot=True)
        author["discriminator"] = "0000"
        message = self.message(body.get("content", ""), channel_id=channel_id, author=author, webhook_id=data["id"])
        self._apply_fields(message, body, request[_FILES])
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

    async def _webhook_message(self, request: web.Request) -> web.Response:
        """GET, PATCH or DELETE one message of a webhook, or of an interaction (`@original` is
        the interaction's answer, or the message whose component was used)."""
        message_id = request.match_info["message"]
        interaction = self._interaction_by_url(request)
        if interaction is not None:
            interaction.followups.append(request[_RECORD])
            if not interaction.responded:
                return self._not_found("Webhook", 10015)
            if message_id == "@original":
                message_id = interaction.original_id or ""
            data = self.messages.get(message_id) or self.ephemeral_messages.get(message_id)
        else:
            webhook = self.webhooks.get(request.match_info["webhook"])
            if webhook is None:
                return self._not_found("Webhook", 10015)
            if webhook["token"] != request.match_info["token"]:
                return self._json({"message": "Invalid Webhook Token", "code": 50027}, 401)
            data = self.messages.get(message_id)
            if data is not None and data.get("webhook_id") != webhook["id"]:
                data = None
        if data is None:
            return self._not_found("Message", 10008)
        if request.method == "GET":
            return self._json(_public(data))
        if request.method == "DELETE":
            if self.messages.pop(data["id"], None) is not None:
                await self._echo_delete(data)
            self.ephemeral_messages.pop(data["id"], None)
            return web.Response(status=204)
        body = request[_BODY] or {}
        refused = self._refuse_message(body, request[_FILES], edit=True)
        if refused is not None:
            return refused
        data["flags"] = int(data.get("flags") or 0) & ~_FLAG_LOADING
        return self._json(await self._edit(data, body, request[_FILES]))

    # --- interactions ------------------------------------------------------------------------

    def _interaction_by_url(self, request: web.Request) -> Interaction | None:
        """The interaction whose token a webhook URL carries (webhook id = the application id)."""
        if request.match_info["webhook"] != APPLICATION_ID:
            return None
        token = request.match_info["token"]
        return next((i for i in self.interactions.values() if i.token == token), None)

    def _interaction_message(
        self, interaction: Interaction, body: dict[str, Any], *, loading: bool = False
    ) -> dict[str, Any]:
        """A message the bot posts as an interaction answer or follow-up (stored, or kept aside
        when ephemeral)."""
        by = interaction.payload.get("member", {}).get("user") or interaction.payload.get("user") or self.alice
        ephemeral = bool(int(body.get("flags") or 0) & _FLAG_EPHEMERAL)
        metadata: dict[str, Any] = {
            "id": interaction.id,
            "type": 3,
            "user": by,
            "authorizing_integration_owners": interaction.payload.get("authorizing_integration_owners", {}),
        }
        if interaction.message_id is not None:
            metadata["interacted_message_id"] = interaction.message_id
        data = self.message(
            "" if loading else body.get("content") or "",
            channel_id=interaction.channel_id,
            author=self.bot,
            store=not ephemeral,
            webhook_id=APPLICATION_ID,
            application_id=APPLICATION_ID,
            interaction_metadata=metadata,
        )
        data.pop("member", None)
        flags = (_FLAG_EPHEMERAL if ephemeral else 0) | (_FLAG_LOADING if loading else 0)
        data["flags"] = flags
        if ephemeral:
            self.ephemeral_messages[data["id"]] = data
        return data

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        interaction = self.interactions.get(request.match_info["interaction"])
        if interaction is None or interaction.token != request.match_info["token"]:
            return self._not_found("interaction", 10062)
        body = request[_BODY] or {}
        files: list[FilePart] = request[_FILES]
        kind = int(body.get("type") or 0)
        data = body.get("data") or {}
        already = any(c.status == 0 or c.status < 300 for c in interaction.callbacks)  # 0: still in flight
        record = InteractionCallback(kind, data, arrived - (interaction.dispatched_at or arrived), 0, files)
        interaction.callbacks.append(record)
        response = await self._answer_interaction(interaction, kind, data, files, already, record.delay)
        if response.status < 300 and request.query.get("with_response", "").lower() not in ("1", "true"):
            response = web.Response(status=204)
        record.status = response.status
        return response

    async def _answer_interaction(
        self,
        interaction: Interaction,
        kind: int,
        data: dict[str, Any],
        files: list[FilePart],
        already: bool,
        delay: float,
    ) -> web.Response:
        if interaction.dispatched_at is None or delay > self.interaction_deadline:
            return self._not_found("interaction", 10062)  # too late: Discord has forgotten it
        if already:
            return self._json({"message": "Interaction has already been acknowledged.", "code": 40060}, 400)
        ephemeral = bool(int(data.get("flags") or 0) & _FLAG_EPHEMERAL)
        message: dict[str, Any] | None = None
        if kind == CHANNEL_MESSAGE:
            refused = self._refuse_message(data, files)
            if refused is not None:
                return refused
            message = self._interaction_message(interaction, data)
            self._apply_fields(message, {k: v for k, v in data.items() if k != "flags"}, files)
            interaction.original_id = message["id"]
        elif kind == DEFERRED_CHANNEL_MESSAGE:
            message = self._interaction_message(interaction, data, loading=True)
            interaction.original_id = message["id"]
        elif kind in (DEFERRED_UPDATE, UPDATE_MESSAGE):
            interaction.original_id = interaction.message_id
            if kind == UPDATE_MESSAGE:
                source = self.messages.get(interaction.message_id or "") or self.ephemeral_messages.get(
                    interaction.message_id or ""
                )
                if source is None:
                    return self._not_found("Message", 10008)
                refused = self._refuse_message(data, files, edit=True)
                if refused is not None:
                    return refused
                await self._edit(source, data, files)
                message = source
        elif kind not in (PONG, 9):  # 9: show a modal
            return self._invalid_form(
                "type", "BASE_TYPE_CHOICES", f"Value must be one of (1, 4, 5, 6, 7, 9), not {kind}."
            )
        if message is not None and kind in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE):
            if ephemeral:
                interaction.ephemeral_ids.append(message["id"])
            elif self.echo_own and self.connected:
                await self.dispatch("MESSAGE_CREATE", _public(message))
        callback: dict[str, Any] = {"id": interaction.id, "type": interaction.payload["type"]}
        if kind in (CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE) and message is not None:
            callback["response_message_id"] = message["id"]
            callback["response_message_loading"] = kind == DEFERRED_CHANNEL_MESSAGE
            callback["response_message_ephemeral"] = ephemeral
        answer: dict[str, Any] = {"interaction": callback}
        if kind != PONG:
            answer["resource"] = {"type": kind, **({"message": _public(message)} if message is not None else {})}
        return self._json(answer)

    async def _followup(self, request: web.Request, interaction: Interaction) -> web.Response:
        """`POST /webhooks/{application}/{token}`: a follow-up message. The first one after a
        deferred answer (type 5) fills the loading message instead of posting a new one."""
        interaction.followups.append(request[_RECORD])
        if not interaction.responded:
            return self._not_found("Webhook", 10015)
        body = request[_BODY] or {}
        files: list[FilePart] = request[_FILES]
        refused = self._refuse_message(body, files)
        if refused is not None:
            return refused
        original_id = interaction.original_id or ""
        pending = self.messages.get(original_id) or self.ephemeral_messages.get(original_id)
        if pending is not None and int(pending.get("flags") or 0) & _FLAG_LOADING:
            pending["flags"] = int(pending["flags"]) & ~_FLAG_LOADING
            answer = await self._edit(pending, {k: v for k, v in body.items() if k != "flags"}, files)
        else:
            message = self._interaction_message(interaction, body)
            self._apply_fields(message, {k: v for k, v in body.items() if k != "flags"}, files)
            if message["id"] in self.ephemeral_messages:
                interaction.ephemeral_ids.append(message["id"])
            elif self.echo_own and self.connected:
                await self.dispatch("MESSAGE_CREATE", _public(message))
            answer = _public(message)
        if request.query.get("wait", "").lower() in ("true", "1"):
            return self._json(answer)
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
        """Send one DISPATCH (op 0) to the connected client (an INTERACTION_CREATE starts its
        interaction's answer clock)."""
        interaction_id = data.get("id") if isinstance(data, dict) else None  # a fuzzed payload may be anything
        if event == "INTERACTION_CREATE" and isinstance(interaction_id, str) and interaction_id in self.interactions:
            self.interactions[interaction_id].dispatched_at = time.monotonic()
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
        self.identifies.append(data)
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
    return {k: v for k, v in data.items() if k not in _PRIVATE_KEYS}


def _guess_type(filename: str) -> str:
    """The content type Discord gives a file from its name (text types get a charset)."""
    guessed = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    return f"{guessed}; charset=utf-8" if guessed.startswith("text/") else guessed


def _parse_multipart(content_type: str, raw: bytes) -> tuple[Any, list[FilePart]]:
    """A multipart/form-data body: the JSON of `payload_json` and the file parts."""
    parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw
    )
    payload: Any = None
    files: list[FilePart] = []
    for part in parsed.iter_parts():
        name = str(part.get_param("name", header="content-disposition") or "")
        data = part.get_payload(decode=True) or b""
        assert isinstance(data, bytes)
        if name == "payload_json":
            payload = json.loads(data)
        elif part.get_filename() is not None:
            files.append(FilePart(name, str(part.get_filename()), part.get_content_type(), data))
    return payload, files


def _check_components(rows: Any) -> web.Response | None:
    """Discord's limits on message components: at most 5 action rows of at most 5 buttons, a
    label of at most 80 characters, a custom_id of 1-100 characters (link buttons carry a url
    instead), custom_ids unique in the message."""
    problems: dict[str, Any] = {}
    seen: set[str] = set()
    if not isinstance(rows, list) or len(rows) > 5:
        problems["components"] = "Must be 5 or fewer in length."
    else:
        for r, row in enumerate(rows):
            children = row.get("components") if isinstance(row, dict) else None
            if (
                not isinstance(row, dict)
                or row.get("type") != 1
                or not isinstance(children, list)
                or not 1 <= len(children) <= 5
            ):
                problems[f"components.{r}"] = "An action row holds 1 to 5 components."
                continue
            for c, button in enumerate(children):
                key = f"components.{r}.components.{c}"
                if button.get("type") != 2:
                    continue
                custom_id = button.get("custom_id")
                if button.get("style") == 5:
                    if not button.get("url"):
                        problems[key] = "A link button needs a url."
                elif not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 100:
                    problems[key] = "custom_id must be between 1 and 100 in length."
                elif custom_id in seen:
                    problems[key] = "Component custom id cannot be duplicated"
                else:
                    seen.add(custom_id)
                if len(str(button.get("label") or "")) > 80:
                    problems[key] = "label must be 80 or fewer in length."
    if not problems:
        return None
    errors = {k: {"_errors": [{"code": "COMPONENT_INVALID", "message": v}]} for k, v in problems.items()}
    body = {"message": "Invalid Form Body", "code": 50035, "errors": errors}
    return web.Response(body=json.dumps(body).encode(), status=400, headers={"Content-Type": "application/json"})
