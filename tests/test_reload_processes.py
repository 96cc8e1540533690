"""Reloads and watchdogs of real `botweave run` processes, on the platform emulators.

A reload by SIGHUP while a long streamed Telegram turn runs and a Discord gateway session is
up; `botweave reload` from a second process, with a good and a broken file; reload across an
ingress and two workers on Redis; and the watchdogs: a start-up that blocks in a plugin's
import, and an event loop a plugin's `time.sleep` stalls. Timeouts are set small here so the
tests stay short.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import free_port
from tests.emulators.discord import DM_CHANNEL_ID, DiscordEmulator
from tests.emulators.openai import OpenAIEmulator, Reply
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, "-m", "botweave"]
LONG_ANSWER = " ".join(f"word{i}" for i in range(40))


class Bot:
    """One `botweave` process and its log."""

    def __init__(self, tmp: Path, args: list[str], *, env: dict[str, str] | None = None, name: str = "bot") -> None:
        self.log_path = tmp / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [*LAUNCH, *args], cwd=ROOT, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})},
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def lines(self, fragment: str) -> list[str]:
        return [line for line in self.log().splitlines() if fragment in line]

    async def wait_log(self, fragment: str, timeout: float = 60, count: int = 1) -> None:
        try:
            await wait_until(lambda: len(self.lines(fragment)) >= count or self.proc.poll() is not None, timeout, fragment)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- log ---\n{self.log()[-5000:]}") from None
        assert len(self.lines(fragment)) >= count, f"the bot exited ({self.proc.poll()}) first:\n{self.log()[-5000:]}"

    async def exited(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, f"still running after {timeout}s:\n{self.log()[-5000:]}"
            await asyncio.sleep(0.05)
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture
def bots(tmp_path: Path) -> Iterator[Callable[..., Bot]]:
    started: list[Bot] = []

    def start(*args: str, **kwargs: Any) -> Bot:
        bot = Bot(tmp_path, list(args), **kwargs)
        started.append(bot)
        return bot

    yield start
    for bot in started:
        bot.close()


def botweave(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A second `botweave` command, run to its end."""
    return subprocess.run(
        [*LAUNCH, *args], cwd=ROOT, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        capture_output=True, text=True, timeout=timeout,
    )


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture
async def discord() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


async def get(port: int, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}{path}", timeout=aiohttp.ClientTimeout(total=5)) as response:
            return response.status, await response.json()


async def readyz(port: int, timeout: float = 30) -> dict[str, Any]:
    """/readyz's body once it answers 200 (a busy test machine can hold a poll back a while)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = await get(port, "/readyz")
        if status == 200:
            return body
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.2)


async def ready(port: int, bot: Bot, timeout: float = 90) -> None:
    """Until the bot's /readyz answers 200 (it serves)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if (await get(port, "/readyz"))[0] == 200:
                return
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass
        assert bot.proc.poll() is None, f"the bot exited:\n{bot.log()[-5000:]}"
        assert time.monotonic() < deadline, f"not ready after {timeout}s:\n{bot.log()[-5000:]}"
        await asyncio.sleep(0.1)


async def test_sighup_applies_a_new_agent_and_route_while_a_streamed_turn_runs_and_discord_stays_connected(
    tmp_path: Path,
    bots: Callable[..., Bot],
    telegram_emulator: TelegramEmulator,
    discord: DiscordEmulator,
    openai_emulator: OpenAIEmulator,
) -> None:
    tg, llm = telegram_emulator, openai_emulator
    config: dict[str, Any] = {
        "bot": {"unknown_user_policy": "allow", "streaming": True, "stream_edit_interval_ms": 200},
        "agents": {"assistant": {"model": "openai/gpt-emu", "api_base": llm.base_url, "api_key": "sk-loopback"}},
        "platforms": {
            "telegram": adapter_config(tg, poll_timeout=1),
            "discord": {"token": discord.token, "api_base_url": discord.api_base, "gateway_url": discord.gateway_url},
        },
    }
    path = write(tmp_path / "bot.yaml", config)
    bot = bots("run", str(path))
    await bot.wait_log("discord: connected as")
    await bot.wait_log("telegram: connected as")
    await discord.wait_ready(30)

    # about twenty seconds of streaming: the reload must land mid-turn even on a loaded machine
    llm.queue(Reply(text=LONG_ANSWER, chunks=40, chunk_delay=0.5))
    ann = tg.user(501, "Ann")
    tg.push_message(tg.private_chat(ann), ann, "tell me a long story")
    await wait_until(lambda: tg.sent(501), timeout=30, what="the streamed answer to begin")

    config["agents"]["helper"] = {"model": "offline/echo"}
    config["routes"] = [{"match": {"platform": "discord"}, "agent": "helper"}, {"match": {}, "agent": "assistant"}]
    write(path, config)
    bot.proc.send_signal(signal.SIGHUP)
    await bot.wait_log("config reloaded")
    assert "applied: agents, routes" in bot.lines("config reloaded")[0]
    first = tg.sent(501)[0]
    assert tg.current(501, first["message_id"])["text"] != LONG_ANSWER  # the reload came mid-turn
    await wait_until(
        lambda: (tg.current(501, first["message_id"]) or {}).get("text") == LONG_ANSWER, timeout=60,
        what="the streamed turn to finish",
    )
    assert "(stopped)" not in tg.current(501, first["message_id"])["text"]

    await discord.dispatch("MESSAGE_CREATE", discord.message("who answers now?", channel_id=DM_CHANNEL_ID))
    answer = "helper (offline echo) heard: who answers now?"  # streamed too: the last edit has it all
    await wait_until(
        lambda: [m["content"] for m in discord.bot_messages(DM_CHANNEL_ID)] == [answer], timeout=30,
        what="the new agent's answer on Discord",
    )
    assert len(discord.identifies) == 1  # the session was never re-identified
    assert not bot.lines("discord: connected as")[1:]

    # a broken edit: nothing changes, one line says why, the revision stays
    before = bot.lines("config reloaded")[0].split("-> ")[1].split(";")[0]
    write(path, {**config, "agents": {**config["agents"], "helper": {"model": "offline/echo", "temprature": 1}}})
    bot.proc.send_signal(signal.SIGHUP)
    await bot.wait_log("config reload refused")
    (refused,) = bot.lines("config reload refused")
    assert f"still running revision {before}" in refused and "agents.helper.temprature: unknown key" in refused
    await discord.dispatch("MESSAGE_CREATE", discord.message("/status", channel_id=DM_CHANNEL_ID))
    await wait_until(lambda: len(discord.bot_messages(DM_CHANNEL_ID)) == 2, timeout=30, what="/status")
    assert f"config: revision {before}" in discord.bot_messages(DM_CHANNEL_ID)[1]["content"]
    assert len(discord.identifies) == 1


async def test_botweave_reload_from_another_shell_applies_a_file_or_refuses_it_with_checks_message(
    tmp_path: Path, bots: Callable[..., Bot], telegram_emulator: TelegramEmulator
) -> None:
    tg = telegram_emulator
    port = free_port()
    config: dict[str, Any] = {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": adapter_config(tg, poll_timeout=1)},
        "ops": {"listen": f"127.0.0.1:{port}"},
    }
    path = write(tmp_path / "bot.yaml", config)
    nobody = botweave("reload", str(path))
    assert nobody.returncode == 1 and "no bot is running" in nobody.stderr

    bot = bots("run", str(path))
    await bot.wait_log("telegram: connected as")
    same = botweave("reload", str(path))
    assert same.returncode == 0, same.stderr
    assert "config unchanged" in same.stdout

    config["agents"]["helper"] = {"model": "offline/echo"}
    config["routes"] = [{"match": {"chat_id": "502"}, "agent": "helper"}, {"match": {}, "agent": "assistant"}]
    write(path, config)
    applied = botweave("reload", str(path))
    assert applied.returncode == 0, applied.stderr
    assert "config reloaded" in applied.stdout and "applied: agents, routes" in applied.stdout
    bob = tg.user(502, "Bob")
    tg.push_message(tg.private_chat(bob), bob, "hi")
    await wait_until(lambda: tg.sent_texts(502), timeout=30, what="the new route to answer")
    assert tg.sent_texts(502) == ["helper (offline echo) heard: hi"]

    config["schedules"] = {"digest": {"cron": "0 25 * * *", "agent": "helper", "prompt": "p", "target": "telegram:502"}}
    write(path, config)
    refused = botweave("reload", str(path))
    check = botweave("check", str(path))
    assert refused.returncode == 2 and check.returncode == 2
    message = check.stderr.strip().splitlines()
    assert message[0] == "botweave: invalid configuration:" and "schedules.digest" in message[1]
    assert refused.stderr.strip().splitlines()[-len(message):] == message
    await bot.wait_log("config reload refused")
    assert len(bot.lines("config reload refused")) == 1

    body = await readyz(port)  # ready: the bot serves its last good configuration
    assert "differs from what runs" in body["config"] and "schedules.digest" in body["config"], body
    doctor = botweave("doctor", "--no-model", str(path))
    assert doctor.returncode == 1
    (running,) = [line for line in doctor.stdout.splitlines() if "running bot" in line]
    assert running.startswith("FAIL") and "differs from what runs" in running

    del config["schedules"]
    write(path, config)
    assert botweave("reload", str(path)).returncode == 0
    assert await readyz(port) == {"status": "ready"}
    doctor = botweave("doctor", "--no-model", str(path))
    (running,) = [line for line in doctor.stdout.splitlines() if "running bot" in line]
    assert running.startswith("ok") and "the file's" in running, doctor.stdout


async def test_a_reload_reaches_the_ingress_and_every_worker_on_redis(
    tmp_path: Path, bots: Callable[..., Bot], telegram_emulator: TelegramEmulator, redis_url: str
) -> None:
    tg = telegram_emulator
    config: dict[str, Any] = {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": {**adapter_config(tg, poll_timeout=1), "requests_per_second": 1000}},
        "store": {"url": redis_url, "prefix": f"reload-{uuid.uuid4().hex[:8]}:", "stream_lease_seconds": 2, "lock_ttl_seconds": 1},
    }
    path = write(tmp_path / "bot.yaml", config)
    ingress = bots("run", "--role", "ingress", str(path), name="ingress")
    workers = [bots("run", "--role", "worker", str(path), name=f"worker{i}") for i in range(2)]
    await ingress.wait_log("now holds the platform connection")
    for worker in workers:
        await worker.wait_log("store: redis")
    users = [tg.user(600 + i, f"U{i}") for i in range(6)]
    for user in users:
        tg.push_message(tg.private_chat(user), user, "before")
    await wait_until(lambda: all(tg.sent_texts(u["id"]) for u in users), timeout=60, what="answers before the reload")

    config["agents"]["helper"] = {"model": "offline/echo"}
    config["routes"] = [{"match": {}, "agent": "helper"}]
    write(path, config)
    await asyncio.sleep(1.5)  # every process has announced itself
    result = botweave("reload", str(path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3 and all("config reloaded" in line for line in lines), result.stdout
    assert sorted(line.split("(")[1].split(")")[0] for line in lines) == ["ingress", "worker", "worker"]
    for process in (ingress, *workers):
        assert len(process.lines("config reloaded")) == 1

    for user in users:
        tg.push_message(tg.private_chat(user), user, "after")
    await wait_until(lambda: all(len(tg.sent_texts(u["id"])) == 2 for u in users), timeout=60, what="answers after")
    assert {tg.sent_texts(u["id"])[1] for u in users} == {"helper (offline echo) heard: after"}


def plugin(tmp_path: Path, name: str, source: str) -> dict[str, str]:
    """A plugin module in its own folder, and the environment that lets the bot import it."""
    folder = tmp_path / "plugins"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return {"PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


async def test_a_start_that_blocks_is_ended_by_the_deadline_with_every_stack_written(
    tmp_path: Path, bots: Callable[..., Bot], telegram_emulator: TelegramEmulator
) -> None:
    env = plugin(tmp_path, "sleepy_import", """
        import time

        def wait_for_a_server_that_never_answers():
            time.sleep(120)

        wait_for_a_server_that_never_answers()

        def setup(app):
            pass
    """)
    config = {
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": adapter_config(telegram_emulator, poll_timeout=1)},
        "plugins": ["sleepy_import"],
        "ops": {"startup_timeout_seconds": 3},
    }
    path = write(tmp_path / "bot.yaml", config)
    started = time.monotonic()
    bot = bots("run", str(path), env=env)
    assert await bot.exited(timeout=60) == 4
    assert time.monotonic() - started < 30
    log = bot.log()
    assert "not serving 3s after the start" in log
    assert "wait_for_a_server_that_never_answers" in log and "sleepy_import.py" in log  # the stack, by faulthandler
    assert not telegram_emulator.calls_to("getUpdates")


async def test_a_stalled_event_loop_fails_healthz_then_ends_the_process(
    tmp_path: Path, bots: Callable[..., Bot], telegram_emulator: TelegramEmulator
) -> None:
    tg = telegram_emulator
    env = plugin(tmp_path, "blocking_command", """
        import time

        def setup(app):
            async def block(inbound):
                time.sleep(60)  # blocks the event loop: the mistake the watchdog is for
                return "done"

            app.commands.register("block", block, help="block the event loop")
    """)
    port = free_port()
    config = {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": adapter_config(tg, poll_timeout=1)},
        "plugins": ["blocking_command"],
        "ops": {"listen": f"127.0.0.1:{port}", "loop_stall_seconds": 2},
    }
    path = write(tmp_path / "bot.yaml", config)
    bot = bots("run", str(path), env=env)
    await ready(port, bot)
    assert await get(port, "/healthz") == (200, {"status": "ok"})

    ann = tg.user(501, "Ann")
    tg.push_message(tg.private_chat(ann), ann, "/block")
    answers: list[tuple[int, Any]] = []
    deadline = time.monotonic() + 30
    while bot.proc.poll() is None and time.monotonic() < deadline:
        try:
            answers.append(await get(port, "/healthz"))
        except aiohttp.ClientError:
            pass  # the process is going
        await asyncio.sleep(0.1)
    assert await bot.exited(timeout=30) == 5
    stalled = [body for status, body in answers if status == 503]
    assert stalled and stalled[0]["status"] == "stalled", answers
    log = bot.log()
    assert "the event loop has not run a callback for" in log
    assert "blocking_command.py" in log and "in block" in log  # where the loop is stuck, by faulthandler
    assert "exiting with code 5" in log
