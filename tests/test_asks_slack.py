"""`ask_user` end to end on Slack, in Socket Mode and over HTTP: emulator ⇄ slack-bolt /
slack_sdk ⇄ App ⇄ offline agent. Options are a Block Kit actions block; a press is a
`block_actions` payload acknowledged within three seconds; without options the asked person's
next message is the answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App

from tests.emulators.slack import EventDelivery, SlackEmulator, event_callback, slack_section, wait_for

DM, ALICE, BOB = "D0ALICE", "U0ALICE", "U0BOB"
SIZES = "call ask_user " + json.dumps({"question": "Which size?", "options": ["Small", "Large"]})
FREE = "call ask_user " + json.dumps({"question": "What is the delivery address?"})


@pytest.fixture
async def emulator() -> AsyncIterator[SlackEmulator]:
    emu = SlackEmulator()
    await emu.start()
    emu.add_user(ALICE, "Alice")
    emu.add_user(BOB, "Bob")
    emu.add_channel(DM, "im")
    yield emu
    await emu.stop()


@pytest.fixture(params=["socket", "http"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def app(emulator: SlackEmulator, mode: str) -> AsyncIterator[App]:
    running = App.from_config({
        "agents": {"assistant": {"model": "offline/echo", "tools": ["ask_user"]}},
        "platforms": {"slack": slack_section(emulator, mode)},
    })
    await running.start()
    yield running
    await running.stop()


def actions_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in message.get("blocks") or [] if b.get("type") == "actions" for e in b["elements"]]


async def a_question(emulator: SlackEmulator, delivery: EventDelivery, text: str) -> dict[str, Any]:
    await delivery.deliver_all(event_callback(emulator.post_as_user(DM, ALICE, text)))
    await wait_for(lambda: any(m["text"].startswith("❓") for m in emulator.messages[DM]), 30)
    return next(m for m in emulator.messages[DM] if m["text"].startswith("❓"))


async def test_options_are_block_kit_and_only_the_person_asked_answers(app, emulator, mode):
    delivery = EventDelivery(emulator, app.adapters["slack"], mode)
    question = await a_question(emulator, delivery, SIZES)
    buttons = actions_of(question)
    assert [b["text"]["text"] for b in buttons] == ["Small", "Large"]

    bob = await delivery.deliver_action(emulator.block_actions(DM, question["ts"], buttons[1]["action_id"], user=BOB))
    assert bob.ack_seconds is not None and bob.ack_seconds < 3
    await wait_for(lambda: emulator.ephemerals)
    assert emulator.ephemerals[0]["user"] == BOB and "not yours" in emulator.ephemerals[0]["text"]

    alice = await delivery.deliver_action(emulator.block_actions(DM, question["ts"], buttons[1]["action_id"], user=ALICE))
    assert alice.ack_seconds is not None and alice.ack_seconds < 3
    await wait_for(lambda: any('{"answer": "Large"}' in m["text"] for m in emulator.posted()), 10)
    shown = emulator.find(DM, question["ts"])
    assert shown is not None and "Alice answered: Large" in shown["text"] and actions_of(shown) == []

    await delivery.deliver_action(emulator.block_actions(DM, question["ts"], buttons[0]["action_id"], user=ALICE,
                                                         block_id="botweave-buttons"))
    await wait_for(lambda: any(e["text"] == "Already answered: Large" for e in emulator.ephemerals))
    assert sum('{"answer"' in m["text"] for m in emulator.posted()) == 1


async def test_the_next_message_is_the_answer(app, emulator, mode):
    delivery = EventDelivery(emulator, app.adapters["slack"], mode)
    question = await a_question(emulator, delivery, FREE)
    assert actions_of(question) == []
    await delivery.deliver_all(event_callback(emulator.post_as_user(DM, ALICE, "12 Rose Lane")))
    await wait_for(lambda: any('{"answer": "12 Rose Lane"}' in m["text"] for m in emulator.posted()), 10)
    assert "Alice answered: 12 Rose Lane" in emulator.find(DM, question["ts"])["text"]  # type: ignore[index]
    await app.drain()
    assert not any("heard: 12 Rose Lane" in m["text"] for m in emulator.posted()), "no turn of its own"
