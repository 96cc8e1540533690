"""The event loop `botweave run` and `botweave chat` serve on: the oldest message first.

asyncio runs ready callbacks in the order they became ready, so a turn that waits on
several things in a row (its model's answer, the store, the platform's reply) goes to the
back of the line after each one. With a few hundred conversations answering at once, every
turn then advances one step per pass over all the others: they all finish together at the end
of the burst, and a chat keeps paying for the whole burst on every message.

This loop runs the ready callbacks of turns in the order their messages were received (the
receipt stamp turn control already gives each message), so the turn that has waited longest
goes on as soon as it can, and a turn's own steps no longer queue behind younger turns.
Everything that is not a turn's work (reading sockets, taking in updates, timers, background
tasks) runs before any turn's, in its usual order, so nothing outside the turns can starve.
See docs/performance.md for what it changed in the race.

It relies on one detail of CPython's selector loop, its deque of ready callbacks: were that
to change, the loop keeps the usual order. A program that runs `App.serve()` on a loop of
its own (uvloop, say) keeps that loop's order too.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import heapq
import itertools
from collections.abc import Callable, Coroutine, Iterable, Iterator
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple, Unpack

from botweave.model_client import prepared_on_loop, settled

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

#: The place of the turn running in this context: its message's receipt stamp, or that less
#: `_AHEAD` until it has asked its model (see `serving`); None outside turns.
TURN_ORDER: contextvars.ContextVar[float | None] = contextvars.ContextVar("botweave_turn_order", default=None)

#: Where work that is not a turn's sorts: before every turn (receipt stamps are positive).
_NOT_A_TURN = 0.0
#: How far ahead of everything else a turn runs until it has asked its model (see `serving`):
#: more than any receipt stamp, so its place is negative.
_AHEAD = 1e12


@contextlib.contextmanager
def serving(received_at: float, *, ahead_until_asked: bool = False) -> Iterator[None]:
    """Within it, the running task is the turn of a message received at `received_at`: its
    steps, and the tasks it starts, run in that message's place.

    With `ahead_until_asked`, the turn's steps up to its model request (`asked`) run before
    all other work, turns and intake alike, oldest message first: that short stretch is what
    stands between the turn and its longest wait. Once the model calls run in other
    processes it is most of what a turn still does here before that wait, and a chat's next
    request then goes out while replies to others are still being delivered, and while a
    burst is still being taken in."""
    token = TURN_ORDER.set(received_at - _AHEAD if ahead_until_asked else received_at)
    try:
        yield
    finally:
        TURN_ORDER.reset(token)


def asked() -> float | None:
    """The running turn has handed its model the request: from now on it runs in its
    message's place. Returns that place (the receipt stamp), None outside a turn."""
    order = TURN_ORDER.get()
    if order is not None and order < _NOT_A_TURN:
        order += _AHEAD
        TURN_ORDER.set(order)
    return order


class OldestFirst:
    """A ready queue ordered by (turn's receipt stamp, arrival): the shape the selector loop
    uses of its deque (append, popleft, len, clear)."""

    __slots__ = ("_heap", "_arrival")

    def __init__(self, handles: Iterable[asyncio.Handle] = ()) -> None:
        self._heap: list[tuple[float, int, asyncio.Handle]] = []
        self._arrival = itertools.count()
        for handle in handles:
            self.append(handle)

    def append(self, handle: asyncio.Handle) -> None:
        context: contextvars.Context | None = getattr(handle, "_context", None)
        order = context.get(TURN_ORDER) if context is not None else None
        heapq.heappush(self._heap, (_NOT_A_TURN if order is None else order, next(self._arrival), handle))

    def popleft(self) -> asyncio.Handle:
        return heapq.heappop(self._heap)[2]

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)


class OldestFirstLoop(asyncio.SelectorEventLoop):
    """The selector loop with `OldestFirst` as its ready queue. It also prepares litellm's
    requests to OpenAI models in place instead of handing them to the executor (see
    `model_client.prepared_on_loop`): a turn's call then goes out without a wake-up through
    the loop's self-pipe and two extra passes."""

    def __init__(self) -> None:
        super().__init__()
        ready = getattr(self, "_ready", None)
        if isinstance(ready, collections.deque):
            setattr(self, "_ready", OldestFirst(ready))

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[Unpack[_Ts]], _T], *args: Unpack[_Ts]
    ) -> asyncio.Future[_T]:
        if executor is not None or not prepared_on_loop(func):
            return super().run_in_executor(executor, func, *args)
        return settled(self.create_future(), func, *args)


def new_loop() -> asyncio.AbstractEventLoop:
    """The loop for `asyncio.Runner(loop_factory=...)`."""
    return OldestFirstLoop()


def run(main: Coroutine[Any, Any, _T]) -> _T:
    """`asyncio.run(main)` on the oldest-first loop."""
    with asyncio.Runner(loop_factory=new_loop) as runner:
        return runner.run(main)
