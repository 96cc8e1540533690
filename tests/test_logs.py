"""Logs as an operator collects them: `botweave run --log-format json` in a subprocess, a
console and a Telegram conversation (emulator) answered by a model (OpenAI emulator)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

from botweave.runtime.logs import JsonFormatter

from tests.emulators.openai import OpenAIEmulator, Reply
from tests.emulators.telegram import TelegramEmulator, wait_until

ROOT = Path(__file__).resolve().parents[1]
ANN = TelegramEmulator.user(1, "Ann", "ann")
API_KEY = "sk-do-not-log-this"
TURN_FIELDS = {"conversation", "agent", "model", "outcome", "latency_ms", "tokens_in", "tokens_out"}


async def test_json_lines_carry_the_turn_fields_and_no_secrets(
    tmp_path: Path, telegram_emulator: TelegramEmulator, openai_emulator: OpenAIEmulator
) -> None:
    emu = telegram_emulator
    config = tmp_path / "bot.yaml"
    config.write_text(
        "agents:\n"
        f"  helper: {{model: openai/gpt-emu, api_base: '{openai_emulator.base_url}', api_key: '{API_KEY}'}}\n"
        "platforms:\n"
        "  console: {}\n"
        f"  telegram: {{token: '{emu.token}', api_base_url: '{emu.api_base_url}', poll_timeout: 1,"
        " unknown_user_policy: allow}\n"
    )
    openai_emulator.queue(
        Reply(text="hi console", usage={"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}),
        Reply(text="hi telegram", usage={"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botweave", "run", str(config), "--log-format", "json",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=str(ROOT), env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"hello\n")
        await proc.stdin.drain()
        assert (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip() == "hi console"
        emu.push_message(emu.private_chat(ANN), ANN, "hello from telegram")
        await wait_until(lambda: emu.sent_texts(1) == ["hi telegram"], timeout=30, what="the telegram reply")
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0  # SIGTERM is a clean stop
    text = stderr.decode()
    assert API_KEY not in text and emu.token not in text
    records = [json.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)

    connected = {r["platform"]: r for r in records if r["message"].startswith(("console: connected", "telegram: connected"))}
    assert connected["telegram"]["level"] == "INFO" and connected["telegram"]["mode"] == "polling"
    assert connected["telegram"]["bot"] == "ThisBot" and connected["console"]["mode"] == "pipe"

    turns = {r["conversation"]: r for r in records if TURN_FIELDS <= set(r)}
    assert set(turns) == {"console:dm:local", "telegram:dm:1"}
    console, telegram = turns["console:dm:local"], turns["telegram:dm:1"]
    assert console["level"] == "INFO"
    assert (console["agent"], console["model"], console["outcome"]) == ("helper", "openai/gpt-emu", "replied")
    assert (console["tokens_in"], console["tokens_out"]) == (11, 2)
    assert (telegram["tokens_in"], telegram["tokens_out"]) == (5, 4)
    assert isinstance(console["latency_ms"], int) and console["latency_ms"] >= 0


def test_the_json_formatter_keeps_tracebacks_and_extra_fields() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("t").makeRecord("t", logging.ERROR, __file__, 1, "failed %s", ("x",), sys.exc_info(),
                                                   extra={"agent": "a"})
    data = json.loads(JsonFormatter().format(record))
    assert data["message"] == "failed x" and data["agent"] == "a" and data["level"] == "ERROR"
    assert "ValueError: boom" in data["exception"]
