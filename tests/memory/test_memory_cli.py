"""The way the bot is really run: `botweave run bot.yaml` (its SQLite file next to the
configuration) against the Telegram emulator and the loopback model. Facts reach the same
person after a restart of the process and nobody else; a long chat with a small window never
sends more than the window."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from botweave.context import SUMMARY_INSTRUCTIONS, SUMMARY_PREFIX, TokenCounter

from tests.emulators.openai import text_of
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.memory.support import leaks, memory_block, model, secret_of

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def write_config(path: Path, emu: TelegramEmulator, base_url: str, **agent: Any) -> Path:
    config = {
        "agents": {"assistant": {"model": "openai/gpt-4o-mini", "api_base": base_url, "api_key": "sk-loopback", **agent}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu, requests_per_second=1000)}},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def run(config: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "botweave", "run", str(config)], cwd=ROOT, env=ENV, stdin=subprocess.DEVNULL,
        stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


async def test_botweave_run_remembers_each_person_across_a_restart_and_never_mixes_them(
    tmp_path, telegram_emulator, openai_emulator
):
    emu, llm = telegram_emulator, model(openai_emulator)
    config = write_config(tmp_path / "bot.yaml", emu, llm.base_url, memory={"enabled": True})
    people = {f"p{n}": TelegramEmulator.user(300 + n, f"P{n}") for n in range(5)}
    chats = {p: emu.private_chat(u) for p, u in people.items()}
    secrets = {p: secret_of(p) for p in people}
    proc = run(config, tmp_path / "first.log")
    try:
        for p, user in people.items():
            emu.push_message(chats[p], user, f"I am {p}, remember {secrets[p]}")
        await wait_until(lambda: all(emu.sent_texts(chats[p]["id"]) for p in people), timeout=90, what="answers")
    finally:
        stop(proc)
    proc = run(config, tmp_path / "second.log")
    try:
        for p, user in people.items():
            emu.push_message(chats[p], user, f"I am {p}, what do you know?")
        await wait_until(lambda: all(len(emu.sent_texts(chats[p]["id"])) >= 2 for p in people), timeout=90, what="later")
    finally:
        stop(proc)
    later = [r for r in llm.requests if "what do you know" in text_of(r["messages"][-1])]
    assert len(later) == len(people)
    for request in later:
        author = text_of(request["messages"][-1]).split("I am ")[1].split(",")[0]
        assert secrets[author] in memory_block(request)
    assert leaks(llm) == []


async def test_botweave_run_keeps_a_long_chat_inside_a_small_window(tmp_path, telegram_emulator, openai_emulator):
    emu, llm = telegram_emulator, openai_emulator
    llm.reply = "Noted, and here is a reply of a few words."
    window = 700
    config = write_config(tmp_path / "bot.yaml", emu, llm.base_url, context={"max_tokens": window, "keep_recent": 6})
    ann = TelegramEmulator.user(9, "Ann")
    chat = emu.private_chat(ann)
    proc = run(config, tmp_path / "run.log")
    try:
        for number in range(40):
            emu.push_message(chat, ann, f"message {number}: " + "tell me about sheep " * 6)
            await wait_until(lambda: len(emu.sent_texts(chat["id"])) > number, timeout=90, what=f"answer {number}")
    finally:
        stop(proc)
    counter = TokenCounter("openai/gpt-4o-mini")
    from botweave.model_calls import litellm_module

    litellm = litellm_module()
    summaries = [r for r in llm.requests if r["messages"][0]["content"] == SUMMARY_INSTRUCTIONS]
    turns = [r for r in llm.requests if r not in summaries]
    assert len(turns) == 40 and 1 <= len(summaries) < 10  # summaries are written now and then, not every turn
    for request in turns:
        assert counter.messages(request["messages"]) <= window
        assert litellm.token_counter(model="openai/gpt-4o-mini", messages=request["messages"]) <= window
    users = [text_of(m) for m in turns[-1]["messages"] if m["role"] == "user"]
    assert users[-3:] == [f"message {n}: " + "tell me about sheep " * 6 for n in (37, 38, 39)]
    assert turns[-1]["messages"][1]["content"].startswith(SUMMARY_PREFIX)
