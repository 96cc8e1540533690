"""What only Discord has in a room: the channel webhook each agent posts through.

The shared room cases (test_rooms.py) run here too; these add what a person in the channel, or
its Integrations page, would see of the webhooks: one, named for what it is, created once and
reused (ours from an earlier run as well, never someone else's), with each agent's avatar; the
bold name in the bot's own posts where the bot may not have one; a webhook deleted behind our
back replaced. The posts of our webhook coming back over the gateway are dropped however the
webhook came to be.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave.types import BotMessage

from tests.adapters.rooms import PLANNER_AVATAR, ROSTER, SHOWN, DiscordRoom
from tests.emulators.discord import BOT_ID, CHANNEL_ID, THREAD_ID
from tests.emulators.telegram import wait_until


@pytest.fixture
async def room() -> AsyncIterator[DiscordRoom]:
    driver = DiscordRoom()
    await driver.start_emulator()
    try:
        yield driver
    finally:
        await driver.stop()


def with_a_thread_room(room: DiscordRoom) -> dict[str, Any]:
    """The room on #general, and a tighter one in its thread (max_messages counts the person)."""
    config = room.config()
    config["rooms"]["tight"] = {"roster": list(ROSTER), "max_rounds": 3, "max_messages": 4}
    config["routes"].insert(0, {"match": {"chat_id": CHANNEL_ID, "thread_id": THREAD_ID}, "room": "tight"})
    return config


async def test_one_webhook_created_once_carries_every_agents_name_and_avatar(room: DiscordRoom) -> None:
    await room.start()
    await room.say("what is the plan today?")
    posts = room.emu.webhook_messages(CHANNEL_ID)
    assert [p["author"]["username"] for p in posts] == list(SHOWN)
    assert [p["content"].split(" ", 1)[0] for p in posts] == list(ROSTER)  # no name in the text
    assert posts[0]["sent_with"]["avatar_url"] == PLANNER_AVATAR
    assert posts[1]["sent_with"]["avatar_url"] is None  # no avatar configured: the webhook's own
    assert all(p["sent_with"]["allowed_mentions"]["parse"] == ["users"] for p in posts)
    assert room.emu.bot_messages(CHANNEL_ID) == []  # nothing posted by the bot user itself
    assert len(room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/webhooks")) == 1
    [webhook] = room.emu.webhooks.values()
    assert webhook["name"] == "botweave" and webhook["channel_id"] == CHANNEL_ID
    assert {p["webhook_id"] for p in posts} == {webhook["id"]}
    # a second activity reuses it: looked up once, then cached
    await room.say("thanks, and tomorrow?")
    assert len(room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/webhooks")) == 1
    assert len(room.emu.calls("GET", rf"/channels/{CHANNEL_ID}/webhooks")) == 1


async def test_a_room_in_a_thread_posts_into_the_thread_and_max_messages_holds(room: DiscordRoom) -> None:
    await room.start(with_a_thread_room(room))
    await room.say("@critic weigh in", channel_id=THREAD_ID)
    # max_messages=4 counts the person: three agents in round 0, critic's round 1 is cut off
    assert room.speakers(THREAD_ID) == list(SHOWN)
    assert room.speakers(CHANNEL_ID) == []
    executions = room.emu.webhook_executions()
    assert all(e.path.startswith("/webhooks/") for e in executions)
    [webhook] = room.emu.webhooks.values()
    assert webhook["channel_id"] == CHANNEL_ID  # the parent's webhook, with `thread_id`
    await room.quiet()
    assert len(room.emu.webhook_executions()) == 3


async def test_our_webhook_from_an_earlier_run_is_reused_and_a_foreign_one_is_not(room: DiscordRoom) -> None:
    foreign = room.emu.add_webhook(CHANNEL_ID, "Deploys")  # someone else's: never post through it
    ours = room.emu.add_webhook(CHANNEL_ID, "botweave", creator=room.emu.bot)
    await room.start()
    await room.say("morning all")
    assert room.speakers() == list(SHOWN)
    assert room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/webhooks") == []
    assert {m["webhook_id"] for m in room.emu.webhook_messages()} == {ours["id"]}
    assert foreign["id"] not in {m["webhook_id"] for m in room.emu.messages.values() if m.get("webhook_id")}


async def test_posts_from_our_webhook_made_by_another_worker_are_dropped_too(room: DiscordRoom) -> None:
    """A worker elsewhere created the webhook: this process asks Discord once who owns it."""
    await room.start()
    elsewhere = room.emu.add_webhook(CHANNEL_ID, "botweave", creator=room.emu.bot)
    foreign = room.emu.add_webhook(CHANNEL_ID, "Deploys")
    for _ in range(2):
        post = room.emu.message("planner (offline echo) heard: hi", author=room.emu.bot, webhook_id=elsewhere["id"])
        post["author"] = {"id": elsewhere["id"], "username": "Planner", "discriminator": "0000", "avatar": None, "bot": True}
        await room.emu.dispatch("MESSAGE_CREATE", post)
    announcement = room.emu.message("deploy finished", webhook_id=foreign["id"])
    announcement["author"] = {"id": foreign["id"], "username": "Deploys", "discriminator": "0000", "avatar": None, "bot": True}
    await room.emu.dispatch("MESSAGE_CREATE", announcement)
    await wait_until(lambda: any(isinstance(i, BotMessage) and i.message_id == announcement["id"] for i in room.items))
    await room.quiet()
    assert [i.message_id for i in room.items if isinstance(i, BotMessage) and i.metadata.get("webhook_id")] == [
        announcement["id"]
    ]
    assert len(room.emu.calls("GET", rf"/webhooks/{elsewhere['id']}")) == 1  # asked once, then cached
    assert room.emu.webhook_executions() == []  # a bot-authored message opens no room activity


async def test_without_manage_webhooks_the_room_falls_back_to_bold_names(room: DiscordRoom) -> None:
    room.emu.deny_webhooks = True
    await room.start()
    await room.say("what is the plan today?")
    posted = room.emu.bot_messages(CHANNEL_ID)
    assert [p["content"].split(":**", 1)[0] for p in posted] == ["**Planner", "**Researcher", "**critic"]
    assert all(p["author"]["id"] == BOT_ID for p in posted)
    assert room.emu.webhook_messages() == [] and room.emu.webhook_executions() == []
    # the refusal is remembered for the channel: asked once, not once per post
    assert len(room.emu.calls("GET", rf"/channels/{CHANNEL_ID}/webhooks")) == 1
    assert room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/webhooks") == []
    await room.quiet()
    assert len(room.emu.bot_messages(CHANNEL_ID)) == 3  # the bot's own echoes did not re-trigger the room


async def test_the_bold_name_fallback_keeps_long_turns_within_2000_characters(room: DiscordRoom) -> None:
    """The runtime cuts turns at 2000 characters; the name in front must not push one over."""
    room.emu.deny_webhooks = True
    await room.start()
    words = " ".join(f"item{i}" for i in range(500))  # one long paragraph: cut close to 2000
    await room.say(words)
    posted = room.emu.bot_messages(CHANNEL_ID)
    posts = room.emu.calls("POST", rf"/channels/{CHANNEL_ID}/messages")
    assert [p.status for p in posts] == [200] * len(posts)  # nothing refused as too long
    assert all(len(p["content"]) <= 2000 for p in posted)
    turns = [m.group(1) for p in posted if (m := re.match(r"\*\*(\w+):\*\* \w+ \(offline echo\) heard: ", p["content"]))]
    assert turns == list(SHOWN)
    assert len(posted) > len(turns)  # the long turns continued in further messages
    everything = "".join(p["content"] for p in posted)
    assert all(everything.count(f"Reply as {agent}.") == 1 for agent in ROSTER)
    assert everything.count("item499") == 3  # each agent's turn arrived in full


async def test_a_webhook_deleted_in_the_channel_settings_is_replaced(room: DiscordRoom) -> None:
    await room.start()
    await room.say("first topic")
    [first] = room.emu.webhooks.values()
    del room.emu.webhooks[first["id"]]  # a moderator removed it; our cached copy is stale
    await room.say("second topic")
    [second] = room.emu.webhooks.values()
    assert second["id"] != first["id"]
    assert room.speakers() == list(SHOWN)  # the posts of the new webhook
    statuses = [e.status for e in room.emu.webhook_executions()]
    assert statuses[:4] == [200, 200, 200, 404] and set(statuses[4:]) == {200}  # one refusal, then the new one
    assert room.emu.bot_messages(CHANNEL_ID) == []  # nothing fell back to the bot's own name
