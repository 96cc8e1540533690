"""End to end: Bot API emulator ⇄ python-telegram-bot ⇄ TelegramAdapter ⇄ App ⇄ offline agent.

The offline model answers "assistant (offline echo) heard: <turn>", so every assertion on a
sent text also shows what the agent was given.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from botweave import App
from botweave.adapters.telegram.adapter import TelegramAdapter
from botweave.config import BotConfig
from botweave.delivery import Delivery, ReplyChannel
from botweave.hooks import HookRegistry
from telegram import Message

from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)
from tests.support import StartApp

ANN = TelegramEmulator.user(1, "Ann", "ann")
BOB = TelegramEmulator.user(2, "Bob", "bob")
OTHER_BOT = TelegramEmulator.user(99, "Helper", "HelperBot", is_bot=True)
HEARD = "assistant (offline echo) heard: "

Runner = Callable[..., Any]


@pytest_asyncio.fixture
async def run_app(telegram_emulator: TelegramEmulator, start_app: StartApp) -> Runner:
    """Start an App whose only platform is Telegram, pointed at the emulator."""

    async def start(**telegram: Any) -> App:
        section = {"unknown_user_policy": "allow", **adapter_config(telegram_emulator), **telegram}
        app = await start_app({"agents": {"assistant": {"model": "offline/echo"}}, "platforms": {"telegram": section}})
        assert isinstance(app.adapters["telegram"], TelegramAdapter)
        return app

    return start


async def replies(emu: TelegramEmulator, chat_id: int, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
    await wait_until(lambda: len(emu.sent(chat_id)) >= count, timeout=timeout, what=f"{count} replies in {chat_id}")
    return emu.sent(chat_id)


async def settle(app: App, emu: TelegramEmulator) -> None:
    """Every pushed update fetched and every turn finished."""
    await wait_until(lambda: not emu.pending, what="updates to be fetched")
    await asyncio.sleep(0.05)
    await app.drain()


async def test_dm_reply_is_a_reply_to_the_users_message(run_app, telegram_emulator):
    emu = telegram_emulator
    await run_app(typing={"mode": "instant"})  # typing even for a quick answer
    question = emu.push_message(emu.private_chat(ANN), ANN, "hello there")
    (answer,) = await replies(emu, 1)
    assert answer["text"] == HEARD + "hello there"
    assert answer["reply_to_message"]["message_id"] == question["message_id"]
    assert emu.calls_to("sendChatAction")  # typing was shown while the turn ran


async def test_group_answers_only_when_addressed(run_app, telegram_emulator):
    emu = telegram_emulator
    app = await run_app()
    group = emu.group(-1001)
    emu.push_message(group, ANN, "just chatting")
    emu.push_message(group, ANN, "/help@OtherBot")
    emu.push_message(group, OTHER_BOT, "@ThisBot bots may not talk to me")
    await settle(app, emu)
    assert emu.sent(-1001) == []
    emu.push_message(group, ANN, "@ThisBot what time is it?")
    (first,) = await replies(emu, -1001)
    assert first["text"] == HEARD + "[Ann] @ThisBot what time is it?"
    emu.push_message(group, BOB, "and tomorrow?", reply_to=first)
    second = (await replies(emu, -1001, 2))[1]
    assert second["text"] == HEARD + '[Bob] [In reply to: "' + first["text"] + '"]\nand tomorrow?'


async def test_commands_for_this_bot_run_and_forwarded_ones_do_not(run_app, telegram_emulator):
    emu = telegram_emulator
    app = await run_app()
    group = emu.group(-1001)
    emu.push_message(group, ANN, "/new@ThisBot")
    (done,) = await replies(emu, -1001)
    assert done["text"] == "Started a new conversation; earlier messages are forgotten."
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, "/new", forward_origin={"type": "user", "sender_user": BOB, "date": 1})
    (answer,) = await replies(emu, 1)
    assert answer["text"] == HEARD + "/new"  # forwarded text is content for the agent, not a command
    await settle(app, emu)


async def test_forum_topic_reply_lands_in_the_topic(run_app, telegram_emulator):
    emu = telegram_emulator
    await run_app(typing={"mode": "instant"})  # typing even for a quick answer
    forum = emu.group(-1003, "Forum", forum=True)
    topic = emu.topic(forum, ANN, "Releases")
    emu.push_message(forum, ANN, "@ThisBot ship it?", thread_id=topic["message_id"])
    (answer,) = await replies(emu, -1003)
    assert answer["message_thread_id"] == topic["message_id"]
    assert answer["text"] == HEARD + "[Ann] @ThisBot ship it?"
    typing = emu.calls_to("sendChatAction")
    assert typing and all(c.params.get("message_thread_id") == topic["message_id"] for c in typing)


async def test_full_and_partial_quotes_reach_the_agent(run_app, telegram_emulator):
    emu = telegram_emulator
    await run_app()
    chat = emu.private_chat(ANN)
    earlier = emu.message(chat, emu.bot, "Plan A:  cheap.\nPlan B: fast.")
    emu.push_message(chat, ANN, "why?", reply_to=earlier)
    emu.push_message(chat, ANN, "and this?", reply_to=earlier, quote={"text": "Plan B: fast.", "position": 16, "is_manual": True})
    full, partial = await replies(emu, 1, 2)
    assert full["text"] == HEARD + '[In reply to: "Plan A: cheap. Plan B: fast."]\nwhy?'
    assert partial["text"] == HEARD + '[In reply to: "Plan B: fast."]\nand this?'


async def test_every_platform_event_reaches_its_hook(run_app, telegram_emulator):
    emu = telegram_emulator
    app = await run_app()
    seen: list[tuple[str, dict[str, Any]]] = []
    for name in ("reaction_received", "message_edited", "member_joined", "member_left", "thread_created", "message_deleted"):
        app.hooks.register(name, lambda event: seen.append((event.name, event.payload)))
    group = emu.group(-1001)
    target = emu.message(group, emu.bot, "answer")
    emu.push_reaction(target, ANN, old=[], new=["👍"])
    emu.push_reaction(target, ANN, old=["👍"], new=[])
    original = emu.message(group, ANN, "typo")
    emu.push_edit(original, "fixed " + "x" * 600)
    emu.push_message(group, ANN, None, new_chat_members=[BOB])
    emu.push_chat_member(group, BOB, "left", "member")  # the same join, reported twice by Telegram
    emu.push_message(group, BOB, None, left_chat_member=BOB)
    forum = emu.group(-1003, "Forum", forum=True)
    emu.push("message", emu.topic(forum, ANN, "Ideas"))
    await settle(app, emu)
    names = [name for name, _ in seen]
    assert names == ["reaction_received", "reaction_received", "message_edited", "member_joined", "member_left", "thread_created"]
    assert [p["kind"] for _, p in seen[:2]] == ["reaction_added", "reaction_removed"]
    assert seen[0][1]["emoji"] == "👍" and seen[0][1]["message_id"] == str(target["message_id"])
    assert seen[2][1]["new_text"] == ("fixed " + "x" * 600)[:500]
    assert seen[3][1]["user_id"] == "2" and seen[5][1]["chat_id"] == "-1003"
    assert emu.sent() == []  # events never start turns


async def test_webhook_with_right_and_wrong_secret(run_app, telegram_emulator, unused_tcp_port):
    emu = telegram_emulator
    url = f"http://127.0.0.1:{unused_tcp_port}/hook"
    await run_app(mode="webhook", webhook_url=url, webhook_port=unused_tcp_port, webhook_path="/hook", webhook_secret="right")
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, "delivered by Telegram")
    (answer,) = await replies(emu, 1)
    assert answer["text"] == HEARD + "delivered by Telegram"
    forged = {"update_id": 5000, "message": emu.message(chat, ANN, "forged")}
    status = await emu.post_to_webhook(
        forged, headers={"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": "wrong"}
    )
    assert status == 403
    await asyncio.sleep(0.3)
    assert emu.sent_texts(1) == [HEARD + "delivered by Telegram"]


async def test_long_reply_is_chunked_by_utf16_and_every_id_kept(run_app, telegram_emulator):
    emu = telegram_emulator
    app = await run_app()
    sent_ids: list[list[str]] = []
    app.hooks.register("message_sent", lambda event: sent_ids.append(event.payload["message_ids"]))
    chat = emu.private_chat(ANN)
    earlier = emu.message(chat, emu.bot, "q" * 200)
    long_text = "\n\n".join(["😀 emoji paragraph " * 30] * 7)  # 3792 chars, 4002 UTF-16 units
    question = emu.push_message(chat, ANN, long_text, reply_to=earlier)
    # The reply (prefix + quote + text) is under 4096 characters but over 4096 UTF-16 units.
    await wait_until(lambda: sent_ids, timeout=30, what="the reply to be sent")
    messages = emu.sent(1)
    assert len(messages) == 2
    assert [c.status for c in emu.calls_to("sendMessage")] == [200, 200]
    assert sent_ids == [[str(m["message_id"]) for m in messages]]
    assert all(len(m["text"].encode("utf-16-le")) // 2 <= 4096 for m in messages)
    assert messages[0]["reply_to_message"]["message_id"] == question["message_id"]
    assert all("reply_to_message" not in m for m in messages[1:])
    joined = "".join(m["text"] for m in messages).replace("\n", "").replace(" ", "")
    assert joined.endswith(long_text.replace("\n", "").replace(" ", ""))


async def test_streamed_reply_respects_the_edit_floor_and_ends_exact(run_app, telegram_emulator):
    emu = telegram_emulator
    app = await run_app(streaming=True, stream_edit_interval_ms=0)
    emu.push_message(emu.private_chat(ANN), ANN, "stream please")
    await wait_until(lambda: emu.calls_to("editMessageText"), timeout=30, what="the final edit")
    await app.drain()
    (sent,) = emu.sent(1)
    assert emu.current(1, sent["message_id"])["text"] == HEARD + "stream please"
    edits = [c for c in emu.calls_to("editMessageText") if c.status == 200]
    send_call = next(c for c in emu.calls_to("sendMessage") if c.status == 200)
    stamps = [send_call.at] + [c.at for c in edits]
    assert all(b - a >= 1.1 - 0.02 for a, b in zip(stamps, stamps[1:]))


@pytest.mark.parametrize(("chat_kind", "floor"), [("dm", 1.1), ("group", 3.1)])
async def test_slow_stream_edits_no_faster_than_the_floor(telegram_emulator, chat_kind, floor):
    """Tokens arrive every 50 ms for ~2.6 s; writes to the message keep Telegram's floor."""
    emu = telegram_emulator
    adapter = TelegramAdapter(adapter_config(emu))
    await adapter.start()
    try:
        chat = emu.private_chat(ANN) if chat_kind == "dm" else emu.group(-1001)
        origin_raw = emu.message(chat, ANN, "go")
        origin = adapter.inbound.message(Message.de_json(origin_raw, adapter.application.bot))
        channel = ReplyChannel(Delivery(HookRegistry()), adapter, origin, BotConfig(streaming=True, stream_edit_interval_ms=0))

        async def tokens() -> AsyncIterator[str]:
            for i in range(52):
                yield f"w{i} "
                await asyncio.sleep(0.05)

        delivery = await channel.stream_text(tokens())
        final = "".join(f"w{i} " for i in range(52))
        (sent,) = emu.sent(chat["id"])
        assert delivery.message_ids == [str(sent["message_id"])]
        assert emu.current(chat["id"], sent["message_id"])["text"] == final.strip()
        writes = [c.at for c in emu.calls if c.method in ("sendMessage", "editMessageText") and c.status == 200]
        assert all(b - a >= floor - 0.02 for a, b in zip(writes, writes[1:]))
        assert 2 <= len(writes) <= 1 + int(2.6 / floor) + 1  # the post, the edits the floor allows, the final
    finally:
        await adapter.stop()


async def test_429_storm_every_reply_delivered_once_in_order(run_app, telegram_emulator):
    emu = telegram_emulator
    app = await run_app()
    users = [TelegramEmulator.user(10 + i, f"User{i}") for i in range(3)]
    chats = [emu.private_chat(u) for u in users]
    emu.rate_limit("sendMessage", retry_after=1, times=4)
    for n in range(3):
        for user, chat in zip(users, chats):
            emu.push_message(chat, user, f"message {n}")
    for chat in chats:
        await replies(emu, chat["id"], 3, timeout=30)
    await app.drain()
    for chat in chats:
        assert emu.sent_texts(chat["id"]) == [HEARD + f"message {n}" for n in range(3)]
    assert sum(1 for c in emu.calls_to("sendMessage") if c.status == 429) == 4


async def test_a_malformed_update_is_skipped_and_the_next_answered(run_app, telegram_emulator):
    emu = telegram_emulator
    await run_app()
    chat = emu.private_chat(ANN)
    emu.push_raw({"message": ["not", "a", "message"]})
    emu.push_raw({"edited_message": {"message_id": "x"}})
    emu.push_message(chat, ANN, "are you alive?")
    (answer,) = await replies(emu, 1)
    assert answer["text"] == HEARD + "are you alive?"


async def test_a_redelivered_update_gets_one_answer(run_app, telegram_emulator):
    emu = telegram_emulator
    app = await run_app()
    chat = emu.private_chat(ANN)
    question = emu.message(chat, ANN, "once")
    emu.push_raw({"update_id": 3000, "message": question})
    await replies(emu, 1)
    emu.push_raw({"update_id": 3001, "message": question})  # Telegram may resend after a restart
    await settle(app, emu)
    assert emu.sent_texts(1) == [HEARD + "once"]
