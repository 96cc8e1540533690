"""Memory's cost: a turn's CPU with memory on (200 items per person) against the same turn with
memory off, in one run, on one store.

Each round builds a bot in this process (the recording platform of the test suite, no SDK)
answering `--people` private chats through botweave's own model client, against the loopback
model of the race (bench/race_world.py) in a process of its own, so the CPU measured is the
bot's alone. With memory on, every person has `--items` items already, so each request carries
the newest that fit `inject_tokens` and the lookups run on a full memory. Rounds alternate
off/on; the CPU of `--messages` turns per person is measured with `time.process_time` after a
warm-up turn each, and each side's least CPU per turn over the rounds is compared (the machine
is shared; another process only ever adds). Target: on / off at most 1.1.

    python3 bench/memory.py [--people 50] [--messages 4] [--items 200] [--rounds 3] [--store memory|sqlite]
                            [--inject-tokens 800]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from botweave import App  # noqa: E402
from botweave.memory.items import MemoryItem  # noqa: E402
from botweave.memory.stores import Scope  # noqa: E402
from botweave.store import MemoryStore, SQLiteStore, Store  # noqa: E402

from tests.support import RecordingAdapter, message  # noqa: E402


def config(base_url: str, memory: bool, inject_tokens: int) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "openai/bench-model", "api_base": base_url, "api_key": "sk-bench",
                                 "memory": {"enabled": memory, "inject_tokens": inject_tokens}}},
    }


def store_for(kind: str, folder: Path, round_: int, memory: bool) -> Store:
    if kind == "sqlite":
        return SQLiteStore(folder / f"state-{round_}-{int(memory)}.db")
    return MemoryStore()


async def seed(app: App, people: int, items: int) -> None:
    now = time.time()
    for person in range(people):
        scope = Scope("assistant", f"test:u{person}")
        for number in range(items):
            fact = f"person {person} fact {number}: likes item number {number} of the catalogue"
            await app.memory.backend.add(scope, MemoryItem(f"i{number}", fact, now - number, now - number, "seed"), items)


async def one_round(base_url: str, memory: bool, args: argparse.Namespace, folder: Path, round_: int) -> float:
    """CPU seconds per turn."""
    app = App.from_config(config(base_url, memory, args.inject_tokens), store=store_for(args.store, folder, round_, memory))
    app.add_adapter(RecordingAdapter())
    await app.store.connect()
    if memory:
        await seed(app, args.people, args.items)

    async def chat(person: int, count: int, tag: str) -> None:
        for number in range(count):
            await app.handle(message(f"{tag} {number}", user_id=f"u{person}", chat_id=f"c{person}"))

    await asyncio.gather(*(chat(p, 1, "warm-up") for p in range(args.people)))
    started = time.process_time()
    await asyncio.gather(*(chat(p, args.messages, "message") for p in range(args.people)))
    spent = time.process_time() - started
    await app.stop()
    return spent / (args.people * args.messages)


async def main(args: argparse.Namespace) -> int:
    model = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "race_world.py"), "model"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, cwd=ROOT,
    )
    try:
        assert model.stdout is not None
        base_url = model.stdout.readline().strip()
        off: list[float] = []
        on: list[float] = []
        with tempfile.TemporaryDirectory() as tmp:
            for round_ in range(args.rounds):
                for memory in ((False, True) if round_ % 2 == 0 else (True, False)):
                    (on if memory else off).append(await one_round(base_url, memory, args, Path(tmp), round_))
        # the machine is shared: a round another process slowed only ever costs more, so the
        # least CPU of each side's rounds is its truest figure (the median is shown too)
        off_ms, on_ms = min(off) * 1000, min(on) * 1000
        median_ratio = statistics.median(on) / statistics.median(off)
        print(f"store={args.store} people={args.people} turns/round={args.people * args.messages} items/person={args.items}")
        print(f"memory off: {off_ms:.3f} ms CPU per turn, least (rounds: {', '.join(f'{v * 1000:.3f}' for v in off)})")
        print(f"memory on:  {on_ms:.3f} ms CPU per turn, least (rounds: {', '.join(f'{v * 1000:.3f}' for v in on)})")
        ratio = on_ms / off_ms
        print(f"ratio on/off (least of the rounds): {ratio:.3f} (target <= 1.1) {'OK' if ratio <= 1.1 else 'OVER'}")
        print(f"ratio on/off (medians): {median_ratio:.3f}")
        return 0
    finally:
        if model.stdin is not None:
            model.stdin.close()
        model.wait(timeout=10)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=50)
    parser.add_argument("--messages", type=int, default=4)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--inject-tokens", type=int, default=800, help="memory.inject_tokens with memory on")
    parser.add_argument("--store", choices=("memory", "sqlite"), default="memory")
    return parser.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
