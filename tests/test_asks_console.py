"""`ask_user` on the console: options are numbered choices (typing a number presses one), and
without options the next line typed is the answer (a pipe stands in for the terminal)."""

from __future__ import annotations

import asyncio
import io
import json
import os

from botweave import App
from botweave.adapters.console.adapter import ConsoleAdapter

from tests.emulators.telegram import wait_until

SIZES = "call ask_user " + json.dumps({"question": "Which size?", "options": ["Small", "Large"]})
FREE = "call ask_user " + json.dumps({"question": "What is the delivery address?"})


async def run(line: str, *, shown: str, after: list[str]) -> str:
    app = App.from_config({"agents": {"assistant": {"model": "offline/echo", "tools": ["ask_user"]}}})
    read, write = os.pipe()
    out = io.StringIO()
    console = ConsoleAdapter(stdin=os.fdopen(read, "r"), stdout=out)
    app.add_adapter(console)
    writer = os.fdopen(write, "w")
    await app.start(platforms=[])
    try:
        writer.write(line + "\n")
        writer.flush()
        await wait_until(lambda: shown in out.getvalue(), timeout=20, what="the question")
        for typed in after:
            writer.write(typed + "\n")
            writer.flush()
            await asyncio.sleep(0.3)
        await wait_until(lambda: "ask_user returned" in out.getvalue(), timeout=10, what="the model's answer")
        writer.close()
        await asyncio.wait_for(console.finished.wait(), 10)
        await app.drain()
    finally:
        await app.stop()
    return out.getvalue()


async def test_typing_the_number_of_a_choice_is_the_answer():
    shown = await run(SIZES, shown="(type a number)", after=["2"])
    lines = shown.splitlines()
    assert "[1] Small  [2] Large  (type a number)" in lines
    assert "(Answered: Large)" in lines
    assert any("answered: Large" in line for line in lines)
    assert any('ask_user returned {"answer": "Large"}' in line for line in lines)


async def test_the_next_line_is_a_free_answer_and_starts_no_turn():
    shown = await run(FREE, shown="Reply with your answer", after=["12 Rose Lane"])
    assert any('ask_user returned {"answer": "12 Rose Lane"}' in line for line in shown.splitlines())
    assert "heard: 12 Rose Lane" not in shown
