"""The store contract, run against the in-memory store and a real Redis server alike."""


import pytest
from botweave.store import MemoryStore, StoreUnavailable
from botweave.store.redis import RedisStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_get_set_delete(store):
    assert await store.get("k") is None
    await store.set("k", "v")
    assert await store.get("k") == "v"
    await store.delete("k", "missing")
    assert await store.get("k") is None


async def test_set_if_absent_claims_once(store):
    assert await store.set_if_absent("dedup:x", "1", ttl=60)
    assert not await store.set_if_absent("dedup:x", "2", ttl=60)
    assert await store.get("dedup:x") == "1"


async def test_counters(store):
    assert await store.incr("n") == 1
    assert await store.incr("n", 5) == 6


async def test_lists_append_trim_and_range(store):
    await store.list_append("l", "a", "b", "c")
    await store.list_append("l", "d", max_len=3)
    assert await store.list_range("l") == ["b", "c", "d"]
    assert await store.list_range("l", -2, -1) == ["c", "d"]
    assert await store.list_range("l", 0, 0) == ["b"]
    assert await store.list_range("none") == []


async def test_windows_count_recent_events(store):
    assert await store.window_add("w", 100.0, 60.0) == 1
    assert await store.window_add("w", 100.0, 60.0) == 2  # same instant, separate events
    assert await store.window_add("w", 150.0, 60.0) == 3
    assert await store.window_add("w", 161.0, 60.0) == 2  # the two at t=100 fell out


async def test_keys_by_prefix(store):
    await store.set("pair:a", "1")
    await store.set("pair:b", "1")
    await store.set("other", "1")
    assert sorted(await store.keys("pair:")) == ["pair:a", "pair:b"]


async def test_memory_ttl_expires():
    clock = Clock()
    store = MemoryStore(clock=clock)
    await store.set("k", "v", ttl=10)
    assert await store.set_if_absent("d", "1", ttl=5)
    clock.now += 11
    assert await store.get("k") is None
    assert await store.set_if_absent("d", "1", ttl=5)


async def test_redis_ttl_is_set(redis_url):
    store = RedisStore(redis_url, prefix="ttl-test:")
    await store.set("k", "v", ttl=30)
    assert 0 < await store._redis.pttl("ttl-test:k") <= 30_000
    await store.close()


async def test_unreachable_redis_is_one_clear_error_without_the_password():
    store = RedisStore("redis://:hunter2@127.0.0.1:1/0")
    with pytest.raises(StoreUnavailable) as info:
        await store.connect()
    assert "cannot reach the Redis store at redis://:***@127.0.0.1:1/0" in str(info.value)
    assert "hunter2" not in str(info.value)
    await store.close()
