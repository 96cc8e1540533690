"""The oldest message first: how turns take their turn at this process's one event loop.

asyncio runs ready work in the order it became ready. A turn waits on several things in a
row (the store, its model, the platform's answer), and after each it goes to the back of the
line behind every other turn's next step: with a few hundred conversations answering at once,
every turn then advances one step per pass over all the others, they all finish together at
the end of the burst, and each message pays for the whole burst's work instead of its own.

So turns do their own work a few at a time (`slots`), and a turn that wants to go on while
the slots are taken waits in line by its message's receipt stamp: the oldest message's turn is
woken first. A turn holds a slot

* from its start until it asks its model (`step_aside`, called by every model call:
  `AskingAside` wraps an agent's `ModelCalls`), so a chat's next request goes out while
  others' replies are still being delivered and a burst is still being taken in;
* again from its model's last answer until the turn ends (`resume`, called by the agent
  turn), so its reply is delivered in its message's place.

Nothing else waits for a slot: taking in updates, timers, background tasks, tool calls and a
streamed answer's edits run as they always do, and nothing outside the turns ever waits
behind them. A slot is not a lock either: a turn that has waited `patience` seconds goes on
without one (a turn holding a slot may itself be waiting on others: an admission queue, a
person's approval), so the order is the best the slots give, never a stall. The event loop
itself is left as it is: this is botweave's own bookkeeping, on any loop (uvloop too).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from botweave.model_calls import ModelCalls, ModelOutput

#: Turns doing their own work at once. More keeps the loop busy while a few wait on a quick
#: store write or platform call; fewer keeps the order strict.
SLOTS = 8
#: How long a turn waits for a slot before it goes on without one.
PATIENCE_S = 0.5


@dataclass(slots=True)
class _Place:
    """A turn's place in line (its message's receipt stamp), whose line, and whether it
    holds a slot."""

    order: TurnOrder
    stamp: float
    holding: bool = False


_PLACE: ContextVar[_Place | None] = ContextVar("botweave_turn_place", default=None)


class TurnOrder:
    def __init__(self, slots: int = SLOTS, patience: float = PATIENCE_S) -> None:
        if slots < 1:
            raise ValueError("turns need at least one slot")
        self._free = slots
        self._patience = patience
        self._waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self._arrival = itertools.count()

    @contextlib.asynccontextmanager
    async def turn(self, stamp: float) -> AsyncIterator[None]:
        """The running task is the turn of a message received at `stamp` (a positive number
        that grows with time) from here to the block's end; it starts holding a slot."""
        place = _Place(self, stamp)
        token = _PLACE.set(place)
        try:
            await self._take(place)
            yield
        finally:
            self._give_back(place)
            _PLACE.reset(token)

    async def _take(self, place: _Place) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            place.holding = True
            return
        granted = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (place.stamp, next(self._arrival), granted))
        try:
            await asyncio.wait_for(asyncio.shield(granted), self._patience)
        except asyncio.TimeoutError:
            if not granted.done():
                granted.cancel()  # left in line; skipped when its turn comes
                return  # goes on without a slot
        except BaseException:
            if granted.done() and not granted.cancelled():
                self._pass_on()  # it was handed a slot as it was cancelled: the next one gets it
            else:
                granted.cancel()
            raise
        place.holding = True

    def _give_back(self, place: _Place) -> None:
        if place.holding:
            place.holding = False
            self._pass_on()

    def _pass_on(self) -> None:
        """A slot is free: to the oldest turn still waiting, else back to the pool."""
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():
                granted.set_result(None)
                return
        self._free += 1


def step_aside() -> None:
    """The running turn (if any) is about to wait for its model: its slot goes to the next."""
    place = _PLACE.get()
    if place is not None:
        place.order._give_back(place)


async def resume() -> None:
    """The running turn's (if any) model has answered: it takes a slot again, in its place."""
    place = _PLACE.get()
    if place is not None and not place.holding:
        await place.order._take(place)


class AskingAside:
    """An agent's `ModelCalls` whose every call first gives up the turn's slot: waiting for
    a model is the longest wait of a turn."""

    def __init__(self, calls: ModelCalls) -> None:
        self.calls = calls

    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        step_aside()
        return await self.calls.answer(request)

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        step_aside()
        async for piece in self.calls.stream(request):
            yield piece
