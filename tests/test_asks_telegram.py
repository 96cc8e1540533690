"""`ask_user` end to end on Telegram: Bot API emulator ⇄ python-telegram-bot ⇄ App ⇄ a model
that calls the tool (the offline echo model on `call ask_user {...}`, or the loopback OpenAI
emulator scripted to call it).

The turn pauses on the question; the person asked answers with a button (options) or with
their next message (no options), and the model gets the answer as the call's result.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from botweave import App

from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until

ANN = TelegramEmulator.user(1, "Ann", "ann")
BOB = TelegramEmulator.user(2, "Bob", "bob")
SIZES = "call ask_user " + json.dumps({"question": "Which size?", "options": ["Small", "Large"]})
FREE = "call ask_user " + json.dumps({"question": "What is the delivery address?"})


def config(emu: TelegramEmulator, *, model: dict[str, Any] | None = None, entry: Any = "ask_user",
           telegram: dict[str, Any] | None = None) -> dict[str, Any]:
    agent = {"model": "offline/echo", **(model or {}), "tools": [entry]}
    return {
        "agents": {"assistant": agent},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu), **(telegram or {})}},
    }


def scripted(llm: OpenAIEmulator) -> dict[str, Any]:
    return {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback"}


def questions(emu: TelegramEmulator, chat_id: int) -> list[dict[str, Any]]:
    return [m for m in emu.sent(chat_id) if (m.get("text") or "").startswith("❓")]


async def a_question(emu: TelegramEmulator, chat_id: int) -> dict[str, Any]:
    await wait_until(lambda: questions(emu, chat_id), timeout=20, what="the question")
    return questions(emu, chat_id)[-1]


async def answered(emu: TelegramEmulator, query_id: str):
    await wait_until(lambda: emu.callback_answer(query_id) is not None, what="answerCallbackQuery")
    return emu.callback_answer(query_id)


def texts(emu: TelegramEmulator, chat_id: int) -> list[str]:
    return emu.sent_texts(chat_id)


async def test_a_press_by_the_person_asked_is_the_answer_and_others_are_told_it_is_not_theirs(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu))
    group = emu.private_chat(ANN)  # Bob's press reaches the bot as it would from a forwarded keyboard
    emu.push_message(group, ANN, SIZES)
    question = await a_question(emu, group["id"])
    where = (group["id"], question["message_id"])

    buttons = emu.buttons(*where)
    assert [b["text"] for b in buttons] == ["Small", "Large"]
    assert all(len(b["callback_data"].encode()) <= 64 for b in buttons)
    assert "Which size?" in question["text"] and "Ann" in question["text"]

    bob = emu.press(where, BOB, "Large")
    told = await answered(emu, bob)
    assert told.show_alert and "not yours" in told.text and "Ann" in told.text
    assert emu.buttons(*where), "Bob's press decided nothing"

    ann = emu.press(where, ANN, "Large")
    assert (await answered(emu, ann)).text == "Answered: Large"
    await wait_until(lambda: any("ask_user returned" in t for t in texts(emu, group["id"])), what="the model's answer")
    assert any('{"answer": "Large"}' in t for t in texts(emu, group["id"]))
    shown = emu.current(*where)
    assert "Ann answered: Large" in shown["text"] and not shown.get("reply_markup")

    again = emu.push_callback_query(question, ANN, buttons[0]["callback_data"])
    assert (await answered(emu, again)).text == "Already answered: Large"
    assert sum('{"answer"' in t for t in texts(emu, group["id"])) == 1


async def test_a_free_reply_reaches_the_model_as_the_result_in_one_request_and_starts_no_turn(
    telegram_emulator, start_app, llm
):
    emu = telegram_emulator
    app = await start_app(config(emu, model=scripted(llm), telegram={"busy_mode": "interrupt"}))
    llm.queue_tool_calls(tool_call("ask_user", {"question": "What is the delivery address?"}))
    llm.queue_text("Shipping to 12 Rose Lane.")
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, "ship my order")
    question = await a_question(emu, chat["id"])
    assert not question.get("reply_markup") and "Reply with your answer" in question["text"]

    emu.push_message(chat, ANN, "12 Rose Lane")
    await wait_until(lambda: "Shipping to 12 Rose Lane." in texts(emu, chat["id"]), what="the continuation")
    await app.drain()
    assert len(llm.requests) == 2, "the reply is the tool's result: one request for the continuation, no new turn"
    call = llm.issued_calls[0]
    assert llm.tool_output(call.id) == {"answer": "12 Rose Lane"}
    assert "12 Rose Lane" not in [llm.last_user_text(i) for i in range(len(llm.requests))]
    assert "Ann answered: 12 Rose Lane" in emu.current(chat["id"], question["message_id"])["text"]
    llm.assert_tool_protocol()

    # the next message is a message again
    llm.queue_text("You are welcome.")
    emu.push_message(chat, ANN, "thanks")
    await wait_until(lambda: "You are welcome." in texts(emu, chat["id"]), what="a turn of its own")
    assert llm.last_user_text() == "thanks"


async def test_in_a_group_only_the_person_asked_answers(telegram_emulator, start_app, llm):
    emu = telegram_emulator
    await start_app(config(emu, model=scripted(llm), telegram={"group_policy": "respond_all"}))
    llm.queue_tool_calls(tool_call("ask_user", {"question": "What is the delivery address?"}))
    llm.queue_text("Shipping to Rose Lane.")
    llm.queue_text("Hello Bob.")
    group = emu.group(-200, "Team")
    emu.push_message(group, ANN, "ship my order")
    question = await a_question(emu, group["id"])
    emu.push_message(group, BOB, "Baker Street")
    emu.push_message(group, ANN, "Rose Lane")
    await wait_until(lambda: "Shipping to Rose Lane." in texts(emu, group["id"]), what="Ann's answer")
    assert llm.tool_output(llm.issued_calls[0].id) == {"answer": "Rose Lane"}
    assert "Ann answered: Rose Lane" in emu.current(group["id"], question["message_id"])["text"]
    # Bob's message was a turn of his own, answered after the question's
    await wait_until(lambda: "Hello Bob." in texts(emu, group["id"]), what="Bob's turn")
    assert llm.last_user_text().endswith("Baker Street")


async def test_no_answer_in_time_is_an_error_for_the_model(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu))
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, "call ask_user " + json.dumps({"question": "Which size?", "options": ["S", "L"],
                                                               "timeout_seconds": 0.5}))
    question = await a_question(emu, chat["id"])
    await wait_until(lambda: any("no answer within 0.5 s" in t for t in texts(emu, chat["id"])), what="the timeout")
    assert any('{"error": "no answer within 0.5 s"}' in t for t in texts(emu, chat["id"]))
    shown = emu.current(chat["id"], question["message_id"])
    assert "No answer in time" in shown["text"] and not shown.get("reply_markup")
    late = emu.push_callback_query(question, ANN, question["reply_markup"]["inline_keyboard"][0][0]["callback_data"])
    assert "timed out" in (await answered(emu, late)).text


async def test_the_default_wait_comes_from_the_tool_entry(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu, entry={"name": "ask_user", "timeout_seconds": 0.5}))
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, FREE)
    await a_question(emu, chat["id"])
    await wait_until(lambda: any("no answer within 0.5 s" in t for t in texts(emu, chat["id"])), what="the timeout")


async def test_stop_ends_a_turn_waiting_on_an_answer_and_help_is_still_a_command(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu))
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, FREE)
    question = await a_question(emu, chat["id"])
    emu.push_message(chat, ANN, "/help")  # a command, not the answer: it waits its turn
    await asyncio.sleep(0.5)
    assert "answered" not in emu.current(chat["id"], question["message_id"])["text"]

    emu.push_message(chat, ANN, "/stop")
    await wait_until(lambda: "Stopped." in texts(emu, chat["id"]), what="the stop")
    await wait_until(lambda: "Withdrawn" in (emu.current(chat["id"], question["message_id"]).get("text") or ""),
                     what="the question withdrawn")
    await wait_until(lambda: any("/stop" in t for t in texts(emu, chat["id"]) if t != "Stopped."), what="the help text")
    assert not any("ask_user returned" in t for t in texts(emu, chat["id"]))
    # with nobody waiting, the next message is a turn of its own
    emu.push_message(chat, ANN, "hello again")
    await wait_until(lambda: any("hello again" in t for t in texts(emu, chat["id"])), what="a new turn")


async def test_no_typing_indicator_while_the_question_waits(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu, telegram={"typing": {"mode": "instant"}}))
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, FREE)
    question = await a_question(emu, chat["id"])
    shown = len(emu.calls_to("sendChatAction"))
    assert shown >= 1, "the turn showed the bot at work before it asked"
    await asyncio.sleep(5.0)  # longer than Telegram's 4 s renewal
    assert len(emu.calls_to("sendChatAction")) == shown
    emu.push_message(chat, ANN, "Rose Lane")
    await wait_until(lambda: any('{"answer": "Rose Lane"}' in t for t in texts(emu, chat["id"])), what="the answer")
    assert "Ann answered: Rose Lane" in emu.current(chat["id"], question["message_id"])["text"]


async def test_a_reply_reaching_the_ingress_process_answers_the_turn_waiting_in_a_worker(telegram_emulator, redis_url, llm):
    """Redis deployment: the ingress holds the Telegram connection, a worker runs the turn.
    The reply reaches the ingress, which finds the open question in the store and records the
    answer there; the worker's turn goes on, and the reply never becomes a turn."""
    emu = telegram_emulator
    cfg = config(emu, model=scripted(llm))
    cfg["store"] = {"url": redis_url, "prefix": f"asks-{uuid.uuid4().hex[:8]}:"}
    llm.queue_tool_calls(tool_call("ask_user", {"question": "What is the delivery address?"}))
    llm.queue_text("Shipping to Rose Lane.")
    worker = App.from_config(cfg, role="worker")
    ingress = App.from_config(cfg, role="ingress")
    await worker.start()
    await ingress.start()
    try:
        chat = emu.private_chat(ANN)
        emu.push_message(chat, ANN, "ship my order")
        question = await a_question(emu, chat["id"])
        emu.push_message(chat, ANN, "Rose Lane")
        await wait_until(lambda: "Shipping to Rose Lane." in texts(emu, chat["id"]), timeout=20, what="the worker's answer")
        assert llm.tool_output(llm.issued_calls[0].id) == {"answer": "Rose Lane"}
        await wait_until(lambda: "Ann answered: Rose Lane" in emu.current(chat["id"], question["message_id"])["text"],
                         what="the question edited by the worker")
        assert not any(llm.last_user_text(i) == "Rose Lane" for i in range(len(llm.requests)))
    finally:
        await ingress.stop()
        await worker.stop()


async def test_one_question_at_a_time_per_person(telegram_emulator, start_app, llm):
    emu = telegram_emulator
    await start_app(config(emu, model=scripted(llm)))
    llm.queue_tool_calls(
        tool_call("ask_user", {"question": "What is the delivery address?"}),
        tool_call("ask_user", {"question": "And the phone number?"}),
    )
    llm.queue_text("Noted.")
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, "ship my order")
    await a_question(emu, chat["id"])
    await asyncio.sleep(0.3)
    assert len(questions(emu, chat["id"])) == 1, "a reply could not say which of two it answers"
    emu.push_message(chat, ANN, "Rose Lane")
    await wait_until(lambda: "Noted." in texts(emu, chat["id"]), what="the continuation")
    outputs = [llm.tool_output(call.id) for call in llm.issued_calls]
    assert {"answer": "Rose Lane"} in outputs
    assert any("already waiting" in (o.get("error") or "") for o in outputs)
    llm.assert_tool_protocol()
