"""One driver per platform, so a single test can run against every adapter.

A driver starts the platform's emulator and its adapter through the real SDK (the console reads
a pipe and prints to a buffer) and answers, in the same words for every platform, what a person
would see there: which text a message shows, who said it, what reached them privately, which
files the bot posted. It also plays the platform's side: a person saying something or sending
a file, or the bot's own post coming back.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from botweave.adapter import Adapter
from botweave.adapters.console.adapter import ConsoleAdapter
from botweave.adapters.console.config import ConsoleConfig
from botweave.adapters.console.outbound import ConsoleOutbound
from botweave.adapters.discord.adapter import DiscordAdapter
from botweave.adapters.discord.config import DiscordConfig
from botweave.adapters.email.adapter import EmailAdapter
from botweave.adapters.email.config import EmailConfig
from botweave.adapters.slack.adapter import SlackAdapter
from botweave.adapters.slack.config import SlackConfig
from botweave.adapters.slack.format import reaction_to_emoji, unescape
from botweave.adapters.teams.adapter import TeamsAdapter
from botweave.adapters.teams.config import TeamsConfig
from botweave.adapters.telegram.adapter import TelegramAdapter
from botweave.adapters.whatsapp.adapter import WhatsAppAdapter
from botweave.adapters.whatsapp.config import WhatsAppConfig
from botweave.events import ConversationEvents
from botweave.gateway import Client, GatewayConfig, WebAdapter, WebConfig
from botweave.gateway.server import Gateway
from botweave.methods import MethodRegistry
from botweave.store import MemoryStore
from botweave.types import BotMessage, PlatformEvent

from tests.emulators import discord as discord_emulator
from tests.emulators import slack as slack_emulator
from tests.emulators import teams as teams_emulator
from tests.emulators.discord import DiscordEmulator
from tests.emulators.mail import MailEmulator, text_of
from tests.emulators.slack import EventDelivery, IdentitySlackEmulator, event_callback, slack_section
from tests.emulators.teams import TeamsEmulator, card_of, card_text, text_shown
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.emulators.whatsapp import ANN, BOT_NAME, WhatsAppEmulator

Item = BotMessage | PlatformEvent


@dataclass
class PostedFile:
    """A file the bot posted, as people see it: how it is shown, its name, bytes and caption."""

    shown_as: str  # Telegram: photo, voice or document; elsewhere: attachment
    filename: str
    data: bytes
    caption: str
    message_id: str


class PlatformDriver(ABC):
    """What every platform's driver answers; see the module docstring."""

    name: ClassVar[str]
    #: The adapter itself drops the bot's own posts; otherwise it hands them on as the bot's
    #: (the runtime then drops them by `is_self`).
    drops_own_posts: ClassVar[bool]
    #: A well-formed message id that names no message.
    unknown_id: ClassVar[str]

    adapter: Adapter
    chat: str  # a chat where people talk and the bot may post
    person: str  # a person's user id

    def __init__(self) -> None:
        self.received: list[Item] = []

    async def _sink(self, item: Item) -> None:
        self.received.append(item)

    async def start(self) -> None:
        self.adapter = self.make_adapter()
        self.adapter.bind(self._sink)
        await self.adapter.start()

    async def stop(self) -> None:
        await self.adapter.stop()

    @abstractmethod
    def make_adapter(self) -> Adapter:
        """A new adapter for this emulator, not started."""

    @abstractmethod
    def text_of(self, message_id: str) -> str | None:
        """The text the message shows now in `chat`; None when it is gone."""

    @abstractmethod
    def reactions_on(self, message_id: str) -> list[str]:
        """The bot's reactions the message shows, as emoji."""

    @abstractmethod
    def said(self, message_id: str) -> tuple[str, str]:
        """Who a person reads as the author of the bot's message, and its words."""

    @abstractmethod
    def direct_messages(self, user_id: str) -> list[str]:
        """The texts that reached the user privately."""

    @abstractmethod
    def sent_so_far(self) -> object:
        """Everything the bot has asked of the platform so far (log-ins and reads aside):
        unchanged means nothing was sent."""

    @abstractmethod
    async def person_says(self, text: str) -> BotMessage:
        """A person posts `text` in `chat`; what the adapter handed on for it."""

    @abstractmethod
    async def own_post_comes_back(self, text: str) -> list[Item]:
        """A post by the bot's own user arrives inbound; what the adapter handed on for it."""

    #: Whether people can send this platform files (the console reads lines only).
    receives_files: ClassVar[bool] = True

    @abstractmethod
    def files_posted(self) -> list[PostedFile]:
        """Every file the bot posted in `chat`, in order."""

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        """A person posts a file (the platform declares `declared_size`, default its real
        size, and serves `data`); what the adapter handed on for it."""
        pytest.fail(f"people cannot send {self.name} files")

    def file_fetches(self) -> int:
        """How many times the bot fetched a file's bytes from the platform."""
        pytest.fail(f"people cannot send {self.name} files")

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        """A person answers one of the messages in `chat` (in its thread, on Slack)."""
        pytest.fail(f"people cannot answer a message on {self.name}")

    async def _next_message(self, before: int) -> BotMessage:
        await wait_until(lambda: len(self.received) > before, what="the adapter to hand on a message")
        item = self.received[before]
        assert isinstance(item, BotMessage)
        return item


def _named(text: str, pattern: str) -> tuple[str, str] | None:
    """(name, words) of a text with the name in front, or None."""
    match = re.match(pattern, text, re.DOTALL)
    return (match.group(1), match.group(2)) if match else None


class TelegramDriver(PlatformDriver):
    name = "telegram"
    drops_own_posts = False  # Telegram never shows a bot its own posts; if one came, it is marked
    unknown_id = "999"
    ANN = TelegramEmulator.user(1, "Ann", "ann")

    async def start(self) -> None:
        self.emu = await TelegramEmulator().start()
        self.dm = self.emu.private_chat(self.ANN)
        self.chat = self.person = str(self.ANN["id"])
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        await self.emu.stop()

    def make_adapter(self) -> Adapter:
        return TelegramAdapter(adapter_config(self.emu))

    def _message(self, message_id: str) -> dict[str, Any] | None:
        return self.emu.current(int(self.chat), int(message_id))

    def text_of(self, message_id: str) -> str | None:
        message = self._message(message_id)
        return message["text"] if message else None

    def reactions_on(self, message_id: str) -> list[str]:
        return [r["emoji"] for r in self.emu.reactions.get((int(self.chat), int(message_id)), [])]

    def said(self, message_id: str) -> tuple[str, str]:
        message = self._message(message_id)
        assert message is not None
        return speaker_of_telegram_post(message)

    def direct_messages(self, user_id: str) -> list[str]:
        return self.emu.sent_texts(int(user_id))

    def sent_so_far(self) -> object:
        return [c.method for c in self.emu.calls if c.method not in ("getMe", "getUpdates", "deleteWebhook")]

    async def person_says(self, text: str) -> BotMessage:
        before = len(self.received)
        self.emu.push_message(self.dm, self.ANN, text)
        return await self._next_message(before)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        before = len(self.received)
        self.emu.push_message(self.dm, self.emu.bot, text)
        return [await self._next_message(before)]

    def files_posted(self) -> list[PostedFile]:
        return [
            PostedFile(u.kind, u.filename or "", u.data, u.caption or "", str(u.message["message_id"]))
            for u in self.emu.sent_media(int(self.chat))
        ]

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        before = len(self.received)
        if mime.startswith("image/"):
            self.emu.push_photo(self.dm, self.ANN, data, caption or None, file_size=declared_size)
        elif mime == "audio/ogg":
            self.emu.push_voice(self.dm, self.ANN, data, caption or None, file_size=declared_size)
        else:
            self.emu.push_document(
                self.dm, self.ANN, data, caption or None, file_name=filename, mime_type=mime, file_size=declared_size
            )
        return await self._next_message(before)

    def file_fetches(self) -> int:
        return len(self.emu.downloads)

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        before = len(self.received)
        self.emu.push_message(self.dm, self.ANN, text, reply_to=self.emu.messages[(int(self.chat), int(to.message_id))])
        return await self._next_message(before)


def speaker_of_telegram_post(message: dict[str, Any]) -> tuple[str, str]:
    """Telegram cannot change a post's author: the agent's name is a bold `Name:` in front
    (the whole bold entity, nothing more), else the post is the bot's own."""
    text = message["text"]
    bold = [e for e in message.get("entities", []) if e["type"] == "bold" and e["offset"] == 0]
    if not bold:
        return message["from"]["username"], text
    name = text.encode("utf-16-le")[: 2 * bold[0]["length"]].decode("utf-16-le")
    assert name.endswith(":") and text.startswith(name + " "), text
    return name[:-1], text[len(name) + 1 :]


def discord_adapter(emu: DiscordEmulator) -> DiscordAdapter:
    return DiscordAdapter(DiscordConfig(token=discord_emulator.TOKEN, api_base_url=emu.api_base, gateway_url=emu.gateway_url))


async def discord_into_a_list() -> tuple[DiscordEmulator, DiscordAdapter, list[Item]]:
    """A Discord emulator and a started adapter handing what it receives to a list (no
    runtime): for tests of what the adapter makes of gateway payloads."""
    emu = await DiscordEmulator().start()
    received: list[Item] = []

    async def sink(item: Item) -> None:
        received.append(item)

    adapter = discord_adapter(emu)
    adapter.bind(sink)
    await adapter.start()
    await emu.wait_ready()
    return emu, adapter, received


class DiscordDriver(PlatformDriver):
    name = "discord"
    drops_own_posts = True
    unknown_id = "123"

    async def start(self) -> None:
        self.emu = await DiscordEmulator().start()
        self.chat, self.person = discord_emulator.CHANNEL_ID, discord_emulator.ALICE_ID
        await super().start()
        await self.emu.wait_ready()

    async def stop(self) -> None:
        await super().stop()
        await self.emu.stop()

    def make_adapter(self) -> Adapter:
        return discord_adapter(self.emu)

    def text_of(self, message_id: str) -> str | None:
        message = self.emu.messages.get(message_id)
        return message["content"] if message else None

    def reactions_on(self, message_id: str) -> list[str]:
        return list(self.emu.messages[message_id].get("bot_reactions", []))

    def said(self, message_id: str) -> tuple[str, str]:
        message = self.emu.messages[message_id]
        if message.get("webhook_id"):
            return message["author"]["username"], message["content"]
        return _named(message["content"], r"\*\*(.+?):\*\* (.*)") or (message["author"]["username"], message["content"])

    def direct_messages(self, user_id: str) -> list[str]:
        assert user_id == discord_emulator.ALICE_ID  # the emulator's one DM channel is hers
        return [m["content"] for m in self.emu.bot_messages(discord_emulator.DM_CHANNEL_ID)]

    def sent_so_far(self) -> object:
        return [(r.method, r.path) for r in self.emu.requests if r.method != "GET"]

    async def person_says(self, text: str) -> BotMessage:
        before = len(self.received)
        await self.emu.dispatch("MESSAGE_CREATE", self.emu.message(text, channel_id=self.chat))
        return await self._next_message(before)

    def files_posted(self) -> list[PostedFile]:
        return [
            PostedFile("attachment", u.filename, u.data, self.emu.messages[u.message_id]["content"], u.message_id)
            for u in self.emu.uploads
            if u.channel_id == self.chat
        ]

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        before = len(self.received)
        attachment = self.emu.attachment(filename, mime, declared_size, data=data, channel_id=self.chat)
        await self.emu.dispatch("MESSAGE_CREATE", self.emu.message(caption, channel_id=self.chat, attachments=[attachment]))
        return await self._next_message(before)

    def file_fetches(self) -> int:
        return len(self.emu.cdn_fetches)

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        before = len(self.received)
        await self.emu.dispatch("MESSAGE_CREATE", self.emu.message(text, channel_id=self.chat, reply_to=to.message_id))
        return await self._next_message(before)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        own = self.emu.message(text, channel_id=self.chat, author=self.emu.bot)
        await self.emu.dispatch("MESSAGE_CREATE", own)
        await self.person_says("a barrier: everything dispatched before it has been read")
        return [i for i in self.received if isinstance(i, BotMessage) and i.message_id == own["id"]]


class SlackDriver(PlatformDriver):
    name = "slack"
    drops_own_posts = True
    unknown_id = "1600000000.000001"

    async def start(self) -> None:
        self.emu = IdentitySlackEmulator()
        await self.emu.start()
        self.chat, self.person = "C0GENERAL", "U0ALICE"
        self.emu.add_user(self.person, "Alice")
        self.emu.add_channel(self.chat, "channel")
        await super().start()
        self.delivery = EventDelivery(self.emu, self.adapter, "socket")

    async def stop(self) -> None:
        await super().stop()
        await self.emu.stop()

    def make_adapter(self) -> Adapter:
        return SlackAdapter(SlackConfig(**slack_section(self.emu, "socket")))

    def _message(self, message_id: str) -> dict[str, Any] | None:
        return self.emu.find(self.chat, message_id)

    def text_of(self, message_id: str) -> str | None:
        """What Slack shows: mrkdwn's three escaped characters as themselves."""
        message = self._message(message_id)
        return unescape(message["text"]) if message else None

    def reactions_on(self, message_id: str) -> list[str]:
        message = self._message(message_id) or {}
        return [reaction_to_emoji(name) for name in message.get("reactions", {})]

    def said(self, message_id: str) -> tuple[str, str]:
        message = self._message(message_id)
        assert message is not None
        if message.get("username"):
            return message["username"], message["text"]
        return _named(message["text"], r"\*(.+?):\* (.*)") or (slack_emulator.BOT_NAME, message["text"])

    def direct_messages(self, user_id: str) -> list[str]:
        return [m["text"] for m in self.emu.messages.get("D" + user_id.removeprefix("U"), [])]

    def sent_so_far(self) -> object:
        return [c.method for c in self.emu.calls if c.method.startswith(("chat.", "reactions."))]

    async def person_says(self, text: str) -> BotMessage:
        before = len(self.received)
        await self.delivery.deliver_all(event_callback(self.emu.post_as_user(self.chat, self.person, text)))
        return await self._next_message(before)

    def files_posted(self) -> list[PostedFile]:
        return [
            PostedFile("attachment", u.filename, u.data or b"", u.initial_comment, u.message_ts or "")
            for u in self.emu.uploads.values()
            if u.completed and u.channel == self.chat
        ]

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        before = len(self.received)
        shared = self.emu.add_file(filename, data, mimetype=mime, size=declared_size, user=self.person)
        event = self.emu.post_as_user(self.chat, self.person, caption, subtype="file_share", files=[shared])
        await self.delivery.deliver_all(event_callback(event))
        return await self._next_message(before)

    def file_fetches(self) -> int:
        return len(self.emu.file_fetches)

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        before = len(self.received)
        event = self.emu.post_as_user(self.chat, self.person, text, thread_ts=to.message_id)
        await self.delivery.deliver_all(event_callback(event))
        return await self._next_message(before)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        before = len(self.received)
        own = self.emu.post_as_user(self.chat, slack_emulator.BOT_USER_ID, text, bot_id=slack_emulator.BOT_ID)
        await self.delivery.deliver_all(event_callback(own))  # returns once the adapter read it
        return self.received[before:]


class TeamsDriver(PlatformDriver):
    """Teams through the Bot Connector emulator: `chat` is Alice's personal chat with the bot,
    which Teams announced (its `conversationUpdate`) when she installed the app."""

    name = "teams"
    drops_own_posts = True  # Teams never sends a bot its own posts; one that came is dropped
    unknown_id = "1700000000000"

    async def start(self) -> None:
        self.emu = await TeamsEmulator().start()
        self.chat, self.person = teams_emulator.PERSONAL, teams_emulator.ALICE["id"]
        await super().start()
        assert await self.deliver(self.emu.installed(self.chat)) == 200

    async def stop(self) -> None:
        await super().stop()
        await self.emu.stop()

    def make_adapter(self) -> Adapter:
        return TeamsAdapter(TeamsConfig(**self.emu.config()))

    @property
    def endpoint(self) -> str:
        assert isinstance(self.adapter, TeamsAdapter) and self.adapter.port
        return f"http://127.0.0.1:{self.adapter.port}/api/messages"

    async def deliver(self, activity: dict[str, Any], **kwargs: Any) -> int:
        return await self.emu.deliver(activity, url=self.endpoint, **kwargs)

    def _shown(self, message_id: str) -> str | None:
        activity = self.emu.shown(self.chat, message_id)
        if activity is None:
            return None
        card = card_of(activity)
        return card_text(card) if card is not None else text_shown(activity)

    def text_of(self, message_id: str) -> str | None:
        return self._shown(message_id)

    def reactions_on(self, message_id: str) -> list[str]:
        return []  # a bot cannot react on Teams

    def said(self, message_id: str) -> tuple[str, str]:
        text = self._shown(message_id)
        assert text is not None
        return _named(text, r"\*\*(.+?):\*\* (.*)") or (teams_emulator.BOT_NAME, text)

    def direct_messages(self, user_id: str) -> list[str]:
        chats = [c.id for c in self.emu.conversations.values() if c.kind == "personal" and c.members[0]["id"] == user_id]
        return [text_shown(a) for chat in chats for a in self.emu.bot_posts(chat)]

    def sent_so_far(self) -> object:
        return [(c.method, c.path) for c in self.emu.calls]

    async def person_says(self, text: str) -> BotMessage:
        before = len(self.received)
        assert await self.deliver(self.emu.message(text, conversation=self.chat)) == 200
        return await self._next_message(before)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        own = self.emu.message(text, conversation=self.chat, sender={"id": teams_emulator.BOT_ID, "name": "weaver"})
        assert await self.deliver(own) == 200
        await self.person_says("a barrier: everything delivered before it has been read")
        return [i for i in self.received if isinstance(i, BotMessage) and i.message_id == own["id"]]

    def files_posted(self) -> list[PostedFile]:
        posted = []
        for activity in self.emu.bot_posts(self.chat):
            for attachment in activity.get("attachments") or []:
                url = str(attachment.get("contentUrl") or "")
                if url.startswith("data:"):
                    data = base64.b64decode(url.split(",", 1)[1])
                    posted.append(PostedFile("attachment", attachment["name"], data, text_shown(activity), activity["id"]))
        return posted

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        before = len(self.received)
        attachment = self.emu.file(data, filename, declared_size=declared_size)
        assert await self.deliver(self.emu.message(caption, conversation=self.chat, attachments=[attachment])) == 200
        return await self._next_message(before)

    def file_fetches(self) -> int:
        return len(self.emu.file_fetches)

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        before = len(self.received)
        quote = {"type": "quotedReply", "quotedReply": {"messageId": to.message_id, "senderId": to.sender.user_id,
                                                         "senderName": to.sender.display_name, "preview": to.text[:100]}}
        assert await self.deliver(self.emu.message(text, conversation=self.chat, entities=[quote])) == 200
        return await self._next_message(before)


class ConsoleDriver(PlatformDriver):
    name = "console"
    drops_own_posts = True
    unknown_id = "out-999"

    async def start(self) -> None:
        self.chat, self.person = "console", "local"
        read_end, write_end = os.pipe()
        self._stdin = os.fdopen(read_end, "r")
        self._typing = os.fdopen(write_end, "w")
        self.stdout = io.StringIO()
        await super().start()

    async def stop(self) -> None:
        self._typing.close()  # end of input: the reading thread ends
        await super().stop()
        await asyncio.to_thread(self._stdin.close)
        shutil.rmtree(self.saved, ignore_errors=True)

    def make_adapter(self) -> Adapter:
        self.saved = tempfile.mkdtemp(prefix="botweave-test-console-")
        return ConsoleAdapter(ConsoleConfig(save_dir=self.saved), stdin=self._stdin, stdout=self.stdout)

    @property
    def _shown(self) -> dict[str, str]:
        assert isinstance(self.adapter.outbound, ConsoleOutbound)
        return self.adapter.outbound.messages

    def text_of(self, message_id: str) -> str | None:
        text = self._shown.get(message_id)
        if text is not None:
            assert self.stdout.getvalue().rstrip("\n").endswith(text.splitlines()[-1])
        return text

    def reactions_on(self, message_id: str) -> list[str]:
        """A terminal cannot decorate an earlier line: a reaction is printed as a line of its own."""
        return re.findall(rf"^\(reacted (\S+) to {re.escape(message_id)}\)$", self.stdout.getvalue(), re.M)

    def said(self, message_id: str) -> tuple[str, str]:
        text = self._shown[message_id]
        return _named(text, r"\[(.+?)\] (.*)") or ("botweave", text)

    def direct_messages(self, user_id: str) -> list[str]:
        return list(self._shown.values())  # the console is one person's DM

    def sent_so_far(self) -> object:
        return self.stdout.getvalue()

    async def person_says(self, text: str) -> BotMessage:
        before = len(self.received)
        self._typing.write(text + "\n")
        self._typing.flush()
        return await self._next_message(before)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        return []  # the console never reads what it printed

    receives_files = False

    def files_posted(self) -> list[PostedFile]:
        posted = []
        for message_id, text in self._shown.items():
            match = re.match(r"\[file saved: (.+?)\](?: (.*))?$", text, re.DOTALL)
            if match:
                path = Path(match.group(1))
                posted.append(PostedFile("attachment", path.name, path.read_bytes(), match.group(2) or "", message_id))
        return posted


class WebStore(MemoryStore):
    """The web platform's side of the store, as the platform's own servers would see it: the
    bytes of every file kept, and how often a file's bytes were read."""

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, bytes] = {}
        self.fetches = 0

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        if key.startswith("gwfiledata:"):
            self.files[key.removeprefix("gwfiledata:")] = base64.b64decode(value)
        await super().set(key, value, ttl=ttl)

    async def get(self, key: str) -> str | None:
        if key.startswith("gwfiledata:"):
            self.fetches += 1
        return await super().get(key)


class WebDriver(PlatformDriver):
    """The web platform: the gateway in front of the adapter, a person at the Python client.
    What the platform "shows" is what its conversation events published, as they were
    published (a listener in this process keeps each message's newest record)."""

    name = "web"
    drops_own_posts = True  # the bot's posts are events, never read back as messages
    unknown_id = "b-00000000000000000000"

    async def start(self) -> None:
        self.store = WebStore()
        self.events = ConversationEvents(self.store)
        self.shown: dict[str, dict[str, dict[str, Any]]] = {}  # conversation -> message id -> record
        self.published = 0
        self.events.listen(self._published)
        self.adapter = self.make_adapter()
        self.adapter.bind(self._sink, events=self.events)
        await self.adapter.start()
        self.gateway = Gateway(
            GatewayConfig(listen="127.0.0.1:0"), self.events, MethodRegistry(), web_platform=lambda: self.adapter
        )
        await self.gateway.start()
        self.client = Client(self.gateway.url)
        await self.client.connect()
        self.chat = await self.client.create_session("contract")
        self.person = "local"  # no token anywhere, loopback: the person at this machine
        self.conversation = f"web:{self.chat}"

    def _published(self, conversation: str, seq: int, logged: str) -> None:
        event = json.loads(logged)
        if event["event"] == "message":
            self.published += 1
            self.shown.setdefault(conversation, {})[event["data"]["id"]] = event["data"]

    async def stop(self) -> None:
        await self.client.close()
        await self.gateway.stop()
        await self.adapter.stop()

    def make_adapter(self) -> Adapter:
        return WebAdapter(WebConfig())

    def _message(self, message_id: str) -> dict[str, Any] | None:
        record = self.shown.get(self.conversation, {}).get(message_id)
        return None if record is None or record.get("deleted") else record

    def text_of(self, message_id: str) -> str | None:
        record = self._message(message_id)
        return record["text"] if record else None

    def reactions_on(self, message_id: str) -> list[str]:
        record = self._message(message_id)
        return list(record["reactions"]) if record else []

    def said(self, message_id: str) -> tuple[str, str]:
        record = self._message(message_id)
        assert record is not None
        return record["author"]["name"], record["text"]

    def direct_messages(self, user_id: str) -> list[str]:
        """What reached the person's inbox session (any session of theirs but this chat)."""
        return [m["text"] for c, messages in self.shown.items() if c != self.conversation for m in messages.values()]

    def sent_so_far(self) -> object:
        return self.published

    async def person_says(self, text: str) -> BotMessage:
        before = len(self.received)
        await self.client.send(self.chat, text)
        return await self._next_message(before)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        return []

    def files_posted(self) -> list[PostedFile]:
        posted = []
        for record in self.shown.get(self.conversation, {}).values():
            if record["author"]["kind"] == "user":
                continue
            for ref in record["attachments"]:
                data = self.store.files[ref["file_id"]]
                posted.append(PostedFile("attachment", ref["filename"], data, record["text"], record["id"]))
        return posted

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        """An upload: the gateway counts the bytes itself, so a size the person claims plays
        no part (`declared_size` is what another platform would have said)."""
        before = len(self.received)
        file_id = await self.client.upload(data, filename, mime)
        await self.client.send(self.chat, caption, attachments=[file_id])
        return await self._next_message(before)

    def file_fetches(self) -> int:
        return self.store.fetches

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        before = len(self.received)
        await self.client.send(self.chat, text, reply_to=to.message_id)
        return await self._next_message(before)


class EmailDriver(PlatformDriver):
    """A mailbox on the IMAP/SMTP emulator: the chat is a person's address, a message a mail."""

    name = "email"
    drops_own_posts = True
    unknown_id = "no-such-message@example.test"

    async def start(self) -> None:
        self.emu = MailEmulator()
        await self.emu.start()
        self.chat = self.person = "alice@example.com"
        self.store = MemoryStore()
        self.adapter = self.make_adapter()
        self.adapter.bind(self._sink, store=self.store)
        await self.adapter.start()

    async def stop(self) -> None:
        await super().stop()
        await self.emu.stop()

    def make_adapter(self) -> Adapter:
        return EmailAdapter(EmailConfig.model_validate(self.emu.config()))

    def text_of(self, message_id: str) -> str | None:
        sent = self.emu.smtp.by_id(message_id)
        if sent is None:
            return None
        text = text_of(sent)
        named = _named(text, r"(.+?): (.*)")
        return named[1] if named and str(sent["From"]).startswith(named[0]) else text

    def reactions_on(self, message_id: str) -> list[str]:
        return []

    def said(self, message_id: str) -> tuple[str, str]:
        sent = self.emu.smtp.by_id(message_id)
        assert sent is not None
        return sent["From"].addresses[0].display_name, text_of(sent)

    def direct_messages(self, user_id: str) -> list[str]:
        return self.emu.smtp.texts_to(user_id)

    def sent_so_far(self) -> object:
        return len(self.emu.smtp.sent)

    async def _mail(self, text: str, **kwargs: Any) -> BotMessage:
        before = len(self.received)
        self.emu.person_writes(self.person, text, **kwargs)
        return await self._next_message(before)

    async def person_says(self, text: str) -> BotMessage:
        return await self._mail(text)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        raw, own = self.emu.person_mail(self.emu.address, text)
        self.emu.imap.deliver(raw)
        await self.person_says("a barrier: everything delivered before it has been read")
        return [i for i in self.received if isinstance(i, BotMessage) and i.message_id == own]

    def files_posted(self) -> list[PostedFile]:
        posted = []
        for sent in self.emu.smtp.sent:
            for part in sent.iter_attachments():
                data = part.get_content()
                posted.append(PostedFile("attachment", part.get_filename() or "", data if isinstance(data, bytes)
                                         else data.encode(), text_of(sent), str(sent["Message-ID"]).strip("<>")))
        return posted

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        sizes = {filename: declared_size} if declared_size is not None else None
        return await self._mail(caption, files=((data, filename, mime),), declared_sizes=sizes)

    def file_fetches(self) -> int:
        return len(self.emu.imap.part_fetches)

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        return await self._mail(text, in_reply_to=to.message_id, references=(to.thread_id or to.message_id,))


class WhatsAppDriver(PlatformDriver):
    """WhatsApp through the Cloud API emulator: Ann writes first (a business may write
    freely only within 24 hours of a person's message), as every conversation there starts."""

    name = "whatsapp"
    drops_own_posts = True  # the Cloud API never shows a business its own messages
    unknown_id = "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBI5QUNEQjg3Q0U2MDk0MUQ5OUIA"

    async def start(self) -> None:
        self.emu = await WhatsAppEmulator().start()
        self.chat = self.person = str(ANN.wa_id)
        await super().start()
        assert isinstance(self.adapter, WhatsAppAdapter) and self.adapter.webhook is not None
        self.emu.webhook_url = f"http://127.0.0.1:{self.adapter.webhook.port}/whatsapp"
        await self.person_says("hello")

    async def stop(self) -> None:
        await super().stop()
        await self.emu.stop()

    def make_adapter(self) -> Adapter:
        return WhatsAppAdapter(WhatsAppConfig(**self.emu.section()))

    def text_of(self, message_id: str) -> str | None:
        sent = self.emu.message(message_id)
        return sent.text if sent is not None else None

    def reactions_on(self, message_id: str) -> list[str]:
        return list(self.emu.reactions.get(message_id, []))

    def said(self, message_id: str) -> tuple[str, str]:
        sent = self.emu.message(message_id)
        assert sent is not None
        return _named(sent.text, r"\*(.+?):\* (.*)") or (BOT_NAME, sent.text)

    def direct_messages(self, user_id: str) -> list[str]:
        assert user_id == ANN.wa_id
        return self.emu.texts_to(ANN)

    def sent_so_far(self) -> object:
        return len(self.emu.sent), len(self.emu.uploads)

    async def person_says(self, text: str) -> BotMessage:
        before = len(self.received)
        await self.emu.says(ANN, text)
        return await self._next_message(before)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        return []

    def files_posted(self) -> list[PostedFile]:
        posted = []
        for sent in self.emu.sent_to(ANN):
            if sent.type in ("image", "document", "audio", "video"):
                media = sent.body[sent.type]
                upload = self.emu.uploads[media["id"]]
                posted.append(PostedFile(sent.type, upload.filename, upload.data, media.get("caption", ""), sent.id))
        return posted

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        before = len(self.received)
        kind = "image" if mime.startswith("image/") else "audio" if mime.startswith("audio/") else "document"
        message = self.emu.media_message(
            ANN, kind, data, mime, caption=caption, filename=filename, declared_size=declared_size
        )
        await self.emu.deliver(self.emu.notification(messages=[message], contacts=[ANN.contact()]))
        return await self._next_message(before)

    def file_fetches(self) -> int:
        return len(self.emu.media_fetches)

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        before = len(self.received)
        await self.emu.says(ANN, text, reply_to=to.message_id)
        return await self._next_message(before)


DRIVERS: dict[str, type[PlatformDriver]] = {
    driver.name: driver for driver in (TelegramDriver, DiscordDriver, SlackDriver, ConsoleDriver, WebDriver, EmailDriver,
                   WhatsAppDriver, TeamsDriver)
}

from tests.adapters.platform_matrix import MatrixDriver  # noqa: E402 - it builds on PlatformDriver above

DRIVERS[MatrixDriver.name] = MatrixDriver
