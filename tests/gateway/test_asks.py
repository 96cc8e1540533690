"""`ask_user` through the gateway: the `ask` event reaches the session's clients, `ask.answer`
answers it (the person asked only), a client that resumes is sent the open question again, a
question left open by a stopped bot is reported expired after the restart, and a Telegram
question can be answered from a token bound to the person asked."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botweave import App
from botweave.gateway import GatewayError

from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.gateway.support import TOKEN_CONFIG, client, collect, has

SIZES = "call ask_user " + json.dumps({"question": "Which size?", "options": ["Small", "Large"]})
FREE = "call ask_user " + json.dumps({"question": "What is the delivery address?"})
ANN_ON_TELEGRAM = TelegramEmulator.user(1, "Ann", "ann")  # ann's token is bound to telegram:1


def bot_config(*, store: str = "memory://", **more: Any) -> dict[str, Any]:
    return {
        "agents": {"assistant": {"model": "offline/echo", "tools": ["ask_user"]}},
        "gateway": {"listen": "127.0.0.1:0", "tokens": TOKEN_CONFIG},
        "store": {"url": store},
        **more,
    }


async def test_the_person_asked_answers_from_a_resumed_client_and_nobody_else_can(start_app) -> None:
    app = await start_app(bot_config())
    async with client(app, "ann") as ann, client(app, "bob") as bob:
        session = await ann.create_session()
        conversation = f"web:{session}"
        message_id = await ann.send(session, SIZES)
        events = await collect(ann, lambda seen: has(seen, "ask"))
        asked = events[-1]
        assert asked.conversation == conversation and asked.seq is not None
        assert asked.data["question"] == "Which size?" and asked.data["options"] == ["Small", "Large"]
        assert asked.data["session"] == session and asked.data["id"]
        ask_id = asked.data["id"]
        assert [a["id"] for a in (await ann.call("ask.list"))["asks"]] == [ask_id]
        assert (await bob.call("ask.list"))["asks"] == []
        with pytest.raises(GatewayError) as refused:
            await bob.call("ask.answer", {"id": ask_id, "value": "Small"})
        assert refused.value.code == "forbidden"
        cursor = ann.cursors[conversation]

    # ann's tab comes back, resuming after the `ask`: the open question is sent again
    async with client(app, "ann", resume={conversation: cursor}) as again:
        resent = await again.next_event(where=lambda e: e.event == "ask")
        assert resent.data["id"] == ask_id and resent.data["options"] == ["Small", "Large"]
        assert resent.conversation == conversation
        with pytest.raises(GatewayError) as wrong:
            await again.call("ask.answer", {"id": ask_id, "value": "Medium"})
        assert wrong.value.code == "bad_request"
        assert await again.call("ask.answer", {"id": ask_id, "value": "Large"}) == {"outcome": "answered", "value": "Large"}
        events = await collect(again, lambda seen: has(seen, "final", message_id=message_id))
        assert has(events, "ask.resolved", id=ask_id, outcome="answered", value="Large")
        assert '{"answer": "Large"}' in events[-1].data["text"]
        edited = [e.data for e in events if e.event == "message" and "answered: Large" in e.data["text"]]
        assert edited and edited[-1]["buttons"] == []
        with pytest.raises(GatewayError) as twice:
            await again.call("ask.answer", {"id": ask_id, "value": "Small"})
        assert twice.value.code == "conflict" and "Already answered" in twice.value.message
    async with client(app, "ann", resume={conversation: cursor}) as later:
        await later.next_event(where=lambda e: e.event == "final")
        assert (await later.call("ask.list"))["asks"] == [], "an answered question is not sent again"


async def test_a_free_answer_comes_from_the_composer_as_the_next_message(start_app) -> None:
    app = await start_app(bot_config())
    async with client(app, "ann") as ann:
        session = await ann.create_session()
        message_id = await ann.send(session, FREE)
        asked = (await collect(ann, lambda seen: has(seen, "ask")))[-1]
        assert "options" not in asked.data
        await ann.send(session, "12 Rose Lane")
        events = await collect(ann, lambda seen: has(seen, "final", message_id=message_id))
        assert '{"answer": "12 Rose Lane"}' in events[-1].data["text"]
        assert has(events, "ask.resolved", id=asked.data["id"], value="12 Rose Lane")
        finals = [e for e in events if e.event == "final"]
        assert len(finals) == 1, "the answer started no turn of its own"


async def test_a_question_open_at_shutdown_is_reported_expired_after_the_restart(tmp_path) -> None:
    store = f"sqlite:///{tmp_path / 'bot.db'}"
    first = App.from_config(bot_config(store=store))
    await first.start()
    try:
        async with client(first, "ann") as ann:
            session = await ann.create_session()
            await ann.send(session, SIZES)
            asked = (await collect(ann, lambda seen: has(seen, "ask")))[-1]
            conversation = asked.conversation
            cursor = ann.cursors[conversation]
    finally:
        await first.stop()
    second = App.from_config(bot_config(store=store))
    await second.start()
    try:
        async with client(second, "ann", resume={conversation: cursor}) as ann:
            ended = await ann.next_event(where=lambda e: e.event == "ask.resolved")
            assert ended.data["id"] == asked.data["id"] and ended.data["outcome"] == "expired"
            with pytest.raises(GatewayError) as late:
                await ann.call("ask.answer", {"id": asked.data["id"], "value": "Large"})
            assert late.value.code == "conflict" and "expired" in late.value.message
            # the message whose turn was cut off runs again and may ask anew; the old question is gone
            assert asked.data["id"] not in [a["id"] for a in (await ann.call("ask.list"))["asks"]]
            history = await ann.call("chat.history", {"conversation": conversation, "limit": 20})
            assert any("Expired" in m["text"] and not m["buttons"] for m in history["messages"])
    finally:
        await second.stop()


async def test_a_telegram_question_is_answered_from_the_token_bound_to_the_person(start_app, telegram_emulator) -> None:
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "allow", **adapter_config(emu)}
    app = await start_app(bot_config(platforms={"telegram": telegram}))
    async with client(app, "ann") as ann, client(app, "bob") as bob:
        chat = emu.private_chat(ANN_ON_TELEGRAM)
        emu.push_message(chat, ANN_ON_TELEGRAM, SIZES)
        notice = await ann.next_event(where=lambda e: e.event == "ask")
        assert notice.data["asked"] == {"platform": "telegram", "user_id": "1", "name": "Ann"}
        assert notice.data["session"] == notice.data["conversation"] == "telegram:dm:1"
        with pytest.raises(GatewayError) as refused:
            await bob.call("ask.answer", {"id": notice.data["id"], "value": "Small"})
        assert refused.value.code == "forbidden"
        await ann.call("ask.answer", {"id": notice.data["id"], "value": "2"})  # an option by its number
    await wait_until(lambda: any('{"answer": "Large"}' in t for t in emu.sent_texts(chat["id"])), 20, "the answer")
    question = next(m for m in emu.sent(chat["id"]) if m.get("reply_markup"))
    assert "Ann answered: Large" in emu.current(chat["id"], question["message_id"])["text"]

