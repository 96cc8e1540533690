"""The in-memory store: fast, process-local, gone on restart (tests and `--ephemeral`)."""

from __future__ import annotations

import bisect
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botweave.store.base import Append, CappedSet, LogSlice, Operation, Put, Remove, Store
from botweave.store.carrier import InboundCarrier
from botweave.store.journal import InboundJournal
from botweave.store.patience import Patience

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass(slots=True)
class _Entry:
    value: Any
    expires: float | None = None


@dataclass(slots=True)
class _Log:
    head: int = 0
    entries: deque[tuple[int, str]] = field(default_factory=deque)


@dataclass
class MemoryStore(Store):
    """Fast, process-local, gone on restart: tests and `--ephemeral`."""

    clock: Clock = time.monotonic
    _data: dict[str, _Entry] = field(default_factory=dict)
    _logs: dict[str, _Log] = field(default_factory=dict)

    def _live(self, key: str) -> _Entry | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry.expires is not None and entry.expires <= self.clock():
            del self._data[key]
            return None
        return entry

    def _expiry(self, ttl: float | None) -> float | None:
        return None if ttl is None else self.clock() + ttl

    def describe(self) -> str:
        return "memory:// (in this process; gone when it stops)"

    @property
    def external(self) -> bool:
        return False

    def inbound_carrier(
        self, *, dedup_ttl: float, lease: float, lock_ttl: float, patience: Patience | None = None, via: Store | None = None
    ) -> InboundCarrier:
        """The journal, kept in this store: one process answers what it receives."""
        return InboundJournal(via or self, dedup_ttl)

    async def get(self, key: str) -> str | None:
        entry = self._live(key)
        return None if entry is None or not isinstance(entry.value, str) else entry.value

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        self._data[key] = _Entry(value, self._expiry(ttl))

    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        if self._live(key) is not None:
            return False
        self._data[key] = _Entry(value, self._expiry(ttl))
        return True

    async def set_if_absent_capped(
        self, key: str, value: str, *, prefix: str, cap: int, ttl: float | None = None
    ) -> CappedSet:
        # No await between the check and the write: atomic within the event loop.
        if self._live(key) is not None:
            return "exists"
        if sum(1 for k in list(self._data) if k.startswith(prefix) and self._live(k) is not None) >= cap:
            return "full"
        self._data[key] = _Entry(value, self._expiry(ttl))
        return "set"

    async def delete(self, *keys: str) -> None:
        for key in keys:
            self._data.pop(key, None)

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        entry = self._live(key)
        if entry is None:
            entry = self._data[key] = _Entry("0", self._expiry(ttl))
        value = int(entry.value) + amount
        entry.value = str(value)
        return value

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        found: list[str | None] = []
        for key in keys:
            entry = self._live(key)
            found.append(None if entry is None or not isinstance(entry.value, str) else entry.value)
        return found

    async def incr_many(self, amounts: Mapping[str, tuple[int, float | None]]) -> None:
        for key, (amount, ttl) in amounts.items():
            await self.incr(key, amount, ttl=ttl)

    async def list_append(self, key: str, *values: str, max_len: int | None = None) -> None:
        self._append(key, values, max_len)

    async def list_range(self, key: str, start: int = 0, end: int = -1) -> list[str]:
        entry = self._live(key)
        if entry is None:
            return []
        items: list[str] = entry.value
        stop = len(items) + end + 1 if end < 0 else end + 1
        return items[start:stop]

    async def window_add(self, key: str, now: float, window: float) -> int:
        entry = self._live(key)
        if entry is None:
            entry = self._data[key] = _Entry([])
        events: list[float] = entry.value
        del events[: bisect.bisect_left(events, now - window)]
        bisect.insort(events, now)
        entry.expires = self.clock() + window  # an idle window disappears, as in Redis
        return len(events)

    async def keys(self, prefix: str) -> list[str]:
        return [k for k in list(self._data) if k.startswith(prefix) and self._live(k) is not None]

    async def commit(
        self, marker: str, operations: Sequence[Operation], *, value: str = "1", ttl: float | None = None
    ) -> bool:
        # No await between the check and the writes: nothing else runs in between.
        if self._live(marker) is not None:
            return False
        for op in operations:
            self._apply(op)
        self._data[marker] = _Entry(value, self._expiry(ttl))
        return True

    def later(self, *operations: Operation) -> None:
        # Applied now: nothing here is worth deferring, and every later call sees them.
        for op in operations:
            try:
                self._apply(op)
            except (AttributeError, TypeError) as exc:  # an append onto a key that holds no list
                log.warning("a deferred write to the memory store failed and was dropped (%s): %s", op.key, exc)

    def _apply(self, op: Operation) -> None:
        if isinstance(op, Append):
            self._append(op.key, op.values, op.max_len)
        elif isinstance(op, Put):
            self._data[op.key] = _Entry(op.value, self._expiry(op.ttl))
        elif isinstance(op, Remove):
            self._data.pop(op.key, None)

    def _append(self, key: str, values: Sequence[str], max_len: int | None) -> None:
        entry = self._live(key)
        if entry is None:
            entry = self._data[key] = _Entry([])
        entry.value.extend(values)
        if max_len is not None and len(entry.value) > max_len:
            del entry.value[: len(entry.value) - max_len]

    def _holders(self, key: str) -> dict[str, float]:
        entry = self._live(key)
        if entry is None or not isinstance(entry.value, dict):
            entry = self._data[key] = _Entry({})
        holders: dict[str, float] = entry.value
        now = self.clock()
        for name in [n for n, until in holders.items() if until <= now]:
            del holders[name]
        return holders

    async def slots_acquire(self, claims: Sequence[tuple[str, int]], holder: str, ttl: float) -> bool:
        tables = [(self._holders(key), limit) for key, limit in claims]
        for holders, limit in tables:
            if limit > 0 and holder not in holders and len(holders) >= limit:
                return False
        until = self.clock() + ttl
        for holders, _ in tables:
            holders[holder] = until
        return True

    async def slots_release(self, keys: Sequence[str], holder: str) -> None:
        for key in keys:
            self._holders(key).pop(holder, None)

    async def slots_held(self, key: str) -> int:
        return len(self._holders(key))

    async def log_append(
        self, key: str, value: str, *, max_len: int, unique: str | None = None, unique_ttl: float | None = None
    ) -> int:
        # No await between the check, the number and the append: one step on the event loop.
        if unique is not None:
            if self._live(unique) is not None:
                return 0
            self._data[unique] = _Entry("1", self._expiry(unique_ttl))
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = _Log()
        log.head += 1
        log.entries.append((log.head, value))
        while len(log.entries) > max(max_len, 1):
            log.entries.popleft()
        return log.head

    async def log_read(self, key: str, *, after: int = 0, limit: int = 100) -> LogSlice:
        log = self._logs.get(key)
        if log is None:
            return LogSlice((), 1, 0)
        first = log.entries[0][0] if log.entries else log.head + 1
        skip = max(0, after + 1 - first)
        picked = [log.entries[i] for i in range(skip, min(len(log.entries), skip + max(limit, 0)))]
        return LogSlice(tuple(picked), first, log.head)
