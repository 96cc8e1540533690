"""A Telegram Bot API emulator on 127.0.0.1 for tests driving the real python-telegram-bot.

It speaks the Bot API wire format (`POST /bot<token>/<method>` with form or JSON parameters,
`{"ok": true, "result": ...}` / `{"ok": false, "error_code", "description", "parameters"}`),
keeps a little chat state (messages per chat, edits, deletions, reactions), long-polls
`getUpdates` with offsets like Telegram, pushes updates to a webhook when one is set, records
every call, and can be told to fail: 429 with `retry_after`, 400s with Telegram's own
descriptions, 409 conflicts, or "delivered but the connection dropped".

Tests script users and chats with the builders (`user`, `private_chat`, `group`,
`push_message`, ...), then assert on `calls`, `sent`, and the chat state.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest_asyncio
from aiohttp import web

BOT_ID = 4242
BOT_USERNAME = "ThisBot"
TOKEN = "123:abc"
MAX_TEXT_UTF16 = 4096

_STRING_PARAMS = {"text", "url", "secret_token", "action", "file_id", "callback_query_id", "caption", "emoji"}
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
        self.files: dict[str, tuple[str, bytes]] = {}
        self.allowed_updates: list[str] | None = None
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
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
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
        key = int(chat_id)
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

    # --- scripting: updates --------------------------------------------------------------

    def push(self, kind: str, payload: Any) -> int:
        """Queue one update (`{"update_id": n, kind: payload}`); returns its id."""
        return self.push_raw({kind: payload})

    def push_raw(self, update: dict[str, Any]) -> int:
        """Queue an update exactly as given (an update_id is added if missing)."""
        update = dict(update)
        update.setdefault("update_id", next(self._update_ids))
        if self.webhook is not None:
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

    # --- HTTP ----------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            body = await request.json()
            return dict(body) if isinstance(body, dict) else {}
        raw: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            raw.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
        params: dict[str, Any] = {}
        for key, value in raw.items():
            if key in _STRING_PARAMS:
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
        for path, content in self.files.values():
            if path == request.match_info["path"]:
                return web.Response(body=content)
        return web.Response(status=404)

    async def _deliver(self, update: dict[str, Any]) -> None:
        assert self.webhook is not None
        headers = {"Content-Type": "application/json"}
        if self.webhook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook["secret_token"]
        status = await self.post_to_webhook(update, headers=headers)
        self.webhook_deliveries.append((int(update["update_id"]), status))

    async def post_to_webhook(self, update: dict[str, Any], *, headers: dict[str, str] | None = None) -> int:
        """POST an update to the registered webhook URL (tests use this to forge requests)."""
        assert self.webhook is not None, "no webhook is set"
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
            ready = [u for u in self._pending if u["update_id"] >= offset][:limit]
            remaining = deadline - time.monotonic()
            if ready or remaining <= 0 or self._closing.is_set():
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

    def _check_text(self, text: Any, entities: Any) -> None:
        if not isinstance(text, str) or not text.strip():
            raise ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_TEXT_UTF16:
            raise ApiError(400, "Bad Request: message is too long")
        size = utf16_len(text)
        for entity in entities or []:
            if entity.get("type") not in _ENTITY_TYPES:
                raise ApiError(400, f"Bad Request: can't parse entities: unsupported entity type {entity.get('type')!r}")
            if entity["offset"] < 0 or entity["length"] <= 0 or entity["offset"] + entity["length"] > size:
                raise ApiError(400, "Bad Request: can't parse entities: entity is out of the text bounds")

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        chat = self._chat(params["chat_id"])
        if chat.blocked:
            raise ApiError(403, "Forbidden: bot was blocked by the user")
        text, entities = params.get("text"), params.get("entities")
        self._check_text(text, entities)
        thread_id = params.get("message_thread_id")
        if thread_id is not None and chat.data.get("is_forum") and int(thread_id) not in chat.topics:
            raise ApiError(400, "Bad Request: message thread not found")
        reply = params.get("reply_parameters") or {}
        replied = None
        if reply:
            replied = self.messages.get((chat.id, int(reply["message_id"])))
            if replied is None and not reply.get("allow_sending_without_reply"):
                raise ApiError(400, "Bad Request: message to be replied not found")
        message_id = self.next_message_id(chat.id)
        message: dict[str, Any] = {
            "message_id": message_id, "from": self.bot, "chat": chat.data, "date": int(time.time()), "text": text,
        }
        if entities:
            message["entities"] = entities
        if thread_id is not None:
            message["message_thread_id"] = int(thread_id)
            message["is_topic_message"] = bool(chat.data.get("is_forum"))
        if replied is not None:
            message["reply_to_message"] = {k: v for k, v in replied.items() if k != "reply_to_message"}
        self.messages[(chat.id, message_id)] = message
        return message

    def _own_message(self, params: dict[str, Any], missing: str) -> tuple[Chat, dict[str, Any]]:
        chat = self._chat(params["chat_id"])
        message = self.messages.get((chat.id, int(params["message_id"])))
        if message is None:
            raise ApiError(400, f"Bad Request: {missing}")
        return chat, message

    async def _api_editMessageText(self, params: dict[str, Any]) -> Any:
        chat, message = self._own_message(params, "message to edit not found")
        if message.get("from", {}).get("id") != self.bot["id"]:
            raise ApiError(400, "Bad Request: message can't be edited")
        text, entities = params.get("text"), params.get("entities")
        self._check_text(text, entities)
        if text == message.get("text") and (entities or []) == (message.get("entities") or []):
            raise ApiError(400, NOT_MODIFIED)
        edited = dict(message, text=text, edit_date=int(time.time()))
        edited.pop("entities", None)
        if entities:
            edited["entities"] = entities
        self.messages[(chat.id, message["message_id"])] = edited
        return edited

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

    async def _api_sendChatAction(self, params: dict[str, Any]) -> Any:
        self._chat(params["chat_id"])
        if params.get("action") not in {"typing", "upload_photo", "record_video", "upload_video", "record_voice",
                                        "upload_voice", "upload_document", "choose_sticker", "find_location",
                                        "record_video_note", "upload_video_note"}:
            raise ApiError(400, "Bad Request: wrong parameter action in request")
        return True

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> Any:
        return True

    def add_file(self, file_id: str, path: str, content: bytes = b"data") -> None:
        self.files[file_id] = (path, content)

    async def _api_getFile(self, params: dict[str, Any]) -> Any:
        file_id = params.get("file_id", "")
        if file_id not in self.files:
            raise ApiError(400, "Bad Request: invalid file_id")
        path, content = self.files[file_id]
        return {"file_id": file_id, "file_unique_id": f"u-{file_id}", "file_size": len(content), "file_path": path}


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


@pytest_asyncio.fixture
async def telegram_emulator() -> AsyncIterator[TelegramEmulator]:
    emu = await TelegramEmulator().start()
    try:
        yield emu
    finally:
        await emu.stop()
