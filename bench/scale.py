"""Throughput of one worker against two, on Redis, against the Telegram emulator.

Each run starts a private redis-server, the Bot API emulator, one ingress process and N
worker processes (`botweave run --role ...`), feeds the same burst of messages over many
conversations, and times until every message is answered. Machines here are noisy, so the
result that matters is the ratio of the two runs made back to back.

    python3 bench/scale.py [--messages N] [--conversations N]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.emulators.telegram import TelegramEmulator  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not start")


def write_config(path: Path, emu: TelegramEmulator, redis_url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "agents": {"assistant": {"model": "offline/echo", "max_history": 5}},
                "bot": {"unknown_user_policy": "allow"},
                "platforms": {
                    "telegram": {
                        "token": emu.token,
                        "api_base_url": emu.api_base_url,
                        "poll_timeout": 1,
                        "requests_per_second": 10_000,
                    }
                },
                "store": {"url": redis_url, "prefix": f"bench-{uuid.uuid4().hex[:8]}:"},
            }
        )
    )
    return path


def spawn(config: Path, role: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "botweave", "run", "--role", role, str(config)],
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


async def wait_for_answers(emu: TelegramEmulator, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(emu.sent()) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(emu.sent())} of {count} answered in {timeout:.0f}s")
        await asyncio.sleep(0.02)


async def one_run(workers: int, messages: int, conversations: int, redis_url: str, workdir: Path) -> float:
    emu = await TelegramEmulator().start()
    config = write_config(workdir / f"bot-{workers}.yaml", emu, redis_url)
    procs = [spawn(config, "ingress", workdir / f"ingress-{workers}.log")]
    procs += [spawn(config, "worker", workdir / f"worker-{workers}-{i}.log") for i in range(workers)]
    try:
        users = [emu.user(10_000 + i, f"User{i}") for i in range(conversations)]
        chats = [emu.private_chat(u) for u in users]
        for user, chat in zip(users, chats):  # warm-up: every process connected and ready
            emu.push_message(chat, user, "warm up")
        await wait_for_answers(emu, conversations, timeout=120)
        started = time.perf_counter()
        for n in range(messages // conversations):
            for user, chat in zip(users, chats):
                emu.push_message(chat, user, f"message {n}")
        await wait_for_answers(emu, conversations + messages, timeout=600)
        return time.perf_counter() - started
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        await emu.stop()


async def main(messages: int, conversations: int) -> None:
    # Processes stopped in the middle of a long poll are normal here, not worth a traceback.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    messages -= messages % conversations
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        redis, redis_url = start_redis(workdir)
        try:
            one = await one_run(1, messages, conversations, redis_url, workdir)
            two = await one_run(2, messages, conversations, redis_url, workdir)
        finally:
            redis.terminate()
            redis.wait(timeout=10)
    print(f"messages: {messages} over {conversations} conversations (offline model, Telegram emulator, Redis)")
    print(f"1 worker:  {messages / one:8.1f} msg/s  ({one:.2f} s)")
    print(f"2 workers: {messages / two:8.1f} msg/s  ({two:.2f} s)")
    print(f"ratio 2 workers / 1 worker throughput: {one / two:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--conversations", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.conversations))
