"""The state store: one async interface that every backend implements.

The operations are the ones Redis does atomically (SET NX EX, RPUSH+LTRIM, INCR, sorted-set
windows), so every backend can be shared by workers: dedup keys, histories and loop-guard
windows mean the same thing whichever process reads them. Values are strings; callers encode
JSON themselves.

Two operations exist for the delivery protocol. `commit` applies a turn's writes (history
appends, the reply it will send) together with a marker, and only when the marker is absent,
so a turn that runs again after a crash can neither apply its effects twice nor half-apply
them. `slots_acquire` / `slots_release` hold counted slots with an expiry, so a limit on
concurrent turns holds across processes and a crashed holder's slot comes back by itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit


@dataclass(frozen=True, slots=True)
class Append:
    """Append `values` to the list at `key`, then keep only its newest `max_len` items."""

    key: str
    values: tuple[str, ...]
    max_len: int | None = None


@dataclass(frozen=True, slots=True)
class Put:
    """Set `key` to `value` (expiring after `ttl` seconds when given)."""

    key: str
    value: str
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class Remove:
    """Delete `key`, whatever it holds."""

    key: str


Operation = Append | Put | Remove


class Store(ABC):
    async def connect(self) -> None:
        """Open connections; the in-memory store has none."""

    async def close(self) -> None:
        """Release connections."""

    def describe(self) -> str:
        """Where the state lives, safe to print (no password)."""
        return type(self).__name__

    @abstractmethod
    async def get(self, key: str) -> str | None: ...

    @abstractmethod
    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None: ...

    @abstractmethod
    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        """Atomically claim `key`; False when it already exists (the basis of dedup)."""

    @abstractmethod
    async def delete(self, *keys: str) -> None: ...

    @abstractmethod
    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        """Add to a counter; `ttl` is set when the counter is created."""

    @abstractmethod
    async def list_append(self, key: str, *values: str, max_len: int | None = None) -> None:
        """Append, then keep only the newest `max_len` items."""

    @abstractmethod
    async def list_range(self, key: str, start: int = 0, end: int = -1) -> list[str]:
        """Items from `start` to `end` inclusive (negative counts from the end), like LRANGE."""

    @abstractmethod
    async def window_add(self, key: str, now: float, window: float) -> int:
        """Record an event at `now`, forget events older than `window`, return how many remain."""

    @abstractmethod
    async def keys(self, prefix: str) -> list[str]: ...

    @abstractmethod
    async def commit(
        self, marker: str, operations: Sequence[Operation], *, value: str = "1", ttl: float | None = None
    ) -> bool:
        """Apply `operations` and set `marker` to `value` in one atomic step, only when `marker`
        does not exist yet. True when this call applied them; False when the marker was there
        (an earlier run committed, and nothing was written now)."""

    @abstractmethod
    async def slots_acquire(self, claims: Sequence[tuple[str, int]], holder: str, ttl: float) -> bool:
        """Take a slot named `holder` in every `(key, limit)` of `claims`, all or none: False when
        any key already has `limit` live holders. A slot expires `ttl` seconds after it was last
        taken; taking it again while held renews it. A limit of 0 means unlimited."""

    @abstractmethod
    async def slots_release(self, keys: Sequence[str], holder: str) -> None:
        """Give `holder`'s slot back in each of `keys` (a slot not held is ignored)."""

    @abstractmethod
    async def slots_held(self, key: str) -> int:
        """How many live slots `key` has."""


class StoreUnavailable(RuntimeError):
    """The store cannot be reached; the message names the URL without its password."""


class StoreOutage(RuntimeError):
    """One operation failed for a reason that passes (a timeout, a lost connection, a database
    busy with another writer). Retrying later is the right response, not giving up."""


def redact_url(url: str) -> str:
    """The URL with its password replaced, safe for logs and dumps."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))
