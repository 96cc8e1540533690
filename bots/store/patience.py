"""The patience of everything that talks to a store: retries with backoff through a short
outage, and one warning per outage however many operations meet it (the module of its own so
that the store contract, the carriers and the wrapper can all name it without importing one
another)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from botweave.store.errors import StoreOutage

log = logging.getLogger("botweave.store.patient")

T = TypeVar("T")

#: Retry pauses grow from the first to the last.
FIRST_PAUSE_S = 0.1
LONGEST_PAUSE_S = 2.0


class Patience:
    """Retries calls through an outage and keeps its log to one warning per outage.

    One instance per process is shared by everything that talks to the store (the store
    itself, the inbound stream, lock heartbeats), so a store that stops answering is reported
    once however many operations meet it, and once again when it is back."""

    def __init__(self, grace: float = 60.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self.clock = clock
        self.what = "the store"
        self._down_since: float | None = None
        #: When the last outage ended (the clock's time); -inf before any.
        self.recovered_at = float("-inf")
        #: Operations that failed with an outage, retried or not (a metric's source).
        self.errors = 0

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def failed(self, exc: BaseException, *, began: float) -> None:
        """Note a failed operation that `began` at that time (the instance's clock); the
        first of an outage is logged. One that began before the store last came back (a
        timeout that fired late) belongs to that outage and does not open another."""
        self.errors += 1
        if began < self.recovered_at:
            return
        if self._down_since is None:
            self._down_since = self.clock()
            log.warning(
                "%s is not answering (%s); waiting up to %.0fs for it before failing",
                self.what, _brief(exc), self.grace,
            )

    def succeeded(self) -> None:
        """Note a successful operation; the first after an outage is logged."""
        if self._down_since is not None:
            self.recovered_at = self.clock()
            log.warning("%s answers again after %.1fs", self.what, self.recovered_at - self._down_since)
            self._down_since = None

    def troubled_within(self, seconds: float) -> bool:
        """Whether the store was away at any time in the last `seconds` (or is now)."""
        return self._down_since is not None or self.clock() - self.recovered_at < seconds

    def stalled(self) -> None:
        """An operation succeeded but took so long the store must have stood still: count it
        as an outage that just ended."""
        self.recovered_at = self.clock()

    async def run(
        self,
        call: Callable[[], Awaitable[T]],
        errors: tuple[type[BaseException], ...] = (StoreOutage,),
        grace: float | None = None,
    ) -> T:
        """`call()`, retried with growing pauses while it fails with one of `errors`, for up to
        `grace` seconds (the instance's own by default); after that the error is raised."""
        limit = self.grace if grace is None else grace
        started = self.clock()
        pause = FIRST_PAUSE_S
        while True:
            began = self.clock()
            try:
                result = await call()
            except errors as exc:
                self.failed(exc, began=began)
                if self.clock() - started + pause > limit:
                    raise
                await asyncio.sleep(pause)
                pause = min(LONGEST_PAUSE_S, pause * 2)
                continue
            self.succeeded()
            return result


def _brief(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
