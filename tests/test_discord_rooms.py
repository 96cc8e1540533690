"""A room of agents bound to a Discord channel, end to end (issue 7 part 3).

The real App and discord.py's real REST, webhook and gateway clients run against the Discord
emulator. What a person in the channel would see is asserted: one message per agent, each
posted through the channel's webhook under the agent's own name (or, without Manage Webhooks,
by the bot with the agent's name in bold), in the planned order, and nothing more — the room's
own posts coming back over the gateway never start it again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from botweave import App
from botweave.types import BotMessage, PlatformEvent

from tests.emulators.discord import BOT_ID, CHANNEL_ID, THREAD_ID, DiscordEmulator
from tests.support import StartApp
from tests.test_discord import Harness, emulator, eventually, make_config, started  # noqa: F401  (fixture)

PLANNER_AVATAR = "https://cdn.example.test/planner.png"
TURN_START = re.compile(r"^(planner|researcher|critic) \(offline echo\) heard: ")
#: Bound on waiting for in-flight turns (the first agent call in a process imports litellm).
TURN_TIMEOUT_S = 20.0
#: How long to keep listening for a room that wrongly re-triggers itself from its own echoes.
ECHO_GRACE_S = 0.4


class BoundedHarness(Harness):
    """The Discord test harness with every wait for turns bounded, so a hang fails one test."""

    async def deliver(self, event: str, data: dict[str, Any]) -> BotMessage | PlatformEvent | None:
        before = len(self.items)
        await self.emu.dispatch(event, data)
        await eventually(lambda: len(self.items) > before)
        await drained(self.app)
        return self.items[before]


async def drained(app: App) -> None:
    """Wait until every submitted item has been handled, for at most TURN_TIMEOUT_S."""
    await asyncio.wait_for(app.drain(), TURN_TIMEOUT_S)


def room_config(emulator: DiscordEmulator, **room: Any) -> dict[str, Any]:
    """Three offline agents in `standup` on #general, a tighter room in its thread, a helper elsewhere."""
    config = make_config(emulator)
    config["agents"] = {
        "planner": {"model": "offline/echo", "display_name": "Planner", "avatar_url": PLANNER_AVATAR},
        "researcher": {"model": "offline/echo", "display_name": "Researcher"},
        "critic": {"model": "offline/echo"},
        "helper": {"model": "offline/echo"},
    }
    config["rooms"] = {
        "standup": {"roster": ["planner", "researcher", "critic"], "max_rounds": 2, **room},
        "tight": {"roster": ["planner", "researcher", "critic"], "max_rounds": 3, "max_messages": 4},
    }
    config["routes"] = [
        {"match": {"chat_id": CHANNEL_ID, "thread_id": THREAD_ID}, "room": "tight"},
        {"match": {"chat_id": CHANNEL_ID}, "room": "standup"},
        {"match": {}, "agent": "helper"},
    ]
    return config


@pytest.fixture
async def start(emulator: DiscordEmulator, start_app: StartApp) -> Callable[..., Awaitable[Harness]]:
    async def run(**room: Any) -> Harness:
        return await started(emulator, start_app, room_config(emulator, **room), BoundedHarness)

    return run


@pytest.fixture
async def room(start: Callable[..., Awaitable[Harness]]) -> Harness:
    return await start()


def speakers(emu: DiscordEmulator, channel_id: str = CHANNEL_ID) -> list[str]:
    """Who the channel shows as the author of each agent turn, oldest first.

    The echo agents repeat the growing transcript, so a later turn can outgrow Discord's 2000
    characters and arrive as several posts; a turn starts where an agent's echo starts, and its
    continuation posts must carry the same name.
    """
    names: list[str] = []
    for post in emu.webhook_messages(channel_id):
        assert len(post["content"]) <= 2000
        author = post["author"]["username"]
        if TURN_START.match(post["content"]):
            names.append(author)
        else:
            assert names and names[-1] == author, "a continuation posted under another name"
    return names


async def quiet_after(bot: Harness) -> int:
    """Let the room's own echoes arrive and be handled; return the webhook executions so far.

    A DM round trip is a barrier for everything dispatched before it; the extra grace gives a
    wrongly re-triggered room time to post again, so a later count comparison would catch it.
    """
    await bot.settle()
    await asyncio.sleep(ECHO_GRACE_S)
    await drained(bot.app)
    return len(bot.emu.webhook_executions())


async def test_a_person_gets_one_reply_per_agent_each_under_its_own_name(room: Harness) -> None:
    await room.say("what is the plan today?")
    assert speakers(room.emu) == ["Planner", "Researcher", "critic"]  # round 0, roster order
    posts = room.emu.webhook_messages(CHANNEL_ID)
    assert [p["content"].split(" ", 1)[0] for p in posts] == ["planner", "researcher", "critic"]
    assert "what is the plan today?" in posts[0]["content"]  # the agent saw the person's words
    assert posts[0]["sent_with"]["avatar_url"] == PLANNER_AVATAR
    assert posts[1]["sent_with"]["avatar_url"] is None  # no avatar configured: the webhook's own
    assert all(p["sent_with"]["allowed_mentions"]["parse"] == ["users"] for p in posts)
    assert room.replies() == []  # nothing posted by the bot user itself
    # one webhook, created once, named for what it is
    assert len(room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/webhooks")) == 1
    [webhook] = room.emu.webhooks.values()
    assert webhook["name"] == "botweave" and webhook["channel_id"] == CHANNEL_ID
    assert {p["webhook_id"] for p in posts} == {webhook["id"]}


async def test_the_rooms_own_webhook_posts_do_not_trigger_it_again(room: Harness) -> None:
    await room.say("status, please")
    executions = await quiet_after(room)
    assert executions == 3
    # the three echoes came over the gateway and the adapter kept them from the runtime
    echoed = {m["id"] for m in room.emu.webhook_messages()}
    assert len(echoed) == 3
    assert not any(isinstance(i, BotMessage) and i.message_id in echoed for i in room.items)
    await asyncio.sleep(ECHO_GRACE_S)
    assert len(room.emu.webhook_executions()) == executions  # still nothing new


async def test_mentions_start_a_follow_up_round_and_max_rounds_holds(room: Harness) -> None:
    await room.say("@critic please check the numbers")
    # the echo agents repeat what they heard, so each mentions @critic: critic alone speaks in
    # round 1, and max_rounds=2 ends the activity there
    assert speakers(room.emu) == ["Planner", "Researcher", "critic", "critic"]
    executions = await quiet_after(room)
    assert executions == len(room.emu.webhook_messages())  # no post beyond the caps
    # the next person's message opens a new activity at round 0, reusing the same webhook (the
    # echoes quote the earlier transcript, @critic included, so critic is admitted to round 1 again)
    await room.say("thanks, and tomorrow?")
    assert speakers(room.emu)[4:] == ["Planner", "Researcher", "critic", "critic"]
    assert len(room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/webhooks")) == 1
    assert len(room.emu.calls("GET", rf"/channels/{CHANNEL_ID}/webhooks")) == 1  # cached after that


async def test_a_room_in_a_thread_posts_into_the_thread_and_max_messages_holds(room: Harness) -> None:
    await room.say("@critic weigh in", channel_id=THREAD_ID)
    # max_messages=4 counts the person: three agents in round 0, critic's round 1 is cut off
    assert speakers(room.emu, THREAD_ID) == ["Planner", "Researcher", "critic"]
    assert speakers(room.emu, CHANNEL_ID) == []
    executions = room.emu.webhook_executions()
    assert all(e.path.startswith("/webhooks/") for e in executions)
    [webhook] = room.emu.webhooks.values()
    assert webhook["channel_id"] == CHANNEL_ID  # the parent's webhook, with `thread_id`
    assert await quiet_after(room) == 3


async def test_our_webhook_from_an_earlier_run_is_reused_and_a_foreign_one_is_not(
    emulator: DiscordEmulator, start: Callable[..., Awaitable[Harness]]
) -> None:
    foreign = emulator.add_webhook(CHANNEL_ID, "Deploys")  # someone else's: never post through it
    ours = emulator.add_webhook(CHANNEL_ID, "botweave", creator=emulator.bot)
    room = await start()
    await room.say("morning all")
    assert speakers(room.emu) == ["Planner", "Researcher", "critic"]
    assert room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/webhooks") == []
    assert {m["webhook_id"] for m in room.emu.webhook_messages()} == {ours["id"]}
    assert foreign["id"] not in {m["webhook_id"] for m in room.emu.messages.values() if m.get("webhook_id")}


async def test_posts_from_our_webhook_made_by_another_worker_are_dropped_too(room: Harness) -> None:
    """A worker elsewhere created the webhook: this process asks Discord once who owns it."""
    elsewhere = room.emu.add_webhook(CHANNEL_ID, "botweave", creator=room.emu.bot)
    foreign = room.emu.add_webhook(CHANNEL_ID, "Deploys")
    for _ in range(2):
        post = room.emu.message("planner (offline echo) heard: hi", author=room.emu.bot, webhook_id=elsewhere["id"])
        post["author"] = {"id": elsewhere["id"], "username": "Planner", "discriminator": "0000", "avatar": None, "bot": True}
        await room.emu.dispatch("MESSAGE_CREATE", post)
    announcement = room.emu.message("deploy finished", webhook_id=foreign["id"])
    announcement["author"] = {"id": foreign["id"], "username": "Deploys", "discriminator": "0000", "avatar": None, "bot": True}
    await room.emu.dispatch("MESSAGE_CREATE", announcement)
    await eventually(lambda: any(isinstance(i, BotMessage) and i.message_id == announcement["id"] for i in room.items))
    await room.settle()
    assert [i.message_id for i in room.items if isinstance(i, BotMessage) and i.metadata.get("webhook_id")] == [
        announcement["id"]
    ]
    assert len(room.emu.calls("GET", rf"/webhooks/{elsewhere['id']}")) == 1  # asked once, then cached
    assert room.emu.webhook_executions() == []  # a bot-authored message opens no room activity


async def test_without_manage_webhooks_the_room_falls_back_to_bold_names(
    emulator: DiscordEmulator, start: Callable[..., Awaitable[Harness]]
) -> None:
    emulator.deny_webhooks = True
    room = await start()
    await room.say("what is the plan today?")
    posted = room.replies(CHANNEL_ID)
    assert [p["content"].split(":**", 1)[0] for p in posted] == ["**Planner", "**Researcher", "**critic"]
    assert all(p["author"]["id"] == BOT_ID for p in posted)
    assert room.emu.webhook_messages() == [] and room.emu.webhook_executions() == []
    # the refusal is remembered for the channel: asked once, not once per post
    assert len(room.emu.calls("GET", rf"/channels/{CHANNEL_ID}/webhooks")) == 1
    assert room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/webhooks") == []
    await room.settle()
    assert len(room.replies(CHANNEL_ID)) == 3  # the bot's own echoes did not re-trigger the room


async def test_the_bold_name_fallback_keeps_long_turns_within_2000_characters(
    emulator: DiscordEmulator, start: Callable[..., Awaitable[Harness]]
) -> None:
    """The runtime cuts turns at 2000 characters; the name in front must not push one over."""
    emulator.deny_webhooks = True
    room = await start()
    words = " ".join(f"item{i}" for i in range(500))  # one long paragraph: cut close to 2000
    await room.say(words)
    posted = room.replies(CHANNEL_ID)
    posts = room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/messages")
    assert [p.status for p in posts] == [200] * len(posts)  # nothing refused as too long
    assert all(len(p["content"]) <= 2000 for p in posted)
    turns = [m.group(1) for p in posted if (m := re.match(r"\*\*(\w+):\*\* \w+ \(offline echo\) heard: ", p["content"]))]
    assert turns == ["Planner", "Researcher", "critic"]
    assert len(posted) > len(turns)  # the long turns continued in further messages
    everything = "".join(p["content"] for p in posted)
    assert all(everything.count(f"Reply as {agent}.") == 1 for agent in ("planner", "researcher", "critic"))
    assert everything.count("item499") == 3  # each agent's turn arrived in full


async def test_a_webhook_deleted_in_the_channel_settings_is_replaced(room: Harness) -> None:
    await room.say("first topic")
    [first] = room.emu.webhooks.values()
    del room.emu.webhooks[first["id"]]  # a moderator removed it; our cached copy is stale
    await room.say("second topic")
    [second] = room.emu.webhooks.values()
    assert second["id"] != first["id"]
    assert speakers(room.emu) == ["Planner", "Researcher", "critic"]  # the posts of the new webhook
    statuses = [e.status for e in room.emu.webhook_executions()]
    assert statuses[:4] == [200, 200, 200, 404] and set(statuses[4:]) == {200}  # one refusal, then the new one
    assert room.replies() == []  # nothing fell back to the bot's own name
