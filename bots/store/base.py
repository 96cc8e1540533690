"""The state store: one async interface that every backend implements.

The operations are the ones Redis does atomically (SET NX EX, RPUSH+LTRIM, INCR, sorted-set
windows), so a Redis backend is a drop-in and workers can share dedup keys, histories and
loop-guard windows. Values are strings; callers encode JSON themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

#: What `set_if_absent_capped` did: wrote the key, found it there, or found no room.
CappedSet = Literal["set", "exists", "full"]


class Store(ABC):
    async def connect(self) -> None:
        """Open connections; the in-memory store has none."""

    async def close(self) -> None:
        """Release connections."""

    @abstractmethod
    async def get(self, key: str) -> str | None: ...

    @abstractmethod
    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None: ...

    @abstractmethod
    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        """Atomically claim `key`; False when it already exists (the basis of dedup)."""

    @abstractmethod
    async def set_if_absent_capped(
        self, key: str, value: str, *, prefix: str, cap: int, ttl: float | None = None
    ) -> CappedSet:
        """Claim `key` unless it exists or `prefix` already holds `cap` live keys: one atomic step.

        `key` starts with `prefix`, and every key under `prefix` is written by this method
        only. "exists" when `key` is there (nothing written); "full" when `cap` or more keys
        under `prefix` are live (nothing written); else `key` is set to `value` (expiring
        after `ttl`) and "set". A key that is deleted or expires frees its place. However many
        callers race, in this process or in others sharing the store, no more than `cap` keys
        under `prefix` ever get "set" at once: the check and the write are one step. (Pairing
        uses it for its pending-code cap and its approval attempts.)
        """

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


class StoreUnavailable(RuntimeError):
    """The store cannot be reached; the message names the URL without its password."""


def redact_url(url: str) -> str:
    """The URL with its password replaced, safe for logs and dumps."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))
