"""`ask_user` end to end on Discord: REST + gateway emulator ⇄ discord.py ⇄ App ⇄ offline agent.

Options are message components; a press arrives as INTERACTION_CREATE and is answered through
the interaction callback (ephemeral to whoever pressed). Without options the asked person's
next message in the channel is the answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App

from tests.adapters.test_discord import eventually, make_config
from tests.emulators.discord import DM_CHANNEL_ID, DiscordEmulator

CHANNEL_MESSAGE = 4
SIZES = "call ask_user " + json.dumps({"question": "Which size?", "options": ["Small", "Large"]})
FREE = "call ask_user " + json.dumps({"question": "What is the delivery address?"})


@pytest.fixture
async def emulator() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


async def start(emulator: DiscordEmulator, start_app: Any) -> App:
    config = make_config(emulator)
    config["agents"]["assistant"]["tools"] = ["ask_user"]
    app = await start_app(config)
    await emulator.wait_ready()
    return app


async def a_question(emulator: DiscordEmulator, text: str) -> dict[str, Any]:
    await emulator.dispatch("MESSAGE_CREATE", emulator.message(text, channel_id=DM_CHANNEL_ID))
    return await eventually(
        lambda: next((m for m in emulator.bot_messages(DM_CHANNEL_ID) if m["content"].startswith("❓")), None), timeout=30
    )


def said(emulator: DiscordEmulator, fragment: str) -> bool:
    return any(fragment in m["content"] for m in emulator.bot_messages(DM_CHANNEL_ID))


async def test_options_are_components_only_the_asker_answers_and_the_question_shows_the_answer(emulator, start_app):
    await start(emulator, start_app)
    question = await a_question(emulator, SIZES)
    buttons = emulator.buttons(question)
    assert [b["label"] for b in buttons] == ["Small", "Large"]
    assert all(len(b["custom_id"]) <= 100 for b in buttons)

    bob = await emulator.press(question["id"], buttons[1]["custom_id"], by=emulator.bob)
    told = await emulator.wait_response(bob)
    assert told.type == CHANNEL_MESSAGE and told.ephemeral and "not yours" in told.data["content"]
    assert told.delay < 3 and emulator.buttons(question["id"])

    alice = await emulator.press(question["id"], buttons[1]["custom_id"])
    answer = await emulator.wait_response(alice)
    assert answer.delay < 3 and answer.ephemeral and answer.data["content"] == "Answered: Large"
    await eventually(lambda: said(emulator, '{"answer": "Large"}'))
    await eventually(lambda: "Alice answered: Large" in emulator.messages[question["id"]]["content"])
    assert emulator.buttons(question["id"]) == []

    again = await emulator.press(question["id"], buttons[0]["custom_id"])
    assert (await emulator.wait_response(again)).data["content"] == "Already answered: Large"
    assert sum('{"answer"' in m["content"] for m in emulator.bot_messages(DM_CHANNEL_ID)) == 1


async def test_the_next_message_is_the_answer_and_stop_ends_a_waiting_turn(emulator, start_app):
    await start(emulator, start_app)
    question = await a_question(emulator, FREE)
    assert emulator.buttons(question) == []
    await emulator.dispatch("MESSAGE_CREATE", emulator.message("12 Rose Lane", channel_id=DM_CHANNEL_ID))
    await eventually(lambda: said(emulator, '{"answer": "12 Rose Lane"}'))
    await eventually(lambda: "Alice answered: 12 Rose Lane" in emulator.messages[question["id"]]["content"])
    assert not said(emulator, "heard: 12 Rose Lane"), "the answer started no turn of its own"

    await emulator.dispatch("MESSAGE_CREATE", emulator.message(
        "call ask_user " + json.dumps({"question": "Gift wrap?", "options": ["Yes", "No"]}), channel_id=DM_CHANNEL_ID))
    wrap = await eventually(
        lambda: next((m for m in emulator.bot_messages(DM_CHANNEL_ID) if "Gift wrap?" in m["content"]), None), timeout=30
    )
    await emulator.dispatch("MESSAGE_CREATE", emulator.message("/stop", channel_id=DM_CHANNEL_ID))
    await eventually(lambda: "Withdrawn" in emulator.messages[wrap["id"]]["content"])
    assert emulator.buttons(wrap["id"]) == []
    assert not said(emulator, "ask_user returned {\"error")
