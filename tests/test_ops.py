"""What an operator sees: /metrics after real traffic, /healthz, and /readyz as the store and a
platform come and go, in every role.

Traffic goes through the Telegram emulator and python-telegram-bot; the model is the OpenAI
emulator through litellm, so token counts are the ones the provider reports.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from botweave import App
from botweave.runtime.turn_control import FAILED_NOTICE
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port
from tests.emulators.openai import OpenAIEmulator, Reply
from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)
from tests.support import StartApp

ANN = TelegramEmulator.user(1, "Ann", "ann")
USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def get(app: App, path: str) -> tuple[int, Any]:
    assert app.ops is not None
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{app.ops.port}{path}") as response:
            body = await response.json() if response.content_type == "application/json" else await response.text()
            return response.status, body


def config(emu: TelegramEmulator, **extra: Any) -> dict[str, Any]:
    return {
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu, poll_timeout=1)}},
        "ops": {"listen": "127.0.0.1:0"},
        **extra,
    }


async def test_metrics_move_as_the_traffic_did(
    telegram_emulator: TelegramEmulator, openai_emulator: OpenAIEmulator, start_app: StartApp
) -> None:
    emu = telegram_emulator
    app = await start_app(
        config(emu, agents={"assistant": {"model": "openai/gpt-emu", "api_base": openai_emulator.base_url, "api_key": "k"}})
    )
    dm = emu.private_chat(ANN)
    status, text = await get(app, "/metrics")
    assert status == 200
    before = parse(text)

    openai_emulator.queue(Reply(text="one", usage=USAGE), Reply(text="two", usage=USAGE))
    emu.fail("sendMessage", code=403, description="Forbidden: bot was blocked by the user", times=1)
    emu.rate_limit("sendMessage", retry_after=1)  # the second reply waits a second, then goes out
    for text_in in ("first", "second", "/help", "third"):
        emu.push_message(dm, ANN, text_in)
        await wait_until(lambda: not emu.pending, what="the update to be fetched")
        await asyncio.sleep(0.05)
        await app.drain()
    # the first reply was refused by the platform: its sender is told, once
    assert emu.sent_texts(1)[:2] == [FAILED_NOTICE, "two"]

    status, text = await get(app, "/metrics")
    after = parse(text)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("botweave_inbound_total", platform="telegram", kind="text", outcome="replied") == 3
    assert sum(v - value(before, n, **dict(k)) for (n, k), v in after.items()
               if n == "botweave_inbound_total" and ("outcome", "command") in k) == 1
    assert delta("botweave_turns_total", agent="assistant", outcome="replied") == 3
    assert delta("botweave_turn_seconds_count") == 3
    assert delta("botweave_model_seconds_count") == 3
    assert delta("botweave_outbound_total", platform="telegram", action="send", result="ok") == 4  # two replies, /help, the notice for the refused one
    assert delta("botweave_outbound_total", platform="telegram", action="send", result="failed") == 1
    assert 1.0 <= delta("botweave_rate_limit_wait_seconds_total", platform="telegram") < 5.0
    # the scripted usage twice, then whatever the emulator estimated for the third
    assert delta("botweave_tokens_total", agent="assistant", model="openai/gpt-emu", kind="prompt") > 2 * USAGE["prompt_tokens"]
    assert delta("botweave_tokens_total", agent="assistant", model="openai/gpt-emu", kind="completion") > 2 * USAGE["completion_tokens"]
    assert value(after, "botweave_queue_depth") == 0
    for name in ("botweave_tool_calls_total", "botweave_rate_limit_wait_seconds_total", "botweave_store_errors_total"):
        assert f"# TYPE {name} counter" in text, name
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if not line.startswith("#")}
    assert not [name for name in names if name.endswith("_created")]


async def test_healthz_and_readyz_while_polling_stops_and_resumes(
    telegram_emulator: TelegramEmulator, start_app: StartApp
) -> None:
    app = await start_app(config(telegram_emulator))
    assert await get(app, "/healthz") == (200, {"status": "ok"})
    assert await get(app, "/readyz") == (200, {"status": "ready"})

    # Telegram answers getUpdates with 502 twice: python-telegram-bot backs off (1 s, 1.5 s),
    # longer than twice the poll timeout without an answer.
    telegram_emulator.fail("getUpdates", code=502, description="Bad Gateway", times=2)
    seen: list[tuple[int, Any]] = []

    async def probe(status: int) -> bool:
        seen.append(await get(app, "/readyz"))
        return seen[-1][0] == status

    deadline = time.monotonic() + 10
    while not await probe(503):
        assert time.monotonic() < deadline, seen[-1]
        await asyncio.sleep(0.1)
    body = seen[-1][1]
    assert body["status"] == "unready" and "getUpdates has not answered" in body["failing"]["telegram"]
    assert set(body["failing"]) == {"telegram"}
    while not await probe(200):
        assert time.monotonic() < deadline + 10, seen[-1]
        await asyncio.sleep(0.1)


class RedisServer:
    """A redis-server of this test's own, on a fixed port, that can be killed and brought back."""

    def __init__(self, directory: str) -> None:
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.directory],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def own_redis(tmp_path: Any) -> Iterator[RedisServer]:
    server = RedisServer(str(tmp_path))
    server.start()
    yield server
    server.kill()


@pytest.fixture
async def apps() -> AsyncIterator[list[App]]:
    started: list[App] = []
    yield started
    for app in started:
        await asyncio.wait_for(app.stop(timeout=1.0), 20)


async def test_readyz_names_the_store_while_it_is_away_and_recovers(own_redis: RedisServer, apps: list[App]) -> None:
    app = App.from_config(
        {"agents": {"a": {"model": "offline/echo"}}, "store": {"url": own_redis.url}, "ops": {"listen": "127.0.0.1:0"}},
        role="worker",
    )
    apps.append(app)
    await app.start()
    assert await get(app, "/readyz") == (200, {"status": "ready"})
    errors_before = parse((await get(app, "/metrics"))[1])

    own_redis.kill()
    status, body = await get(app, "/readyz")
    assert status == 503 and set(body["failing"]) == {"store"}, body
    errors_after = parse((await get(app, "/metrics"))[1])
    assert value(errors_after, "botweave_store_errors_total") > value(errors_before, "botweave_store_errors_total")

    own_redis.start()  # the same port, empty
    deadline = time.monotonic() + 15
    while (await get(app, "/readyz"))[0] != 200:
        assert time.monotonic() < deadline, "never ready again"
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("role", ["ingress", "worker"])
async def test_every_role_serves_the_endpoints(
    role: str, telegram_emulator: TelegramEmulator, redis_url: str, apps: list[App]
) -> None:
    app = App.from_config(config(telegram_emulator, store={"url": redis_url, "prefix": f"ops-{role}:"}), role=role)
    apps.append(app)
    await app.start()
    assert await get(app, "/healthz") == (200, {"status": "ok"})
    assert await get(app, "/readyz") == (200, {"status": "ready"})
    assert (await get(app, "/metrics"))[0] == 200
