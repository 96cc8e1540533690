"""What fallbacks, key rotation and budgets cost a turn when nothing fails.

Two bots answer the same messages through the whole pipeline, their model calls going to the
race's loopback model in a process of its own (so its CPU is charged to neither): one agent
with only a model, and one with two keys, two fallbacks and a limit of every kind
(`per_user`, `per_agent`, `per_chat`: so each model call reads its counters, and adds its
tokens and cost to them). Nothing fails, so both make the same calls; the difference is the
guard's work: building the candidates, the store read before each call, pricing the answer
and counting it. The measure is this process's CPU seconds per message, guarded / plain,
the two taking turns over `--repeat` runs; the median ratio is printed. Target: at most 1.02.

    python3 bench/failover.py [--messages 400] [--chats 50] [--repeat 5] [--store memory|sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from botweave import App, BotChannel, BotMessage, BotUser, MessageActionResult, PlatformCapabilities  # noqa: E402
from botweave.adapter import Adapter  # noqa: E402

HERE = Path(__file__).resolve().parent


class NoOpAdapter(Adapter):
    platform = "bench"
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(max_message_length=4000)

    async def start(self, *, inbound: bool = True) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, chat_id: str, text: str, *, thread_id: Any = None, reply_to: Any = None) -> MessageActionResult:
        return MessageActionResult("ok", chat_id, message_id="1")


def config(base_url: str, store: str, guarded: bool) -> dict[str, Any]:
    agent: dict[str, Any] = {"model": "openai/gpt-4o-mini", "api_base": base_url, "max_history": 6}
    if guarded:
        agent["api_keys"] = ["sk-bench-a", "sk-bench-b"]
        agent["fallbacks"] = ["openai/gpt-4o", {"model": "openai/gpt-4.1-mini", "api_base": base_url, "api_key": "sk-c"}]
    else:
        agent["api_key"] = "sk-bench-a"
    settings: dict[str, Any] = {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": agent},
        "models": {"client": "direct"},
        "store": {"url": store},
    }
    if guarded:
        settings["budgets"] = {
            "per_user": {"tokens_per_day": 10**9, "cost_per_day": 10**6},
            "per_agent": {"assistant": {"tokens_per_day": 10**12}},
            "per_chat": {"cost_per_day": 10**6},
        }
    return settings


def batch(prefix: str, count: int, chats: int) -> list[BotMessage]:
    return [
        BotMessage(
            message_id=f"{prefix}-{i}",
            content=f"message number {i}",
            sender=BotUser(f"u{i % chats}", "user", "User"),
            channel=BotChannel(f"c{i % chats}", "dm"),
            platform="bench",
        )
        for i in range(count)
    ]


async def cpu_per_message(app: App, messages: list[BotMessage]) -> float:
    started = time.process_time()
    await asyncio.gather(*(app.handle(msg) for msg in messages))
    return (time.process_time() - started) / len(messages)


async def run(args: argparse.Namespace) -> None:
    model = subprocess.Popen(
        [sys.executable, str(HERE / "race_world.py"), "model"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert model.stdout is not None
    base_url = model.stdout.readline().strip()
    folder = tempfile.TemporaryDirectory()
    try:
        apps = {}
        for name in ("plain", "guarded"):
            store = "memory://" if args.store == "memory" else f"sqlite:///{folder.name}/{name}.db"
            app = App.from_config(config(base_url, store, name == "guarded"))
            app.add_adapter(NoOpAdapter())
            await app.start(platforms=[])
            await asyncio.gather(*(app.handle(msg) for msg in batch(f"warm-{name}", args.chats, args.chats)))
            apps[name] = app
        ratios = []
        for rep in range(args.repeat):
            # the two take turns in slices, each going first as often as the other: what runs
            # second in a pair was seen to pay for what the first left (garbage, grown dicts)
            spent = {"plain": 0.0, "guarded": 0.0}
            slices = 10
            for part in range(slices):
                order = ("plain", "guarded") if part % 2 == 0 else ("guarded", "plain")
                for name in order:
                    gc.collect()
                    messages = batch(f"{name}-{rep}-{part}", args.messages // slices, args.chats)
                    spent[name] += await cpu_per_message(apps[name], messages) / slices
            ratios.append(spent["guarded"] / spent["plain"])
            print(
                f"run {rep + 1}: plain {spent['plain'] * 1e6:7.0f} µs/msg  guarded {spent['guarded'] * 1e6:7.0f} µs/msg"
                f"  ratio {ratios[-1]:.3f}",
                flush=True,
            )
        for app in apps.values():
            await app.stop()
        print(f"store: {args.store}; messages per run: {args.messages} over {args.chats} chats")
        print(f"CPU per turn, fallbacks + keys + budgets / none (median of {args.repeat}): {statistics.median(ratios):.3f}"
              " (target <= 1.02)")
    finally:
        assert model.stdin is not None
        model.stdin.close()
        model.wait(timeout=10)
        folder.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
