"""Which store backend a URL names."""

from __future__ import annotations

from pathlib import Path

from botweave.store.base import Store
from botweave.store.memory import MemoryStore
from botweave.store.redis import RedisStore
from botweave.store.sqlite import SQLiteStore, sqlite_path

SCHEMES = ("memory://", "sqlite://", "redis://", "rediss://", "unix://")


def open_store(url: str, prefix: str = "botweave:default:", *, base: Path | None = None) -> Store:
    """The backend for `url`; a relative `sqlite:///` path is taken relative to `base` (the
    configuration file's folder). `prefix` namespaces Redis keys; a SQLite file and the
    memory store belong to one deployment already."""
    if url.startswith("memory://"):
        return MemoryStore()
    if url.startswith("sqlite://"):
        return SQLiteStore(sqlite_path(url, base))
    return RedisStore(url, prefix)


def is_shared(url: str) -> bool:
    """Whether processes on several hosts can share this store (several workers need it)."""
    return url.startswith(("redis://", "rediss://", "unix://"))
