"""The Slack adapter on its own: what it reads out of Slack events, what it does on the Web API.

The adapter runs against the emulator through slack-bolt's Socket Mode handler (the reading
side is the same code in HTTP mode; test_slack.py covers both modes end to end) and hands
what it reads to a list instead of the runtime.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave.adapters.slack.adapter import SlackAdapter
from botweave.adapters.slack.config import SlackConfig
from botweave.adapters.slack.format import emoji_to_reaction, markdown_to_mrkdwn, reaction_to_emoji
from botweave.types import META_MENTIONS_BOT, META_REPLY_TO_BOT, BotMessage, MessageType, PlatformEvent

from tests.adapters.test_slack import ALICE, BOB, CHANNEL, DM, MPIM, PRIVATE, emulator  # noqa: F401  (fixture)
from tests.emulators.slack import (
    BOT_ID,
    BOT_TOKEN,
    BOT_USER_ID,
    EventDelivery,
    SlackEmulator,
    event_callback,
    slack_section,
)


class Harness:
    def __init__(self, adapter: SlackAdapter, emulator: SlackEmulator) -> None:
        self.adapter = adapter
        self.emulator = emulator
        self.items: list[BotMessage | PlatformEvent] = []
        self.slack = EventDelivery(emulator, adapter, "socket")
        adapter.bind(self._sink)

    async def _sink(self, item: BotMessage | PlatformEvent) -> None:
        self.items.append(item)

    async def read(self, event: dict[str, Any]) -> BotMessage | PlatformEvent | None:
        """Deliver one event; what the adapter handed to the runtime for it, if anything."""
        before = len(self.items)
        await self.slack.deliver_all(event_callback(event))
        new = self.items[before:]
        assert len(new) <= 1
        return new[0] if new else None

    async def message(self, event: dict[str, Any]) -> BotMessage:
        item = await self.read(event)
        assert isinstance(item, BotMessage)
        return item


async def start_adapter(emulator: SlackEmulator, **overrides: Any) -> Harness:
    adapter = SlackAdapter(SlackConfig(**slack_section(emulator, "socket", **overrides)))
    harness = Harness(adapter, emulator)
    await adapter.start()
    return harness


@pytest.fixture
async def slack(emulator: SlackEmulator) -> AsyncIterator[Harness]:
    harness = await start_adapter(emulator)
    yield harness
    await harness.adapter.stop()


# --- start ---------------------------------------------------------------------------------------


async def test_start_logs_in_and_knows_who_it_is(slack: Harness, emulator: SlackEmulator) -> None:
    me = slack.adapter.self_user
    assert me is not None and me.user_id == BOT_USER_ID and me.username == "weaver" and me.is_bot
    assert emulator.connections == 1
    assert len(emulator.calls_to("apps.connections.open")) == 1


async def test_socket_mode_acknowledges_every_envelope_by_its_id(slack: Harness, emulator: SlackEmulator) -> None:
    for text in ("one", "two", "three"):
        await slack.read(emulator.post_as_user(DM, ALICE, text))
    assert all(envelope.acked.is_set() for envelope in emulator.envelopes.values())
    assert len(emulator.envelopes) == 3 and emulator.bad_acks == []


async def test_a_wrong_bot_token_fails_start_without_showing_it(emulator: SlackEmulator) -> None:
    adapter = SlackAdapter(SlackConfig(**slack_section(emulator, "socket", bot_token="xoxb-wrong-secret")))
    with pytest.raises(RuntimeError) as failure:
        await adapter.start()
    assert "invalid_auth" in str(failure.value) and "xoxb-wrong-secret" not in str(failure.value)
    assert "xoxb-wrong-secret" not in repr(adapter.config)


async def test_a_send_only_instance_opens_no_connection(emulator: SlackEmulator) -> None:
    adapter = SlackAdapter(SlackConfig(**slack_section(emulator, "socket")))
    await adapter.start(inbound=False)
    try:
        assert adapter.self_user is not None and adapter.self_user.user_id == BOT_USER_ID
        assert emulator.connections == 0 and emulator.calls_to("apps.connections.open") == []
        assert (await adapter.send(DM, "still able to talk")).ok
    finally:
        await adapter.stop()


async def test_send_direct_opens_the_dm_once(slack: Harness, emulator: SlackEmulator) -> None:
    first = await slack.adapter.send_direct(ALICE, "your pairing code is ABCD2345")
    second = await slack.adapter.send_direct(ALICE, "approved")
    assert first.ok and second.ok
    assert [p["channel"] for p in emulator.posted()] == ["D0ALICE", "D0ALICE"]
    assert len(emulator.calls_to("conversations.open")) == 1
    unknown = await slack.adapter.send_direct("U0NOBODY", "hello?")
    assert unknown.status == "no_route"


def test_declares_no_thread_created_and_slack_limits() -> None:
    assert "thread_created" not in SlackAdapter.emits
    assert SlackAdapter.capabilities.max_message_length == 4000
    assert SlackAdapter.capabilities.edit_floor_for("channel") >= 1000
    assert SlackAdapter.capabilities.markdown == "slack"


# --- reading messages ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("channel", "expected"), [(CHANNEL, "channel"), (PRIVATE, "group"), (MPIM, "group"), (DM, "dm")]
)
async def test_channel_types(slack: Harness, emulator: SlackEmulator, channel: str, expected: str) -> None:
    msg = await slack.message(emulator.post_as_user(channel, ALICE, "hello"))
    assert msg.channel.channel_type == expected
    assert msg.channel.channel_id == channel
    assert msg.platform == "slack" and msg.thread_id is None


async def test_a_plain_message(slack: Harness, emulator: SlackEmulator) -> None:
    event = emulator.post_as_user(CHANNEL, ALICE, "plain words &amp; &lt;tags&gt;")
    msg = await slack.message(event)
    assert msg.message_id == event["ts"]
    assert msg.text == "plain words & <tags>"
    assert msg.sender.user_id == ALICE and msg.sender.display_name == "Alice" and not msg.sender.is_bot
    assert msg.metadata[META_MENTIONS_BOT] is False and msg.metadata[META_REPLY_TO_BOT] is False
    assert msg.metadata["scope"] == "T0EMU"
    assert msg.allow_control and msg.quoted is None


async def test_mentions_bot_removed_others_named_and_names_cached(slack: Harness, emulator: SlackEmulator) -> None:
    first = await slack.message(emulator.post_as_user(CHANNEL, ALICE, f"<@{BOT_USER_ID}> ask <@{BOB}> about it"))
    second = await slack.message(emulator.post_as_user(CHANNEL, ALICE, f"and <@{BOB}|bob> again"))
    assert first.text == "ask @bobby about it"
    assert first.metadata[META_MENTIONS_BOT] is True
    assert second.text == "and @bob again" and second.metadata[META_MENTIONS_BOT] is False
    looked_up = [c.params["user"] for c in emulator.calls_to("users.info")]
    assert sorted(looked_up) == [ALICE, BOB]  # each person once, however often they appear


async def test_a_command_after_the_mention_is_a_command(slack: Harness, emulator: SlackEmulator) -> None:
    msg = await slack.message(emulator.post_as_user(CHANNEL, ALICE, f"<@{BOT_USER_ID}> /new"))
    assert msg.is_command and msg.command == "new"


async def test_files_become_attachments(slack: Harness, emulator: SlackEmulator) -> None:
    files = [
        {"id": "F1", "name": "cat.png", "mimetype": "image/png", "size": 1234,
         "url_private": "https://files.slack.com/files-pri/T0EMU-F1/cat.png"},
    ]
    msg = await slack.message(emulator.post_as_user(DM, ALICE, "look", subtype="file_share", files=files))
    assert msg.message_type == MessageType.IMAGE
    assert msg.attachments == [
        {"url": "https://files.slack.com/files-pri/T0EMU-F1/cat.png", "file_id": "F1", "mime": "image/png",
         "size": 1234, "filename": "cat.png"}
    ]


async def test_thread_reply_carries_thread_and_root_quote(slack: Harness, emulator: SlackEmulator) -> None:
    root = emulator.post_as_user(CHANNEL, ALICE, f"Budget for <@{BOB}>'s team?")
    reply = await slack.message(emulator.post_as_user(CHANNEL, BOB, "about 10k", thread_ts=root["ts"]))
    assert reply.thread_id == root["ts"] and reply.reply_to == root["ts"]
    assert reply.quoted is not None
    assert (reply.quoted.message_id, reply.quoted.text, reply.quoted.author) == (
        root["ts"], "Budget for @bobby's team?", "user"
    )
    assert reply.prompt_text == "[In reply to: \"Budget for @bobby's team?\"]\nabout 10k"
    assert reply.metadata[META_REPLY_TO_BOT] is False


async def test_thread_broadcast_uses_the_root_from_the_event(slack: Harness, emulator: SlackEmulator) -> None:
    root = emulator.post_as_user(CHANNEL, ALICE, "root text")
    event = emulator.post_as_user(CHANNEL, BOB, "also to channel", thread_ts=root["ts"], subtype="thread_broadcast")
    msg = await slack.message(event)
    assert msg.thread_id == root["ts"]
    assert msg.quoted is not None and msg.quoted.text == "root text"
    assert emulator.calls_to("conversations.replies") == []


async def test_reply_in_a_thread_the_bot_started_is_addressed(slack: Harness, emulator: SlackEmulator) -> None:
    sent = await slack.adapter.send(CHANNEL, "I am the **root**")
    assert sent.ok and sent.message_id
    msg = await slack.message(emulator.post_as_user(CHANNEL, ALICE, "thanks", thread_ts=sent.message_id))
    assert msg.quoted is not None and msg.quoted.author == "bot" and msg.quoted.text == "I am the *root*"
    assert msg.metadata[META_REPLY_TO_BOT] is True
    assert emulator.calls_to("conversations.replies") == []  # the bot remembered its own message


async def test_thread_the_bot_replied_in_before_a_restart_is_addressed(emulator: SlackEmulator) -> None:
    root = emulator.post_as_user(CHANNEL, ALICE, "question")
    emulator.messages[CHANNEL].append({"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID, "text": "answer",
                                       "ts": emulator.next_ts(), "thread_ts": root["ts"]})
    emulator.find(CHANNEL, root["ts"])["reply_users"] = [BOT_USER_ID]  # type: ignore[index]
    slack = await start_adapter(emulator)
    try:
        msg = await slack.message(emulator.post_as_user(CHANNEL, BOB, "follow-up", thread_ts=root["ts"]))
        assert msg.metadata[META_REPLY_TO_BOT] is True
        assert msg.quoted is not None and msg.quoted.author == "user"
    finally:
        await slack.adapter.stop()


async def test_a_thread_another_process_of_the_bot_replied_in_is_addressed(
    slack: Harness, emulator: SlackEmulator
) -> None:
    """Slack delivers the bot's own posts too: they tell the receiving process which threads
    the bot is in, even when a different process (a worker) posted the reply."""
    root = emulator.post_as_user(CHANNEL, ALICE, "question")
    first = await slack.message(emulator.post_as_user(CHANNEL, BOB, "me too", thread_ts=root["ts"]))
    assert first.metadata[META_REPLY_TO_BOT] is False
    own_reply = emulator.post_as_user(CHANNEL, BOT_USER_ID, "answer", thread_ts=root["ts"], bot_id=BOT_ID)
    assert await slack.read(own_reply) is None  # never handed on as a message
    later = await slack.message(emulator.post_as_user(CHANNEL, ALICE, "thanks", thread_ts=root["ts"]))
    assert later.metadata[META_REPLY_TO_BOT] is True
    assert len(emulator.calls_to("conversations.replies")) == 1


async def test_a_rate_limited_root_lookup_does_not_hold_up_the_message(
    slack: Harness, emulator: SlackEmulator
) -> None:
    root = emulator.post_as_user(CHANNEL, ALICE, "question")
    emulator.rate_limits["conversations.replies"] = [60]
    msg = await slack.message(emulator.post_as_user(CHANNEL, BOB, "reply", thread_ts=root["ts"]))
    assert msg.thread_id == root["ts"] and msg.quoted is None  # no quote rather than a minute's wait
    again = await slack.message(emulator.post_as_user(CHANNEL, BOB, "again", thread_ts=root["ts"]))
    assert again.quoted is not None and again.quoted.text == "question"  # tried again, not cached


async def test_reply_in_thread_option_makes_each_post_its_own_thread(emulator: SlackEmulator) -> None:
    slack = await start_adapter(emulator, reply_in_thread=True)
    try:
        event = emulator.post_as_user(CHANNEL, ALICE, "top level")
        msg = await slack.message(event)
        assert msg.thread_id == event["ts"] and msg.quoted is None
    finally:
        await slack.adapter.stop()


async def test_other_bots_are_marked_and_have_no_control(slack: Harness, emulator: SlackEmulator) -> None:
    event = emulator.post_as_user(CHANNEL, "", "/new please", subtype="bot_message", bot_id="B0OTHER")
    msg = await slack.message(event)
    assert msg.sender.is_bot and msg.sender.user_id == "B0OTHER" and msg.sender.name == "otherbot"
    assert msg.allow_control is False


async def test_own_and_non_message_subtypes_are_not_handed_on(slack: Harness, emulator: SlackEmulator) -> None:
    own_edit = {
        "type": "message", "subtype": "message_changed", "channel": CHANNEL, "channel_type": "channel",
        "message": {"type": "message", "user": BOT_USER_ID, "text": "new", "ts": "1.0"},
        "previous_message": {"type": "message", "user": BOT_USER_ID, "text": "old", "ts": "1.0"},
        "ts": "1.1", "event_ts": "1.1",
    }
    join = emulator.post_as_user(CHANNEL, ALICE, f"<@{ALICE}> has joined the channel", subtype="channel_join")
    assert await slack.read(own_edit) is None
    assert await slack.read(join) is None


async def test_reaction_emoji_are_unicode_where_possible() -> None:
    assert reaction_to_emoji("+1") == "👍"
    assert reaction_to_emoji("white_check_mark") == "✅"
    assert reaction_to_emoji("thumbsup::skin-tone-3") == "👍🏼"
    assert reaction_to_emoji("our-custom-logo") == "our-custom-logo"
    assert emoji_to_reaction("🎉") == "tada" and emoji_to_reaction(":eyes:") == "eyes"


# --- outbound ---------------------------------------------------------------------------------------


async def test_send_converts_markdown_to_mrkdwn(slack: Harness, emulator: SlackEmulator) -> None:
    result = await slack.adapter.send(DM, "**Bold**, [docs](https://example.com) and a<b & c")
    assert result.ok and result.message_id
    [posted] = emulator.posted()
    assert posted["text"] == "*Bold*, <https://example.com|docs> and a&lt;b &amp; c"
    assert markdown_to_mrkdwn("# Title\n- item") == "*Title*\n• item"


async def test_send_into_a_thread(slack: Harness, emulator: SlackEmulator) -> None:
    root = emulator.post_as_user(CHANNEL, ALICE, "root")
    result = await slack.adapter.send(CHANNEL, "in thread", thread_id=root["ts"], reply_to=root["ts"])
    assert result.ok
    assert emulator.posted()[0]["thread_ts"] == root["ts"]


async def test_outbound_results_map_slack_errors(slack: Harness, emulator: SlackEmulator) -> None:
    adapter = slack.adapter
    mine = await adapter.send(CHANNEL, "draft")
    assert mine.message_id
    theirs = emulator.post_as_user(CHANNEL, ALICE, "not yours")

    edited = await adapter.edit(CHANNEL, mine.message_id, "final")
    assert edited.status == "ok" and emulator.find(CHANNEL, mine.message_id)["text"] == "final"  # type: ignore[index]
    assert (await adapter.edit(CHANNEL, theirs["ts"], "x")).status == "failed"
    assert (await adapter.edit(CHANNEL, theirs["ts"], "x")).detail == "cant_update_message"
    missing = await adapter.edit(CHANNEL, "1600000000.000001", "x")
    assert (missing.status, missing.detail) == ("no_route", "message_not_found")

    assert (await adapter.react(CHANNEL, theirs["ts"], "👍")).status == "ok"
    again = await adapter.react(CHANNEL, theirs["ts"], "👍")
    assert (again.status, again.detail) == ("ok", "already_reacted")
    assert emulator.calls_to("reactions.add")[0].params["name"] == "thumbsup"

    assert (await adapter.delete(CHANNEL, mine.message_id)).status == "ok"
    gone = await adapter.delete(CHANNEL, mine.message_id)
    assert (gone.status, gone.detail) == ("no_route", "message_not_found")
    nowhere = await adapter.send("C0NOWHERE", "hello?")
    assert (nowhere.status, nowhere.detail) == ("no_route", "channel_not_found")


async def test_a_post_that_may_have_been_delivered_is_not_resent(slack: Harness, emulator: SlackEmulator) -> None:
    emulator.drop_after["chat.postMessage"] = 1  # Slack posts it, then the connection dies
    result = await slack.adapter.send(DM, "only once")
    assert result.status == "failed" and result.retryable  # delivery decides; the adapter never repeats
    assert len(emulator.calls_to("chat.postMessage")) == 1
    assert [m["text"] for m in emulator.messages[DM]] == ["only once"]


async def test_an_edit_is_retried_after_a_dropped_connection(slack: Harness, emulator: SlackEmulator) -> None:
    sent = await slack.adapter.send(DM, "v1")
    assert sent.message_id
    emulator.drop_after["chat.update"] = 1
    result = await slack.adapter.edit(DM, sent.message_id, "v2")
    assert result.ok  # chat.update is idempotent, so retrying it is safe
    assert emulator.find(DM, sent.message_id)["text"] == "v2"  # type: ignore[index]


def test_config_repr_hides_secrets() -> None:
    config = SlackConfig(bot_token=BOT_TOKEN, app_token="xapp-hidden", signing_secret="shh-secret")
    dumped = repr(config) + str(config.model_dump())
    assert BOT_TOKEN not in dumped and "xapp-hidden" not in dumped and "shh-secret" not in dumped
