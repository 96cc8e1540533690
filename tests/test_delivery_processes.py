"""Delivery guarantees with real `botweave run` processes: a worker killed under load, Redis
paused mid-load, the embedded SQLite store across restarts, and how fast SIGTERM exits.

One run of each scenario; bench/crash.py repeats them and prints the spread, since a kill
lands differently every time.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import crashlab
from tests.emulators.openai import OpenAIEmulator
from tests.emulators.telegram import TelegramEmulator, wait_until

TAKEOVER_LIMIT_S = 15.0


def report(result: crashlab.Result) -> str:
    return f"{result.line()}\n--- process logs ---\n{result.logs[-8000:]}"


@pytest.mark.parametrize("platform", ["telegram", "discord", "slack", "whatsapp", "teams"])
async def test_a_worker_killed_under_load_loses_no_reply_and_is_taken_over_within_15s(
    platform: str, redis_url: str, tmp_path: Path
) -> None:
    result = await crashlab.run(platform, "kill", redis_url, tmp_path)
    duplicates = sum(n - 1 for n in result.duplicated.values())
    assert not result.lost, report(result)
    if platform in ("telegram", "whatsapp", "teams"):  # no idempotency key: only a send in flight at the kill may show twice
        assert duplicates <= result.in_flight, report(result)
    else:
        assert duplicates == 0, report(result)
    assert result.takeover_s <= TAKEOVER_LIMIT_S, report(result)
    assert not result.history_problems, report(result)
    assert not result.model_problems, report(result)
    assert result.tracebacks == 0, report(result)


async def test_redis_paused_mid_load_loses_and_duplicates_nothing_and_keeps_every_history(
    redis_url: str, tmp_path: Path
) -> None:
    result = await crashlab.run("telegram", "pause", redis_url, tmp_path)
    assert not result.lost, report(result)
    assert not result.duplicated, report(result)
    assert not result.history_problems, report(result)
    assert not result.model_problems, report(result)
    assert result.tracebacks == 0, report(result)
    assert result.outage_warnings <= 3, "one warning per process and outage, not one per operation"


# --- the embedded store ----------------------------------------------------------------------------


def botweave(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run(
        [sys.executable, "-m", "botweave", *args], capture_output=True, text=True, env=env, timeout=timeout,
        cwd=crashlab.ROOT,
    )


def single_config(path: Path, emu: TelegramEmulator, llm_url: str, **bot: Any) -> Path:
    """A bot.yaml naming no store: `botweave run` keeps state in its own SQLite file."""
    config = {
        "agents": {"assistant": {"model": "openai/loopback", "api_base": llm_url, "api_key": "sk-loopback"}},
        "platforms": {
            "telegram": {"token": emu.token, "api_base_url": emu.api_base_url, "poll_timeout": 1, "requests_per_second": 1000}
        },
        "bot": bot,
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def test_the_default_store_keeps_conversations_approvals_and_cut_off_turns_across_restarts(
    telegram_emulator: TelegramEmulator, tmp_path: Path, private_state_dir: Path
) -> None:
    emu = telegram_emulator
    llm = crashlab.EchoModel(0.0)
    await llm.start()
    procs = crashlab.Processes(tmp_path)
    config = single_config(tmp_path / "bot.yaml", emu, llm.base_url, unknown_user_policy="pair")
    checked = botweave("check", str(config))
    database = next(line for line in checked.stdout.splitlines() if line.startswith("# store: sqlite:///"))
    assert str(private_state_dir) in database and "bot-" in database, checked.stdout
    stranger = emu.user(777, "Stranger")
    chat = emu.private_chat(stranger)
    try:
        procs.spawn("run-1", config, "run")
        emu.push_message(chat, stranger, "hello?")
        await wait_until(lambda: any("pairing code is" in t for t in emu.sent_texts(777)), timeout=60, what="a code")
        code = next(t for t in emu.sent_texts(777) if "pairing code is" in t).split("pairing code is ")[1][:8]
        # a second shell, while the bot runs, against the same file
        approved = await asyncio.to_thread(botweave, "pair", "approve", "telegram", code, "--config", str(config))
        assert approved.returncode == 0, approved.stderr
        emu.push_message(chat, stranger, "remember tangerine")
        await wait_until(lambda: "re: remember tangerine" in emu.sent_texts(777), timeout=30, what="the admitted answer")
        assert await procs.terminate("run-1") < 5

        # restarted: the approval and the conversation are still there
        procs.spawn("run-2", config, "run")
        emu.push_message(chat, stranger, "what was the word?")
        await wait_until(lambda: "re: what was the word?" in emu.sent_texts(777), timeout=60, what="the answer")
        request = next(r for r in reversed(llm.requests) if r["messages"][-1]["content"] == "what was the word?")
        assert {"role": "user", "content": "remember tangerine"} in request["messages"], "history survived"
        assert sum("pairing code" in t for t in emu.sent_texts(777)) == 1, "the approval survived"

        # killed while the model thinks: the next start answers what the platform was told was received
        llm.delay = 3.0
        emu.push_message(chat, stranger, "slow question")
        await wait_until(lambda: llm.requests and llm.requests[-1]["messages"][-1]["content"] == "slow question",
                         timeout=30, what="the slow turn to start")
        procs.kill("run-2")
        await asyncio.sleep(0.5)
        assert not emu.pending, "the update was acknowledged to Telegram before the kill"
        llm.delay = 0.0
        procs.spawn("run-3", config, "run")
        await wait_until(lambda: "re: slow question" in emu.sent_texts(777), timeout=60, what="the cut-off turn")
        await asyncio.sleep(1.0)
        assert emu.sent_texts(777).count("re: slow question") == 1
        slow = [r for r in llm.requests if r["messages"][-1]["content"] == "slow question"]
        assert [m["content"] for m in slow[-1]["messages"] if m["role"] == "user"].count("slow question") == 1
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{procs.logs()[-6000:]}") from None
    finally:
        for name in list(procs.running):
            if procs.running[name].poll() is None:
                await procs.terminate(name)
        procs.close()
        await llm.stop()


# --- shutdown ---------------------------------------------------------------------------------------


async def test_sigterm_exits_within_two_seconds_when_idle_in_every_role(
    telegram_emulator: TelegramEmulator, redis_url: str, tmp_path: Path
) -> None:
    emu = telegram_emulator
    llm = OpenAIEmulator(reply="Noted.")
    await llm.start()
    shared = crashlab.write_config(tmp_path / "shared.yaml", _TelegramAt(emu), redis_url, llm.base_url, "sigterm:")
    alone = single_config(tmp_path / "alone.yaml", emu, llm.base_url, unknown_user_policy="allow")
    procs = crashlab.Processes(tmp_path)
    user = emu.user(901, "Ann")
    try:
        procs.spawn("ingress", shared, "run", "--role", "ingress")
        procs.spawn("worker", shared, "run", "--role", "worker")
        emu.push_message(emu.private_chat(user), user, "warm up")
        await wait_until(lambda: emu.sent(901), timeout=60, what="the deployment to answer")
        await asyncio.sleep(1.0)
        exits = {name: await procs.terminate(name) for name in ("worker", "ingress")}
        procs.spawn("all", alone, "run")
        emu.push_message(emu.private_chat(user), user, "warm up again")
        await wait_until(lambda: len(emu.sent(901)) == 2, timeout=60, what="the single process to answer")
        await asyncio.sleep(1.0)
        exits["all (sqlite)"] = await procs.terminate("all")
        assert all(seconds < 2.0 for seconds in exits.values()), exits
        assert all(proc.returncode == 0 for proc in procs.running.values()), {n: p.returncode for n, p in procs.running.items()}
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{procs.logs()[-6000:]}") from None
    finally:
        procs.close()
        await llm.stop()


class _TelegramAt(crashlab.TelegramSide):
    """The Telegram side of crashlab, on an emulator the test already runs."""

    def __init__(self, emu: TelegramEmulator) -> None:
        self.emulator = emu
        self._chats = []
