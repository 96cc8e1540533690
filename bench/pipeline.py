"""Throughput of the whole pipeline versus calling the offline model directly.

Both loops pay for litellm (the offline model runs through litellm's real call path), so the
difference is what botweave adds per message: dedup, policies, routing, history, shaping and
delivery. Machines here are noisy, so the result is a ratio of two loops run back to back.

    python3 bench/pipeline.py [--messages N] [--conversations N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from botweave import App, BotChannel, BotMessage, BotUser, MessageActionResult, PlatformCapabilities  # noqa: E402
from botweave.adapter import Adapter  # noqa: E402

HISTORY_TURNS = 10


class NoOpAdapter(Adapter):
    platform = "bench"
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(max_message_length=4000)

    async def start(self, *, inbound: bool = True) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, chat_id: str, text: str, *, thread_id=None, reply_to=None) -> MessageActionResult:
        return MessageActionResult("ok", chat_id, message_id="1")


def messages(count: int, conversations: int) -> list[BotMessage]:
    return [
        BotMessage(
            message_id=str(i),
            content=f"message number {i}",
            sender=BotUser(f"u{i % conversations}", "user", "User"),
            channel=BotChannel(f"c{i % conversations}", "dm"),
            platform="bench",
        )
        for i in range(count)
    ]


async def run(count: int, conversations: int) -> None:
    app = App.from_config(
        {
            "bot": {"unknown_user_policy": "allow"},
            "agents": {"assistant": {"model": "offline/echo", "max_history": HISTORY_TURNS}},
        }
    )
    app.add_adapter(NoOpAdapter())
    agent = app.agents["assistant"]
    await agent.complete([], "warm up")  # import litellm and build its clients outside the timing

    batch = messages(count, conversations)
    started = time.perf_counter()
    for msg in batch:
        await app.submit(msg)
    await app.drain()
    pipeline = time.perf_counter() - started

    # The same history the pipeline sends once a conversation is warm (max_history turns), so
    # litellm's own per-message work is equal on both sides and the difference is ours.
    history = [
        {"role": role, "content": "earlier message"} for _ in range(HISTORY_TURNS) for role in ("user", "assistant")
    ]
    started = time.perf_counter()
    for msg in batch:
        await agent.complete(history, msg.prompt_text)
    direct = time.perf_counter() - started

    overhead_us = (pipeline - direct) / count * 1e6
    print(f"messages: {count} over {conversations} conversations")
    print(f"pipeline: {count / pipeline:10.1f} msg/s  ({pipeline / count * 1e6:8.1f} µs/msg)")
    print(f"direct:   {count / direct:10.1f} msg/s  ({direct / count * 1e6:8.1f} µs/msg)")
    print(f"per-message overhead of the pipeline: {overhead_us:.1f} µs")
    print(f"ratio pipeline/direct throughput: {direct / pipeline:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--conversations", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(run(args.messages, args.conversations))


if __name__ == "__main__":
    main()
