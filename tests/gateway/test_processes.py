"""The gateway as `botweave run` processes, killed mid-stream: the one process on SQLite
(kill -9, started again), and a worker behind an ingress on Redis (kill -9; the other worker
takes the turn over). A client that reconnects and resumes must get every event the store
numbered, once: lost and repeated events are counted against the conversation's log as the
store holds it afterwards.

Races show in some runs only: `BOTWEAVE_GATEWAY_RUNS=10` runs each scenario ten times, each
run printing what it counted (`pytest -s` shows the lines).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from botweave.events import LOG_PREFIX
from botweave.gateway import Client
from botweave.store import SQLiteStore
from botweave.store.redis import RedisStore

from tests.conftest import free_port
from tests.emulators.openai import OpenAIEmulator, Reply
from tests.emulators.telegram import wait_until
from tests.gateway.support import TOKEN_CONFIG, TOKENS

ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("BOTWEAVE_GATEWAY_RUNS", "1"))
STORY = " ".join(f"word{n}" for n in range(120))


class Bot:
    """`botweave run` processes of one test, with their logs."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.running: list[subprocess.Popen[bytes]] = []

    def spawn(self, config: Path, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"bot-{len(self.running)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "botweave", "-v", "run", str(config), *args],
            cwd=ROOT,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.running.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob("bot-*.log")))

    def close(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


async def listening(port: int, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.1)


def write_config(path: Path, llm: OpenAIEmulator, port: int, store: dict[str, Any]) -> Path:
    config = {
        "agents": {"helper": {"model": "openai/gpt-4o-mini", "api_base": llm.base_url, "api_key": "sk-test"}},
        "gateway": {"listen": f"127.0.0.1:{port}", "tokens": [t for t in TOKEN_CONFIG if t["name"] == "ann"]},
        "store": store,
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Tally:
    """What one client saw of one conversation, counted against the store's log."""

    def __init__(self) -> None:
        self.seqs: list[int] = []

    def lost_and_repeated(self, held: list[int], client: Client) -> tuple[int, int]:
        expected = set(range(self.seqs[0], held[-1] + 1))
        assert expected <= set(held), "the log still holds every event of the run"
        lost = len(expected - set(self.seqs))
        repeated = len(self.seqs) - len(set(self.seqs)) + client.duplicates
        return lost, repeated


async def follow_until_final(client: Client, conversation: str, message_id: str, tally: Tally, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while True:
            event = await client.next_event(timeout)
            if event.conversation != conversation:
                continue
            tally.seqs.append(event.seq or 0)
            if event.event == "final" and event.data.get("message_id") == message_id:
                return


async def stream_started(client: Client, conversation: str, deltas: int, tally: Tally) -> None:
    seen = 0
    while seen < deltas:
        event = await client.next_event(60)
        if event.conversation == conversation:
            tally.seqs.append(event.seq or 0)
            seen += event.event == "delta"


async def held_seqs(store: Any, conversation: str) -> list[int]:
    await store.connect()
    try:
        return [seq for seq, _ in (await store.log_read(LOG_PREFIX + conversation, limit=100_000)).entries]
    finally:
        await store.close()


@pytest.mark.parametrize("run", range(RUNS))
async def test_a_gateway_killed_and_started_again_on_sqlite_loses_and_repeats_nothing(tmp_path: Path, llm: OpenAIEmulator,
                                                                                      run: int) -> None:
    port = free_port()
    database = tmp_path / "state.db"
    config = write_config(tmp_path / "bot.yaml", llm, port, {"url": f"sqlite:///{database}"})
    llm.chunk_delay = 0.02
    llm.queue(Reply(text=STORY), Reply(text=STORY))  # the cut-off turn, and its run after the restart
    bots = Bot(tmp_path)
    try:
        first = bots.spawn(config)
        await listening(port)
        tally = Tally()
        async with Client(f"ws://127.0.0.1:{port}/ws", TOKENS["ann"]) as ann:
            session = await ann.create_session()
            conversation = f"web:{session}"
            message_id = await ann.send(session, "a long story")
            kill_after = random.randint(3, 60)
            await stream_started(ann, conversation, kill_after, tally)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            bots.spawn(config)  # the same file: the journal runs the cut-off turn again
            await follow_until_final(ann, conversation, message_id, tally, timeout=90)
        bots.close()
        held = await held_seqs(SQLiteStore(database), conversation)
        lost, repeated = tally.lost_and_repeated(held, ann)
        print(f"sqlite restart run {run}: killed after {kill_after} deltas; {len(tally.seqs)} events; "
              f"lost {lost}, repeated {repeated}")
        assert (lost, repeated) == (0, 0), bots.logs()[-4000:]
        assert tally.seqs == sorted(tally.seqs)
    finally:
        bots.close()


async def running_turns(port: int) -> float:
    """What a worker's /metrics says it is doing: the inbound items it holds."""
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            for line in (await response.text()).splitlines():
                if line.startswith("botweave_queue_depth "):
                    return float(line.split()[1])
    return 0.0


@pytest.mark.parametrize("run", range(RUNS))
async def test_a_worker_killed_mid_stream_on_redis_loses_and_repeats_nothing(tmp_path: Path, llm: OpenAIEmulator,
                                                                           redis_url: str, run: int) -> None:
    port = free_port()
    prefix = f"gwkill-{uuid.uuid4().hex[:8]}:"
    store = {"url": redis_url, "prefix": prefix, "stream_lease_seconds": 2, "lock_ttl_seconds": 1}
    config = write_config(tmp_path / "bot.yaml", llm, port, store)
    llm.chunk_delay = 0.03
    llm.queue(Reply(text=STORY), Reply(text=STORY))
    bots = Bot(tmp_path)
    try:
        bots.spawn(config, "--role", "ingress")
        ops = [free_port(), free_port()]
        workers = [bots.spawn(config, "--role", "worker", "--ops-listen", f"127.0.0.1:{p}") for p in ops]
        await listening(port)
        for p in ops:
            await listening(p)
        tally = Tally()
        async with Client(f"ws://127.0.0.1:{port}/ws", TOKENS["ann"]) as ann:
            session = await ann.create_session()
            conversation = f"web:{session}"
            message_id = await ann.send(session, "a long story")
            kill_after = random.randint(3, 60)
            await stream_started(ann, conversation, kill_after, tally)
            busy = [await running_turns(p) for p in ops]
            victim = workers[busy.index(max(busy))]
            victim.send_signal(signal.SIGKILL)  # the worker streaming the answer
            victim.wait(timeout=10)
            await follow_until_final(ann, conversation, message_id, tally, timeout=90)
        await wait_until(lambda: len(llm.requests) == 2, 5, "the other worker to have run the turn again")
        bots.close()
        held = await held_seqs(RedisStore(redis_url, prefix=prefix), conversation)
        lost, repeated = tally.lost_and_repeated(held, ann)
        print(f"redis worker kill run {run}: killed after {kill_after} deltas; {len(tally.seqs)} events; "
              f"lost {lost}, repeated {repeated}")
        assert (lost, repeated) == (0, 0), bots.logs()[-4000:]
        assert tally.seqs == sorted(tally.seqs)
    finally:
        bots.close()
