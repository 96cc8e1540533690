"""botweave as separate processes on Redis, against the Telegram emulator.

Each test starts real `botweave run` processes (ingress, workers, or all-in-one), kills or
restarts them, and asserts what the Telegram user would see.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from tests.emulators.openai import OpenAIEmulator
from tests.emulators.telegram import TelegramEmulator, wait_until

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, "-m", "botweave"]


class Recording(OpenAIEmulator):
    """Keeps a request from the moment it arrives (the parent records after parsing too)."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(reply="Noted.")
        self.delay = delay
        self.arrived: list[float] = []

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        self.arrived.append(time.monotonic())
        if self.delay:
            await asyncio.sleep(self.delay)
        return await super()._completions(request)


@pytest.fixture
async def slow_llm() -> AsyncIterator[Recording]:
    llm = Recording(delay=4.0)
    await llm.start()
    yield llm
    await llm.stop()


@pytest.fixture
async def llm() -> AsyncIterator[Recording]:
    llm = Recording()
    await llm.start()
    yield llm
    await llm.stop()


def write_config(path: Path, emu: TelegramEmulator, redis_url: str, llm_url: str | None = None, **sections: Any) -> Path:
    """A bot.yaml for the processes: Telegram on the emulator, Redis with short leases."""
    agent = {"model": "openai/loopback", "api_base": llm_url, "api_key": "sk-loopback"} if llm_url else {"model": "offline/echo"}
    config: dict[str, Any] = {
        "agents": {"assistant": agent},
        "platforms": {
            "telegram": {
                "token": emu.token,
                "api_base_url": emu.api_base_url,
                "poll_timeout": 1,
                "requests_per_second": 1000,
            }
        },
        "bot": {"unknown_user_policy": "allow"},
        "store": {
            "url": redis_url,
            "prefix": f"proc-{uuid.uuid4().hex[:8]}:",
            "stream_lease_seconds": 2,
            "lock_ttl_seconds": 1,
        },
    }
    config.update(sections)  # whole sections replaced: bot, agents, rooms, routes
    path.write_text(yaml.safe_dump(config))
    return path


class Processes:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.running: list[subprocess.Popen[bytes]] = []

    def spawn(self, config: Path, role: str = "all") -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{role}-{len(self.running)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [*LAUNCH, "-v", "run", "--role", role, str(config)],
            cwd=ROOT,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.running.append(proc)
        return proc

    async def wait(self, predicate, timeout: float, what: str) -> None:
        """wait_until, with the processes' logs in the failure message."""
        try:
            await wait_until(predicate, timeout=timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- process logs ---\n{self.logs()[-6000:]}") from None

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob("*.log")))

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)

    def close(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    yield procs
    procs.close()


async def test_a_worker_killed_mid_turn_is_replaced_and_the_message_is_answered_exactly_once(
    telegram_emulator: TelegramEmulator, redis_url: str, slow_llm: Recording, processes: Processes, tmp_path: Path
) -> None:
    emu = telegram_emulator
    config = write_config(tmp_path / "bot.yaml", emu, redis_url, slow_llm.base_url)
    processes.spawn(config, "ingress")
    first = processes.spawn(config, "worker")
    user = emu.user(501, "Ann")
    emu.push_message(emu.private_chat(user), user, "are you there?")
    await processes.wait(lambda: len(slow_llm.arrived) >= 1, timeout=60, what="the first worker to start its turn")
    first.send_signal(signal.SIGKILL)  # in the middle of the turn: the model has not answered
    first.wait(timeout=10)
    processes.spawn(config, "worker")
    await processes.wait(lambda: emu.sent_texts(501), timeout=60, what="the second worker to answer")
    await asyncio.sleep(3)  # a duplicate would arrive now
    assert emu.sent_texts(501) == ["Noted."], processes.logs()
    assert len(slow_llm.arrived) == 2  # the killed turn, and the one that answered


async def test_two_workers_answer_a_thousand_messages_exactly_once_in_order(
    telegram_emulator: TelegramEmulator, redis_url: str, llm: Recording, processes: Processes, tmp_path: Path
) -> None:
    emu = telegram_emulator
    config = write_config(tmp_path / "bot.yaml", emu, redis_url, llm.base_url)
    processes.spawn(config, "ingress")
    processes.spawn(config, "worker")
    processes.spawn(config, "worker")
    users = [emu.user(1000 + i, f"User{i}") for i in range(50)]
    chats = [emu.private_chat(u) for u in users]
    for n in range(20):
        for user, chat in zip(users, chats):
            emu.push_message(chat, user, f"{user['id']}-{n}")
    await processes.wait(lambda: len(emu.sent()) >= 1000, timeout=180, what="1000 answers")
    await asyncio.sleep(2)
    sent = emu.sent()
    assert len(sent) == 1000, processes.logs()[-3000:]
    # exactly once: every inbound message got one reply, addressed to it
    replied_to = [(m["chat"]["id"], m["reply_to_message"]["text"]) for m in sent]
    assert len(set(replied_to)) == 1000
    # per-conversation order, and no two turns of one conversation overlapping: turn n+1's
    # model request arrives only after turn n's reply was sent
    requests = [(r["messages"][-1]["content"], at) for r, at in zip(llm.requests, llm.arrived)]
    started = {text: at for text, at in requests}
    finished = {(c.result["chat"]["id"], c.result["reply_to_message"]["text"]): c.at for c in emu.calls_to("sendMessage") if c.status == 200}
    for user in users:
        order = [m["reply_to_message"]["text"] for m in sent if m["chat"]["id"] == user["id"]]
        assert order == [f"{user['id']}-{n}" for n in range(20)]
        for n in range(19):
            assert finished[(user["id"], f"{user['id']}-{n}")] <= started[f"{user['id']}-{n + 1}"]


async def test_history_pairing_loop_guard_and_room_survive_a_restart(
    telegram_emulator: TelegramEmulator, redis_url: str, llm: Recording, processes: Processes, tmp_path: Path
) -> None:
    emu = telegram_emulator
    model = {"model": "openai/loopback", "api_base": llm.base_url, "api_key": "sk-loopback"}
    config = write_config(
        tmp_path / "bot.yaml",
        emu,
        redis_url,
        llm.base_url,
        bot={
            "owner_user_id": "900",
            "unknown_user_policy": "pair",
            "allowed_chats": ["-200", "-300"],
            "allow_bots": True,
            "group_policy": "respond_all",
            "bot_loop_protection": {"max_events_per_window": 2, "window_seconds": 60, "cooldown_seconds": 600},
        },
        agents={"assistant": model, "planner": model},
        rooms={"standup": {"roster": ["planner"], "max_rounds": 1}},
        routes=[{"match": {"chat_id": "-300"}, "room": "standup"}, {"match": {}, "agent": "assistant"}],
    )
    owner, ann, other_bot = emu.user(900, "Owner"), emu.user(501, "Ann"), emu.user(777, "OtherBot", is_bot=True)
    ann_chat, owner_chat = emu.private_chat(ann), emu.private_chat(owner)
    group, room_chat = emu.group(-200, "Bots"), emu.group(-300, "Standup")

    run = processes.spawn(config)
    emu.push_message(ann_chat, ann, "hello?")
    await processes.wait(lambda: any("pairing code is" in t for t in emu.sent_texts(501)), timeout=60, what="a pairing code")
    code = next(t for t in emu.sent_texts(501) if "pairing code is" in t).split("pairing code is ")[1][:8]
    emu.push_message(owner_chat, owner, f"/pair approve {code}")
    await processes.wait(lambda: "You're approved. Say hello!" in emu.sent_texts(501), timeout=30, what="the approval")
    emu.push_message(ann_chat, ann, "remember the word tangerine")
    for i in range(3):  # the third trips the loop guard: cooldown of 10 minutes
        emu.push_message(group, other_bot, f"bot ping {i}")
    emu.push_message(room_chat, ann, "room opener before restart")
    await processes.wait(lambda: len(emu.sent(-200)) == 2 and emu.sent(-300) and "Noted." in emu.sent_texts(501), timeout=60, what="first answers")

    processes.stop(run)
    answered_before = len(emu.sent())
    processes.spawn(config)
    emu.push_message(ann_chat, ann, "what was the word?")  # answered without pairing again
    emu.push_message(group, other_bot, "bot ping after restart")  # still in cooldown
    emu.push_message(room_chat, ann, "room message after restart")
    await processes.wait(lambda: emu.sent_texts(501).count("Noted.") == 2 and len(emu.sent(-300)) == 2, timeout=60, what="answers after restart")
    await asyncio.sleep(2)
    assert len(emu.sent(-200)) == 2, "the loop guard's cooldown survived the restart"
    assert not any("pairing code" in t for t in emu.sent_texts(501)[2:]), "the approval survived"
    ann_request = next(r for r in reversed(llm.requests) if r["messages"][-1]["content"] == "what was the word?")
    assert {"role": "user", "content": "remember the word tangerine"} in ann_request["messages"], "history survived"
    room_request = next(r for r in reversed(llm.requests) if "room message after restart" in r["messages"][-1]["content"])
    assert "room opener before restart" in room_request["messages"][-1]["content"], "the room transcript survived"
    assert len(emu.sent()) == answered_before + 2
