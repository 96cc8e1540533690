"""The `web` platform: chats held through the gateway, as one more platform.

A person's message reaches the runtime the way a Telegram update does: the gateway turns a
`chat.send` into a `BotMessage` and hands it to `dispatch`, so it goes through the whole
pipeline (access, hooks, commands, rate limits, admission, turn control, media, the agent)
and its answer through delivery (hooks, the outbox). What is different is where messages are
shown: botweave itself is this platform, so "posting a message" is keeping its record and
publishing it as a conversation event, which the gateway delivers to every client following
the session. That is why the outbound part works in any process sharing the store (a worker
answering a web message from the shared stream writes its reply the same way), and why a
send can be made exactly once: the outbox's chunk key names the message.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, ClassVar

from botweave.adapter import ActionError, Adapter, ByteLimit, Check, Outbound, Outcome, PlatformRejected
from botweave.delivery import bot_message
from botweave.events import ConversationEvents, new_id
from botweave.types import AgentIdentity, BotUser, Button, OutboundFile, PlatformCapabilities

from .config import WebConfig
from .files import FileShelf
from .sessions import SessionBook, conversation_of

#: How much of a file `read_file` hands over at a time.
READ_CHUNK = 256 * 1024


def keyed_id(key: str) -> str:
    """The id of the message sent under an outbox chunk key: the same in every attempt."""
    return "b-" + hashlib.blake2b(key.encode(), digest_size=10).hexdigest()


class WebOutbound(Outbound):
    def __init__(self, events: ConversationEvents, bot: BotUser) -> None:
        self.events = events
        self.bot = bot
        self.files = FileShelf(events.store)
        self.sessions = SessionBook(events.store)

    async def _post(
        self,
        chat_id: str,
        text: str,
        *,
        message_id: str | None = None,
        reply_to: str | None = None,
        buttons: Sequence[Button] = (),
        identity: AgentIdentity | None = None,
        attachments: Sequence[Mapping[str, Any]] = (),
        unique: str | None = None,
    ) -> str:
        record = bot_message(message_id or new_id("b"), text, self.bot.user_id, self.bot.name, identity)
        record |= {
            "reply_to": reply_to,
            "buttons": [b.to_dict() for b in buttons],
            "attachments": [dict(a) for a in attachments],
        }
        await self.events.post(conversation_of(chat_id), record, unique=unique)
        return str(record["id"])

    async def _own(self, chat_id: str, message_id: str) -> dict[str, Any]:
        """The record of one of the bot's messages in this session (what may be changed)."""
        record = await self.events.message(conversation_of(chat_id), message_id)
        if record is None or record.get("deleted") or record.get("author", {}).get("kind") == "user":
            raise ActionError("failed", f"no message {message_id} of the bot in this session")
        return record

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str:
        return await self._post(chat_id, text, reply_to=reply_to)

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None, reply_to: str | None
    ) -> str:
        return await self._post(chat_id, text, message_id=keyed_id(key), reply_to=reply_to, unique=f"evonce:web:{key}")

    async def send_buttons(
        self, chat_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None, reply_to: str | None
    ) -> str:
        return await self._post(chat_id, text, reply_to=reply_to, buttons=buttons)

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        record = await self._own(chat_id, message_id)
        await self.events.update(conversation_of(chat_id), record | {"text": text})

    async def edit_buttons(
        self, chat_id: str, message_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None
    ) -> None:
        record = await self._own(chat_id, message_id)
        change = {"text": text, "buttons": [b.to_dict() for b in buttons]}
        await self.events.update(conversation_of(chat_id), record | change)

    async def delete(self, chat_id: str, message_id: str) -> None:
        record = await self._own(chat_id, message_id)
        await self.events.update(conversation_of(chat_id), record | {"deleted": True, "text": "", "buttons": []})

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        record = await self.events.message(conversation_of(chat_id), message_id)
        if record is None or record.get("deleted"):
            raise ActionError("failed", f"no message {message_id} in this session")
        reactions = [*record.get("reactions", []), emoji]
        await self.events.update(conversation_of(chat_id), record | {"reactions": reactions})

    async def send_as(self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None) -> str:
        return await self._post(chat_id, text, identity=identity)

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str:
        stored = await self.files.put(file.data, file.filename, file.mime, conversation=conversation_of(chat_id))
        return await self._post(chat_id, caption, reply_to=reply_to, attachments=[stored.ref()])

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        stored = await self.files.get(str(ref.get("file_id") or ""))
        if stored is None:
            raise ActionError("failed", "the file is no longer kept")
        limit.declared(stored.size)
        data = await self.files.data(stored.file_id)
        if data is None:
            raise ActionError("failed", "the file is no longer kept")
        for start in range(0, len(data), READ_CHUNK):
            yield data[start : start + READ_CHUNK]

    async def direct_chat(self, user_id: str) -> str:
        return (await self.sessions.inbox(user_id)).id

    def classify(self, exc: Exception, action: str) -> Outcome:
        return "failed", f"{action}: {type(exc).__name__}: {exc}"


class WebAdapter(Adapter):
    platform = "web"
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        max_message_length=None,
        can_edit=True,
        can_delete=True,
        can_react=True,
        markdown="commonmark",  # shown by the browser UI as safe Markdown
        buttons=True,
        edit_floor_ms=0,
    )
    emits = frozenset({"message_edited", "message_deleted", "button_pressed"})
    idempotency = "key"
    events_native = True

    def __init__(self, config: WebConfig | None = None) -> None:
        super().__init__(config or WebConfig())

    async def start(self, *, inbound: bool = True) -> None:
        if self.events is None:
            raise PlatformRejected(
                "the web platform is the gateway's: set gateway.listen in bot.yaml (or --gateway-listen HOST:PORT)"
            )
        name = self.config.bot_name
        self.self_user = BotUser("botweave", name, name, is_bot=True)
        self.outbound = WebOutbound(self.events, self.self_user)

    async def stop(self) -> None:
        self.outbound = None

    @property
    def mode(self) -> str:
        return "gateway"

    async def diagnose(self) -> list[Check]:
        return [Check("web", True, "served by the gateway; its tokens are checked under `gateway`")]
