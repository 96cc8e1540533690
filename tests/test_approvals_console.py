"""Buttons and approvals on the console: the request shows numbered choices, and typing a number
presses that button (a pipe stands in for the terminal)."""

from __future__ import annotations

import asyncio
import io
import json
import os

from botweave import App
from botweave.adapters.console.adapter import ConsoleAdapter

from tests import approvaldemo
from tests.emulators.telegram import wait_until

CALL = "call transfer " + json.dumps({"amount": 9, "to": "Bob", "api_key": "sk-abcdefghijklmnop"})


async def run(*lines: str, after_request: list[str]) -> tuple[str, App]:
    approvaldemo.TRANSFERS.clear()
    app = App.from_config({
        "agents": {
            "assistant": {"model": "offline/echo", "tools": [{"python": "tests.approvaldemo:transfer", "approval": "required"}]}
        }
    })
    read, write = os.pipe()
    out = io.StringIO()
    console = ConsoleAdapter(stdin=os.fdopen(read, "r"), stdout=out)
    app.add_adapter(console)
    writer = os.fdopen(write, "w")
    await app.start(platforms=[])
    try:
        for line in lines:
            writer.write(line + "\n")
        writer.flush()
        await wait_until(lambda: "(type a number)" in out.getvalue(), timeout=20, what="the choices")
        for line in after_request:
            writer.write(line + "\n")
            writer.flush()
            await asyncio.sleep(0.3)
        writer.close()
        await asyncio.wait_for(console.finished.wait(), 10)
        await app.drain()
    finally:
        await app.stop()
    return out.getvalue(), app


async def test_typing_a_choice_presses_the_button_and_approves():
    shown, _ = await run(CALL, after_request=["7", "1"])
    lines = shown.splitlines()
    assert "[1] Approve  [2] Deny  (type a number)" in lines
    assert "sk-abcdefghijklmnop" not in shown and "***" in shown
    assert "(Approved.)" in lines
    assert any("Approved by" in line for line in lines)
    assert any("transfer returned" in line and "sent 9 to Bob" in line for line in lines)
    # "7" was no choice: it went to the agent as a message after the turn
    assert any("heard: 7" in line for line in lines)
    assert approvaldemo.TRANSFERS == [{"amount": 9, "to": "Bob"}]


async def test_deny_from_the_console():
    shown, _ = await run(CALL, after_request=["2"])
    assert "(Denied.)" in shown.splitlines()
    assert '{"error": "denied by' in shown
    assert approvaldemo.TRANSFERS == []
