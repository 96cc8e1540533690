"""A Matrix homeserver emulator on 127.0.0.1 for the adapter tests.

It speaks the Client-Server API v3 wire format, so mautrix's `ClientAPI` runs unmodified
against it (its base URL is the emulator's):

* `GET /_matrix/client/versions`; `POST /login` (`m.login.password` with a `device_id`, which
  is kept: logging in again on the same device keeps its transactions); `GET /account/whoami`;
  bearer tokens on every other call (`M_MISSING_TOKEN` / `M_UNKNOWN_TOKEN`, HTTP 401);
* `GET /sync` with `since`, `timeout` (long-polled: it answers as soon as something happens)
  and `next_batch`; joined rooms' `state` and `timeline`, invited rooms' `invite_state`. The
  first sync (no `since`) gives each joined room's last `INITIAL_TIMELINE` events, as a real
  homeserver gives a recent slice;
* `POST /join/{room}` and `/rooms/{room}/join` (only an invited or already joined user),
  `/rooms/{room}/leave`, `GET /joined_rooms`, `GET /profile/{user}/displayname`, `POST /createRoom` (with `invite` and `is_direct`), `m.direct`
  account data;
* `PUT /rooms/{room}/send/{type}/{txnId}`: a repeat of a transaction id by the same device
  answers the first event id and stores nothing (`sends` records every request, `dedup` says
  which were repeats); `fail_sends` drops the connection of the next N sends *after* the event
  was stored, the ambiguous failure a real network has; `PUT /rooms/{room}/redact/{id}/{txn}`;
  `GET /rooms/{room}/event/{id}`; `GET /rooms/{room}/messages` (paging back); `PUT /rooms/{room}/typing/{user}`; `/joined_members`;
* media: `POST /_matrix/media/v3/upload` gives an `mxc://` URI; the bytes are served only by
  the authenticated `GET /_matrix/client/v1/media/download/{server}/{id}` (the unauthenticated
  `/_matrix/media/v3/download` is frozen, as on homeservers that require authenticated media);
  `fetches` counts downloads.

The test side: `add_user`, `create_room`, `invite_bot`, `say` / `post` (any content, a reply,
a thread message), `react`, `send_file`, and read-outs of what a person sees (`text_of`
follows `m.replace` edits, `edits_of`, `reactions_on`, `bot_events`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.emulators.serving import client_gone

SERVER = "emu.test"
BOT = f"@bot:{SERVER}"
BOT_PASSWORD = "bot-password"
BOT_DEVICE = "BOTDEVICE"
BOT_TOKEN = "syt_emulator_bot_token"
ANN = f"@ann:{SERVER}"
BOB = f"@bob:{SERVER}"
#: Events of each joined room a sync gives at most (Synapse's default filter): the first sync
#: gives the latest ones; a later one with more to give says `limited` and hands `prev_batch`,
#: from where `/rooms/{room}/messages` pages back to the rest.
INITIAL_TIMELINE = 10


@dataclass
class Room:
    room_id: str
    members: dict[str, str] = field(default_factory=dict)  # user -> join | invite | leave
    state: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    inviter: dict[str, str] = field(default_factory=dict)  # invited user -> who invited them
    joined_at: dict[str, int] = field(default_factory=dict)  # user -> stream position of their join

    @property
    def encrypted(self) -> bool:
        return ("m.room.encryption", "") in self.state


@dataclass
class Send:
    """One `PUT …/send/{type}/{txnId}` as the homeserver received it."""

    room_id: str
    event_type: str
    txn_id: str
    device: str
    content: dict[str, Any]
    event_id: str
    repeat: bool  # the transaction id was seen before from this device: nothing new stored
    dropped: bool  # stored, and then the connection was dropped before the answer


@dataclass
class Media:
    data: bytes
    mime: str
    filename: str


class MatrixEmulator:
    def __init__(self) -> None:
        self.users: dict[str, str] = {BOT: "Bot", ANN: "Ann", BOB: "Bob"}
        self.passwords = {BOT: BOT_PASSWORD}
        #: access token -> (user, device)
        self.tokens: dict[str, tuple[str, str]] = {BOT_TOKEN: (BOT, BOT_DEVICE)}
        self.rooms: dict[str, Room] = {}
        self.events: dict[str, dict[str, Any]] = {}
        #: The stream /sync reads: (position, room, section, event) with section `timeline` or `invite`.
        self.stream: list[tuple[int, str, str, dict[str, Any]]] = []
        self.sends: list[Send] = []
        self._txns: dict[tuple[str, str, str], str] = {}  # (user, device, txnId) -> event id
        self.media: dict[str, Media] = {}
        self.fetches = 0
        self.uploads: list[tuple[str, Media]] = []
        self.syncs: list[str | None] = []  # the `since` of every /sync
        self.joins: list[str] = []
        self.typing: list[str] = []
        self.event_fetches: list[str] = []  # event ids asked for with GET /rooms/{room}/event/{id}
        self.account_data: dict[tuple[str, str], dict[str, Any]] = {}
        self.logins: list[dict[str, Any]] = []
        #: Sends whose connection is dropped after the event is stored (the ambiguous failure).
        self.fail_sends = 0
        self._ids = itertools.count(1)
        self._positions: dict[str, int] = {}  # event id -> its stream position
        self.pages: list[dict[str, str]] = []  # the query of every /messages request
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    # --- serving -------------------------------------------------------------------------

    async def start(self) -> MatrixEmulator:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[client_gone])
        client = "/_matrix/client"
        r = app.router
        r.add_get(f"{client}/versions", self._versions)
        r.add_post(f"{client}/v3/login", self._login)
        r.add_get(f"{client}/v3/account/whoami", self._whoami)
        r.add_get(f"{client}/v3/sync", self._sync)
        r.add_post(f"{client}/v3/join/{{room}}", self._join)
        r.add_post(f"{client}/v3/rooms/{{room}}/join", self._join)
        r.add_post(f"{client}/v3/rooms/{{room}}/leave", self._leave)
        r.add_post(f"{client}/v3/createRoom", self._create_room)
        r.add_put(f"{client}/v3/rooms/{{room}}/send/{{type}}/{{txn}}", self._send)
        r.add_put(f"{client}/v3/rooms/{{room}}/redact/{{event}}/{{txn}}", self._redact)
        r.add_get(f"{client}/v3/rooms/{{room}}/event/{{event}}", self._event)
        r.add_get(f"{client}/v3/rooms/{{room}}/messages", self._messages)
        r.add_put(f"{client}/v3/rooms/{{room}}/typing/{{user}}", self._typing)
        r.add_get(f"{client}/v3/rooms/{{room}}/joined_members", self._joined_members)
        r.add_get(f"{client}/v3/joined_rooms", self._joined_rooms)
        r.add_get(f"{client}/v3/profile/{{user}}/displayname", self._displayname)
        r.add_get(f"{client}/v3/user/{{user}}/account_data/{{type}}", self._get_account_data)
        r.add_put(f"{client}/v3/user/{{user}}/account_data/{{type}}", self._put_account_data)
        r.add_post("/_matrix/media/v3/upload", self._upload)
        r.add_get(f"{client}/v1/media/download/{{server}}/{{media}}", self._download)
        r.add_get(f"{client}/v1/media/download/{{server}}/{{media}}/{{name}}", self._download)
        r.add_get("/_matrix/media/v3/download/{server}/{media}", self._frozen_download)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def section(self, **overrides: Any) -> dict[str, Any]:
        """A `platforms.matrix` mapping pointing at this emulator (access token login)."""
        return {"homeserver": self.url, "user_id": BOT, "access_token": BOT_TOKEN, "device_id": BOT_DEVICE,
                "sync_timeout_seconds": 2, **overrides}

    # --- the test side: people and rooms ----------------------------------------------------

    def add_user(self, user_id: str, name: str) -> str:
        self.users[user_id] = name
        return user_id

    def create_room(
        self, creator: str = ANN, *, members: tuple[str, ...] = (BOT,), encrypted: bool = False,
        direct: bool = False, name: str | None = None,
    ) -> str:
        """A room `creator` made, with `members` joined (the bot by default)."""
        room = Room(f"!{secrets.token_hex(6)}:{SERVER}")
        self.rooms[room.room_id] = room
        self._state(room, creator, "m.room.create", "", {"creator": creator, "room_version": "10"})
        for user in (creator, *members):
            if room.members.get(user) != "join":
                self._state(room, user, "m.room.member", user, {"membership": "join", "displayname": self.users.get(user)})
        if name:
            self._state(room, creator, "m.room.name", "", {"name": name})
        if encrypted:
            self._state(room, creator, "m.room.encryption", "", {"algorithm": "m.megolm.v1.aes-sha2"})
        if direct:
            room.state[("botweave.test.direct", "")] = {}
        return room.room_id

    def invite_bot(self, room_id: str, inviter: str, *, direct: bool = False) -> None:
        room = self.rooms[room_id]
        content: dict[str, Any] = {"membership": "invite", "displayname": "Bot"}
        if direct:
            content["is_direct"] = True
        event = self._state(room, inviter, "m.room.member", BOT, content)
        room.inviter[BOT] = inviter
        stripped = [
            {"type": t, "state_key": k, "sender": e["sender"], "content": e["content"]}
            for (t, k), e in room.state.items()
            if t in ("m.room.create", "m.room.name", "m.room.encryption", "m.room.member") and "event_id" in e
        ]
        self._publish(room_id, "invite", {"events": stripped, "invite": event})

    def say(
        self, room_id: str, sender: str, text: str, *, reply_to: str | None = None, thread: str | None = None,
        fallback: bool = True, msgtype: str = "m.text", mentions: tuple[str, ...] | None = None,
    ) -> dict[str, Any]:
        """A person's text message; a reply (`reply_to`, with the quoting fallback unless
        `fallback` is False) or a message in the thread rooted at `thread`."""
        content: dict[str, Any] = {"msgtype": msgtype, "body": text}
        if mentions is not None:
            content["m.mentions"] = {"user_ids": list(mentions)}
        if reply_to is not None:
            quoted = self.events[reply_to]
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
            if fallback:
                quoted_body = str(quoted["content"].get("body", ""))
                lines = "\n".join(f"> {line}" for line in quoted_body.splitlines() or [""])
                content["body"] = f"> <{quoted['sender']}> {lines[2:]}\n\n{text}"
        if thread is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread", "event_id": thread, "is_falling_back": True,
                "m.in_reply_to": {"event_id": reply_to or self._last_in_thread(room_id, thread)},
            }
        return self.post(room_id, sender, "m.room.message", content)

    def react(self, room_id: str, sender: str, event_id: str, key: str) -> dict[str, Any]:
        content = {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}
        return self.post(room_id, sender, "m.reaction", content)

    def upload(self, data: bytes, mime: str, filename: str) -> str:
        media_id = secrets.token_hex(8)
        self.media[media_id] = Media(data, mime, filename)
        return f"mxc://{SERVER}/{media_id}"

    def send_file(
        self, room_id: str, sender: str, data: bytes, filename: str, mime: str, *,
        declared_size: int | None = None, caption: str = "",
    ) -> dict[str, Any]:
        """A person's file: `m.image` for pictures, `m.audio`, else `m.file`; the event declares
        `declared_size` (default the real size) in its `info`."""
        msgtype = "m.image" if mime.startswith("image/") else "m.audio" if mime.startswith("audio/") else "m.file"
        content: dict[str, Any] = {
            "msgtype": msgtype, "body": caption or filename, "url": self.upload(data, mime, filename),
            "info": {"mimetype": mime, "size": len(data) if declared_size is None else declared_size},
        }
        if caption:
            content["filename"] = filename
        return self.post(room_id, sender, "m.room.message", content)

    def redact(self, event_id: str, *, by: str) -> dict[str, Any]:
        """A person redacts an event (a message, or their reaction)."""
        event = self.events[event_id]
        event["redacted"] = True
        event["content"] = {}
        redaction = self.post(event["room_id"], by, "m.room.redaction", {"redacts": event_id})
        redaction["redacts"] = event_id
        event["unsigned"]["redacted_because"] = redaction
        return redaction

    def post(self, room_id: str, sender: str, event_type: str, content: dict[str, Any]) -> dict[str, Any]:
        room = self.rooms[room_id]
        event = self._event_of(room_id, sender, event_type, content)
        room.timeline.append(event)
        self._publish(room_id, "timeline", event)
        return event

    # --- the test side: what people see -----------------------------------------------------

    def text_of(self, event_id: str) -> str | None:
        """The text a client shows for a message: its newest `m.replace` edit's new content, or
        None once redacted."""
        event = self.events.get(event_id)
        if event is None or event.get("redacted"):
            return None
        edits = self.edits_of(event_id)
        content = edits[-1]["content"]["m.new_content"] if edits else event["content"]
        return str(content.get("body", ""))

    def edits_of(self, event_id: str) -> list[dict[str, Any]]:
        event = self.events[event_id]
        return [
            e for e in self.rooms[event["room_id"]].timeline
            if (e["content"].get("m.relates_to") or {}).get("rel_type") == "m.replace"
            and e["content"]["m.relates_to"].get("event_id") == event_id
            and not e.get("redacted")
        ]

    def reactions_on(self, event_id: str, sender: str = BOT) -> list[str]:
        room = self.rooms[self.events[event_id]["room_id"]]
        return [
            e["content"]["m.relates_to"]["key"] for e in room.timeline
            if e["type"] == "m.reaction" and e["sender"] == sender and not e.get("redacted")
            and e["content"]["m.relates_to"].get("event_id") == event_id
        ]

    def bot_events(self, room_id: str, event_type: str = "m.room.message") -> list[dict[str, Any]]:
        """The bot's events of `event_type` in a room, edits left out (they change a message)."""
        return [
            e for e in self.rooms[room_id].timeline
            if e["sender"] == BOT and e["type"] == event_type and not e.get("redacted")
            and (e["content"].get("m.relates_to") or {}).get("rel_type") != "m.replace"
        ]

    def bot_texts(self, room_id: str) -> list[str]:
        return [self.text_of(e["event_id"]) or "" for e in self.bot_events(room_id)]

    def direct_rooms(self, user: str) -> list[str]:
        """Rooms that are the bot's direct chat with `user`."""
        return [
            room_id for room_id, room in self.rooms.items()
            if room.members.get(BOT) == "join" and set(room.members) == {BOT, user}
        ]

    # --- internals -------------------------------------------------------------------------

    def _event_of(self, room_id: str, sender: str, event_type: str, content: dict[str, Any]) -> dict[str, Any]:
        event_id = f"${next(self._ids):08d}{secrets.token_hex(4)}"
        event = {
            "event_id": event_id, "room_id": room_id, "sender": sender, "type": event_type, "content": content,
            "origin_server_ts": int(time.time() * 1000), "unsigned": {},
        }
        self.events[event_id] = event
        return event

    def _state(self, room: Room, sender: str, event_type: str, key: str, content: dict[str, Any]) -> dict[str, Any]:
        event = self._event_of(room.room_id, sender, event_type, content)
        event["state_key"] = key
        room.state[(event_type, key)] = event
        if event_type == "m.room.member":
            room.members[key] = content["membership"]
        room.timeline.append(event)
        self._publish(room.room_id, "timeline", event)
        if event_type == "m.room.member" and content["membership"] == "join":
            room.joined_at[key] = len(self.stream)
        return event

    def _publish(self, room_id: str, section: str, event: dict[str, Any]) -> None:
        self.stream.append((len(self.stream) + 1, room_id, section, event))
        if section == "timeline":
            self._positions[event["event_id"]] = len(self.stream)
        asyncio.get_event_loop().create_task(self._wake())

    async def _wake(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _last_in_thread(self, room_id: str, root: str) -> str:
        for event in reversed(self.rooms[room_id].timeline):
            relates = event["content"].get("m.relates_to") or {}
            if event["event_id"] == root or (relates.get("rel_type") == "m.thread" and relates.get("event_id") == root):
                return str(event["event_id"])
        return root

    @staticmethod
    def _error(status: int, errcode: str, message: str, **extra: Any) -> web.Response:
        return web.json_response({"errcode": errcode, "error": message, **extra}, status=status)

    def _auth(self, request: web.Request) -> tuple[str, str]:
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ") if header.startswith("Bearer ") else request.query.get("access_token")
        if not token:
            raise web.HTTPUnauthorized(
                text=json.dumps({"errcode": "M_MISSING_TOKEN", "error": "Missing access token"}),
                content_type="application/json",
            )
        who = self.tokens.get(token)
        if who is None:
            raise web.HTTPUnauthorized(
                text=json.dumps({"errcode": "M_UNKNOWN_TOKEN", "error": "Unknown access token"}),
                content_type="application/json",
            )
        return who

    def _joined_room(self, room_id: str, user: str) -> Room:
        room = self.rooms.get(room_id)
        if room is None or room.members.get(user) != "join":
            raise web.HTTPForbidden(
                text=json.dumps({"errcode": "M_FORBIDDEN", "error": f"{user} is not in room {room_id}"}),
                content_type="application/json",
            )
        return room

    # --- endpoints -------------------------------------------------------------------------

    async def _versions(self, request: web.Request) -> web.Response:
        return web.json_response({"versions": ["v1.9", "v1.10", "v1.11"], "unstable_features": {}})

    async def _login(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.logins.append({k: v for k, v in body.items() if k != "password"})
        identifier = body.get("identifier") or {}
        user = identifier.get("user") or body.get("user") or ""
        if user and not user.startswith("@"):
            user = f"@{user}:{SERVER}"
        if body.get("type") != "m.login.password" or self.passwords.get(user) != body.get("password"):
            return self._error(403, "M_FORBIDDEN", "Invalid username or password")
        device = body.get("device_id") or secrets.token_hex(5).upper()
        token = f"syt_{secrets.token_hex(12)}"
        self.tokens[token] = (user, device)
        return web.json_response({"user_id": user, "access_token": token, "device_id": device, "home_server": SERVER})

    async def _whoami(self, request: web.Request) -> web.Response:
        user, device = self._auth(request)
        return web.json_response({"user_id": user, "device_id": device, "is_guest": False})

    async def _sync(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        since = request.query.get("since")
        self.syncs.append(since)
        timeout = min(int(request.query.get("timeout", "0") or 0), 60_000) / 1000
        if since is None:
            return web.json_response(self._initial_sync(user))
        try:
            after = int(since.removeprefix("s"))
        except ValueError:
            return self._error(400, "M_INVALID_PARAM", "unknown since token")
        deadline = time.monotonic() + timeout
        while len(self.stream) <= after and time.monotonic() < deadline:
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
                except asyncio.TimeoutError:
                    break
        return web.json_response(self._sync_since(user, after))

    def _initial_sync(self, user: str) -> dict[str, Any]:
        join: dict[str, Any] = {}
        invite: dict[str, Any] = {}
        for room_id, room in self.rooms.items():
            membership = room.members.get(user)
            if membership == "join":
                join[room_id] = {
                    "state": {"events": [e for e in room.state.values() if "event_id" in e]},
                    "timeline": {"events": [dict(e) for e in room.timeline[-INITIAL_TIMELINE:]], "limited": True},
                }
            elif membership == "invite":
                invite[room_id] = {"invite_state": {"events": self._invite_state(room, user)}}
        return {"next_batch": f"s{len(self.stream)}", "rooms": {"join": join, "invite": invite, "leave": {}}}

    def _invite_state(self, room: Room, user: str) -> list[dict[str, Any]]:
        return [
            {"type": t, "state_key": k, "sender": e["sender"], "content": e["content"]}
            for (t, k), e in room.state.items()
            if t in ("m.room.create", "m.room.name", "m.room.encryption", "m.room.member") and "event_id" in e
            and (t != "m.room.member" or k == user)
        ]

    def _sync_since(self, user: str, after: int) -> dict[str, Any]:
        join: dict[str, Any] = {}
        invite: dict[str, Any] = {}
        for position, room_id, section, event in self.stream[after:]:
            room = self.rooms[room_id]
            if section == "invite":
                if event["invite"]["state_key"] == user and room.members.get(user) == "invite":
                    invite[room_id] = {"invite_state": {"events": self._invite_state(room, user)}}
                continue
            if room.members.get(user) != "join" or position < room.joined_at.get(user, 0):
                continue
            if event["type"] == "m.room.member" and event["state_key"] == user and event["content"]["membership"] == "join":
                # just joined: the room's state comes with it, as a homeserver sends it
                join.setdefault(room_id, {"timeline": {"events": []}})["state"] = {
                    "events": [e for e in room.state.values() if "event_id" in e]
                }
            join.setdefault(room_id, {"timeline": {"events": []}})["timeline"]["events"].append(dict(event))
        for section in join.values():
            timeline = section["timeline"]
            if len(timeline["events"]) > INITIAL_TIMELINE:
                kept = timeline["events"][-INITIAL_TIMELINE:]
                timeline.update(events=kept, limited=True, prev_batch=f"s{self._positions[kept[0]['event_id']] - 1}")
        return {"next_batch": f"s{len(self.stream)}", "rooms": {"join": join, "invite": invite, "leave": {}}}

    async def _join(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        room_id = request.match_info["room"]
        room = self.rooms.get(room_id)
        if room is None or room.members.get(user) not in ("invite", "join"):
            return self._error(403, "M_FORBIDDEN", "You are not invited to this room.")
        self.joins.append(room_id)
        if room.members.get(user) != "join":
            self._state(room, user, "m.room.member", user, {"membership": "join", "displayname": self.users.get(user)})
        return web.json_response({"room_id": room_id})

    async def _leave(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        room = self.rooms.get(request.match_info["room"])
        if room is not None and room.members.get(user) in ("invite", "join"):
            self._state(room, user, "m.room.member", user, {"membership": "leave"})
        return web.json_response({})

    async def _create_room(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        body = await request.json()
        room_id = self.create_room(user, members=())
        room = self.rooms[room_id]
        for invitee in body.get("invite") or []:
            # the emulator's people accept at once, as a person would who asked for the chat
            self._state(room, invitee, "m.room.member", invitee, {"membership": "join", "displayname": self.users.get(invitee)})
        return web.json_response({"room_id": room_id})

    async def _send(self, request: web.Request) -> web.StreamResponse:
        user, device = self._auth(request)
        room = self._joined_room(request.match_info["room"], user)
        event_type, txn = request.match_info["type"], request.match_info["txn"]
        content = await request.json()
        key = (user, device, txn)
        known = self._txns.get(key)
        if known is None:
            relates = content.get("m.relates_to") or {}
            target = relates.get("event_id")
            if relates.get("rel_type") in ("m.replace", "m.annotation") and target not in self.events:
                return self._error(400, "M_UNKNOWN", f"unknown event {target}")
            event = self._event_of(room.room_id, user, event_type, content)
            event["unsigned"]["transaction_id"] = txn
            room.timeline.append(event)
            self._publish(room.room_id, "timeline", event)
            self._txns[key] = event["event_id"]
        event_id = known or self._txns[key]
        dropped = self.fail_sends > 0
        self.sends.append(Send(room.room_id, event_type, txn, device, content, event_id, known is not None, dropped))
        if dropped:
            self.fail_sends -= 1
            assert request.transport is not None
            request.transport.close()  # stored, and the answer never arrives
            raise ConnectionResetError
        return web.json_response({"event_id": event_id})

    async def _redact(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        room = self._joined_room(request.match_info["room"], user)
        event = self.events.get(request.match_info["event"])
        if event is None or event["room_id"] != room.room_id:
            return self._error(404, "M_NOT_FOUND", "Event not found")
        if event["sender"] != user:
            return self._error(403, "M_FORBIDDEN", "You cannot redact someone else's event")
        event["redacted"] = True
        event["content"] = {}
        redaction = self._event_of(room.room_id, user, "m.room.redaction", {})
        redaction["redacts"] = event["event_id"]
        event["unsigned"]["redacted_because"] = redaction
        room.timeline.append(redaction)
        self._publish(room.room_id, "timeline", redaction)
        return web.json_response({"event_id": redaction["event_id"]})

    async def _event(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        room = self._joined_room(request.match_info["room"], user)
        event = self.events.get(request.match_info["event"])
        self.event_fetches.append(request.match_info["event"])
        if event is None or event["room_id"] != room.room_id:
            return self._error(404, "M_NOT_FOUND", "Event not found")
        served = {k: v for k, v in event.items() if k != "redacted"}
        edits = self.edits_of(event["event_id"]) if event["type"] == "m.room.message" else []
        if edits:  # the newest edit rides along, as homeservers aggregate it
            served["unsigned"] = {**event["unsigned"], "m.relations": {"m.replace": edits[-1]}}
        return web.json_response(served)

    async def _messages(self, request: web.Request) -> web.Response:
        """Paging back (`dir=b`) from `from` to `to` (both stream tokens), `limit` at a time."""
        user, _ = self._auth(request)
        room = self._joined_room(request.match_info["room"], user)
        self.pages.append(dict(request.query))
        if request.query.get("dir") != "b":
            return self._error(400, "M_INVALID_PARAM", "the emulator pages backwards only")
        start = int(request.query["from"].removeprefix("s"))
        stop = int(request.query.get("to", "s0").removeprefix("s"))
        limit = int(request.query.get("limit", "10"))
        found = [e for e in reversed(room.timeline) if stop < self._positions.get(e["event_id"], 0) <= start]
        chunk = found[:limit]
        answer: dict[str, Any] = {"chunk": [dict(e) for e in chunk], "start": request.query["from"]}
        if len(found) > limit:
            answer["end"] = f"s{self._positions[chunk[-1]['event_id']] - 1}"
        return web.json_response(answer)

    async def _typing(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        self._joined_room(request.match_info["room"], user)
        self.typing.append(request.match_info["room"])
        return web.json_response({})

    async def _joined_members(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        room = self._joined_room(request.match_info["room"], user)
        joined = {u: {"display_name": self.users.get(u)} for u, m in room.members.items() if m == "join"}
        return web.json_response({"joined": joined})

    async def _joined_rooms(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        return web.json_response({"joined_rooms": [r for r, room in self.rooms.items() if room.members.get(user) == "join"]})

    async def _displayname(self, request: web.Request) -> web.Response:
        name = self.users.get(request.match_info["user"])
        if name is None:
            return self._error(404, "M_NOT_FOUND", "Profile not found")
        return web.json_response({"displayname": name})

    async def _get_account_data(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        data = self.account_data.get((user, request.match_info["type"]))
        if data is None:
            return self._error(404, "M_NOT_FOUND", "Account data not found")
        return web.json_response(data)

    async def _put_account_data(self, request: web.Request) -> web.Response:
        user, _ = self._auth(request)
        self.account_data[(user, request.match_info["type"])] = await request.json()
        return web.json_response({})

    async def _upload(self, request: web.Request) -> web.Response:
        self._auth(request)
        data = await request.read()
        mime = request.headers.get("Content-Type", "application/octet-stream")
        media = Media(data, mime, request.query.get("filename", ""))
        uri = self.upload(data, mime, media.filename)
        self.uploads.append((uri, media))
        return web.json_response({"content_uri": uri})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        self._auth(request)
        media = self.media.get(request.match_info["media"])
        if media is None or request.match_info["server"] != SERVER:
            return self._error(404, "M_NOT_FOUND", "Media not found")
        self.fetches += 1
        return web.Response(body=media.data, content_type=media.mime.split(";")[0])

    async def _frozen_download(self, request: web.Request) -> web.Response:
        return self._error(404, "M_NOT_FOUND", "Unauthenticated media is frozen: use /_matrix/client/v1/media/download")
