"""Turn control on each platform, end to end: one driver per platform for the shared tests.

A driver runs the real App (or two, as workers sharing Redis) and the platform's real SDK
client against its emulator, with one agent answering through litellm from the OpenAI
emulator, whose replies stream slowly so a turn is still running while a person acts. It
answers in the same words for every platform: a person says, edits or deletes a message
(in a DM, or in a group as Alice or Bob), and which of the bot's messages a chat shows now
and what they say.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import pytest
from botweave import App
from botweave.types import BotMessage, PlatformEvent

from tests.emulators import discord as discord_emulator
from tests.emulators import teams as teams_emulator
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai import OpenAIEmulator
from tests.emulators.slack import EventDelivery, SlackEmulator, event_callback, slack_section
from tests.emulators.teams import TeamsEmulator, text_shown
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until

TIMEOUT_S = 20.0
#: Words of the slow answer and the pause between them: about 4 s of streaming.
SLOW_WORDS = 40
WORD_PAUSE_S = 0.1


def slow_answer(tag: str = "story") -> str:
    return " ".join(f"{tag}{n}" for n in range(SLOW_WORDS))


class TurnDriver(ABC):
    name: ClassVar[str]
    deletes: ClassVar[bool] = True  # the platform reports deletions

    def __init__(self) -> None:
        self.items: list[BotMessage | PlatformEvent] = []
        self.apps: list[App] = []
        self.llm = OpenAIEmulator()
        #: A Redis store section: `start` then runs a second worker beside the app it starts.
        self.shared: dict[str, Any] | None = None

    # --- platform parts ----------------------------------------------------------------------

    @abstractmethod
    async def start_emulator(self) -> None:
        """Start the platform emulator and the people in it."""

    @abstractmethod
    async def stop_emulator(self) -> None:
        """Stop the platform emulator."""

    @abstractmethod
    def section(self) -> dict[str, Any]:
        """The platform's bot.yaml section, pointed at the emulator."""

    async def _ready(self, app: App) -> None:
        """Until the app's adapter receives."""

    @abstractmethod
    async def _say(self, text: str, *, group: bool, who: str, age: float) -> str:
        """Post `text` as `who` (sent `age` seconds ago); its message id."""

    @abstractmethod
    async def edit(self, message_id: str, text: str, *, group: bool = False) -> None:
        """The person edits their message; returns once the runtime saw the edit."""

    async def delete(self, message_id: str, *, group: bool = False) -> None:
        pytest.fail(f"{self.name} does not report deletions")

    @abstractmethod
    def bot_posts(self, *, group: bool = False) -> list[tuple[str, str]]:
        """The bot's messages the chat shows now, oldest first: (id, text)."""

    @abstractmethod
    def sends(self) -> int:
        """How many messages the bot posted on the platform so far."""

    # --- the same for every platform ---------------------------------------------------------

    def user_id(self, who: str) -> str:
        """The platform's id of one of the people in these chats."""
        person = self.people[who]  # type: ignore[attr-defined]
        return str(person["id"]) if isinstance(person, dict) else str(person)

    def config(self, **bot: Any) -> dict[str, Any]:
        return {
            "bot": {"unknown_user_policy": "allow", "streaming": True, "group_policy": "respond_all", **bot},
            "agents": {"helper": {"model": "openai/gpt-4o-mini", "api_base": self.llm.base_url, "api_key": "sk-test"}},
            "platforms": {self.name: self.section()},
            **({"store": self.shared} if self.shared else {}),
        }

    async def start(self, config: dict[str, Any] | None = None, *, role: str = "all", **bot: Any) -> App:
        """An App on the emulator; `role` as `botweave run --role` (with a Redis store). A
        worker only answers: the person's side stays with the app that receives."""
        app = App.from_config(config or self.config(**bot), role=role)  # type: ignore[arg-type]
        self.apps.append(app)
        await app.start()
        assert self.name in app.adapters, f"the {self.name} adapter did not start"
        if role == "worker":
            return app
        if self.shared and role == "all":
            await self.start(config or self.config(**bot), role="worker")  # a second worker beside it
        self.app = app
        # with Redis, the adapter that receives is the platform leader's, once it holds the connection
        await wait_until(lambda: app.receiving(self.name) is not None, TIMEOUT_S, "the receiving adapter")
        receiver = app.receiving(self.name)
        assert receiver is not None
        submit = app.submit

        async def tap(item: BotMessage | PlatformEvent) -> None:
            self.items.append(item)
            await submit(item)

        receiver.bind(tap)
        await self._ready(app)
        return app

    async def stop(self) -> None:
        for app in self.apps:
            await asyncio.wait_for(app.stop(), 15)
        await self.stop_emulator()
        await self.llm.stop()

    async def begin(self) -> None:
        await self.llm.start()
        self.llm.chunk_delay = WORD_PAUSE_S
        await self.start_emulator()

    async def say(self, text: str, *, group: bool = False, who: str = "alice", age: float = 0.0) -> str:
        """A person posts `text`; returns once the runtime has it (not once it is answered)."""
        message_id = await self._say(text, group=group, who=who, age=age)
        await wait_until(
            lambda: any(isinstance(i, BotMessage) and i.message_id == message_id for i in self.items),
            timeout=TIMEOUT_S,
            what=f"message {text!r} to reach the runtime",
        )
        return message_id

    async def event_seen(self, kind: str, message_id: str) -> None:
        await wait_until(
            lambda: any(isinstance(i, PlatformEvent) and i.kind == kind and i.message_id == message_id for i in self.items),
            timeout=TIMEOUT_S,
            what=f"{kind} of {message_id} to reach the runtime",
        )

    async def streaming(self, *, group: bool = False, words: int = 3) -> str:
        """Until the bot's streamed answer shows a few words; its message id."""
        def shown() -> bool:
            posts = self.bot_posts(group=group)
            return bool(posts) and len(posts[-1][1].split()) >= words
        await wait_until(shown, TIMEOUT_S, "a streamed answer to show")
        return self.bot_posts(group=group)[-1][0]

    async def idle(self) -> None:
        """Until every app has nothing in flight (with the stream: nothing pending either)."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            busy = False
            for app in self.apps:
                await asyncio.wait_for(app.drain(), TIMEOUT_S)
                if app.stream is not None and await app.stream.backlog():
                    busy = True
            if not busy:
                await asyncio.sleep(0.2)  # a last edit may still be on its way
                for app in self.apps:
                    if app.stream is not None and await app.stream.backlog():
                        busy = True
                if not busy:
                    return
            await asyncio.sleep(0.05)
        raise AssertionError("the apps did not become idle")

    def texts(self, *, group: bool = False) -> list[str]:
        return [text for _, text in self.bot_posts(group=group)]

    def user_turns(self, index: int = -1) -> list[str]:
        """The person's turns (user messages) the model was sent in request `index`."""
        return [m["content"] if isinstance(m["content"], str) else str(m["content"])
                for m in self.llm.messages(index) if m["role"] == "user"]

    def assistant_turns(self, index: int = -1) -> list[str]:
        return [str(m.get("content") or "") for m in self.llm.messages(index) if m["role"] == "assistant"]


class TelegramTurns(TurnDriver):
    name = "telegram"
    deletes = False  # Telegram never tells bots about deletions
    GROUP_ID = -1003

    async def start_emulator(self) -> None:
        self.emu = await TelegramEmulator().start()
        self.people = {"alice": TelegramEmulator.user(7, "Alice", "alice"), "bob": TelegramEmulator.user(8, "Bob", "bob")}
        self.group = self.emu.group(self.GROUP_ID, "Team")
        self.sent_messages: dict[str, dict[str, Any]] = {}

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return adapter_config(self.emu, poll_timeout=1)

    def _chat(self, group: bool, who: str = "alice") -> dict[str, Any]:
        return self.group if group else self.emu.private_chat(self.people[who])

    async def _say(self, text: str, *, group: bool, who: str, age: float) -> str:
        extra = {"date": int(time.time() - age)} if age else {}
        message = self.emu.push_message(self._chat(group, who), self.people[who], text, **extra)
        self.sent_messages[str(message["message_id"])] = message
        return str(message["message_id"])

    async def edit(self, message_id: str, text: str, *, group: bool = False) -> None:
        self.emu.push_edit(self.sent_messages[message_id], text)
        await self.event_seen("message_edited", message_id)

    def bot_posts(self, *, group: bool = False) -> list[tuple[str, str]]:
        chat = self._chat(group)["id"]
        posts = []
        for message in self.emu.sent(chat):
            current = self.emu.current(chat, message["message_id"])
            if current is not None:
                posts.append((str(message["message_id"]), current.get("text", "")))
        return posts

    def sends(self) -> int:
        return len(self.emu.sent())


class DiscordTurns(TurnDriver):
    name = "discord"

    async def start_emulator(self) -> None:
        self.emu = await DiscordEmulator().start()
        self.people = {"alice": self.emu.alice, "bob": self.emu.bob}

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return {"token": discord_emulator.TOKEN, "api_base_url": self.emu.api_base, "gateway_url": self.emu.gateway_url}

    async def _ready(self, app: App) -> None:
        await self.emu.wait_ready(TIMEOUT_S)

    @staticmethod
    def _channel(group: bool) -> str:
        return discord_emulator.CHANNEL_ID if group else discord_emulator.DM_CHANNEL_ID

    async def _say(self, text: str, *, group: bool, who: str, age: float) -> str:
        extra: dict[str, Any] = {}
        if age:  # discord.py dates a message by its snowflake id, the timestamp field to match
            millis = int((time.time() - age) * 1000) - discord_emulator._DISCORD_EPOCH_MS
            extra = {"id": str((millis << 22) | 1), "timestamp": _iso(time.time() - age)}
        message = self.emu.message(text, channel_id=self._channel(group), author=self.people[who], **extra)
        await self.emu.dispatch("MESSAGE_CREATE", message)
        return str(message["id"])

    async def edit(self, message_id: str, text: str, *, group: bool = False) -> None:
        await self.emu.dispatch("MESSAGE_UPDATE", self.emu.user_edit(message_id, text))
        await self.event_seen("message_edited", message_id)

    async def delete(self, message_id: str, *, group: bool = False) -> None:
        await self.emu.dispatch("MESSAGE_DELETE", self.emu.user_delete(message_id))
        await self.event_seen("message_deleted", message_id)

    def bot_posts(self, *, group: bool = False) -> list[tuple[str, str]]:
        return [(str(m["id"]), m["content"]) for m in self.emu.bot_messages(self._channel(group))]

    def sends(self) -> int:
        return len(self.emu.calls("POST", r"/channels/\d+/messages"))


class SlackTurns(TurnDriver):
    name = "slack"
    DM = "D0ALICE"
    CHANNEL = "C0TEAM"
    PEOPLE: ClassVar[dict[str, str]] = {"alice": "U0ALICE", "bob": "U0BOB"}

    async def start_emulator(self) -> None:
        self.emu = SlackEmulator()
        await self.emu.start()
        self.people = self.PEOPLE
        self.emu.add_user("U0ALICE", "alice", display_name="Alice")
        self.emu.add_user("U0BOB", "bob", display_name="Bob")
        self.emu.add_channel(self.DM, "im")
        self.emu.add_channel(self.CHANNEL, "channel")

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return slack_section(self.emu, "socket")

    async def _ready(self, app: App) -> None:
        await self.emu.wait_connected(TIMEOUT_S)
        receiver = app.receiving(self.name)
        assert receiver is not None
        self.delivery = EventDelivery(self.emu, receiver, "socket")

    def _channel(self, group: bool) -> str:
        return self.CHANNEL if group else self.DM

    async def _say(self, text: str, *, group: bool, who: str, age: float) -> str:
        channel = self._channel(group)
        event = self.emu.post_as_user(channel, self.PEOPLE[who], text)
        if age:  # a message Slack hands over late: its ts says when it was posted
            stored = self.emu.find(channel, event["ts"])
            assert stored is not None
            old = f"{int(time.time() - age)}.{event['ts'].split('.')[1]}"
            stored["ts"] = event["ts"] = event["event_ts"] = old
        await self.delivery.deliver_all(event_callback(event))
        return str(event["ts"])

    async def edit(self, message_id: str, text: str, *, group: bool = False) -> None:
        await self.delivery.deliver_all(event_callback(self.emu.edit_as_user(self._channel(group), message_id, text)))
        await self.event_seen("message_edited", message_id)

    async def delete(self, message_id: str, *, group: bool = False) -> None:
        await self.delivery.deliver_all(event_callback(self.emu.delete_as_user(self._channel(group), message_id)))
        await self.event_seen("message_deleted", message_id)

    def bot_posts(self, *, group: bool = False) -> list[tuple[str, str]]:
        from tests.emulators.slack import BOT_USER_ID

        return [
            (str(m["ts"]), m["text"]) for m in self.emu.messages.get(self._channel(group), [])
            if m.get("user") == BOT_USER_ID or m.get("bot_id")
        ]

    def sends(self) -> int:
        return len(self.emu.calls_to("chat.postMessage"))


def _iso(unix: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(unix, timezone.utc).isoformat()


class TeamsTurns(TurnDriver):
    """Alice's personal chat, and a group chat with Alice and Bob; each message a signed
    activity to the receiving app's messaging endpoint."""

    name = "teams"

    async def start_emulator(self) -> None:
        self.emu = await TeamsEmulator().start()
        self.people = {"alice": teams_emulator.ALICE, "bob": teams_emulator.BOB}
        self.sent: dict[str, dict[str, Any]] = {}

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return self.emu.config()

    async def _ready(self, app: App) -> None:
        receiver = app.receiving(self.name)
        assert receiver is not None
        self.url = f"http://127.0.0.1:{receiver.port}/api/messages"  # type: ignore[attr-defined]

    def _chat(self, group: bool) -> str:
        return teams_emulator.GROUP_CHAT if group else teams_emulator.PERSONAL

    async def _deliver(self, activity: dict[str, Any]) -> None:
        assert await self.emu.deliver(activity, url=self.url) == 200

    async def _say(self, text: str, *, group: bool, who: str, age: float) -> str:
        activity = self.emu.message(text, conversation=self._chat(group), sender=self.people[who])
        if age:  # a message Teams hands over late: its timestamp says when it was posted
            activity["timestamp"] = _iso(time.time() - age)
        self.sent[activity["id"]] = activity
        await self._deliver(activity)
        return str(activity["id"])

    async def edit(self, message_id: str, text: str, *, group: bool = False) -> None:
        await self._deliver(self.emu.edited(self.sent[message_id], text))
        await self.event_seen("message_edited", message_id)

    async def delete(self, message_id: str, *, group: bool = False) -> None:
        await self._deliver(self.emu.deletion(self.sent[message_id]))
        await self.event_seen("message_deleted", message_id)

    def bot_posts(self, *, group: bool = False) -> list[tuple[str, str]]:
        return [(str(a["id"]), text_shown(a)) for a in self.emu.bot_posts(self._chat(group))]

    def sends(self) -> int:
        return len([c for c in self.emu.connector("POST") if c.body.get("type") == "message" and c.status == 201])


TURN_DRIVERS: dict[str, type[TurnDriver]] = {d.name: d for d in (TelegramTurns, DiscordTurns, SlackTurns, TeamsTurns)}
