"""The parts of buttons and approvals that need no platform: masking, the press budget, the
button book on every store backend, and the configuration's errors."""

from __future__ import annotations

import asyncio
import time

import pytest
from botweave import ConfigError, load_config
from botweave.buttons import ButtonBook
from botweave.policies.approvals import MASK, mask_arguments
from botweave.types import Button, PlatformEvent, PressAnswer

from tests.support import RecordingAdapter


def test_secrets_are_masked_by_name_by_look_and_inside_urls():
    masked = mask_arguments({
        "amount": 5,
        "api_key": "plain-looking",
        "headers": {"Authorization": "Bearer abc.def", "accept": "json"},
        "note": "sk-proj-abcdefghijklmnop",
        "url": "https://deploy:hunter2@example.com/x",
        "tokens_used": 0,
        "list": ["ghp_abcdefghijklmnopqrstuvwxyz", "fine"],
        "long": "x" * 1000,
    })
    assert masked["amount"] == 5 and masked["api_key"] == MASK
    assert masked["headers"] == {"Authorization": MASK, "accept": "json"}
    assert masked["note"] == MASK and masked["url"] == f"https://deploy:{MASK}@example.com/x"
    assert masked["list"] == [MASK, "fine"] and len(masked["long"]) == 300
    assert masked["tokens_used"] == 0  # empty and false values hide nothing


async def test_a_press_is_acknowledged_within_the_budget_however_slow_the_answer():
    adapter = RecordingAdapter()
    adapter.emits = frozenset({"button_pressed"})
    dispatched: list = []

    async def sink(item):
        dispatched.append(item)

    async def slow(event):
        await asyncio.sleep(10)
        return event, PressAnswer("too late")

    adapter.bind(sink, slow)
    answers: list[tuple[float, PressAnswer]] = []
    started = time.monotonic()

    async def acknowledge(answer: PressAnswer) -> None:
        answers.append((time.monotonic() - started, answer))

    event = PlatformEvent("button_pressed", "test", "c1", "u1", message_id="m1", action_id="x")
    assert await adapter.pressed(event, acknowledge)
    assert answers[0][1] == PressAnswer() and answers[0][0] < 2.0
    assert dispatched == [event]


async def test_the_button_book_keeps_meaning_behind_short_ids(store):
    book = ButtonBook(store)
    issued = await book.issue([Button("Ship", "ship", value="order-" + "9" * 300, style="primary")])
    wire = issued[0]
    assert wire.label == "Ship" and wire.style == "primary" and wire.value == ""
    assert len(wire.action_id.encode()) <= 64 and wire.action_id != "ship"
    press = PlatformEvent("button_pressed", "test", "c1", "u1", message_id="m1", action_id=wire.action_id)
    read, known = await book.read(press)
    assert known and read.action_id == "ship" and read.value == "order-" + "9" * 300
    forged = PlatformEvent("button_pressed", "test", "c1", "u1", action_id="bw:not-issued")
    assert await book.read(forged) == (forged, False)


def test_approval_options_are_checked():
    base = {"agents": {"a": {"model": "offline/echo", "tools": []}}}
    base["agents"]["a"]["tools"] = [{"python": "tests.approvaldemo:transfer", "approver": "owner"}]
    with pytest.raises(ConfigError, match="only apply with `approval: required`"):
        load_config(base)
    base["agents"]["a"]["tools"] = [{"python": "tests.approvaldemo:transfer", "approval": "sometimes"}]
    with pytest.raises(ConfigError, match="approval"):
        load_config(base)
    base["agents"]["a"]["tools"] = [
        {"python": "tests.approvaldemo:transfer", "approval": "required", "approver": "owner", "approval_timeout_seconds": 60}
    ]
    entry = load_config(base).agents["a"].tools[0]
    assert (entry.approval, entry.approver, entry.approval_timeout_seconds) == ("required", "owner", 60)
