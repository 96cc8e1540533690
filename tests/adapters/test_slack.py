"""Slack end to end: emulator -> slack-bolt (Socket Mode or HTTP) -> App -> agent -> Web API.

Each scenario is what a Slack user would notice: which messages the bot posted, where
(channel or thread), with what text, and that nothing was posted twice.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App

from tests.emulators.slack import (
    BOT_USER_ID,
    EventDelivery,
    SlackEmulator,
    app_mention_of,
    event_callback,
    post_signed,
    sign,
    slack_section,
    slash_command,
    wait_for,
)

CHANNEL, PRIVATE, MPIM, DM = "C0GENERAL", "G0SECRET", "G0MPIM", "D0ALICE"
ALICE, BOB = "U0ALICE", "U0BOB"


@pytest.fixture
async def emulator() -> AsyncIterator[SlackEmulator]:
    emu = SlackEmulator()
    await emu.start()
    emu.add_user(ALICE, "Alice")
    emu.add_user(BOB, "Bob", display_name="bobby")
    emu.add_channel(CHANNEL, "channel")
    emu.add_channel(PRIVATE, "group")
    emu.add_channel(MPIM, "mpim")
    emu.add_channel(DM, "im")
    yield emu
    await emu.stop()


class Bot:
    """A running App with the Slack adapter, plus how to deliver events to it."""

    def __init__(self, app: App, emulator: SlackEmulator, mode: str) -> None:
        self.app = app
        self.adapter: Any = app.adapters["slack"]
        self.slack = EventDelivery(emulator, self.adapter, mode)
        self.emulator = emulator

    async def deliver(self, *events: dict[str, Any], retry: int = 0) -> None:
        await self.slack.deliver_all(*(event_callback(e) for e in events), retry=retry)
        await self.app.drain()

    async def replies(self, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        await wait_for(lambda: len(self.emulator.posted()) >= count, timeout)
        await self.app.drain()
        return self.emulator.posted()


async def start_bot(emulator: SlackEmulator, mode: str, bot: dict[str, Any] | None = None, **slack: Any) -> Bot:
    app = App.from_config(
        {
            "bot": bot or {},
            "agents": {"assistant": {"model": "offline/echo"}},
            "platforms": {"slack": slack_section(emulator, mode, **slack)},
        }
    )
    await app.start()
    assert "slack" in app.adapters, "the Slack adapter did not start"
    return Bot(app, emulator, mode)


@pytest.fixture(params=["socket", "http"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def bot(emulator: SlackEmulator, mode: str) -> AsyncIterator[Bot]:
    running = await start_bot(emulator, mode)
    yield running
    await running.app.stop()


# --- conversations ---------------------------------------------------------------------------


async def test_channel_mention_gets_one_reply_in_the_channel(bot: Bot, emulator: SlackEmulator) -> None:
    await bot.deliver(emulator.post_as_user(CHANNEL, ALICE, f"<@{BOT_USER_ID}> hello there"))

    [reply] = await bot.replies(1)
    assert reply["channel"] == CHANNEL
    assert "thread_ts" not in reply
    assert reply["text"] == "assistant (offline echo) heard: [Alice] hello there"


async def test_unaddressed_channel_message_is_not_answered(bot: Bot, emulator: SlackEmulator) -> None:
    await bot.deliver(emulator.post_as_user(CHANNEL, ALICE, "just chatting with people"))
    assert emulator.posted() == []


async def test_direct_message_is_answered_without_a_mention(bot: Bot, emulator: SlackEmulator) -> None:
    await bot.deliver(emulator.post_as_user(DM, ALICE, "hi bot"))

    [reply] = await bot.replies(1)
    assert reply["channel"] == DM
    assert reply["text"] == "assistant (offline echo) heard: hi bot"


async def test_thread_reply_is_answered_in_the_thread_with_the_root_quoted(
    bot: Bot, emulator: SlackEmulator
) -> None:
    root = emulator.post_as_user(CHANNEL, ALICE, "What is the plan for Friday?")
    await bot.deliver(root)  # not addressed: no reply
    first = emulator.post_as_user(CHANNEL, BOB, f"<@{BOT_USER_ID}> summarise please", thread_ts=root["ts"])
    await bot.deliver(first)

    [reply] = await bot.replies(1)
    assert reply["thread_ts"] == root["ts"]
    assert reply["text"] == (
        'assistant (offline echo) heard: [bobby] [In reply to: "What is the plan for Friday?"]\nsummarise please'
    )

    # The bot has now replied in this thread, so a follow-up there is addressed to it.
    follow_up = emulator.post_as_user(CHANNEL, ALICE, "and Saturday?", thread_ts=root["ts"])
    await bot.deliver(follow_up)
    replies = await bot.replies(2)
    assert replies[1]["thread_ts"] == root["ts"]
    assert "and Saturday?" in replies[1]["text"]
    assert len(emulator.calls_to("conversations.replies")) == 1  # the root is cached


async def test_message_and_app_mention_of_one_post_give_one_reply(bot: Bot, emulator: SlackEmulator) -> None:
    message = emulator.post_as_user(CHANNEL, ALICE, f"<@{BOT_USER_ID}> once please")
    await bot.deliver(message, app_mention_of(message))

    [reply] = await bot.replies(1)
    assert reply["text"].endswith("once please")
    assert bot.adapter.inbound_stats["duplicate"] == 1


async def test_app_mention_alone_is_answered(bot: Bot, emulator: SlackEmulator) -> None:
    """Apps subscribed only to app_mention still work; the channel kind is looked up."""
    message = emulator.post_as_user(PRIVATE, ALICE, f"<@{BOT_USER_ID}> only a mention")
    await bot.deliver(app_mention_of(message))

    [reply] = await bot.replies(1)
    assert reply["channel"] == PRIVATE
    assert len(emulator.calls_to("conversations.info")) == 1


async def test_a_retried_delivery_gives_one_reply(bot: Bot, emulator: SlackEmulator) -> None:
    body = event_callback(emulator.post_as_user(DM, ALICE, "are you there?"))
    await bot.slack.deliver_all(body)
    await bot.slack.deliver_all(body, retry=1)  # Slack did not see our ack in time and retries
    await bot.slack.deliver_all(body, retry=2)
    await bot.app.drain()

    assert len(await bot.replies(1)) == 1
    assert bot.adapter.inbound_stats["duplicate"] == 2


async def test_own_messages_are_dropped(bot: Bot, emulator: SlackEmulator) -> None:
    echo = emulator.post_as_user(CHANNEL, BOT_USER_ID, f"<@{BOT_USER_ID}> talking to myself")
    echo["bot_id"] = "B0BOT"
    await bot.slack.deliver(event_callback(echo))
    await bot.deliver(emulator.post_as_user(DM, ALICE, "ping"))

    [reply] = await bot.replies(1)
    assert reply["channel"] == DM


async def test_other_bots_are_dropped_by_default(bot: Bot, emulator: SlackEmulator) -> None:
    other = emulator.post_as_user(CHANNEL, "", f"<@{BOT_USER_ID}> beep", subtype="bot_message", bot_id="B0OTHER")
    await bot.deliver(other)
    assert emulator.posted() == []


async def test_long_reply_is_chunked_at_4000_characters(bot: Bot, emulator: SlackEmulator) -> None:
    words = " ".join(f"word{i}" for i in range(900))  # ~7000 characters echoed back
    await bot.deliver(emulator.post_as_user(DM, ALICE, words))

    replies = await bot.replies(2)
    assert len(replies) == 2
    assert all(len(r["text"]) <= 4000 for r in replies)
    assert " ".join(r["text"] for r in replies).split() == f"assistant (offline echo) heard: {words}".split()


async def test_rate_limited_post_is_retried_after_retry_after_and_delivered_once(
    bot: Bot, emulator: SlackEmulator
) -> None:
    emulator.rate_limits["chat.postMessage"] = [1]
    started = time.monotonic()
    await bot.deliver(emulator.post_as_user(DM, ALICE, "slow down"))

    [reply] = await bot.replies(1, timeout=10)
    assert reply["text"].endswith("slow down")
    assert [c.status for c in emulator.calls if c.method == "chat.postMessage"] == [429, 200]
    assert time.monotonic() - started >= 1.0


async def test_reply_in_thread_option_threads_every_chunk(emulator: SlackEmulator, mode: str) -> None:
    bot = await start_bot(emulator, mode, reply_in_thread=True)
    try:
        message = emulator.post_as_user(CHANNEL, ALICE, f"<@{BOT_USER_ID}> " + " ".join(["long"] * 1500))
        await bot.deliver(message)
        replies = await bot.replies(2)
        assert [r.get("thread_ts") for r in replies] == [message["ts"], message["ts"]]
    finally:
        await bot.app.stop()


@pytest.fixture
def slow_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline model streams word by word 80 ms apart, like a real model would."""
    from botweave.model_calls import ModelOutput
    from botweave.offline_model import OfflineCalls

    original = OfflineCalls.stream

    async def paced(self: OfflineCalls, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        async for piece in original(self, request):
            await asyncio.sleep(0.08)
            yield piece

    monkeypatch.setattr(OfflineCalls, "stream", paced)


@pytest.mark.usefixtures("slow_stream")
async def test_streamed_reply_is_bounded_in_edits_and_exact_at_the_end(emulator: SlackEmulator, mode: str) -> None:
    bot = await start_bot(emulator, mode, bot={"streaming": True, "stream_edit_interval_ms": 0})
    try:
        text = "please stream me a somewhat longer answer made of quite a few separate words"
        await bot.deliver(emulator.post_as_user(DM, ALICE, text))
        [posted] = await bot.replies(1)

        writes = [c for c in emulator.calls_to("chat.postMessage") + emulator.calls_to("chat.update")]
        writes.sort(key=lambda c: c.at)
        assert len(emulator.calls_to("chat.postMessage")) == 1  # one message, edited in place
        assert 1 <= len(emulator.calls_to("chat.update")) <= 3  # ~1.5 s of ~19 tokens, >= 1 s apart
        gaps = [b.at - a.at for a, b in zip(writes, writes[1:])]
        assert all(gap >= 0.95 for gap in gaps), gaps  # Slack's 1 s floor beats the 0 ms setting
        final = emulator.find(DM, _ts_of(emulator, posted))
        assert final is not None
        assert final["text"] == f"assistant (offline echo) heard: {text}"
    finally:
        await bot.app.stop()


def _ts_of(emulator: SlackEmulator, posted: dict[str, Any]) -> str:
    """The ts of the one message the bot has in the posted message's channel."""
    own = [m for m in emulator.messages[posted["channel"]] if m.get("user") == BOT_USER_ID]
    assert len(own) == 1
    return str(own[0]["ts"])


async def test_slash_command_runs_the_builtin_command(bot: Bot, emulator: SlackEmulator) -> None:
    command = slash_command("/help", "", user=ALICE, channel=CHANNEL, channel_name="general")
    await bot.slack.deliver_all(command)
    [reply] = await bot.replies(1)
    assert reply["channel"] == CHANNEL
    assert "/new" in reply["text"]


async def test_delivery_is_recorded_before_it_is_acknowledged(bot: Bot, emulator: SlackEmulator) -> None:
    """The ack tells Slack not to redeliver, so it follows the hand-over to the runtime (with
    Redis: the append to the inbound stream); the agent's turn runs after it."""
    emulator.delays["users.info"] = 1.0
    started = time.monotonic()
    await bot.slack.deliver(event_callback(emulator.post_as_user(DM, ALICE, "take your time")))
    acked_after = time.monotonic() - started
    assert bot.adapter.inbound_stats["dispatched"] == 1  # recorded before the ack came back
    assert 1.0 <= acked_after < 3.0  # ...within Slack's 3 seconds
    [reply] = await bot.replies(1)
    assert reply["text"].endswith("take your time")


async def test_a_slow_lookup_still_gets_its_ack_within_three_seconds(bot: Bot, emulator: SlackEmulator) -> None:
    emulator.delays["users.info"] = 2.6
    started = time.monotonic()
    await bot.slack.deliver(event_callback(emulator.post_as_user(DM, ALICE, "very slow")))
    assert time.monotonic() - started < 3.0
    [reply] = await bot.replies(1)
    assert reply["text"].endswith("very slow")


async def test_socket_mode_reconnects_when_slack_asks(emulator: SlackEmulator) -> None:
    bot = await start_bot(emulator, "socket")
    try:
        await emulator.request_reconnect()
        await wait_for(lambda: emulator.connections == 2 and emulator.open_sockets == 1)
        await bot.deliver(emulator.post_as_user(DM, ALICE, "still there?"))
        [reply] = await bot.replies(1)
        assert reply["text"].endswith("still there?")
        assert len(emulator.calls_to("apps.connections.open")) == 2
    finally:
        await bot.app.stop()


async def test_a_wrong_app_token_keeps_slack_off_and_says_why(
    emulator: SlackEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    app = App.from_config(
        {
            "agents": {"assistant": {"model": "offline/echo"}},
            "platforms": {"slack": slack_section(emulator, "socket", app_token="xapp-wrong-secret")},
        }
    )
    await app.start()
    try:
        assert "slack" not in app.adapters
        assert "app_token" in caplog.text and "invalid_auth" in caplog.text
        assert "xapp-wrong-secret" not in caplog.text
    finally:
        await app.stop()


# --- HTTP mode: verification ---------------------------------------------------------------------


@pytest.fixture
async def http_bot(emulator: SlackEmulator) -> AsyncIterator[Bot]:
    running = await start_bot(emulator, "http")
    yield running
    await running.app.stop()


async def test_url_verification_answers_the_challenge(http_bot: Bot) -> None:
    body = {"token": "legacy", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}
    status, text = await post_signed(http_bot.slack.url, body)
    assert status == 200
    assert "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" in text


async def test_wrong_signature_is_rejected_and_never_processed(http_bot: Bot, emulator: SlackEmulator) -> None:
    body = event_callback(emulator.post_as_user(DM, ALICE, "forged"))
    status, _ = await post_signed(http_bot.slack.url, body, secret="not-the-signing-secret")
    assert status == 401
    status, _ = await post_signed(http_bot.slack.url, body, signature="v0=" + "0" * 64)
    assert status == 401
    await http_bot.app.drain()
    assert http_bot.adapter.inbound_stats["received"] == 0
    assert emulator.posted() == []


async def test_stale_timestamp_is_rejected_and_never_processed(http_bot: Bot, emulator: SlackEmulator) -> None:
    body = event_callback(emulator.post_as_user(DM, ALICE, "replayed"))
    status, _ = await post_signed(http_bot.slack.url, body, timestamp=int(time.time()) - 6 * 60)
    assert status == 401
    await http_bot.app.drain()
    assert http_bot.adapter.inbound_stats["received"] == 0
    assert emulator.posted() == []


def test_signature_helper_matches_slack_documentation_example() -> None:
    """The emulator signs like Slack: the worked example from Slack's docs."""
    body = (
        "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
        "&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
        "&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
        "&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
    )
    assert sign(body, 1531420618, "8f742231b10e8888abcd99yyyzzz85a5") == (
        "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
    )


# --- platform events reach their hooks -------------------------------------------------------------


async def test_platform_events_reach_their_hooks(bot: Bot, emulator: SlackEmulator) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    for name in ("message_edited", "message_deleted", "reaction_received", "member_joined", "member_left"):
        bot.app.hooks.register(name, lambda event: seen.append((event.name, event.payload)))

    original = emulator.post_as_user(CHANNEL, ALICE, "teh plan")
    edited = dict(original, text="the plan")
    unfurl = dict(edited, attachments=[{"title": "preview"}])
    events = [
        {"type": "message", "subtype": "message_changed", "channel": CHANNEL, "hidden": True,
         "message": edited, "previous_message": original, "ts": "1.1", "event_ts": "1.1", "channel_type": "channel"},
        {"type": "message", "subtype": "message_changed", "channel": CHANNEL, "hidden": True,
         "message": unfurl, "previous_message": edited, "ts": "1.2", "event_ts": "1.2", "channel_type": "channel"},
        {"type": "reaction_added", "user": BOB, "reaction": "thumbsup",
         "item": {"type": "message", "channel": CHANNEL, "ts": original["ts"]}, "item_user": ALICE, "event_ts": "1.3"},
        {"type": "reaction_removed", "user": BOB, "reaction": "partyparrot",
         "item": {"type": "message", "channel": CHANNEL, "ts": original["ts"]}, "item_user": ALICE, "event_ts": "1.4"},
        {"type": "message", "subtype": "message_deleted", "channel": CHANNEL, "hidden": True,
         "deleted_ts": original["ts"], "previous_message": edited, "ts": "1.5", "event_ts": "1.5", "channel_type": "channel"},
        {"type": "member_joined_channel", "user": BOB, "channel": CHANNEL, "channel_type": "C", "team": "T0EMU", "event_ts": "1.6"},
        {"type": "member_left_channel", "user": BOB, "channel": CHANNEL, "channel_type": "C", "team": "T0EMU", "event_ts": "1.7"},
    ]
    for event in events:  # one at a time: the order of hooks is then the order of events
        await bot.deliver(event)

    assert [(name, p.get("kind")) for name, p in seen] == [
        ("message_edited", "message_edited"),
        ("reaction_received", "reaction_added"),
        ("reaction_received", "reaction_removed"),
        ("message_deleted", "message_deleted"),
        ("member_joined", "member_joined"),
        ("member_left", "member_left"),
    ]
    payloads = [p for _, p in seen]
    assert payloads[0]["new_text"] == "the plan" and payloads[0]["message_id"] == original["ts"]
    assert payloads[1]["emoji"] == "👍" and payloads[1]["user_id"] == BOB
    assert payloads[2]["emoji"] == "partyparrot"  # a custom emoji keeps its Slack name
    assert payloads[3]["message_id"] == original["ts"]
    assert payloads[4]["user_id"] == BOB and payloads[4]["chat_id"] == CHANNEL
    assert emulator.posted() == []  # events are not turns


async def test_a_retried_event_reaches_its_hook_once(bot: Bot, emulator: SlackEmulator) -> None:
    seen: list[dict[str, Any]] = []
    bot.app.hooks.register("reaction_received", lambda event: seen.append(event.payload))
    body = event_callback(
        {"type": "reaction_added", "user": BOB, "reaction": "eyes",
         "item": {"type": "message", "channel": CHANNEL, "ts": "1700000000.000001"}, "event_ts": "1.3"}
    )
    await bot.slack.deliver_all(body)
    await bot.slack.deliver_all(body, retry=1)
    await bot.app.drain()
    assert [p["emoji"] for p in seen] == ["👀"]


# --- several processes: Redis store, one receiving connection, replies from workers ----------------


async def test_with_the_redis_store_a_thread_reply_from_a_worker_keeps_the_thread_addressed(
    emulator: SlackEmulator, redis_url: str
) -> None:
    """In durable mode one adapter instance receives and another sends; the receiving one
    learns that the bot is in a thread from Slack's echo of the bot's own post."""
    emulator.echo_posts = True
    app = App.from_config(
        {
            "agents": {"assistant": {"model": "offline/echo"}},
            "platforms": {"slack": slack_section(emulator, "socket")},
            "store": {"url": redis_url, "prefix": f"slack-{uuid.uuid4().hex[:8]}:"},
        }
    )
    await app.start()
    try:
        root = emulator.post_as_user(CHANNEL, ALICE, "Who owns the release?")
        await emulator.send_envelope(event_callback(root))
        ask = emulator.post_as_user(CHANNEL, BOB, f"<@{BOT_USER_ID}> any idea?", thread_ts=root["ts"])
        await emulator.send_envelope(event_callback(ask))
        await wait_for(lambda: len(emulator.posted()) == 1, timeout=10)
        await wait_for(lambda: len(emulator.echoes) == 1 and emulator.echoes[0].done())

        follow_up = emulator.post_as_user(CHANNEL, ALICE, "and the date?", thread_ts=root["ts"])
        body = event_callback(follow_up)
        await emulator.send_envelope(body)
        await emulator.send_envelope(body, retry_attempt=1, retry_reason="timeout")
        await wait_for(lambda: len(emulator.posted()) == 2, timeout=10)
        await asyncio.sleep(0.3)  # a duplicate answer would show up now

        replies = emulator.posted()
        assert len(replies) == 2
        assert [r["thread_ts"] for r in replies] == [root["ts"], root["ts"]]
        assert replies[1]["text"].endswith("and the date?")
        assert emulator.connections == 1  # one receiving connection for the whole deployment
    finally:
        await app.stop()
