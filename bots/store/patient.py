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

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from botweave.store.base import CappedSet, LogFeed, LogSlice, Operation, Store
from botweave.store.patience import Patience

if TYPE_CHECKING:
    from botweave.store.carrier import InboundCarrier


T = TypeVar("T")

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

    @property
    def shared(self) -> bool:
        return self.inner.shared

    @property
    def external(self) -> bool:
        return self.inner.external

    def inbound_carrier(
        self, *, dedup_ttl: float, lease: float, lock_ttl: float, patience: Patience | None = None, via: Store | None = None
    ) -> InboundCarrier:
        """The backend's carrier; one kept in the store writes through this wrapper, so its
        writes wait out outages as a turn's do."""
        return self.inner.inbound_carrier(
            dedup_ttl=dedup_ttl, lease=lease, lock_ttl=lock_ttl, patience=patience, via=via or self
        )

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


def patient(store: Store, patience: Patience) -> PatientStore:
    """`store`, waiting out its outages with `patience`; a store that waits already is kept as
    it is (with its own patience): outages are never waited out twice over."""
    return store if isinstance(store, PatientStore) else PatientStore(store, patience=patience)


def backend(store: Store) -> Store:
    """The backend behind any wrapping, for code that talks to one backend directly."""
    while isinstance(store, PatientStore):
        store = store.inner
    return store
