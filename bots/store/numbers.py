"""Increasing numbers from a store counter, a block at a time.

The inbound journal numbers every item it records, so a restart answers what was left in the
order it arrived. A counter call per item would be a store round trip before every platform
acknowledgement; `Numbers` takes `block` numbers with one call and hands them out from memory.
Every process sharing the store gets blocks of its own (the counter is atomic), and a restart
starts past every number an earlier run took, so numbers never repeat and a process's numbers
rise in the order they were asked for; the ones a stopped process had not handed out are
simply never used.
"""

from __future__ import annotations

import asyncio

from botweave.store.base import Store

#: Numbers taken from the store per call.
BLOCK = 1000


class Numbers:
    def __init__(self, store: Store, key: str, *, block: int = BLOCK) -> None:
        self.store = store
        self.key = key
        self.block = block
        self._next = 1
        self._last = 0  # nothing taken yet
        self._waiting = 0
        self._refill = asyncio.Lock()

    async def take(self) -> int:
        """The next number. Callers get theirs in the order they asked, also across a refill
        (whoever asks while one is on its way waits behind it)."""
        if self._waiting == 0 and self._next <= self._last:
            return self._hand_out()
        self._waiting += 1
        try:
            async with self._refill:  # first come, first served
                if self._next > self._last:
                    top = await self.store.incr(self.key, self.block)
                    self._next, self._last = top - self.block + 1, top
                return self._hand_out()
        finally:
            self._waiting -= 1

    def _hand_out(self) -> int:
        number = self._next
        self._next += 1
        return number
