"""Telegram updates → BotMessage / PlatformEvent, through python-telegram-bot's real polling
(and webhook server) against the Bot API emulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from botweave.adapter import FileUnavailable
from botweave.adapters.telegram.adapter import TelegramAdapter
from botweave.types import META_MENTIONS_BOT, META_REPLY_TO_BOT, BotMessage, MessageType, PlatformEvent

from tests.emulators.telegram import (
    BOT_ID,
    TelegramEmulator,
    adapter_config,
    wait_until,
)

ANN = TelegramEmulator.user(1, "Ann", "ann")
BOB = TelegramEmulator.user(2, "Bob", "bob")
OTHER_BOT = TelegramEmulator.user(99, "Helper", "HelperBot", is_bot=True)


class Received:
    """The items the adapter dispatched, in order."""

    def __init__(self) -> None:
        self.items: list[BotMessage | PlatformEvent] = []

    async def __call__(self, item: BotMessage | PlatformEvent) -> None:
        self.items.append(item)

    def messages(self) -> list[BotMessage]:
        return [i for i in self.items if isinstance(i, BotMessage)]

    def events(self) -> list[PlatformEvent]:
        return [i for i in self.items if isinstance(i, PlatformEvent)]

    async def wait(self, count: int = 1) -> None:
        await wait_until(lambda: len(self.items) >= count, what=f"{count} dispatched items")


@pytest_asyncio.fixture
async def tg(telegram_emulator: TelegramEmulator) -> AsyncIterator[tuple[TelegramEmulator, TelegramAdapter, Received]]:
    adapter = TelegramAdapter(adapter_config(telegram_emulator))
    received = Received()
    adapter.bind(received)
    await adapter.start()
    try:
        yield telegram_emulator, adapter, received
    finally:
        await adapter.stop()


async def one_message(tg: Any, chat: dict[str, Any], sender: dict[str, Any] | None, text: str | None = None, **kw: Any) -> BotMessage:
    emu, _, received = tg
    before = len(received.messages())
    emu.push_message(chat, sender, text, **kw)
    await wait_until(lambda: len(received.messages()) > before, what="a message")
    return received.messages()[-1]


# --- identity and basics ----------------------------------------------------------------


async def test_login_sets_self_user_and_requests_every_update_type(tg):
    emu, adapter, _ = tg
    assert adapter.self_user is not None
    assert (adapter.self_user.user_id, adapter.self_user.username, adapter.self_user.is_bot) == (str(BOT_ID), "ThisBot", True)
    await wait_until(lambda: emu.allowed_updates is not None, what="a getUpdates call")
    for kind in ("message", "edited_message", "channel_post", "message_reaction", "chat_member", "my_chat_member", "callback_query"):
        assert kind in emu.allowed_updates
    assert "message_deleted" not in adapter.emits and "reaction_added" in adapter.emits


async def test_dm_text_becomes_a_turn(tg):
    emu = tg[0]
    msg = await one_message(tg, emu.private_chat(ANN), ANN, "hello there")
    assert msg.platform == "telegram"
    assert msg.text == "hello there" and msg.message_type == MessageType.TEXT
    assert (msg.sender.user_id, msg.sender.username, msg.sender.display_name) == ("1", "ann", "Ann")
    assert (msg.channel.channel_id, msg.channel.channel_type) == ("1", "dm")
    assert msg.allow_control and msg.reply_to is None and msg.thread_id is None and msg.quoted is None
    assert msg.metadata[META_MENTIONS_BOT] is False and msg.metadata[META_REPLY_TO_BOT] is False
    assert msg.timestamp.tzinfo is not None


async def test_channel_types(tg):
    emu = tg[0]
    basic = await one_message(tg, emu.group(-5, "Old group", kind="group"), ANN, "hi")
    super_ = await one_message(tg, emu.group(-1001, "Team"), ANN, "hi")
    post = await one_message(tg, emu.channel(-1002, "News", "news"), None, "breaking", sender_chat={"id": -1002, "type": "channel", "title": "News"})
    assert [basic.channel.channel_type, super_.channel.channel_type, post.channel.channel_type] == ["group", "group", "channel"]
    assert super_.channel.title == "Team"
    assert post.sender.user_id == "-1002" and post.sender.display_name == "News" and not post.sender.is_bot


# --- content types ----------------------------------------------------------------------

PHOTO = [
    {"file_id": "p-small", "file_unique_id": "ps", "width": 90, "height": 60, "file_size": 1000},
    {"file_id": "p-large", "file_unique_id": "pl", "width": 1280, "height": 853, "file_size": 90000},
    {"file_id": "p-mid", "file_unique_id": "pm", "width": 320, "height": 213, "file_size": 9000},
]
MEDIA_CASES = [
    ({"photo": PHOTO, "caption": "look"}, MessageType.IMAGE, "look", {"type": "photo", "file_id": "p-large", "mime": "image/jpeg", "size": 90000}),
    ({"document": {"file_id": "d1", "file_unique_id": "du", "file_name": "report.pdf", "mime_type": "application/pdf", "file_size": 1234}},
     MessageType.FILE, "", {"type": "document", "file_id": "d1", "filename": "report.pdf", "mime": "application/pdf", "size": 1234}),
    ({"audio": {"file_id": "a1", "file_unique_id": "au", "duration": 120, "mime_type": "audio/mpeg", "file_size": 5000, "file_name": "song.mp3"}},
     MessageType.AUDIO, "", {"type": "audio", "file_id": "a1", "mime": "audio/mpeg", "filename": "song.mp3", "duration": 120}),
    ({"voice": {"file_id": "v1", "file_unique_id": "vu", "duration": 3, "mime_type": "audio/ogg", "file_size": 800}, "caption": "listen"},
     MessageType.AUDIO, "listen", {"type": "voice", "file_id": "v1", "mime": "audio/ogg", "size": 800}),
    ({"video": {"file_id": "vd", "file_unique_id": "vdu", "width": 640, "height": 360, "duration": 9, "mime_type": "video/mp4"}},
     MessageType.VIDEO, "", {"type": "video", "file_id": "vd", "mime": "video/mp4", "width": 640}),
    ({"video_note": {"file_id": "vn", "file_unique_id": "vnu", "length": 240, "duration": 5}},
     MessageType.VIDEO, "", {"type": "video_note", "file_id": "vn", "mime": "video/mp4"}),
    ({"sticker": {"file_id": "st", "file_unique_id": "stu", "type": "regular", "width": 512, "height": 512,
                  "is_animated": False, "is_video": False, "emoji": "😀"}},
     MessageType.STICKER, "😀", {"type": "sticker", "file_id": "st", "mime": "image/webp", "emoji": "😀"}),
    ({"animation": {"file_id": "gif", "file_unique_id": "gu", "width": 200, "height": 200, "duration": 2, "mime_type": "video/mp4", "file_name": "fun.mp4"},
      "document": {"file_id": "gif", "file_unique_id": "gu", "mime_type": "video/mp4", "file_name": "fun.mp4"}},
     MessageType.VIDEO, "", {"type": "animation", "file_id": "gif", "filename": "fun.mp4"}),
    ({"location": {"latitude": 52.52, "longitude": 13.405}},
     MessageType.LOCATION, "Location: 52.52, 13.405", {"type": "location", "latitude": 52.52, "longitude": 13.405}),
    ({"location": {"latitude": 48.85, "longitude": 2.35}, "venue": {"location": {"latitude": 48.85, "longitude": 2.35}, "title": "Louvre", "address": "Rue de Rivoli"}},
     MessageType.LOCATION, "Venue: Louvre, Rue de Rivoli (48.85, 2.35)", {"type": "venue", "title": "Louvre"}),
    ({"contact": {"phone_number": "+4912345", "first_name": "Carl", "last_name": "Cole", "user_id": 77}},
     MessageType.FILE, "Contact: Carl Cole +4912345", {"type": "contact", "phone_number": "+4912345", "user_id": "77"}),
]


@pytest.mark.parametrize(("extra", "kind", "text", "expected"), MEDIA_CASES, ids=[c[3]["type"] for c in MEDIA_CASES])
async def test_media_becomes_type_and_attachments(tg, extra, kind, text, expected):
    emu = tg[0]
    msg = await one_message(tg, emu.private_chat(ANN), ANN, None, **extra)
    assert msg.message_type == kind
    assert msg.text == text
    assert len(msg.attachments) == 1
    attachment = msg.attachments[0]
    assert {k: attachment.get(k) for k in expected} == expected


async def test_caption_entities_count_as_mentions(tg):
    emu = tg[0]
    msg = await one_message(
        tg, emu.group(-1001), ANN, None, photo=PHOTO, caption="@ThisBot what is this?",
        caption_entities=[{"type": "mention", "offset": 0, "length": 8}],
    )
    assert msg.text == "@ThisBot what is this?" and msg.metadata[META_MENTIONS_BOT] is True


# --- commands and mentions --------------------------------------------------------------


async def test_commands_including_bot_suffix(tg):
    emu = tg[0]
    group = emu.group(-1001)
    mine = await one_message(tg, group, ANN, "/help@ThisBot topics")
    other = await one_message(tg, group, ANN, "/help@OtherBot")
    bare = await one_message(tg, group, ANN, "/new")
    assert mine.message_type == MessageType.COMMAND and mine.command == "help" and mine.command_args == ["topics"]
    assert mine.command_target == "ThisBot"
    assert other.command_target == "OtherBot"  # the runtime drops commands for other bots
    assert bare.is_command and bare.command_target is None


async def test_group_mentions_and_replies_to_the_bot(tg):
    emu = tg[0]
    group = emu.group(-1001)
    plain = await one_message(tg, group, ANN, "just chatting")
    mention = await one_message(tg, group, ANN, "hey @thisbot, help")  # usernames are case-insensitive
    other = await one_message(tg, group, ANN, "hey @someoneelse")
    text_mention = await one_message(
        tg, group, ANN, "This Bot, help", entities=[{"type": "text_mention", "offset": 0, "length": 8, "user": emu.bot}]
    )
    ours = emu.message(group, emu.bot, "an earlier answer")
    reply = await one_message(tg, group, BOB, "thanks", reply_to=ours)
    reply_to_human = await one_message(tg, group, BOB, "agreed", reply_to=emu.message(group, ANN, "a human said"))
    assert [m.metadata[META_MENTIONS_BOT] for m in (plain, mention, other, text_mention)] == [False, True, False, True]
    assert reply.metadata[META_REPLY_TO_BOT] is True and reply.reply_to == str(ours["message_id"])
    assert reply.quoted is not None and (reply.quoted.text, reply.quoted.author) == ("an earlier answer", "bot")
    assert reply_to_human.metadata[META_REPLY_TO_BOT] is False and reply_to_human.quoted.author == "user"


# --- threads, replies, quotes -----------------------------------------------------------


async def test_forum_topic_messages_carry_the_thread_and_no_fake_reply(tg):
    emu = tg[0]
    forum = emu.group(-1003, "Forum", forum=True)
    topic = emu.topic(forum, emu.bot, "Releases")  # created by the bot itself
    msg = await one_message(tg, forum, ANN, "in the topic", thread_id=topic["message_id"])
    assert msg.thread_id == str(topic["message_id"])
    assert msg.reply_to is None and msg.quoted is None
    assert msg.metadata[META_REPLY_TO_BOT] is False  # pointing at the topic header is not a reply
    earlier = emu.message(forum, emu.bot, "bot said", thread_id=topic["message_id"])
    reply = await one_message(tg, forum, ANN, "re", thread_id=topic["message_id"], reply_to=earlier)
    assert reply.thread_id == str(topic["message_id"]) and reply.reply_to == str(earlier["message_id"])
    assert reply.metadata[META_REPLY_TO_BOT] is True


async def test_reply_threads_outside_forums_are_not_topics(tg):
    emu = tg[0]
    group = emu.group(-1001)
    first = emu.message(group, BOB, "root")
    msg = await one_message(tg, group, ANN, "re", reply_to=first, message_thread_id=first["message_id"])
    assert msg.thread_id is None and msg.reply_to == str(first["message_id"])


async def test_partial_quote_is_preferred_over_the_whole_message(tg):
    emu = tg[0]
    chat = emu.private_chat(ANN)
    ours = emu.message(chat, emu.bot, "First point. Second point. Third point.")
    full = await one_message(tg, chat, ANN, "why?", reply_to=ours)
    partial = await one_message(
        tg, chat, ANN, "why this?", reply_to=ours, quote={"text": "Second point.", "position": 13, "is_manual": True}
    )
    assert full.quoted.text == "First point. Second point. Third point."
    assert partial.quoted.text == "Second point." and partial.quoted.author == "bot"
    assert partial.prompt_text == '[In reply to: "Second point."]\nwhy this?'


async def test_external_reply_quotes_another_chat(tg):
    emu = tg[0]
    chat = emu.private_chat(ANN)
    msg = await one_message(
        tg, chat, ANN, "what about this?",
        external_reply={
            "origin": {"type": "channel", "chat": {"id": -1002, "type": "channel", "title": "News"}, "message_id": 55, "date": 1},
            "chat": {"id": -1002, "type": "channel", "title": "News"}, "message_id": 55,
        },
        quote={"text": "prices rise 5%", "position": 0},
    )
    assert msg.reply_to is None  # not a message of this chat
    assert (msg.quoted.message_id, msg.quoted.text, msg.quoted.author) == ("55", "prices rise 5%", "user")


async def test_forwarded_and_bot_content_cannot_control(tg):
    emu = tg[0]
    chat = emu.private_chat(ANN)
    forwarded = await one_message(
        tg, chat, ANN, "/new", forward_origin={"type": "user", "sender_user": BOB, "date": 1}
    )
    from_bot = await one_message(tg, emu.group(-1001), OTHER_BOT, "/new@ThisBot")
    via_bot = await one_message(tg, chat, ANN, "inline result", via_bot=OTHER_BOT)
    human = await one_message(tg, chat, ANN, "/new")
    assert forwarded.allow_control is False and forwarded.metadata["forwarded"] is True
    assert from_bot.allow_control is False and from_bot.sender.is_bot is True
    assert via_bot.allow_control is False
    assert human.allow_control is True


async def test_callback_button_press_is_a_button_pressed_event_and_answered(tg):
    emu, _, received = tg
    chat = emu.private_chat(ANN)
    ours = emu.message(chat, emu.bot, "pick one")
    emu.push("callback_query", {"id": "cbq-1", "from": ANN, "chat_instance": "ci", "data": "option_a", "message": ours})
    await received.wait()
    event = received.events()[-1]
    assert event.kind == "button_pressed" and event.action_id == "option_a"
    assert event.message_id == str(ours["message_id"]) and event.chat_id == "1"
    assert event.user_id == str(ANN["id"]) and event.event_id == "cb:cbq-1"
    await wait_until(lambda: emu.calls_to("answerCallbackQuery"), what="answerCallbackQuery")
    assert emu.calls_to("answerCallbackQuery")[0].params["callback_query_id"] == "cbq-1"


# --- platform events --------------------------------------------------------------------


async def test_reaction_changes_become_one_event_per_emoji(tg):
    emu, _, received = tg
    chat = emu.group(-1001)
    target = emu.message(chat, emu.bot, "answer")
    emu.push_reaction(target, ANN, old=["👍", "🔥"], new=["🔥", "❤", "custom:5368324170671202286"])
    await received.wait(3)
    events = {(e.kind, e.emoji) for e in received.events()}
    assert events == {("reaction_removed", "👍"), ("reaction_added", "❤"), ("reaction_added", "custom:5368324170671202286")}
    for event in received.events():
        assert (event.chat_id, event.user_id, event.message_id) == ("-1001", "1", str(target["message_id"]))
        assert event.event_id
    assert len({e.event_id for e in received.events()}) == 3


async def test_edit_becomes_message_edited_with_the_new_text(tg):
    emu, _, received = tg
    chat = emu.private_chat(ANN)
    original = emu.message(chat, ANN, "helo")
    emu.push_edit(original, "hello")
    await received.wait()
    (event,) = received.events()
    assert (event.kind, event.new_text, event.message_id, event.user_id) == ("message_edited", "hello", str(original["message_id"]), "1")
    assert received.messages() == []  # an edit is not a new turn


async def test_joins_leaves_and_topics(tg):
    emu, _, received = tg
    group = emu.group(-1001)
    emu.push_message(group, ANN, None, new_chat_members=[BOB, OTHER_BOT])
    emu.push_message(group, BOB, None, left_chat_member=BOB)
    emu.push_chat_member(group, TelegramEmulator.user(3, "Cid"), "left", "member")
    emu.push_chat_member(group, TelegramEmulator.user(4, "Dee"), "member", "kicked")
    emu.push_chat_member(group, TelegramEmulator.user(5, "Eve"), "member", "administrator")  # promotion: no event
    forum = emu.group(-1003, "Forum", forum=True)
    topic = emu.topic(forum, ANN, "Ideas")
    emu.push("message", topic)
    await received.wait(6)
    await asyncio.sleep(0.1)
    got = [(e.kind, e.user_id) for e in received.events()]
    assert got == [
        ("member_joined", "2"), ("member_joined", "99"), ("member_left", "2"),
        ("member_joined", "3"), ("member_left", "4"), ("thread_created", "1"),
    ]
    created = received.events()[-1]
    assert created.thread_id == str(topic["message_id"]) and created.new_text == "Ideas"
    assert received.messages() == []  # service messages are never turns


# --- robustness -------------------------------------------------------------------------


async def test_malformed_updates_are_skipped_and_the_next_is_handled(tg):
    emu, _, received = tg
    chat = emu.private_chat(ANN)
    emu.push_raw({"message": "this is not a message object"})  # PTB cannot parse it
    emu.push_raw({"message": {"message_id": 9, "date": 1, "text": "no chat"}})  # parses, cannot be normalised
    emu.push_message(chat, ANN, "still here")
    await received.wait()
    assert [m.text for m in received.messages()] == ["still here"]
    await wait_until(lambda: emu.pending == [], what="every update confirmed")


async def test_persistent_409_conflict_is_reported_and_polling_stops(telegram_emulator):
    emu = telegram_emulator
    adapter = TelegramAdapter(adapter_config(emu, conflict_retries=1))
    adapter.bind(Received())
    emu.conflict(times=1000)
    await adapter.start()
    try:
        await wait_until(lambda: adapter.failure is not None, timeout=10, what="the conflict to be reported")
        assert "409 Conflict" in adapter.failure and "another process" in adapter.failure
        await wait_until(lambda: not adapter.application.updater.running, what="polling to stop")
        polls = len(emu.calls_to("getUpdates"))
        await asyncio.sleep(1.2)
        assert len(emu.calls_to("getUpdates")) == polls == 2  # one retry, then nothing more
    finally:
        await adapter.stop()


async def test_a_passing_conflict_is_retried(telegram_emulator):
    emu = telegram_emulator
    adapter = TelegramAdapter(adapter_config(emu, conflict_retries=2))
    received = Received()
    adapter.bind(received)
    emu.conflict(times=1)
    await adapter.start()
    try:
        emu.push_message(emu.private_chat(ANN), ANN, "after the conflict")
        await wait_until(lambda: received.messages(), timeout=5, what="the message after a conflict")
        assert adapter.failure is None
    finally:
        await adapter.stop()


async def test_a_rejected_token_fails_start_clearly(telegram_emulator, caplog):
    caplog.set_level("DEBUG")
    adapter = TelegramAdapter(adapter_config(telegram_emulator, token="999:wrong"))
    with pytest.raises(RuntimeError, match="rejected the bot token") as failure:
        await adapter.start()
    assert "999:wrong" not in str(failure.value) and "999:wrong" not in caplog.text
    assert not adapter.running
    await adapter.stop()


async def test_attachments_are_read_with_get_file_and_the_file_endpoint(tg):
    emu, adapter, _ = tg
    emu.add_file("d1", "documents/file_1.pdf", b"%PDF")
    assert await adapter.download({"file_id": "d1"}, max_bytes=100) == b"%PDF"
    assert len(emu.calls_to("getFile")) == 1 and emu.downloads == ["documents/file_1.pdf"]
    with pytest.raises(FileUnavailable) as missing:
        await adapter.download({"file_id": "unknown"}, max_bytes=100)
    assert "invalid file_id" in str(missing.value).lower() and emu.token not in str(missing.value)


async def test_token_never_reaches_the_logs(tg, caplog):
    emu = tg[0]
    caplog.set_level("DEBUG")
    await one_message(tg, emu.private_chat(ANN), ANN, "hi")
    await tg[1].send("1", "hello")
    assert emu.token not in caplog.text
    assert emu.token not in repr(tg[1])


# --- webhook ----------------------------------------------------------------------------


async def test_webhook_accepts_the_right_secret_and_rejects_others(telegram_emulator, unused_tcp_port):
    emu = telegram_emulator
    url = f"http://127.0.0.1:{unused_tcp_port}/tg-hook"
    adapter = TelegramAdapter(
        adapter_config(
            emu, mode="webhook", webhook_url=url, webhook_listen="127.0.0.1", webhook_port=unused_tcp_port,
            webhook_path="/tg-hook", webhook_secret="s3cret-token",
        )
    )
    received = Received()
    adapter.bind(received)
    await adapter.start()
    try:
        (call,) = emu.calls_to("setWebhook")
        assert call.params["url"] == url and call.params["secret_token"] == "s3cret-token"
        assert "message_reaction" in call.params["allowed_updates"]
        chat = emu.private_chat(ANN)
        emu.push_message(chat, ANN, "via webhook")
        await received.wait()
        assert received.messages()[0].text == "via webhook"
        assert emu.webhook_deliveries[-1][1] == 200

        forged = {"update_id": 777, "message": emu.message(chat, ANN, "forged")}
        wrong = await emu.post_to_webhook(forged, headers={"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": "guess"})
        missing = await emu.post_to_webhook(forged, headers={"Content-Type": "application/json"})
        assert (wrong, missing) == (403, 403)
        await asyncio.sleep(0.2)
        assert [m.text for m in received.messages()] == ["via webhook"]
    finally:
        await adapter.stop()


async def test_webhook_mode_needs_a_public_url(telegram_emulator):
    adapter = TelegramAdapter(adapter_config(telegram_emulator, mode="webhook"))
    with pytest.raises(ValueError, match="webhook_url"):
        await adapter.start()
    await adapter.stop()


async def test_updates_keep_chat_order_and_a_slow_chat_does_not_block_others(telegram_emulator):
    emu = telegram_emulator
    adapter = TelegramAdapter(adapter_config(emu))
    order: list[str] = []

    async def slow_for_ann(item: BotMessage | PlatformEvent) -> None:
        assert isinstance(item, BotMessage)
        if item.channel.channel_id == "1":
            await asyncio.sleep(0.1)
        order.append(f"{item.channel.channel_id}:{item.text}")

    adapter.bind(slow_for_ann)
    await adapter.start()
    try:
        ann, bob = emu.private_chat(ANN), emu.private_chat(BOB)
        for n in range(5):
            emu.push_message(ann, ANN, f"a{n}")
        emu.push_message(bob, BOB, "b0")
        await wait_until(lambda: len(order) == 6, what="all six messages")
        assert [o for o in order if o.startswith("1:")] == [f"1:a{n}" for n in range(5)]
        assert order.index("2:b0") < order.index("1:a1")  # Bob was not queued behind Ann
    finally:
        await adapter.stop()


async def test_updates_are_acknowledged_only_after_the_runtime_has_them(telegram_emulator: TelegramEmulator) -> None:
    """The next getUpdates offset acknowledges an update; it must wait for the hand-over
    (with Redis, the append to the inbound stream), so a crash in between loses nothing."""
    emu = telegram_emulator
    release = asyncio.Event()
    handed: list[str] = []

    async def slow_sink(item: BotMessage | PlatformEvent) -> None:
        await release.wait()
        handed.append(item.text if isinstance(item, BotMessage) else "")

    adapter = TelegramAdapter(adapter_config(emu, poll_timeout=0))
    adapter.bind(slow_sink)
    await adapter.start()
    try:
        user = emu.user(42, "Ann")
        emu.push_message(emu.private_chat(user), user, "keep me")
        await asyncio.sleep(1.0)  # several poll intervals
        offsets = [c.params.get("offset") for c in emu.calls_to("getUpdates")]
        acked = [o for o in offsets if o is not None and int(o) > 1000]  # the first update id is 1000
        assert acked == [], "the update was acknowledged before the runtime had it"
        release.set()
        await wait_until(lambda: handed == ["keep me"], timeout=5, what="the hand-over")
        await wait_until(
            lambda: any(o is not None and int(o) > 1000 for o in (c.params.get("offset") for c in emu.calls_to("getUpdates"))),
            timeout=5,
            what="the acknowledging poll",
        )
    finally:
        await adapter.stop()
