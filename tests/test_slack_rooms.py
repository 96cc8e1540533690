"""A room of agents bound to a Slack channel, end to end (issue 7 part 3).

The real App, slack-bolt and slack_sdk run against the Slack emulator. What a person in the
channel would see is asserted: one message per agent, each under the agent's own name and
icon (`username`, `icon_emoji` / `icon_url` on `chat.postMessage`), in the planned order, and
nothing more — the room's own posts, which Slack delivers back to the app, never start it
again. Without the `chat:write.customize` scope the names appear in bold in the text instead.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from botweave import App
from botweave.adapters.slack.adapter import SlackAdapter
from botweave.adapters.slack.config import SlackConfig
from botweave.types import AgentIdentity

from tests.emulators.slack import (
    BOT_ID,
    BOT_USER_ID,
    EventDelivery,
    IdentitySlackEmulator,
    event_callback,
    slack_section,
)

CHANNEL, ELSEWHERE = "C0STANDUP", "C0RANDOM"
ALICE = "U0ALICE"
PLANNER_ICON, RESEARCHER_ICON, CRITIC_ICON = ":spiral_calendar_pad:", ":mag:", ":face_with_monocle:"
TURN_START = re.compile(r"^(planner|researcher|critic) \(offline echo\) heard: ")
#: Bound on waiting for in-flight turns (the first agent call in a process imports litellm).
TURN_TIMEOUT_S = 15.0
#: How long to keep listening for a room that wrongly re-triggers itself from its own echoes.
ECHO_GRACE_S = 0.3


def room_config(emulator: IdentitySlackEmulator, mode: str) -> dict[str, Any]:
    """Three offline agents in `standup` on #standup (each icon written a different way), a
    helper for every other chat."""
    return {
        "agents": {
            "planner": {"model": "offline/echo", "display_name": "Planner", "icon_emoji": PLANNER_ICON},
            "researcher": {"model": "offline/echo", "display_name": "Researcher", "icon_emoji": "mag"},
            "critic": {"model": "offline/echo", "display_name": "Critic", "icon_emoji": CRITIC_ICON},
            "helper": {"model": "offline/echo"},
        },
        "rooms": {"standup": {"roster": ["planner", "researcher", "critic"], "max_rounds": 2}},
        "routes": [
            {"match": {"chat_id": CHANNEL}, "room": "standup"},
            {"match": {}, "agent": "helper"},
        ],
        "platforms": {"slack": slack_section(emulator, mode)},
    }


class Room:
    """A running App with a room on Slack, and how a person in the channel talks to it."""

    def __init__(self, app: App, emulator: IdentitySlackEmulator, mode: str) -> None:
        self.app = app
        self.emulator = emulator
        self.adapter: SlackAdapter = app.adapters["slack"]  # type: ignore[assignment]
        self.slack = EventDelivery(emulator, self.adapter, mode)

    async def say(self, text: str, *, thread_ts: str | None = None) -> dict[str, Any]:
        """Alice posts in the room's channel; returns once every resulting turn has finished.

        The room drains its planner inside the turn of the person's message, so an idle App
        means every agent that was going to speak has posted.
        """
        event = self.emulator.post_as_user(CHANNEL, ALICE, text, thread_ts=thread_ts)
        await self.slack.deliver_all(event_callback(event))
        await asyncio.wait_for(self.app.drain(), TURN_TIMEOUT_S)
        return event

    async def quiet(self) -> int:
        """Let the room's own echoes arrive and be handled; return chat.postMessage calls so far.

        Every echo is waited for until the app acknowledged it (and the adapter finished reading
        it); the grace after that gives a wrongly re-triggered room time to post again, so a
        count taken now and compared later would catch it.
        """
        await asyncio.wait_for(asyncio.gather(*self.emulator.echoes), TURN_TIMEOUT_S)
        await self.slack.settled()
        await asyncio.wait_for(self.app.drain(), TURN_TIMEOUT_S)
        await asyncio.sleep(ECHO_GRACE_S)
        await asyncio.wait_for(self.app.drain(), TURN_TIMEOUT_S)
        return len(self.emulator.calls_to("chat.postMessage"))

    def speakers(self, channel: str = CHANNEL) -> list[str]:
        """The name Slack shows above each agent turn in `channel`, oldest first.

        The echo agents repeat the growing transcript, so a later turn can outgrow Slack's
        4000 characters and arrive as several posts; a turn starts where an agent's echo
        starts, and its continuation posts must carry the same name.
        """
        names: list[str] = []
        for post in self.emulator.identity_posts(channel):
            assert len(post["text"]) <= 4000
            if TURN_START.match(post["text"]):
                names.append(post["username"])
            else:
                assert names and names[-1] == post["username"], "a continuation posted under another name"
        return names


@pytest.fixture
async def emulator() -> AsyncIterator[IdentitySlackEmulator]:
    emu = IdentitySlackEmulator()
    await emu.start()
    emu.add_user(ALICE, "Alice")
    emu.add_channel(CHANNEL, "channel")
    emu.add_channel(ELSEWHERE, "channel")
    yield emu
    await emu.stop()


@pytest.fixture
async def start(emulator: IdentitySlackEmulator) -> AsyncIterator[Callable[..., Awaitable[Room]]]:
    apps: list[App] = []

    async def run(mode: str = "socket") -> Room:
        app = App.from_config(room_config(emulator, mode))
        apps.append(app)
        await app.start()
        assert "slack" in app.adapters, "the Slack adapter did not start"
        return Room(app, emulator, mode)

    yield run
    for app in apps:
        await asyncio.wait_for(app.stop(), 10)


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_a_person_gets_one_post_per_agent_under_its_own_name_and_icon(
    start: Callable[..., Awaitable[Room]], emulator: IdentitySlackEmulator, mode: str
) -> None:
    room = await start(mode)
    await room.say("what is the plan today?")  # no mention of the bot: the channel is the room's
    assert room.speakers() == ["Planner", "Researcher", "Critic"]  # round 0, roster order, one each
    posts = emulator.identity_posts(CHANNEL)
    assert [p["icons"] for p in posts] == [{"emoji": PLANNER_ICON}, {"emoji": RESEARCHER_ICON}, {"emoji": CRITIC_ICON}]
    assert [p["text"].split(" ", 1)[0] for p in posts] == ["planner", "researcher", "critic"]  # no name prefix
    assert "what is the plan today?" in posts[0]["text"]  # the agent saw the person's words
    assert all("thread_ts" not in p and p["bot_id"] == BOT_ID for p in posts)
    assert emulator.messages[CHANNEL][1:] == posts  # nothing else was posted in the channel
    assert len(emulator.calls_to("chat.postMessage")) == 3


async def test_a_mention_drives_a_follow_up_round_and_max_rounds_holds(
    start: Callable[..., Awaitable[Room]], emulator: IdentitySlackEmulator
) -> None:
    room = await start()
    await room.say("@critic please check the numbers")
    # A person's mention admits nobody, but the echo agents repeat what they heard, so each of
    # them mentions @critic: critic alone speaks in round 1, and max_rounds=2 ends it there.
    assert room.speakers() == ["Planner", "Researcher", "Critic", "Critic"]
    assert await room.quiet() == len(emulator.identity_posts(CHANNEL)) == 4  # no post beyond the caps
    # the next person's message opens a new activity at round 0 (the transcript it is given
    # still quotes @critic, so critic is admitted to round 1 again)
    await room.say("thanks, and tomorrow?")
    assert room.speakers()[4:] == ["Planner", "Researcher", "Critic", "Critic"]


async def test_the_rooms_own_posts_echoed_back_do_not_trigger_it_again(
    start: Callable[..., Awaitable[Room]], emulator: IdentitySlackEmulator
) -> None:
    emulator.echo_posts = True
    room = await start()
    await room.say("@critic status, please")
    assert await room.quiet() == 4
    # Slack delivered all four posts back, as bot messages with the custom name and icon and
    # without a `user`; the adapter recognised them by the bot id and handed none of them on.
    echoed = [e.body["event"] for e in emulator.envelopes.values() if e.body["event"].get("bot_id")]
    assert [e["username"] for e in echoed] == ["Planner", "Researcher", "Critic", "Critic"]
    assert all(e["subtype"] == "bot_message" and "user" not in e and e["icons"] for e in echoed)
    stats = room.adapter.inbound_stats
    assert (stats["received"], stats["dispatched"]) == (5, 1)  # only Alice's message reached the App
    await asyncio.sleep(ECHO_GRACE_S)
    assert len(emulator.calls_to("chat.postMessage")) == 4  # still nothing new


async def test_a_room_in_a_thread_answers_in_the_thread(
    start: Callable[..., Awaitable[Room]], emulator: IdentitySlackEmulator
) -> None:
    emulator.echo_posts = True
    room = await start()
    root = emulator.post_as_user(CHANNEL, ALICE, "Release checklist")
    await room.say("who takes the notes?", thread_ts=root["ts"])
    posts = emulator.identity_posts(CHANNEL)
    assert [p["username"] for p in posts] == ["Planner", "Researcher", "Critic"]
    assert all(p["thread_ts"] == root["ts"] for p in posts)
    assert "who takes the notes?" in posts[0]["text"]
    assert await room.quiet() == 3


async def test_without_chat_write_customize_the_names_are_shown_in_bold(
    start: Callable[..., Awaitable[Room]], emulator: IdentitySlackEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.deny_customize = True
    emulator.echo_posts = True
    room = await start()
    with caplog.at_level(logging.WARNING, logger="botweave.adapters.slack.adapter"):
        await room.say("what is the plan today?")
        await room.say("and tomorrow?")
    # what the channel shows: posts by the app itself, each with an agent's name in bold first
    # (a long turn continues in further posts, each of them named too)
    turns = []
    own = [m for m in emulator.messages[CHANNEL] if m.get("user") == BOT_USER_ID]
    for post in own:
        named = re.match(r"^\*(\w+):\* (.*)", post["text"], re.DOTALL)
        assert named is not None, post["text"]
        if TURN_START.match(named.group(2)):
            turns.append(named.group(1))
        else:
            assert turns and turns[-1] == named.group(1), "a continuation posted under another name"
    assert turns == ["Planner", "Researcher", "Critic"] * 2
    assert emulator.identity_posts(CHANNEL) == []  # no custom username anywhere
    # Slack refused the first post with a username; it was posted again with the prefix, and
    # every later post went straight to the prefix: one refusal in total, not one per post.
    calls = emulator.calls_to("chat.postMessage")
    assert [bool(c.params.get("username")) for c in calls] == [True] + [False] * len(own)
    assert all("icon_emoji" not in c.params for c in calls[1:])
    warnings = [r.getMessage() for r in caplog.records if "chat:write.customize" in r.getMessage()]
    assert len(warnings) == 1 and "Add chat:write.customize" in warnings[0]
    assert await room.quiet() == 1 + len(own)  # the prefixed posts' echoes did not trigger the room
    assert room.adapter.inbound_stats["dispatched"] == 2


# --- the adapter on its own ----------------------------------------------------------------------


@pytest.fixture
async def adapter(emulator: IdentitySlackEmulator) -> AsyncIterator[SlackAdapter]:
    running = SlackAdapter(SlackConfig(**slack_section(emulator, "socket")))
    await running.start(inbound=False)
    yield running
    await running.stop()


async def test_send_as_shows_an_avatar_url_converts_markdown_and_prefers_the_emoji(
    adapter: SlackAdapter, emulator: IdentitySlackEmulator
) -> None:
    scout = AgentIdentity("Scout", avatar_url="https://cdn.example.test/scout.png")
    sent = await adapter.send_as(scout, ELSEWHERE, "**Found** [it](https://example.com) & more")
    assert sent.ok and sent.message_id
    both = AgentIdentity("Bot", avatar_url="https://cdn.example.test/bot.png", icon_emoji="🤖")
    assert (await adapter.send_as(both, ELSEWHERE, "beep")).ok
    first, second = emulator.calls_to("chat.postMessage")
    assert first.params["username"] == "Scout" and first.params["icon_url"] == scout.avatar_url
    assert "icon_emoji" not in first.params
    assert first.params["text"] == "*Found* <https://example.com|it> &amp; more"  # as `send` converts
    assert second.params["icon_emoji"] == ":robot_face:" and "icon_url" not in second.params
    assert emulator.find(ELSEWHERE, sent.message_id)["icons"]["image_48"] == scout.avatar_url  # type: ignore[index]


async def test_send_as_never_resends_a_post_that_may_have_been_delivered(
    adapter: SlackAdapter, emulator: IdentitySlackEmulator
) -> None:
    emulator.drop_after["chat.postMessage"] = 1  # Slack posts it, then the connection dies
    result = await adapter.send_as(AgentIdentity("Planner"), ELSEWHERE, "only once")
    assert result.status == "failed" and "not resent" in result.detail
    assert len(emulator.calls_to("chat.postMessage")) == 1  # neither retried nor re-posted with a prefix
    assert [m["username"] for m in emulator.messages[ELSEWHERE]] == ["Planner"]
    assert adapter.outbound.identities_refused is False


async def test_other_refusals_do_not_switch_to_the_name_prefix(
    adapter: SlackAdapter, emulator: IdentitySlackEmulator
) -> None:
    nowhere = await adapter.send_as(AgentIdentity("Planner"), "C0NOWHERE", "hello?")
    assert (nowhere.status, nowhere.detail) == ("no_route", "channel_not_found")
    empty = await adapter.send_as(AgentIdentity("Planner"), ELSEWHERE, "   ")
    assert (empty.status, empty.detail) == ("failed", "empty message")
    assert adapter.outbound.identities_refused is False
    assert len(emulator.calls_to("chat.postMessage")) == 1  # the empty post never reached Slack
