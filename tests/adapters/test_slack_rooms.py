"""What only Slack has in a room: each agent's name and icon on the post, and the scope behind it.

The shared room cases (test_rooms.py) run here too; these add the `username` and `icon_emoji` /
`icon_url` a person sees on each post (in both receiving modes), the shape in which Slack
delivers those posts back (and that none of them reaches the runtime), a room in a thread, and
what happens without the `chat:write.customize` scope: the names appear in bold in the text.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

import pytest
from botweave.adapters.slack.adapter import SlackAdapter
from botweave.adapters.slack.config import SlackConfig
from botweave.adapters.slack.outbound import SlackOutbound
from botweave.types import AgentIdentity

from tests.adapters.rooms import (
    CRITIC_ICON,
    ECHO_GRACE_S,
    PLANNER_ICON,
    RESEARCHER_ICON,
    ROSTER,
    SHOWN,
    TURN_START,
    SlackRoom,
)
from tests.emulators.slack import BOT_ID, BOT_USER_ID, IdentitySlackEmulator, slack_section

ELSEWHERE = "C0RANDOM"


async def started_room(mode: str = "socket") -> SlackRoom:
    driver = SlackRoom(mode)
    await driver.start_emulator()
    return driver


@pytest.fixture
async def room() -> AsyncIterator[SlackRoom]:
    driver = await started_room()
    try:
        yield driver
    finally:
        await driver.stop()


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_each_post_carries_its_agents_name_and_icon_and_nothing_else_is_posted(mode: str) -> None:
    room = await started_room(mode)
    try:
        await room.start()
        await room.say("what is the plan today?")  # no mention of the bot: the channel is the room's
        assert room.speakers() == list(SHOWN)  # round 0, roster order, one each
        posts = room.emu.identity_posts(room.chat)
        assert [p["icons"] for p in posts] == [{"emoji": PLANNER_ICON}, {"emoji": RESEARCHER_ICON}, {"emoji": CRITIC_ICON}]
        assert [p["text"].split(" ", 1)[0] for p in posts] == list(ROSTER)  # no name prefix
        assert "what is the plan today?" in posts[0]["text"]  # the agent saw the person's words
        assert all("thread_ts" not in p and p["bot_id"] == BOT_ID for p in posts)
        assert room.emu.messages[room.chat][1:] == posts  # nothing else was posted in the channel
        assert len(room.emu.calls_to("chat.postMessage")) == 3
    finally:
        await room.stop()


async def test_the_rooms_posts_come_back_as_bot_messages_and_none_reaches_the_runtime(room: SlackRoom) -> None:
    await room.echo_own_posts()
    await room.start()
    await room.say("@critic status, please")
    assert await room.quiet() == 4
    # Slack delivered all four posts back, as bot messages with the custom name and icon and
    # without a `user`; the adapter recognised them by the bot id and handed none of them on.
    echoed = [e.body["event"] for e in room.emu.envelopes.values() if e.body["event"].get("bot_id")]
    assert [e["username"] for e in echoed] == [*SHOWN, "critic"]
    assert all(e["subtype"] == "bot_message" and "user" not in e and e["icons"] for e in echoed)
    stats = room.adapter.inbound_stats
    assert (stats["received"], stats["dispatched"]) == (5, 1)  # only Alice's message reached the App
    await asyncio.sleep(ECHO_GRACE_S)
    assert len(room.emu.calls_to("chat.postMessage")) == 4  # still nothing new


async def test_a_room_in_a_thread_answers_in_the_thread(room: SlackRoom) -> None:
    await room.echo_own_posts()
    await room.start()
    root = room.emu.post_as_user(room.chat, room.ALICE, "Release checklist")
    await room.say("who takes the notes?", thread_ts=root["ts"])
    posts = room.emu.identity_posts(room.chat)
    assert [p["username"] for p in posts] == list(SHOWN)
    assert all(p["thread_ts"] == root["ts"] for p in posts)
    assert "who takes the notes?" in posts[0]["text"]
    assert await room.quiet() == 3


async def test_without_chat_write_customize_the_names_are_shown_in_bold(
    room: SlackRoom, caplog: pytest.LogCaptureFixture
) -> None:
    room.emu.deny_customize = True
    await room.echo_own_posts()
    await room.start()
    with caplog.at_level(logging.WARNING, logger="botweave.adapters.slack.outbound"):
        await room.say("what is the plan today?")
        await room.say("and tomorrow?")
    # what the channel shows: posts by the app itself, each with an agent's name in bold first
    # (a long turn continues in further posts, each of them named too)
    turns = []
    own = [m for m in room.emu.messages[room.chat] if m.get("user") == BOT_USER_ID]
    for post in own:
        named = re.match(r"^\*(\w+):\* (.*)", post["text"], re.DOTALL)
        assert named is not None, post["text"]
        if TURN_START.match(named.group(2)):
            turns.append(named.group(1))
        else:
            assert turns and turns[-1] == named.group(1), "a continuation posted under another name"
    assert turns == list(SHOWN) * 2
    assert room.emu.identity_posts(room.chat) == []  # no custom username anywhere
    # Slack refused the first post with a username; it was posted again with the prefix, and
    # every later post went straight to the prefix: one refusal in total, not one per post.
    calls = room.emu.calls_to("chat.postMessage")
    assert [bool(c.params.get("username")) for c in calls] == [True] + [False] * len(own)
    assert all("icon_emoji" not in c.params for c in calls[1:])
    warnings = [r.getMessage() for r in caplog.records if "chat:write.customize" in r.getMessage()]
    assert len(warnings) == 1 and "Add chat:write.customize" in warnings[0]
    assert await room.quiet() == 1 + len(own)  # the prefixed posts' echoes did not trigger the room
    assert room.adapter.inbound_stats["dispatched"] == 2


# --- the adapter on its own ----------------------------------------------------------------------


@pytest.fixture
async def emulator() -> AsyncIterator[IdentitySlackEmulator]:
    emu = IdentitySlackEmulator()
    await emu.start()
    emu.add_channel(ELSEWHERE, "channel")
    yield emu
    await emu.stop()


@pytest.fixture
async def adapter(emulator: IdentitySlackEmulator) -> AsyncIterator[SlackAdapter]:
    running = SlackAdapter(SlackConfig(**slack_section(emulator, "socket")))
    await running.start(inbound=False)
    yield running
    await running.stop()


def outbound(adapter: SlackAdapter) -> SlackOutbound:
    assert adapter.outbound is not None
    return adapter.outbound


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
    assert result.status == "failed" and result.retryable  # delivery decides; the adapter never repeats
    assert len(emulator.calls_to("chat.postMessage")) == 1  # neither retried nor re-posted with a prefix
    assert [m["username"] for m in emulator.messages[ELSEWHERE]] == ["Planner"]
    assert outbound(adapter).identities_refused is False


async def test_other_refusals_do_not_switch_to_the_name_prefix(
    adapter: SlackAdapter, emulator: IdentitySlackEmulator
) -> None:
    nowhere = await adapter.send_as(AgentIdentity("Planner"), "C0NOWHERE", "hello?")
    assert (nowhere.status, nowhere.detail) == ("no_route", "channel_not_found")
    empty = await adapter.send_as(AgentIdentity("Planner"), ELSEWHERE, "   ")
    assert (empty.status, empty.detail) == ("failed", "empty message")
    assert outbound(adapter).identities_refused is False
    assert len(emulator.calls_to("chat.postMessage")) == 1  # the empty post never reached Slack
