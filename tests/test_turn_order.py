"""Turns take the event loop's time oldest message first, a few at a time, without ever
stalling: botweave's own bookkeeping, on the loop as asyncio made it."""

from __future__ import annotations

import asyncio

import pytest
from botweave.model_calls import ModelOutput
from botweave.runtime.turn_order import AskingAside, TurnOrder, resume, step_aside


async def test_turns_waiting_to_go_on_are_woken_oldest_message_first():
    order = TurnOrder(slots=1, patience=5.0)
    went: list[float] = []
    holder_may_leave = asyncio.Event()

    async def holder() -> None:
        async with order.turn(0.5):
            await holder_may_leave.wait()

    async def turn(stamp: float) -> None:
        async with order.turn(stamp):
            went.append(stamp)
            await asyncio.sleep(0)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    others = [asyncio.create_task(turn(stamp)) for stamp in (3.0, 1.0, 2.0)]
    await asyncio.sleep(0.01)
    assert went == []  # all wait for the one slot
    holder_may_leave.set()
    await asyncio.gather(first, *others)
    assert went == [1.0, 2.0, 3.0]


async def test_a_turn_gives_its_slot_up_while_it_waits_for_its_model_and_resumes_in_its_place():
    order = TurnOrder(slots=1, patience=5.0)
    steps: list[str] = []
    answered = asyncio.Event()

    class Model:
        async def answer(self, request: dict) -> ModelOutput:
            await answered.wait()
            return ModelOutput("words")

    calls = AskingAside(Model())  # type: ignore[arg-type]

    async def asks(stamp: float) -> None:
        async with order.turn(stamp):
            steps.append(f"{stamp} asks")
            await calls.answer({})
            await resume()
            steps.append(f"{stamp} delivers")

    older = asyncio.create_task(asks(1.0))
    await asyncio.sleep(0)
    younger = asyncio.create_task(asks(2.0))
    await asyncio.sleep(0.01)
    assert steps == ["1.0 asks", "2.0 asks"]  # the older one's wait for its model let the younger ask
    answered.set()
    await asyncio.gather(older, younger)
    assert steps[2:] == ["1.0 delivers", "2.0 delivers"]


async def test_a_turn_that_waited_its_patience_goes_on_without_a_slot():
    order = TurnOrder(slots=1, patience=0.05)
    stuck = asyncio.Event()

    async def holder() -> None:
        async with order.turn(1.0):
            await stuck.wait()  # a turn waiting on something else, holding its slot

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)

    async def later() -> str:
        async with order.turn(2.0):
            return "answered"

    assert await asyncio.wait_for(later(), 1.0) == "answered"
    stuck.set()
    await held
    async with order.turn(3.0):  # the slot came back
        step_aside()


async def test_a_turn_cancelled_while_it_waits_loses_no_slot():
    order = TurnOrder(slots=1, patience=5.0)
    release = asyncio.Event()

    async def holder() -> None:
        async with order.turn(1.0):
            await release.wait()

    async def waiter() -> None:
        async with order.turn(2.0):
            pass

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(waiter())
    await asyncio.sleep(0.01)
    cancelled.cancel()
    release.set()
    await held
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await asyncio.wait_for(waiter(), 0.5)  # a slot is free: no wait for the patience


async def test_outside_a_turn_nothing_waits():
    step_aside()
    await asyncio.wait_for(resume(), 0.1)
