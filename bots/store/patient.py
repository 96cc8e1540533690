"""Waiting out a store's short outages instead of failing the turn that met one.

A Redis failover, a slow fork or a SQLite file held by another writer makes the store stop
answering for seconds. A turn that gave up at the first timeout would lose its reply or mark
its message handled without one; a turn that retried every operation on its own would flood
the log. `PatientStore` wraps a backend: an operation that meets a `StoreOutage` is retried
with backoff for up to `grace` seconds, the first failure of an outage logs one warning and
the first success after it one line saying how long it lasted. Only an outage longer than
the grace reaches the caller.

Retrying is safe for what a turn writes that matters: a commit is guarded by its marker, an
outbox record or a done counter is a plain overwrite. A counter or window retried after a
timeout whose command did land may count one event twice, which costs a rate limit a little
precision and nothing else; a claim (`set_if_absent`, capped or not) retried so reads as taken
already, which errs on the side of writing less, never more (a pairing cap is never exceeded).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from botweave.store.base import CappedSet, LogFeed, LogSlice, Operation, Store, StoreOutage

log = logging.getLogger(__name__)

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


class PatientStore(Store):
    def __init__(self, inner: Store, grace: float = 60.0, *, patience: Patience | None = None) -> None:
        self.inner = inner
        self.patience = patience or Patience(grace)
        self.patience.what = f"the store ({inner.describe()})"

    @property
    def down(self) -> bool:
        return self.patience.down

    def describe(self) -> str:
        return self.inner.describe()

    async def connect(self) -> None:
        await self.inner.connect()

    async def close(self) -> None:
        await self.inner.close()

    async def _patiently(self, call: Callable[[], Awaitable[T]]) -> T:
        return await self.patience.run(call)

    async def get(self, key: str) -> str | None:
        return await self._patiently(lambda: self.inner.get(key))

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        await self._patiently(lambda: self.inner.set(key, value, ttl=ttl))

    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        return await self._patiently(lambda: self.inner.set_if_absent(key, value, ttl=ttl))

    async def set_if_absent_capped(
        self, key: str, value: str, *, prefix: str, cap: int, ttl: float | None = None
    ) -> CappedSet:
        return await self._patiently(
            lambda: self.inner.set_if_absent_capped(key, value, prefix=prefix, cap=cap, ttl=ttl)
        )

    async def delete(self, *keys: str) -> None:
        await self._patiently(lambda: self.inner.delete(*keys))

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        return await self._patiently(lambda: self.inner.incr(key, amount, ttl=ttl))

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        return await self._patiently(lambda: self.inner.get_many(keys))

    async def incr_many(self, amounts: Mapping[str, tuple[int, float | None]]) -> None:
        await self._patiently(lambda: self.inner.incr_many(amounts))

    async def list_append(self, key: str, *values: str, max_len: int | None = None) -> None:
        await self._patiently(lambda: self.inner.list_append(key, *values, max_len=max_len))

    async def list_range(self, key: str, start: int = 0, end: int = -1) -> list[str]:
        return await self._patiently(lambda: self.inner.list_range(key, start, end))

    async def window_add(self, key: str, now: float, window: float) -> int:
        return await self._patiently(lambda: self.inner.window_add(key, now, window))

    async def keys(self, prefix: str) -> list[str]:
        return await self._patiently(lambda: self.inner.keys(prefix))

    async def commit(
        self, marker: str, operations: Sequence[Operation], *, value: str = "1", ttl: float | None = None
    ) -> bool:
        return await self._patiently(lambda: self.inner.commit(marker, operations, value=value, ttl=ttl))

    async def slots_acquire(self, claims: Sequence[tuple[str, int]], holder: str, ttl: float) -> bool:
        return await self._patiently(lambda: self.inner.slots_acquire(claims, holder, ttl))

    async def slots_release(self, keys: Sequence[str], holder: str) -> None:
        await self._patiently(lambda: self.inner.slots_release(keys, holder))

    async def slots_held(self, key: str) -> int:
        return await self._patiently(lambda: self.inner.slots_held(key))

    async def log_append(
        self, key: str, value: str, *, max_len: int, unique: str | None = None, unique_ttl: float | None = None
    ) -> int:
        return await self._patiently(
            lambda: self.inner.log_append(key, value, max_len=max_len, unique=unique, unique_ttl=unique_ttl)
        )

    async def log_read(self, key: str, *, after: int = 0, limit: int = 100) -> LogSlice:
        return await self._patiently(lambda: self.inner.log_read(key, after=after, limit=limit))

    def later(self, *operations: Operation) -> None:
        # Not waited for, so not retried here: the backend logs a write that failed.
        self.inner.later(*operations)

    async def settled(self) -> None:
        await self.inner.settled()

    def log_feed(self, prefix: str) -> LogFeed | None:
        return self.inner.log_feed(prefix)


def backend(store: Store) -> Store:
    """The backend behind any wrapping, for code that talks to one backend directly."""
    while isinstance(store, PatientStore):
        store = store.inner
    return store
