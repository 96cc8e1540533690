"""Approvals end to end on Discord: REST + gateway emulator ⇄ discord.py ⇄ App ⇄ offline agent.

The request carries message components; a press arrives as INTERACTION_CREATE over the
gateway and must be answered through the interaction callback within three seconds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App

from tests import approvaldemo
from tests.adapters.test_discord import eventually, make_config
from tests.emulators.discord import DM_CHANNEL_ID, DiscordEmulator

DEFERRED_UPDATE, CHANNEL_MESSAGE = 6, 4
CALL = "call transfer " + json.dumps({"amount": 7, "to": "Bob", "api_key": "hunter2"})


@pytest.fixture
async def emulator() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


@pytest.fixture(autouse=True)
def no_transfers():
    approvaldemo.TRANSFERS.clear()
    yield
    approvaldemo.TRANSFERS.clear()


async def start(emulator: DiscordEmulator, start_app: Any, **tool: Any) -> App:
    config = make_config(emulator)
    config["agents"]["assistant"]["tools"] = [{"python": "tests.approvaldemo:transfer", "approval": "required", **tool}]
    app = await start_app(config)
    await emulator.wait_ready()
    return app


async def ask(emulator: DiscordEmulator) -> dict[str, Any]:
    await emulator.dispatch("MESSAGE_CREATE", emulator.message(CALL, channel_id=DM_CHANNEL_ID))
    return await eventually(
        lambda: next((m for m in emulator.bot_messages(DM_CHANNEL_ID) if emulator.buttons(m)), None), timeout=30
    )


def said(emulator: DiscordEmulator, fragment: str) -> bool:
    return any(fragment in m["content"] for m in emulator.bot_messages(DM_CHANNEL_ID))


async def test_buttons_render_as_components_and_the_requester_approves(emulator, start_app):
    await start(emulator, start_app)
    request = await ask(emulator)
    buttons = emulator.buttons(request)
    assert [(b["label"], b["style"]) for b in buttons] == [("Approve", 1), ("Deny", 4)]
    assert all(len(b["custom_id"]) <= 100 for b in buttons)
    assert "hunter2" not in request["content"] and "***" in request["content"]

    bob = await emulator.press(request["id"], buttons[0]["custom_id"], by=emulator.bob)
    told = await emulator.wait_response(bob)
    assert told.type == CHANNEL_MESSAGE and told.ephemeral and "not yours" in told.data["content"]
    assert told.delay < 3 and approvaldemo.TRANSFERS == []

    alice = await emulator.press(request["id"], buttons[0]["custom_id"])
    answer = await emulator.wait_response(alice)
    assert answer.status == 200 and answer.delay < 3
    assert answer.ephemeral and answer.data["content"] == "Approved."
    await eventually(lambda: said(emulator, "transfer returned"))
    assert approvaldemo.TRANSFERS == [{"amount": 7, "to": "Bob"}]
    await eventually(lambda: "Approved by Alice" in emulator.messages[request["id"]]["content"])
    assert emulator.buttons(request["id"]) == []

    # a second press (a client still showing the old buttons) changes nothing
    again = await emulator.press(request["id"], buttons[1]["custom_id"])
    assert (await emulator.wait_response(again)).data["content"] == "Already approved."
    assert approvaldemo.TRANSFERS == [{"amount": 7, "to": "Bob"}]


async def test_deny_and_timeout_reach_the_model(emulator, start_app):
    await start(emulator, start_app, approval_timeout_seconds=1.5)
    request = await ask(emulator)
    deny = emulator.buttons(request)[1]["custom_id"]
    pressed = await emulator.press(request["id"], deny)
    assert (await emulator.wait_response(pressed)).data["content"] == "Denied."
    await eventually(lambda: said(emulator, "denied by Alice"))
    await eventually(lambda: "Denied by Alice" in emulator.messages[request["id"]]["content"])

    second = await ask_again(emulator, request["id"])
    await eventually(lambda: said(emulator, "approval timed out"), timeout=10)
    await eventually(lambda: "No answer in time" in emulator.messages[second["id"]]["content"])
    assert emulator.buttons(second["id"]) == [] and approvaldemo.TRANSFERS == []


async def ask_again(emulator: DiscordEmulator, earlier: str) -> dict[str, Any]:
    await emulator.dispatch("MESSAGE_CREATE", emulator.message(CALL, channel_id=DM_CHANNEL_ID))
    return await eventually(
        lambda: next((m for m in emulator.bot_messages(DM_CHANNEL_ID) if emulator.buttons(m) and m["id"] != earlier), None),
        timeout=30,
    )
