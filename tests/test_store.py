"""The store contract, run against the in-memory store and a real Redis server alike."""


import asyncio

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


async def test_capped_set_claims_a_place_once_and_never_past_the_cap(store):
    assert await store.set_if_absent_capped("cap:a", "1", prefix="cap:", cap=2, ttl=60) == "set"
    assert await store.set_if_absent_capped("cap:a", "2", prefix="cap:", cap=2, ttl=60) == "exists"
    assert await store.set_if_absent_capped("cap:b", "1", prefix="cap:", cap=2, ttl=60) == "set"
    assert await store.set_if_absent_capped("cap:c", "1", prefix="cap:", cap=2, ttl=60) == "full"
    assert await store.get("cap:a") == "1" and await store.get("cap:c") is None
    await store.delete("cap:a")  # a deleted key frees its place
    assert await store.set_if_absent_capped("cap:c", "1", prefix="cap:", cap=2) == "set"
    assert sorted(await store.keys("cap:")) == ["cap:b", "cap:c"]


async def test_capped_set_holds_when_fifty_callers_race(store):
    """The check and the write are one step: fifty concurrent claims, exactly `cap` win."""
    outcomes = await asyncio.gather(
        *(store.set_if_absent_capped(f"race:{n}", "1", prefix="race:", cap=3, ttl=60) for n in range(50))
    )
    assert sorted(outcomes).count("set") == 3 and outcomes.count("full") == 47
    assert len(await store.keys("race:")) == 3


async def test_capped_set_places_free_up_when_keys_expire():
    clock = Clock()
    store = MemoryStore(clock=clock)
    assert await store.set_if_absent_capped("x:1", "1", prefix="x:", cap=1, ttl=10) == "set"
    assert await store.set_if_absent_capped("x:2", "1", prefix="x:", cap=1, ttl=10) == "full"
    clock.now += 11
    assert await store.set_if_absent_capped("x:2", "1", prefix="x:", cap=1, ttl=10) == "set"


async def test_redis_capped_set_places_free_up_when_keys_expire(redis_url):
    store = RedisStore(redis_url, prefix="capped-ttl-test:")
    await store.connect()
    try:
        assert await store.set_if_absent_capped("x:1", "1", prefix="x:", cap=1, ttl=0.2) == "set"
        assert await store.set_if_absent_capped("x:2", "1", prefix="x:", cap=1, ttl=0.2) == "full"
        await asyncio.sleep(0.3)
        assert await store.set_if_absent_capped("x:2", "1", prefix="x:", cap=1, ttl=0.2) == "set"
    finally:
        await store.close()
