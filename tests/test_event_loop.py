"""The oldest-first event loop: a turn's steps go in the order its message was received,
work outside turns is never held behind them, and everything asyncio offers still works."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
from aiohttp import web
from botweave.agents import Agent
from botweave.config import AgentConfig
from botweave.model_client import prepared_on_loop
from botweave.runtime.event_loop import TURN_ORDER, OldestFirstLoop, asked, new_loop, serving

from tests.emulators.openai import OpenAIEmulator


def run_on(loop_factory: Callable[[], asyncio.AbstractEventLoop], scenario: Coroutine[Any, Any, Any]) -> Any:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(scenario)


async def turn(name: str, received_at: float, steps: int, log: list[str]) -> None:
    """A turn that waits on something `steps` times (each wait is one pass of the loop)."""
    with serving(received_at):
        for step in range(1, steps + 1):
            log.append(f"{name}{step}")
            await asyncio.sleep(0)


async def younger_then_older(log: list[str]) -> None:
    younger = asyncio.create_task(turn("young", 2.0, 4, log))
    await asyncio.sleep(0)  # the younger turn takes its first step before the older one starts
    older = asyncio.create_task(turn("old", 1.0, 4, log))
    await asyncio.gather(younger, older)


def test_the_older_turn_runs_to_its_end_before_the_younger_turn_goes_on() -> None:
    ordered: list[str] = []
    run_on(new_loop, younger_then_older(ordered))
    assert ordered == ["young1", "old1", "old2", "old3", "old4", "young2", "young3", "young4"]

    interleaved: list[str] = []  # what the stock loop does with the same two turns
    run_on(asyncio.SelectorEventLoop, younger_then_older(interleaved))
    assert interleaved == ["young1", "young2", "old1", "young3", "old2", "young4", "old3", "old4"]


def test_work_outside_turns_is_not_held_behind_a_busy_turn() -> None:
    async def scenario() -> tuple[int, int]:
        log: list[str] = []
        busy = asyncio.create_task(turn("turn", 1.0, 200, log))
        await asyncio.sleep(0)
        ticks: list[int] = []
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: ticks.append(len(log)))  # a plain callback, no turn of its own
        await asyncio.sleep(0)  # this task (not a turn) gets its pass as well
        ticks.append(len(log))
        await busy
        return ticks[0], ticks[1]

    callback_at, task_at = run_on(new_loop, scenario())
    assert callback_at <= 3 and task_at <= 3, "each ran within a pass or two, not after the turn's 200 steps"


def test_a_turn_ahead_until_asked_goes_before_everything_then_takes_its_messages_place() -> None:
    async def ahead(log: list[str]) -> float | None:
        for step in range(1, 4):
            log.append(f"ahead{step}")
            await asyncio.sleep(0)
        place = asked()
        await asyncio.sleep(0)
        for step in range(4, 6):
            log.append(f"ahead{step}")
            await asyncio.sleep(0)
        return place

    async def scenario() -> tuple[list[str], float | None]:
        log: list[str] = []
        with serving(5.0, ahead_until_asked=True):  # spawned in its place, as the runtime does
            mine = asyncio.create_task(ahead(log))
        older = asyncio.create_task(turn("old", 1.0, 3, log))
        loop = asyncio.get_running_loop()
        for tick in range(1, 4):
            loop.call_soon(log.append, f"tick{tick}")
        place = await mine
        await older
        return log, place

    log, place = run_on(new_loop, scenario())
    assert place == 5.0
    # before it asked, the turn went ahead of plain work and of an older turn; after, it
    # waited for both, as any turn of a message received at 5.0 does
    assert log[:3] == ["ahead1", "ahead2", "ahead3"]
    assert log.index("ahead4") > max(log.index("tick3"), log.index("old3"))
    assert asked() is None  # outside a turn there is nothing to move


def test_timers_threads_sockets_and_cancellation_work_as_usual() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, OldestFirstLoop)
        fired = loop.create_future()
        loop.call_later(0.01, fired.set_result, "timer")
        assert await fired == "timer"
        assert await asyncio.to_thread(threading.get_ident) != threading.get_ident()

        app = web.Application()
        app.router.add_get("/", lambda request: web.json_response({"ok": True}))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # aiohttp keeps the bound socket there
        try:
            with serving(1.0):
                async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/") as answer:
                    assert await answer.json() == {"ok": True}
        finally:
            await runner.cleanup()

        sleeper = asyncio.create_task(asyncio.sleep(30))
        await asyncio.sleep(0)
        sleeper.cancel()
        await asyncio.gather(sleeper, return_exceptions=True)
        assert sleeper.cancelled()

    run_on(new_loop, scenario())


def test_litellm_prepares_an_openai_request_in_place_on_this_loop() -> None:
    """No hand-over to the executor (and no wake-up through the loop's self-pipe) for it."""

    async def scenario() -> tuple[str | None, list[Any]]:
        emulator = OpenAIEmulator("Answered in place.")
        await emulator.start()
        handed: list[Any] = []

        class Watched(ThreadPoolExecutor):
            def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
                handed.append(fn)
                return super().submit(fn, *args, **kwargs)

        asyncio.get_running_loop().set_default_executor(Watched())
        agent = Agent("in-place", AgentConfig(model="openai/gpt-4o", api_base=emulator.base_url, api_key="sk-loopback"))
        try:
            return await agent.complete([], "hi"), handed
        finally:
            await emulator.stop()

    answer, handed = run_on(new_loop, scenario())
    assert answer == "Answered in place."
    assert not any(prepared_on_loop(fn) for fn in handed)

    answer, handed = run_on(asyncio.SelectorEventLoop, scenario())  # the stock loop hands it over
    assert answer == "Answered in place."
    assert any(prepared_on_loop(fn) for fn in handed)


def test_a_turns_place_ends_with_the_turn() -> None:
    """A task that runs turns one after another (a stream consumer) is no turn in between."""

    async def scenario() -> tuple[float | None, float | None]:
        with serving(5.0):
            inside = TURN_ORDER.get()
        return inside, TURN_ORDER.get()

    assert run_on(new_loop, scenario()) == (5.0, None)
