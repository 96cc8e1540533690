"""`store_failures()` is what the side paths that outlive a store's trouble catch (a presence
record, a slot renewal, a notification's counters): it must hold what each real backend
raises, and nothing a bug raises, or a bug would pass for an outage."""

from __future__ import annotations

import sys
import uuid

import pytest
from botweave.store import SQLiteStore, store_failures
from botweave.store.redis import RedisStore


async def test_a_redis_refusal_is_a_store_failure(redis_url):
    store = RedisStore(redis_url, prefix=f"failures:{uuid.uuid4().hex}:")
    await store.connect()
    try:
        await store.set("k", "a string")
        with pytest.raises(store_failures()) as info:  # WRONGTYPE: Redis's own answer, not an outage
            await store.list_append("k", "an item")
        assert type(info.value).__module__.startswith("redis")
    finally:
        await store.close()


async def test_an_unreachable_redis_is_a_store_failure():
    store = RedisStore("redis://127.0.0.1:1/0")
    with pytest.raises(store_failures()):
        await store.connect()
    with pytest.raises(store_failures()):
        await store.get("k")
    await store.close()


async def test_a_sqlite_file_that_cannot_be_opened_is_a_store_failure(tmp_path):
    store = SQLiteStore(tmp_path)  # a directory, not a database file
    with pytest.raises(store_failures()):
        await store.connect()
        await store.get("k")
    await store.close()


def test_a_bug_is_not_a_store_failure():
    for bug in (KeyError, TypeError, AttributeError, ValueError, AssertionError):
        assert not issubclass(bug, store_failures())
    assert issubclass(TimeoutError, store_failures())  # a socket or a lock that did not answer


def test_the_other_types_a_clause_names_are_added():
    assert LookupError in store_failures(LookupError)
    assert set(store_failures()) < set(store_failures(LookupError))


def test_redis_errors_are_named_only_once_redis_is_loaded(monkeypatch):
    """A process on SQLite never imports redis-py for the sake of an except clause."""
    monkeypatch.delitem(sys.modules, "redis.exceptions")
    assert not any(kind.__module__.startswith("redis") for kind in store_failures())
