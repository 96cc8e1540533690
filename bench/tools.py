"""The tool loop's own overhead per round, against calling the tool directly.

A round is: the model's answer parsed into calls, each call's arguments decoded and validated,
the call run under its timeout (concurrently with the round's other calls), its result
encoded, and the call and result added to the conversation for the next request. To measure
only that, the model is a stub that answers instantly (first with calls, then with text), so
the difference between a turn of R rounds and a turn of none, divided by R, is what one round
costs. "Directly" is what a hand-written bot would do with the model's call: decode the
arguments, await the function, encode the result. Two tools are measured: one that does
nothing (the ratio is then all overhead) and one that waits 1 ms, like a quick lookup. A last
figure runs a round through litellm's real call path with the offline model, for scale.

Machines here are noisy, so each figure is the best of several repeats, and the result is a
ratio measured in one run.

    python3 bench/tools.py [--turns N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from botweave import agents as agents_module  # noqa: E402
from botweave.agents import Agent, ToolTurn  # noqa: E402
from botweave.config import AgentConfig  # noqa: E402
from botweave.tooling import ToolContext  # noqa: E402
from botweave.tools.python import function_tool  # noqa: E402

REPEATS = 5


ARGUMENTS = '{"a": 2, "b": 3}'


async def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


async def lookup(a: int, b: int) -> int:
    """Add two whole numbers, slowly (a 1 ms lookup)."""
    await asyncio.sleep(0.001)
    return a + b


def _call(index: int, name: str) -> Any:
    return SimpleNamespace(id=f"call_{index}", function=SimpleNamespace(name=name, arguments=ARGUMENTS))


class StubModel:
    """Answers `rounds` requests with one call each, then with text, at no cost of its own."""

    def __init__(self, rounds: int, tool: str) -> None:
        self.rounds = rounds
        self.tool = tool
        self.seen = 0

    async def acompletion(self, **request: Any) -> Any:
        calls = self.seen % (self.rounds + 1) < self.rounds
        index = self.seen
        self.seen += 1
        message = SimpleNamespace(content=None if calls else "done", tool_calls=[_call(index, self.tool)] if calls else None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


async def turns(agent: Agent, count: int, prompt: str) -> float:
    """Seconds per turn, best of REPEATS."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(count):
            await agent.complete([], prompt, ToolTurn(ToolContext(agent.name)))
        best = min(best, (time.perf_counter() - started) / count)
    return best


async def direct(function: Callable[..., Awaitable[Any]], count: int) -> float:
    """Seconds per direct call (decode the arguments, await, encode the result), best of REPEATS."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        for _ in range(count):
            json.dumps(await function(**json.loads(ARGUMENTS)))
        best = min(best, (time.perf_counter() - started) / count)
    return best


async def per_round(function: Callable[..., Awaitable[Any]], count: int, rounds: int) -> float:
    """Seconds one round of the loop adds to a turn, with the model stubbed out."""
    tool = function_tool(function)
    agent = Agent("bench", AgentConfig(model="offline/echo", max_tool_rounds=rounds + 1), {tool.name: tool})
    real_module = agents_module.litellm_module
    try:
        agents_module.litellm_module = lambda: StubModel(0, tool.name)  # type: ignore[assignment]
        plain = await turns(agent, count, "hi")
        stub = StubModel(rounds, tool.name)
        agents_module.litellm_module = lambda: stub  # type: ignore[assignment]
        with_tools = await turns(agent, count, "hi")
    finally:
        agents_module.litellm_module = real_module
    return (with_tools - plain) / rounds


async def run(count: int, rounds: int) -> None:
    print(f"turns: {count} × {rounds} rounds, best of {REPEATS}; µs per call or round")
    print(f"{'tool':<22}{'direct':>10}{'loop round':>12}{'overhead':>10}{'ratio':>8}")
    for label, function, turns_count in (("does nothing", add, count), ("waits 1 ms", lookup, max(1, count // 5))):
        call = await direct(function, turns_count * rounds)
        loop = await per_round(function, turns_count, rounds)
        print(f"{label:<22}{call * 1e6:10.1f}{loop * 1e6:12.1f}{(loop - call) * 1e6:10.1f}{loop / call:8.2f}")

    # For scale: the same round through litellm's real path with the offline model.
    tool = function_tool(add)
    agent = Agent("bench", AgentConfig(model="offline/echo"), {tool.name: tool})
    await agent.complete([], "warm up")
    small = max(1, count // 10)
    echo_round = await turns(agent, small, 'call add {"a": 2, "b": 3}') - await turns(agent, small, "hi")
    loop = await per_round(add, count, rounds)
    print(f"a round through litellm with the offline model: {echo_round * 1e3:.2f} ms; the loop's own share {loop / echo_round:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(run(args.turns, args.rounds))


if __name__ == "__main__":
    main()
