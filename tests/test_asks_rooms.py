"""`ask_user` in a room on the Telegram emulator: a member asks the person who opened the
activity, the other members wait for the answer, and the member goes on with it."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until

ANN = TelegramEmulator.user(1, "Ann", "ann")
BOB = TelegramEmulator.user(2, "Bob", "bob")


def config(emu: TelegramEmulator, llm: OpenAIEmulator) -> dict[str, Any]:
    model = {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback"}
    return {
        "agents": {
            "planner": {**model, "display_name": "Planner", "tools": ["ask_user"]},
            "critic": {**model, "display_name": "Critic"},
        },
        "rooms": {"standup": {"roster": ["planner", "critic"], "max_rounds": 1}},
        "routes": [{"match": {"chat_id": "-300"}, "room": "standup"}],
        "platforms": {"telegram": {"unknown_user_policy": "allow", "group_policy": "respond_all", **adapter_config(emu)}},
    }


async def test_a_member_asks_the_person_and_the_others_wait(telegram_emulator, start_app, llm):
    emu = telegram_emulator
    await start_app(config(emu, llm))
    llm.queue_tool_calls(tool_call("ask_user", {"question": "Which size should we ship?", "options": ["Small", "Large"]}))
    llm.queue_text("We ship Large.")
    llm.queue_text("Large works for me.")
    group = emu.group(-300, "Standup")
    emu.push_message(group, ANN, "plan the shipment")
    await wait_until(lambda: any(m.get("reply_markup") for m in emu.sent(group["id"])), 20, "the question")
    question = next(m for m in emu.sent(group["id"]) if m.get("reply_markup"))
    assert "Which size should we ship?" in question["text"] and "Ann" in question["text"]
    await asyncio.sleep(0.5)
    assert len(llm.requests) == 1, "the critic waits for the answer"

    bob = emu.press((group["id"], question["message_id"]), BOB, "Large")
    await wait_until(lambda: emu.callback_answer(bob) is not None, what="Bob told")
    assert "not yours" in emu.callback_answer(bob).text
    emu.press((group["id"], question["message_id"]), ANN, "Large")
    await wait_until(lambda: any("Large works for me." in t for t in emu.sent_texts(group["id"])), 20, "the critic")
    assert llm.tool_output(llm.issued_calls[0].id) == {"answer": "Large"}
    texts = emu.sent_texts(group["id"])
    planner = next(i for i, t in enumerate(texts) if "We ship Large." in t)
    assert planner < next(i for i, t in enumerate(texts) if "Large works" in t)
    assert "Ann answered: Large" in emu.current(group["id"], question["message_id"])["text"]
    assert "We ship Large." in llm.messages(2)[-1]["content"], "the critic saw the planner's answer"
