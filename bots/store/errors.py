"""What a store operation can raise, in one place every store module and every caller can
import without importing a backend.

What a store operation can raise, for the loops and side paths that go on when the store
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

__all__ = ["StoreOutage", "StoreUnavailable", "outage_errors", "passing_errors", "store_failures"]


class StoreUnavailable(RuntimeError):
    """The store cannot be reached; the message names the URL without its password."""


class StoreOutage(RuntimeError):
    """One operation failed for a reason that passes (a timeout, a lost connection, a database
    busy with another writer). Retrying later is the right response, not giving up."""


_ALWAYS: tuple[type[Exception], ...] = (StoreOutage, StoreUnavailable, sqlite3.Error, OSError)


def store_failures(*also: type[Exception]) -> tuple[type[Exception], ...]:
    """The exception types a store operation can fail with in this process, and `also`, for
    an `except` clause."""
    redis = sys.modules.get("redis.exceptions")
    found = _ALWAYS if redis is None else (*_ALWAYS, redis.RedisError)
    return (*found, *also)


def passing_errors() -> tuple[type[BaseException], ...]:
    """The redis-py errors that say "not now" rather than "never": a retry may succeed."""
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return (RedisConnectionError, RedisTimeoutError, OSError)


def outage_errors() -> tuple[type[BaseException], ...]:
    """Failures that mean "the store is away", from the store layer or from a carrier that
    talks to its server directly (redis-py's own errors)."""
    return (StoreOutage, *passing_errors())
