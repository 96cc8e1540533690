"""What a store operation can raise, for the loops and side paths that go on when the store
is away or refuses (a heartbeat, a renewal, a cleanup on the way out): they catch these and
nothing else, so a bug still reaches the boundary that reports it.

The backends report a passing outage as `StoreOutage` and an unreachable store as
`StoreUnavailable`; other refusals come through as the backend's own errors: sqlite3's, or
redis-py's (a read-only replica after a failover, a server out of memory), and OSError from
the socket or the file underneath. redis-py is named only once it is loaded: a process on
another store never loads it, and nothing there raises its errors.
"""

from __future__ import annotations

import sqlite3
import sys

from botweave.store import StoreOutage, StoreUnavailable

_ALWAYS: tuple[type[Exception], ...] = (StoreOutage, StoreUnavailable, sqlite3.Error, OSError)


def store_failures(*also: type[Exception]) -> tuple[type[Exception], ...]:
    """The exception types a store operation can fail with in this process, and `also`, for
    an `except` clause."""
    redis = sys.modules.get("redis.exceptions")
    found = _ALWAYS if redis is None else (*_ALWAYS, redis.RedisError)
    return (*found, *also)
