"""A small LRU map shared by the adapters' caches (user names, quotes, webhooks, dedup keys).

Long-running bots see an unbounded stream of ids; old entries fall out so memory stays flat.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    def __init__(self, max_entries: int = 2048) -> None:
        self._data: OrderedDict[K, V] = OrderedDict()
        self._max = max_entries

    def get(self, key: K, default: Any = None) -> Any:
        if key not in self._data:
            return default
        self._data.move_to_end(key)
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    def discard(self, key: K) -> None:
        self._data.pop(key, None)

    def add_if_new(self, key: K, value: V) -> bool:
        """Claim a key atomically (no await in between); False when it was already there."""
        if key in self._data:
            return False
        self.put(key, value)
        return True
