"""Rooms on each platform, end to end: one driver per platform for the shared room tests.

A driver runs the real App and the platform's real SDK client against its emulator, with a
room of three offline agents (`standup`) bound to one chat, and answers in the same words for
every platform: who the chat shows as the author of each post, what it says, how many posts
were made, and when everything the room set off (its own posts coming back included) has been
handled. The offline echo agents repeat their whole prompt, so an @-mention in a person's
message reappears in every round-0 reply and admits the mentioned agent to round 1.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from botweave import App
from botweave.adapter import Adapter
from botweave.adapters.teams.adapter import TeamsAdapter
from botweave.replies import measure
from botweave.types import BotMessage, PlatformEvent

from tests.adapters.platforms import speaker_of_telegram_post
from tests.emulators import discord as discord_emulator
from tests.emulators import slack as slack_emulator
from tests.emulators import teams as teams_emulator
from tests.emulators.discord import DiscordEmulator
from tests.emulators.slack import EventDelivery, IdentitySlackEmulator, event_callback, slack_section
from tests.emulators.teams import TeamsEmulator, text_shown
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.emulators.whatsapp import ANN, WhatsAppEmulator

ROSTER = ("planner", "researcher", "critic")
#: What each agent is called in a chat: its display name, or its own name without one.
SHOWN = ("Planner", "Researcher", "critic")
PLANNER_AVATAR = "https://cdn.example.test/planner.png"
PLANNER_ICON, RESEARCHER_ICON, CRITIC_ICON = ":spiral_calendar_pad:", ":mag:", ":face_with_monocle:"
KICKOFF = "Stand-up time: what did you do yesterday?"
TURN_START = re.compile(r"^(planner|researcher|critic) \(offline echo\) heard: ")
#: Bound on waiting for in-flight turns (the first agent call in a process imports litellm).
TURN_TIMEOUT_S = 20.0
#: How long to keep listening for a room that wrongly re-triggers itself from its own echoes.
ECHO_GRACE_S = 0.4


@dataclass(frozen=True)
class Post:
    """One post of the room as a person in the chat sees it."""

    speaker: str  # the author shown: the agent's own name, or its name in front of the text
    words: str  # the text without any name in front
    text: str  # the whole text as posted
    is_reply: bool  # posted as a reply to (or in the thread of) another message
    raw: dict[str, Any]


class RoomDriver:
    name: ClassVar[str]
    #: The adapter itself drops the bot's own posts coming back; otherwise it hands them on
    #: as the bot's (and the runtime drops them by `is_self`).
    drops_own_posts: ClassVar[bool] = True
    chat: str

    def __init__(self) -> None:
        self.items: list[BotMessage | PlatformEvent] = []
        self._apps: list[App] = []

    # --- platform parts ----------------------------------------------------------------------

    async def start_emulator(self) -> None:
        raise NotImplementedError

    async def stop_emulator(self) -> None:
        raise NotImplementedError

    def section(self) -> dict[str, Any]:
        """The platform's bot.yaml section, pointed at the emulator."""
        raise NotImplementedError

    async def _deliver(self, text: str, **where: Any) -> str:
        """A person posts `text` in the room's chat; the id of their message."""
        raise NotImplementedError

    def posts(self, chat: str | None = None) -> list[Post]:
        """The room's posts in `chat` (the room's chat by default), oldest first."""
        raise NotImplementedError

    def post_calls(self) -> int:
        """How many times the bot asked the platform to post in the room's chat."""
        raise NotImplementedError

    def refused_posts(self) -> list[Any]:
        """Post calls the platform refused."""
        raise NotImplementedError

    async def _settle(self) -> None:
        """Until everything delivered so far, the room's own posts coming back included, was read."""
        raise NotImplementedError

    async def echo_own_posts(self) -> None:
        """From now on (or now, for posts made so far) the room's posts come back inbound."""

    # --- the same for every platform ---------------------------------------------------------

    def config(self, model: str = "offline/echo", **room: Any) -> dict[str, Any]:
        """Three agents in `standup` on the room's chat (each identity written a different
        way), a helper for every other chat."""
        return {
            "bot": {"unknown_user_policy": "allow"},
            "agents": {
                "planner": {
                    "model": model,
                    "display_name": "Planner",
                    "avatar_url": PLANNER_AVATAR,
                    "icon_emoji": PLANNER_ICON,
                },
                "researcher": {"model": model, "display_name": "Researcher", "icon_emoji": "mag"},
                "critic": {"model": model, "icon_emoji": CRITIC_ICON},
                "helper": {"model": "offline/echo"},
            },
            "rooms": {
                "standup": {
                    "roster": list(ROSTER),
                    "max_rounds": 2,
                    "kickoff": KICKOFF,
                    "target": self.target,
                    **room,
                }
            },
            "routes": [{"match": {"chat_id": self.chat}, "room": "standup"}, {"match": {}, "agent": "helper"}],
            "platforms": {self.name: self.section()},
        }

    @property
    def target(self) -> str:
        return f"{self.name}:{self.chat}"

    async def start(self, config: dict[str, Any] | None = None, **room: Any) -> App:
        """The App with the room, started; every item its adapter hands on is kept in `items`."""
        app = App.from_config(config or self.config(**room))
        self._apps.append(app)
        await app.start()
        assert self.name in app.adapters, f"the {self.name} adapter did not start"
        self.app = app
        self.adapter: Adapter = app.adapters[self.name]
        submit = app.submit

        async def tap(item: BotMessage | PlatformEvent) -> None:
            self.items.append(item)
            await submit(item)

        self.adapter.bind(tap)
        await self._ready()
        return app

    async def _ready(self) -> None:
        """Until the adapter receives."""

    async def stop(self) -> None:
        for app in self._apps:
            await asyncio.wait_for(app.stop(), 15)
        await self.stop_emulator()

    async def say(self, text: str, **where: Any) -> str:
        """A person posts in the room's chat; returns once every turn it set off has finished.

        The room drains its planner inside the turn of the person's message, so an idle App
        means every agent that was going to speak has posted.
        """
        message_id = await self._deliver(text, **where)
        await wait_until(
            lambda: any(isinstance(i, BotMessage) and i.message_id == message_id for i in self.items),
            timeout=TURN_TIMEOUT_S,
            what="the person's message to reach the runtime",
        )
        await self.drained()
        return message_id

    async def drained(self) -> None:
        await asyncio.wait_for(self.app.drain(), TURN_TIMEOUT_S)

    async def kickoff(self) -> None:
        """The room's scheduled kickoff, fired now (what `botweave room run` does)."""
        assert self.app.rooms is not None
        await asyncio.wait_for(self.app.rooms.scheduler.run_now("standup", self.target), TURN_TIMEOUT_S)
        await self.drained()

    async def quiet(self) -> int:
        """Let the room's own posts come back and be handled, then give a wrongly re-triggered
        room time to post again; the post calls so far, for a later comparison to catch it."""
        await self._settle()
        await self.drained()
        await asyncio.sleep(ECHO_GRACE_S)
        await self._settle()
        await self.drained()
        return self.post_calls()

    def turns(self, chat: str | None = None) -> list[tuple[str, str]]:
        """Each agent turn as (who the chat shows as its author, its words), oldest first.

        The echo agents repeat the growing transcript, so a later turn can outgrow the
        platform's limit and arrive as several posts; a turn starts where an agent's echo
        starts, and its continuation posts must carry the same name. Every post fits the limit.
        """
        turns: list[tuple[str, str]] = []
        for post in self._within_limit(chat):
            if TURN_START.match(post.words):
                turns.append((post.speaker, post.words))
            else:
                assert turns and turns[-1][0] == post.speaker, "a continuation posted under another name"
                turns[-1] = (post.speaker, turns[-1][1] + post.words)
        return turns

    def speakers(self, chat: str | None = None) -> list[str]:
        return [speaker for speaker, _ in self.turns(chat)]

    def authors(self, chat: str | None = None) -> list[str]:
        """The authors in order, each run of posts by one author counted once (every post
        within the platform's limit)."""
        return [name for name, _ in itertools.groupby(post.speaker for post in self._within_limit(chat))]

    def _within_limit(self, chat: str | None) -> list[Post]:
        caps = self.adapter.capabilities
        posts = self.posts(chat)
        limit = caps.max_message_length
        assert limit is None or all(measure(p.text, caps.length_unit) <= limit for p in posts)
        return posts

    def own_items(self) -> list[BotMessage]:
        """What reached the runtime of the room's own posts coming back."""
        ids = {self.post_id(post) for post in self.posts()}
        return [i for i in self.items if isinstance(i, BotMessage) and i.message_id in ids]

    def post_id(self, post: Post) -> str:
        raise NotImplementedError


class TelegramRoom(RoomDriver):
    """A supergroup; Telegram has no per-message author, so each turn starts with the agent's
    name in bold (a `bold` entity over "Name:")."""

    name = "telegram"
    drops_own_posts = False
    GROUP_ID = -1002
    ANN = TelegramEmulator.user(7, "Ann", "ann")

    async def start_emulator(self) -> None:
        self.emu = await TelegramEmulator().start()
        self.group = self.emu.group(self.GROUP_ID, "Team")
        self.chat = str(self.GROUP_ID)

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return adapter_config(self.emu)

    async def _deliver(self, text: str, **where: Any) -> str:
        return str(self.emu.push_message(self.group, self.ANN, text, **where)["message_id"])

    def posts(self, chat: str | None = None) -> list[Post]:
        return [
            Post(*speaker_of_telegram_post(m), text=m["text"], is_reply="reply_to_message" in m, raw=m)
            for m in self.emu.sent(int(chat or self.chat))
        ]

    def post_id(self, post: Post) -> str:
        return str(post.raw["message_id"])

    def post_calls(self) -> int:
        return len(self.emu.calls_to("sendMessage"))

    def refused_posts(self) -> list[Any]:
        return [c for c in self.emu.calls_to("sendMessage") if c.status != 200]

    async def _settle(self) -> None:
        await wait_until(lambda: not self.emu.pending, what="updates to be fetched")
        await asyncio.sleep(0.05)

    async def echo_own_posts(self) -> None:
        """Telegram never shows a bot its own posts; if they came back anyway, as updates."""
        for post in self.posts():
            self.emu.push("message", self.emu.current(self.GROUP_ID, post.raw["message_id"]))


class DiscordRoom(RoomDriver):
    """#general; each turn posted through the channel's webhook under the agent's own name.
    Discord shows the bot its own posts (webhook ones too) over the gateway."""

    name = "discord"

    async def start_emulator(self) -> None:
        self.emu = await DiscordEmulator().start()
        self.chat = discord_emulator.CHANNEL_ID

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return {"token": discord_emulator.TOKEN, "api_base_url": self.emu.api_base, "gateway_url": self.emu.gateway_url}

    async def _ready(self) -> None:
        await self.emu.wait_ready()

    async def _deliver(self, text: str, **where: Any) -> str:
        message = self.emu.message(text, **{"channel_id": self.chat, **where})
        await self.emu.dispatch("MESSAGE_CREATE", message)
        return str(message["id"])

    def posts(self, chat: str | None = None) -> list[Post]:
        posts = []
        for m in self.emu.messages.values():
            if m["channel_id"] != (chat or self.chat):
                continue
            if m.get("webhook_id") in self.emu.webhooks:
                posts.append(Post(m["author"]["username"], m["content"], m["content"], False, m))
            elif m["author"]["id"] == discord_emulator.BOT_ID:
                named = re.match(r"\*\*(.+?):\*\* (.*)", m["content"], re.DOTALL)
                speaker, words = (named.group(1), named.group(2)) if named else (posts[-1].speaker if posts else "", m["content"])
                reply = bool((m.get("sent_with") or {}).get("message_reference"))
                posts.append(Post(speaker, words, m["content"], reply, m))
        return posts

    def post_id(self, post: Post) -> str:
        return str(post.raw["id"])

    def _post_requests(self) -> list[Any]:
        return self.emu.webhook_executions() + self.emu.calls("POST", rf"/channels/{self.chat}/messages")

    def post_calls(self) -> int:
        return len(self._post_requests())

    def refused_posts(self) -> list[Any]:
        return [r for r in self._post_requests() if r.status != 200]

    async def _settle(self) -> None:
        """A DM round trip: everything dispatched before it has been handled after it."""
        await self.say("ping", channel_id=discord_emulator.DM_CHANNEL_ID)


class SlackRoom(RoomDriver):
    """#standup; each turn under the agent's own name and icon (`chat:write.customize`).
    Slack delivers the app's own posts back when it subscribes to message events."""

    name = "slack"
    ALICE = "U0ALICE"

    def __init__(self, mode: str = "socket") -> None:
        super().__init__()
        self.mode = mode

    async def start_emulator(self) -> None:
        self.emu = IdentitySlackEmulator()
        await self.emu.start()
        self.chat = "C0STANDUP"
        self.emu.add_user(self.ALICE, "Alice")
        self.emu.add_channel(self.chat, "channel")
        self.emu.add_channel("C0RANDOM", "channel")

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return slack_section(self.emu, self.mode)

    async def _ready(self) -> None:
        self.delivery = EventDelivery(self.emu, self.adapter, self.mode)

    async def _deliver(self, text: str, **where: Any) -> str:
        event = self.emu.post_as_user(self.chat, self.ALICE, text, **where)
        await self.delivery.deliver_all(event_callback(event))
        return str(event["ts"])

    def posts(self, chat: str | None = None) -> list[Post]:
        posts = []
        for m in self.emu.messages.get(chat or self.chat, []):
            if m.get("username"):
                posts.append(Post(m["username"], m["text"], m["text"], "thread_ts" in m, m))
            elif m.get("user") == slack_emulator.BOT_USER_ID:
                named = re.match(r"\*(.+?):\* (.*)", m["text"], re.DOTALL)
                speaker, words = (named.group(1), named.group(2)) if named else ("", m["text"])
                posts.append(Post(speaker, words, m["text"], "thread_ts" in m, m))
        return posts

    def post_id(self, post: Post) -> str:
        return str(post.raw["ts"])

    def post_calls(self) -> int:
        return len(self.emu.calls_to("chat.postMessage"))

    def refused_posts(self) -> list[Any]:
        return []  # Slack answers a refused post with ok: false, and then nothing is stored

    async def _settle(self) -> None:
        """Every echo waited for until the app acknowledged it and the adapter read it."""
        await asyncio.wait_for(asyncio.gather(*self.emu.echoes), TURN_TIMEOUT_S)
        await self.delivery.settled()

    async def echo_own_posts(self) -> None:
        self.emu.echo_posts = True


class WhatsAppRoom(RoomDriver):
    """Ann's chat with the business (WhatsApp has one-to-one chats only), where she wrote
    earlier today, so the 24-hour window is open. WhatsApp cannot change a message's author:
    each turn starts with the agent's name in bold (`*Name:*`). The Cloud API never shows a
    business its own messages."""

    name = "whatsapp"

    async def start_emulator(self) -> None:
        self.emu = await WhatsAppEmulator().start()
        self.chat = str(ANN.wa_id)
        self.emu.age(ANN, 1)

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return self.emu.section()

    async def _ready(self) -> None:
        from botweave.adapters.whatsapp.adapter import WhatsAppAdapter
        from botweave.model_calls import litellm_module

        adapter = self.adapter
        assert isinstance(adapter, WhatsAppAdapter) and adapter.webhook is not None
        self.emu.webhook_url = f"http://127.0.0.1:{adapter.webhook.port}/whatsapp"
        # what her message an hour ago left in the store: when she wrote
        await adapter.memory.person_wrote(self.chat, "wamid.earlier", self.emu.last_inbound[self.chat])
        # litellm's import (seconds on a busy machine) is not what the turn bounds measure
        await asyncio.to_thread(litellm_module)

    async def _deliver(self, text: str, **where: Any) -> str:
        message, delivered = await self.emu.says(ANN, text)
        assert delivered.status == 200
        return str(message["id"])

    def posts(self, chat: str | None = None) -> list[Post]:
        posts = []
        for sent in self.emu.sent:
            if sent.to != (chat or self.chat) or sent.type != "text":
                continue
            named = re.match(r"\*(.+?):\* (.*)", sent.text, re.DOTALL)
            speaker, words = (named.group(1), named.group(2)) if named else ("", sent.text)
            posts.append(Post(speaker, words, sent.text, "context" in sent.body, {"id": sent.id}))
        return posts

    def post_id(self, post: Post) -> str:
        return str(post.raw["id"])

    def post_calls(self) -> int:
        return sum(1 for s in self.emu.sent if s.to == self.chat) + sum(
            1 for r in self.emu.refused if r.get("to") == self.chat
        )

    def refused_posts(self) -> list[Any]:
        return list(self.emu.refused)

    async def _settle(self) -> None:
        """Nothing comes back: the Cloud API does not echo a business's messages."""


class TeamsRoom(RoomDriver):
    """A group chat; a bot posts only as itself on Teams, so each turn starts with the agent's
    name in bold. Teams never shows a bot its own posts; if they came back, the adapter drops
    them."""

    name = "teams"

    async def start_emulator(self) -> None:
        self.emu = await TeamsEmulator().start()
        self.chat = teams_emulator.GROUP_CHAT

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return self.emu.config()

    async def _ready(self) -> None:
        """The app added to the group chat: Teams tells the bot where the chat is."""
        assert isinstance(self.adapter, TeamsAdapter) and self.adapter.port
        self.url = f"http://127.0.0.1:{self.adapter.port}/api/messages"
        assert await self.emu.deliver(self.emu.installed(self.chat), url=self.url) == 200

    async def _deliver(self, text: str, **where: Any) -> str:
        activity = self.emu.message(text, conversation=self.chat, **where)
        assert await self.emu.deliver(activity, url=self.url) == 200
        return str(activity["id"])

    def posts(self, chat: str | None = None) -> list[Post]:
        posts = []
        for activity in self.emu.bot_posts(chat or self.chat):
            text = text_shown(activity)
            named = re.match(r"\*\*(.+?):\*\* (.*)", text, re.DOTALL)
            speaker, words = (named.group(1), named.group(2)) if named else (teams_emulator.BOT_NAME, text)
            posts.append(Post(speaker, words, text, bool(activity.get("replyToId")), activity))
        return posts

    def post_id(self, post: Post) -> str:
        return str(post.raw["id"])

    def _post_requests(self) -> list[Any]:
        return [c for c in self.emu.connector("POST") if self.chat in c.path and c.body.get("type") == "message"]

    def post_calls(self) -> int:
        return len(self._post_requests())

    def refused_posts(self) -> list[Any]:
        return [c for c in self._post_requests() if c.status != 201]

    async def _settle(self) -> None:
        """Every delivery is answered once the adapter handed it on: nothing is left in flight."""

    async def echo_own_posts(self) -> None:
        for post in self.posts():
            own = self.emu.message(post.text, conversation=self.chat, activity_id=self.emu.new_id(),
                                   sender={"id": teams_emulator.BOT_ID, "name": teams_emulator.BOT_NAME})
            own["id"] = post.raw["id"]
            assert await self.emu.deliver(own, url=self.url) == 200


ROOM_DRIVERS: dict[str, type[RoomDriver]] = {
    driver.name: driver for driver in (TelegramRoom, DiscordRoom, SlackRoom, WhatsAppRoom, TeamsRoom)
}


class Verbose:
    """A litellm provider whose every answer is one paragraph of 5000 characters."""

    provider = "verboseroom"
    text = "word " * 999 + "end."

    @classmethod
    def register(cls) -> str:
        """The model name that answers this way."""
        from botweave.model_calls import litellm_module

        from tests.echo_provider import OfflineEcho

        text = cls.text

        class VerboseEcho(OfflineEcho):
            async def acompletion(self, *args: Any, **kwargs: Any):  # type: ignore[override]
                response = await super().acompletion(*args, **kwargs)
                response.choices[0].message.content = text
                return response

        litellm = litellm_module()
        if not any(p.get("provider") == cls.provider for p in litellm.custom_provider_map):
            litellm.custom_provider_map.append({"provider": cls.provider, "custom_handler": VerboseEcho()})
        return f"{cls.provider}/echo"

from tests.adapters.rooms_matrix import MatrixRoom  # noqa: E402 - it builds on RoomDriver above

ROOM_DRIVERS[MatrixRoom.name] = MatrixRoom
