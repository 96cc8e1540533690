"""litellm is imported as a bot starts only when some agent's calls go through it: a bot
whose agents all speak to an OpenAI-compatible server through botweave's own client answers
without ever loading it (seconds of CPU, and its import would compete with the first turns),
while one that needs it has it loaded by the time it has started. Each case runs in a fresh
interpreter, so nothing imported earlier in this one counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import asyncio, json, os, signal, sys
from botweave import App
from tests.emulators.openai import OpenAIEmulator
from tests.support import RecordingAdapter, message

async def main(client, processes, answer, model):
    llm = OpenAIEmulator("Answered.")
    await llm.start()
    seen = {}
    try:
        app = App.from_config({
            "bot": {"unknown_user_policy": "allow"},
            "agents": {"a": {"model": model, "api_base": llm.base_url, "api_key": "sk-test"}},
            "models": {"client": client, "processes": processes},
        })
        adapter = RecordingAdapter()
        app.add_adapter(adapter)
        started = asyncio.Event()
        def on_started():
            seen["at start"] = "litellm" in sys.modules
            started.set()
        serving = asyncio.create_task(app.serve(on_started=on_started))
        await asyncio.wait_for(started.wait(), 120)
        if answer:
            await app.submit(message("hello"))
            for _ in range(1200):
                if adapter.sent:
                    break
                await asyncio.sleep(0.05)
            seen["answered"] = [sent.text for sent in adapter.sent]
        seen["after"] = "litellm" in sys.modules
        os.kill(os.getpid(), signal.SIGTERM)
        seen["exit code"] = await serving
    finally:
        await llm.stop()
    print(json.dumps(seen))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] == "answer", sys.argv[4]))
"""


def started(client: str, processes: int = 0, *, answer: bool, model: str = "openai/gpt-emulated") -> dict[str, object]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    command = [sys.executable, "-c", PROGRAM, client, str(processes), "answer" if answer else "start", model]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("client", "processes"), [("auto", 0), ("direct", 0), ("litellm", 1)])
def test_a_bot_whose_calls_skip_litellm_here_answers_without_importing_it(client, processes):
    seen = started(client, processes, answer=True)
    assert seen["answered"] == ["Answered."]
    assert seen["at start"] is False and seen["after"] is False
    assert seen["exit code"] == 0


@pytest.mark.parametrize("client", ["auto", "litellm"])
def test_a_bot_on_the_offline_model_answers_without_importing_litellm(client):
    """The echo model is answered in botweave itself, even with `models.client: litellm`:
    `botweave chat` with no bot.yaml never pays litellm's import."""
    seen = started(client, answer=True, model="offline/echo")
    assert seen["answered"] == ["a (offline echo) heard: hello"]
    assert seen["at start"] is False and seen["after"] is False
    assert seen["exit code"] == 0


def test_a_bot_whose_calls_go_through_litellm_has_it_loaded_once_started():
    seen = started("litellm", answer=False)
    assert seen["at start"] is True
    assert seen["exit code"] == 0
