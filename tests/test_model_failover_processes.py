"""`botweave run` as a user starts it, on the Telegram emulator and the OpenAI emulator: a
rate-limited model hands its turns to the fallback and gets no request while it rests, the
footer names the model that answered, a spent budget stops model calls with one notice, and
`/usage` tells the person what they used."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.emulators.openai import OpenAIEmulator, Reply
from tests.emulators.telegram import TelegramEmulator, wait_until

ROOT = Path(__file__).resolve().parents[1]
ANN = TelegramEmulator.user(1, "Ann", "ann")
USAGE = {"prompt_tokens": 60, "completion_tokens": 40, "total_tokens": 100}


@pytest.fixture
def bot_process(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    running: list[subprocess.Popen[bytes]] = []
    yield running
    for proc in running:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


async def test_botweave_run_fails_over_rests_the_model_and_keeps_to_the_budget(
    telegram_emulator: TelegramEmulator, llm: OpenAIEmulator, tmp_path: Path,
    bot_process: list[subprocess.Popen[bytes]],
) -> None:
    emu = telegram_emulator
    config = tmp_path / "bot.yaml"
    config.write_text(yaml.safe_dump({
        "agents": {"assistant": {
            "model": "openai/primary", "api_base": llm.base_url, "api_key": "sk-primary",
            "fallbacks": [{"model": "openai/backup", "api_base": llm.base_url, "api_key": "sk-backup"}],
        }},
        "platforms": {"telegram": {"token": emu.token, "api_base_url": emu.api_base_url, "poll_timeout": 1,
                                   "unknown_user_policy": "allow", "footer": True}},
        "budgets": {"per_user": {"tokens_per_day": 150}},
        "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
    }))
    llm.fail("primary", "429", retry_after=60)
    llm.queue(Reply(text="First answer.", usage=USAGE), Reply(text="Second answer.", usage=USAGE))
    log = open(tmp_path / "bot.log", "wb")  # noqa: SIM115
    bot_process.append(subprocess.Popen(
        [sys.executable, "-m", "botweave", "run", str(config)], cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT,
    ))
    chat = emu.private_chat(ANN)

    def said() -> list[str]:
        return [emu.current(ANN["id"], sent["message_id"])["text"] for sent in emu.sent(ANN["id"])]

    async def answered(count: int) -> None:
        try:
            await wait_until(lambda: len(said()) >= count, timeout=60, what=f"{count} replies")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{(tmp_path / 'bot.log').read_text(errors='replace')[-4000:]}") from None

    for number, text in enumerate(["Hello?", "Still there?", "One more?"], start=1):
        emu.push_message(chat, ANN, text)
        await answered(number)
    emu.push_message(chat, ANN, "/usage")
    await answered(4)
    first, second, refused, usage = said()
    assert first.startswith("First answer.") and "openai/backup" in first, "the footer names the fallback"
    assert second.startswith("Second answer.") and "openai/backup" in second
    assert refused == "Daily limit reached (150 tokens). It resets at 00:00 UTC."
    assert usage.startswith("Today: 200 tokens") and "daily limit of 150 tokens" in usage
    assert llm.count("primary") == 1, "no request to the resting model"
    assert llm.count("backup") == 2, "no request once the budget was spent"
