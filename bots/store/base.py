"""The state store: one async interface that every backend implements.

The operations are the ones Redis does atomically (SET NX EX, RPUSH+LTRIM, INCR, sorted-set
windows), so a Redis backend is a drop-in and workers can share dedup keys, histories and
loop-guard windows. Values are strings; callers encode JSON themselves.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from urllib.parse import urlsplit, urlunsplit


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
