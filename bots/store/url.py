"""Which store backend a URL names."""

from __future__ import annotations

from botweave.store.base import Store
from botweave.store.memory import MemoryStore
from botweave.store.redis import RedisStore


def open_store(url: str, prefix: str = "botweave:default:") -> Store:
    if url.startswith("memory://"):
        return MemoryStore()
    return RedisStore(url, prefix)
