"""Approvals end to end on Slack, in Socket Mode and over HTTP: emulator ⇄ slack-bolt /
slack_sdk ⇄ App ⇄ offline agent. The request is a Block Kit message with an actions block; a
press is a `block_actions` payload that must be acknowledged within three seconds."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App

from tests import approvaldemo
from tests.emulators.slack import EventDelivery, SlackEmulator, event_callback, slack_section, wait_for

DM, ALICE, BOB = "D0ALICE", "U0ALICE", "U0BOB"
CALL = "call transfer " + json.dumps({"amount": 3, "to": "Bob", "api_key": "xoxb-1234-abcd"})


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


@pytest.fixture(autouse=True)
def no_transfers():
    approvaldemo.TRANSFERS.clear()
    yield
    approvaldemo.TRANSFERS.clear()


@pytest.fixture
async def app(emulator: SlackEmulator, mode: str) -> AsyncIterator[App]:
    running = App.from_config(
        {
            "agents": {
                "assistant": {
                    "model": "offline/echo",
                    "tools": [{"python": "tests.approvaldemo:transfer", "approval": "required"}],
                }
            },
            "platforms": {"slack": slack_section(emulator, mode)},
        }
    )
    await running.start()
    yield running
    await running.stop()


def actions_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in message.get("blocks") or [] if b.get("type") == "actions" for e in b["elements"]]


async def ask(emulator: SlackEmulator, delivery: EventDelivery) -> dict[str, Any]:
    await delivery.deliver_all(event_callback(emulator.post_as_user(DM, ALICE, CALL)))
    await wait_for(lambda: any(actions_of(m) for m in emulator.messages[DM]), 30)
    return next(m for m in emulator.messages[DM] if actions_of(m))


async def test_the_request_is_block_kit_and_only_the_requester_decides(app, emulator, mode):
    delivery = EventDelivery(emulator, app.adapters["slack"], mode)
    request = await ask(emulator, delivery)
    buttons = actions_of(request)
    assert [(b["text"]["text"], b.get("style")) for b in buttons] == [("Approve", "primary"), ("Deny", "danger")]
    assert "xoxb-1234-abcd" not in json.dumps(request) and "***" in request["text"]

    bob = await delivery.deliver_action(emulator.block_actions(DM, request["ts"], buttons[0]["action_id"], user=BOB))
    assert bob.ack_seconds is not None and bob.ack_seconds < 3
    await wait_for(lambda: emulator.ephemerals)
    assert emulator.ephemerals[0]["user"] == BOB and "not yours" in emulator.ephemerals[0]["text"]
    assert approvaldemo.TRANSFERS == []

    alice = await delivery.deliver_action(emulator.block_actions(DM, request["ts"], buttons[0]["action_id"], user=ALICE))
    assert alice.ack_seconds is not None and alice.ack_seconds < 3
    await wait_for(lambda: approvaldemo.TRANSFERS, 10)
    await wait_for(lambda: any("transfer returned" in m["text"] for m in emulator.posted()), 10)
    shown = emulator.find(DM, request["ts"])
    assert shown is not None and "Approved by Alice" in shown["text"] and actions_of(shown) == []

    again = await delivery.deliver_action(emulator.block_actions(DM, request["ts"], buttons[1]["action_id"], user=ALICE,
                                                                 block_id="botweave-buttons"))
    assert again.ack_seconds is not None and again.ack_seconds < 3
    await wait_for(lambda: any(e["text"] == "Already approved." for e in emulator.ephemerals))
    assert approvaldemo.TRANSFERS == [{"amount": 3, "to": "Bob"}]


async def test_deny_reaches_the_model(app, emulator, mode):
    delivery = EventDelivery(emulator, app.adapters["slack"], mode)
    request = await ask(emulator, delivery)
    deny = actions_of(request)[1]["action_id"]
    await delivery.deliver_action(emulator.block_actions(DM, request["ts"], deny, user=ALICE))
    await wait_for(lambda: any("denied by Alice" in m["text"] for m in emulator.posted()), 10)
    assert "Denied by Alice" in emulator.find(DM, request["ts"])["text"]  # type: ignore[index]
    assert approvaldemo.TRANSFERS == []
