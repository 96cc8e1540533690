"""The store contract, run against the in-memory store, a SQLite file and a real Redis server
alike (the `store` fixture is parametrized over the three)."""

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
import uuid

import pytest
from botweave.store import (
    Append,
    LogEntry,
    LogSlice,
    MemoryStore,
    PatientStore,
    Put,
    Remove,
    SQLiteStore,
    StoreOutage,
    StoreUnavailable,
)
from botweave.store.numbers import Numbers
from botweave.store.redis import RedisStore
from botweave.store.sqlite import sqlite_path


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_get_set_delete(store):
    assert await store.get("k") is None
    await store.set("k", "v")
    assert await store.get("k") == "v"
    await store.set("k", "w")
    assert await store.get("k") == "w"
    await store.delete("k", "missing")
    assert await store.get("k") is None


async def test_set_if_absent_claims_once(store):
    assert await store.set_if_absent("dedup:x", "1", ttl=60)
    assert not await store.set_if_absent("dedup:x", "2", ttl=60)
    assert await store.get("dedup:x") == "1"


async def test_counters(store):
    assert await store.incr("n") == 1
    assert await store.incr("n", 5) == 6
    assert await store.get("n") == "6"


async def test_many_values_are_read_at_once_in_order(store):
    await store.set("a", "1")
    await store.set("c", "3")
    await store.incr("n", 4)
    assert await store.get_many(["a", "b", "c", "n"]) == ["1", None, "3", "4"]
    assert await store.get_many([]) == []


async def test_many_counters_are_added_at_once_and_expire_from_their_creation(store):
    await store.incr_many({"x": (2, 0.3), "y": (5, None)})
    await store.incr_many({"x": (3, 60), "y": (1, None)})
    assert await store.get_many(["x", "y"]) == ["5", "6"]
    await asyncio.sleep(0.45)
    # the first call's time to live holds: adding to a counter does not extend it
    assert await store.get_many(["x", "y"]) == [None, "6"]
    await store.incr_many({"x": (1, 60)})
    assert await store.get("x") == "1"


async def test_lists_append_trim_and_range(store):
    await store.list_append("l", "a", "b", "c")
    await store.list_append("l", "d", max_len=3)
    assert await store.list_range("l") == ["b", "c", "d"]
    assert await store.list_range("l", -2, -1) == ["c", "d"]
    assert await store.list_range("l", 0, 0) == ["b"]
    assert await store.list_range("l", -10, -1) == ["b", "c", "d"]
    assert await store.list_range("l", 5, 9) == []
    assert await store.list_range("none") == []
    await store.delete("l")
    assert await store.list_range("l") == []


async def test_lists_keep_unicode_and_json(store):
    await store.list_append("h", '{"content": "naïve ☕ \\"quoted\\""}', "ünïcødé")
    assert await store.list_range("h") == ['{"content": "naïve ☕ \\"quoted\\""}', "ünïcødé"]


async def test_windows_count_recent_events(store):
    assert await store.window_add("w", 100.0, 60.0) == 1
    assert await store.window_add("w", 100.0, 60.0) == 2  # same instant, separate events
    assert await store.window_add("w", 150.0, 60.0) == 3
    assert await store.window_add("w", 161.0, 60.0) == 2  # the two at t=100 fell out


async def test_keys_by_prefix(store):
    await store.set("pair:a", "1")
    await store.set("pair:b", "1")
    await store.set("Pair:c", "1")
    await store.set("other", "1")
    await store.list_append("pair:list", "x")
    assert sorted(await store.keys("pair:")) == ["pair:a", "pair:b", "pair:list"]
    assert await store.keys("pair_") == []  # no wildcards hide in a prefix


async def test_commit_applies_everything_once_and_only_when_the_marker_is_absent(store):
    ops = [Append("history:c", ("user", "assistant"), 4), Put("reply:c", "hello"), Remove("draft:c")]
    await store.set("draft:c", "half-written")
    assert await store.commit("turn:1", ops, ttl=60)
    assert await store.list_range("history:c") == ["user", "assistant"]
    assert await store.get("reply:c") == "hello"
    assert await store.get("draft:c") is None
    assert await store.get("turn:1") == "1"
    # the same turn again (after a crash, say): nothing is applied twice
    assert not await store.commit("turn:1", [Append("history:c", ("user", "assistant"), 4), Put("reply:c", "other")])
    assert await store.list_range("history:c") == ["user", "assistant"]
    assert await store.get("reply:c") == "hello"
    # trimming applies inside a commit too
    assert await store.commit("turn:2", [Append("history:c", ("u2", "a2", "u3"), 4)], value="done")
    assert await store.list_range("history:c") == ["assistant", "u2", "a2", "u3"]
    assert await store.get("turn:2") == "done"


async def test_commit_with_no_operations_is_a_claim(store):
    assert await store.commit("turn:only", [])
    assert not await store.commit("turn:only", [])


async def test_concurrent_commits_of_one_marker_apply_once(store):
    results = await asyncio.gather(*(store.commit("turn:race", [Append("h", (str(i),))]) for i in range(10)))
    assert results.count(True) == 1
    assert len(await store.list_range("h")) == 1


async def test_slots_are_limited_all_or_none_and_released(store):
    assert await store.slots_acquire([("adm:all", 2), ("adm:scope:a", 1)], "t1", ttl=30)
    assert not await store.slots_acquire([("adm:all", 2), ("adm:scope:a", 1)], "t2", ttl=30)  # scope a is full
    assert await store.slots_held("adm:all") == 1, "a refused claim takes nothing"
    assert await store.slots_acquire([("adm:all", 2), ("adm:scope:b", 1)], "t3", ttl=30)
    assert not await store.slots_acquire([("adm:all", 2), ("adm:scope:c", 1)], "t4", ttl=30)  # all is full
    assert await store.slots_acquire([("adm:all", 2), ("adm:scope:a", 1)], "t1", ttl=30), "a holder renews"
    await store.slots_release(["adm:all", "adm:scope:a"], "t1")
    assert await store.slots_held("adm:all") == 1
    assert await store.slots_acquire([("adm:all", 2), ("adm:scope:a", 1)], "t2", ttl=30)
    assert await store.slots_acquire([("adm:all", 0)], "t9", ttl=30), "0 is unlimited"


async def test_an_expired_slot_comes_back(store):
    assert await store.slots_acquire([("adm:x", 1)], "crashed", ttl=0.2)
    assert not await store.slots_acquire([("adm:x", 1)], "next", ttl=0.2)
    await asyncio.sleep(0.35)
    assert await store.slots_acquire([("adm:x", 1)], "next", ttl=5)
    assert await store.slots_held("adm:x") == 1


async def test_ttls_expire(store):
    await store.set("short", "v", ttl=0.2)
    assert await store.set_if_absent("claim", "1", ttl=0.2)
    assert await store.commit("marker", [Put("put", "v", ttl=0.2)], ttl=0.2)
    await asyncio.sleep(0.35)
    assert await store.get("short") is None
    assert await store.get("put") is None
    assert await store.set_if_absent("claim", "2", ttl=5)
    assert await store.commit("marker", [])
    assert "short" not in await store.keys("")


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
    assert 0 < await store.client.pttl("ttl-test:k") <= 30_000
    await store.close()


async def test_unreachable_redis_is_one_clear_error_without_the_password():
    store = RedisStore("redis://:hunter2@127.0.0.1:1/0")
    with pytest.raises(StoreUnavailable) as info:
        await store.connect()
    assert "cannot reach the Redis store at redis://:***@127.0.0.1:1/0" in str(info.value)
    assert "hunter2" not in str(info.value)
    with pytest.raises(StoreOutage):  # an operation that meets no server is an outage, not a crash
        await store.get("k")
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


@pytest.mark.parametrize("patient", [False, True], ids=["bare", "patient"])
async def test_capped_set_holds_when_fifty_callers_race(store, patient):
    """The check and the write are one step: fifty concurrent claims, exactly `cap` win,
    on every backend and through the patient wrapper the app puts around it."""
    used = PatientStore(store, grace=5) if patient else store
    outcomes = await asyncio.gather(
        *(used.set_if_absent_capped(f"race:{n}", "1", prefix="race:", cap=3, ttl=60) for n in range(50))
    )
    assert sorted(outcomes).count("set") == 3 and outcomes.count("full") == 47
    assert len(await used.keys("race:")) == 3
    assert await used.set_if_absent_capped("race:0", "2", prefix="race:", cap=3) in ("exists", "full")


_RACER = """
import asyncio, json, sys
from botweave.store import open_store

async def main(url, prefix, worker):
    store = open_store(url, prefix)
    await store.connect()
    sys.stdin.readline()  # every racer is connected: go
    outcomes = await asyncio.gather(*(
        store.set_if_absent_capped(f"race:{worker}:{n}", "1", prefix="race:", cap=3, ttl=60) for n in range(10)
    ))
    await store.close()
    print(json.dumps(outcomes))

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
"""


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_capped_set_holds_when_five_processes_race(backend, tmp_path, request):
    """Five processes sharing one store claim ten places each at once: three in all win."""
    url = f"sqlite:///{tmp_path / 'shared.db'}" if backend == "sqlite" else request.getfixturevalue("redis_url")
    prefix = f"race-{tmp_path.name}:"
    racers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _RACER, url, prefix, str(worker),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )
        for worker in range(5)
    ]
    await asyncio.sleep(1.0)  # let every racer connect before the start signal
    answers = await asyncio.gather(*(racer.communicate(b"go\n") for racer in racers))
    outcomes = [outcome for out, _ in answers for outcome in json.loads(out)]
    assert all(racer.returncode == 0 for racer in racers)
    assert len(outcomes) == 50 and outcomes.count("set") == 3 and outcomes.count("full") == 47


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


async def test_many_operations_at_once_each_land_and_one_failure_stays_its_own(store):
    """A burst of writes from many conversations at once (the SQLite file runs what queued up
    in one transaction): every one lands and reads back, and an operation that fails fails
    alone. (Order across concurrent calls is not promised: Redis spreads them over several
    connections.)"""
    await store.set("not-a-number", "abc")
    writes = [store.set(f"k{n}", str(n)) for n in range(100)]
    appends = [store.list_append("ordered", str(n)) for n in range(50)]
    outcomes = await asyncio.gather(*writes[:50], store.incr("not-a-number"), *writes[50:], *appends, return_exceptions=True)
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failures) == 1 and not isinstance(failures[0], StoreOutage)
    assert [await store.get(f"k{n}") for n in range(100)] == [str(n) for n in range(100)]
    assert sorted(await store.list_range("ordered"), key=int) == [str(n) for n in range(50)]
    assert await store.get("not-a-number") == "abc"
    committed = await asyncio.gather(*(store.commit("turn:same", [Append("h", (str(n),))]) for n in range(10)))
    assert committed.count(True) == 1 and await store.list_range("h") in ([str(n)] for n in range(10))


def twin(store):
    """A second store object on the same data (another connection, as another process has);
    None for the memory store, whose data only its own object holds."""
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    if isinstance(store, RedisStore):
        return RedisStore(store._url, store.prefix)
    return None


async def test_deferred_writes_are_seen_by_every_later_call_in_the_order_they_were_queued(store):
    """Read-your-writes: nothing awaits a deferred write, yet every call made after `later`
    on the same store sees it, whichever kind of call it is."""
    await store.set("gone", "x")
    await store.list_append("h", "0")
    store.later(Put("k", "1"), Append("h", ("1",), 10))
    store.later(Put("k", "2", ttl=60), Remove("gone"))
    assert await store.get("k") == "2"
    assert await store.get_many(["k", "gone"]) == ["2", None]
    assert await store.list_range("h") == ["0", "1"]
    for n in range(30):  # a deferred write then a read, again and again: never a stale answer
        store.later(Put("counter", str(n)), Append("h", (str(n + 2),), 5))
        assert await store.get("counter") == str(n)
    assert await store.list_range("h") == ["27", "28", "29", "30", "31"]
    store.later(Remove("counter"))
    assert not await store.commit("k", [Put("never", "1")])  # a commit's check sees them too
    assert await store.set_if_absent("counter", "again")


async def test_deferred_writes_land_without_anyone_reading_and_survive_closing(store, tmp_path):
    """Another connection sees them once they are settled; a store closed right after queuing
    them writes them first."""
    other = twin(store)
    store.later(*(Put(f"d{n}", str(n)) for n in range(20)), Append("dl", ("a", "b")))
    await store.settled()
    if other is None:
        assert await store.get_many([f"d{n}" for n in range(20)]) == [str(n) for n in range(20)]
        return
    await other.connect()
    try:
        assert await other.get_many([f"d{n}" for n in range(20)]) == [str(n) for n in range(20)]
        assert await other.list_range("dl") == ["a", "b"]
        closing = twin(store)
        await closing.connect()
        closing.later(Put("last", "written"), Remove("d0"))
        await closing.close()  # no settled(): closing waits for them
        assert await other.get_many(["last", "d0"]) == ["written", None]
    finally:
        await other.close()


async def test_a_deferred_write_that_fails_is_logged_and_holds_nothing_back(store, caplog):
    """An append onto a key holding a plain value fails where the backend types its keys
    (memory, Redis); the writes queued around it land, and the log names its key."""
    await store.set("plain", "x")
    with caplog.at_level(logging.WARNING):
        store.later(Put("before", "1"), Append("plain", ("secret-words",)), Put("after", "2"))
        store.later(Put("next", "3"))
        assert await store.get_many(["before", "plain", "after", "next"]) == ["1", "x", "2", "3"]
        await store.settled()
    failed = [r.getMessage() for r in caplog.records if "deferred write" in r.getMessage()]
    if not isinstance(store, SQLiteStore):  # SQLite keeps lists apart from plain values: no failure
        assert len(failed) == 1 and "plain" in failed[0], failed
        assert "secret-words" not in failed[0]  # keys only: values may be what people wrote


async def test_deferred_writes_queued_before_the_sqlite_file_opened_land_once_it_does(tmp_path):
    store = SQLiteStore(tmp_path / "late.db")
    store.later(Put("early", "1"))
    try:
        assert await store.get("early") == "1"
    finally:
        await store.close()
    reopened = SQLiteStore(tmp_path / "late.db")
    try:
        assert await reopened.get("early") == "1"
    finally:
        await reopened.close()


async def test_a_patient_store_passes_deferred_writes_on(tmp_path):
    patient = PatientStore(SQLiteStore(tmp_path / "p.db"))
    await patient.connect()
    try:
        patient.later(Put("k", "v"))
        assert await patient.get("k") == "v"
        await patient.settled()
    finally:
        await patient.close()


async def test_numbers_rise_in_the_order_asked_across_refills_and_never_repeat(store):
    """A block per store call: callers that ask at once, across a refill, get theirs in the
    order they asked; another holder (another process, a restart) never gets the same one."""
    first = Numbers(store, "seq", block=4)
    taken = await asyncio.gather(*(first.take() for _ in range(10)))
    assert taken == sorted(taken) and len(set(taken)) == 10
    assert await store.get("seq") == "12"  # three blocks of four: one store call per block
    second = Numbers(store, "seq", block=4)  # another process, or the next start
    theirs = [await second.take() for _ in range(5)]
    assert min(theirs) > max(taken)
    mine = await first.take()
    assert mine not in theirs and mine > max(taken)


async def test_a_log_numbers_its_entries_and_keeps_the_newest(store):
    assert await store.log_read("conv") == LogSlice((), 1, 0)  # nothing yet: head 0
    seqs = [await store.log_append("conv", f"e{n}", max_len=3) for n in range(1, 6)]
    assert seqs == [1, 2, 3, 4, 5]
    held = await store.log_read("conv")
    assert held == LogSlice(((3, "e3"), (4, "e4"), (5, "e5")), 3, 5)  # the two oldest were trimmed
    assert await store.log_read("conv", after=3) == LogSlice(((4, "e4"), (5, "e5")), 3, 5)
    assert await store.log_read("conv", after=0, limit=2) == LogSlice(((3, "e3"), (4, "e4")), 3, 5)
    assert await store.log_read("conv", after=5) == LogSlice((), 3, 5)
    assert await store.log_read("conv", after=9) == LogSlice((), 3, 5)
    assert (await store.log_read("other")).head == 0, "each key is its own log"
    await store.log_append("other", '{"unicode": "naïve ☕ \\"q\\""}', max_len=10)
    assert (await store.log_read("other")).entries == ((1, '{"unicode": "naïve ☕ \\"q\\""}'),)


async def test_a_log_never_gives_a_number_twice_when_many_append_at_once(store):
    seqs = await asyncio.gather(*(store.log_append("busy", f"v{n}", max_len=1000) for n in range(60)))
    assert sorted(seqs) == list(range(1, 61))
    read = await store.log_read("busy", limit=1000)
    assert [seq for seq, _ in read.entries] == list(range(1, 61))
    assert sorted(value for _, value in read.entries) == sorted(f"v{n}" for n in range(60))
    assert dict(read.entries) == {seq: f"v{n}" for n, seq in enumerate(seqs)}, "each entry under the number it was given"


async def test_a_log_append_with_a_unique_key_happens_once(store):
    assert await store.log_append("u", "first", max_len=10, unique="logonce:a", unique_ttl=60) == 1
    assert await store.log_append("u", "again", max_len=10, unique="logonce:a", unique_ttl=60) == 0
    assert await store.log_append("u", "other", max_len=10, unique="logonce:b") == 2
    racing = await asyncio.gather(*(store.log_append("u", "race", max_len=10, unique="logonce:c") for _ in range(10)))
    assert sorted(racing) == [0] * 9 + [3]
    assert [value for _, value in (await store.log_read("u")).entries] == ["first", "other", "race"]


async def test_a_log_outlives_the_keys_and_deletions_around_it(store):
    """The numbering never restarts: deleting or expiring other keys, even one named like the
    log, leaves it alone."""
    await store.log_append("keep", "a", max_len=5)
    await store.set("keep", "a plain value", ttl=0.1)
    await store.delete("keep")
    assert await store.log_append("keep", "b", max_len=5) == 2
    assert "keep" not in await store.keys("")


async def test_a_shared_store_feeds_every_append_to_other_processes_in_order(redis_url):
    """Two connections to one Redis stand for two processes: what one appends, the other's
    feed reports, each log's entries in the order of their numbers."""
    prefix = f"feed-{uuid.uuid4().hex}:"
    writer, reader = RedisStore(redis_url, prefix=prefix), RedisStore(redis_url, prefix=prefix)
    await writer.connect()
    await reader.connect()
    feed = reader.log_feed("ev:")
    got: list[LogEntry] = []

    async def follow() -> None:
        async for entry in feed:
            got.append(entry)

    following = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.3)  # subscribed
        await asyncio.gather(*(writer.log_append(f"ev:{c}", f"{c}{n}", max_len=50) for n in range(20) for c in "ab"))
        await writer.log_append("elsewhere", "not under the prefix", max_len=5)
        for _ in range(100):
            if len(got) >= 40:
                break
            await asyncio.sleep(0.05)
        assert {e.key for e in got} == {"ev:a", "ev:b"}
        for conv in "ab":
            mine = [e for e in got if e.key == f"ev:{conv}"]
            assert [e.seq for e in mine] == list(range(1, 21))
            read = dict((await reader.log_read(f"ev:{conv}", limit=50)).entries)
            assert all(read[e.seq] == e.value for e in mine)
        assert MemoryStore().log_feed("ev:") is None, "a store of one process has no feed"
    finally:
        await feed.close()
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await writer.close()
        await reader.close()


async def test_a_feed_that_lost_its_connection_says_so_and_listens_again(redis_url):
    """Pub/sub keeps nothing for a subscriber that was away: the feed reports the gap (its
    reader then reads the logs) and goes on with what comes next."""
    prefix = f"feedgap-{uuid.uuid4().hex}:"
    store = RedisStore(redis_url, prefix=prefix)
    await store.connect()
    feed = store.log_feed("ev:")
    got: list[LogEntry] = []

    async def follow() -> None:
        async for entry in feed:
            got.append(entry)

    following = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.3)
        await store.log_append("ev:x", "one", max_len=5)
        await store.client.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        for _ in range(100):
            if any(e.key is None for e in got):
                break
            await asyncio.sleep(0.05)
        await store.log_append("ev:x", "three", max_len=5)
        for _ in range(100):
            if any(e.value == "three" for e in got):
                break
            await asyncio.sleep(0.05)
        assert [(e.key, e.value) for e in got if e.key is None or e.value in ("one", "three")] == [
            ("ev:x", "one"), (None, ""), ("ev:x", "three")
        ]
    finally:
        await feed.close()
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await store.close()


def test_sqlite_urls_name_relative_and_absolute_files(tmp_path):
    assert sqlite_path("sqlite:///state/bot.db", tmp_path) == tmp_path / "state" / "bot.db"
    assert sqlite_path("sqlite:////var/lib/bot.db", tmp_path).as_posix() == "/var/lib/bot.db"
    with pytest.raises(ValueError):
        sqlite_path("sqlite://", tmp_path)


async def test_sqlite_state_survives_reopening_and_is_shared_with_another_process(tmp_path):
    path = tmp_path / "bot.db"
    store = SQLiteStore(path)
    await store.connect()
    await store.list_append("history:c", "one", "two")
    assert await store.commit("turn:1", [Put("approved:telegram:42", "1")])
    await store.close()
    reopened = SQLiteStore(path)
    await reopened.connect()
    assert await reopened.list_range("history:c") == ["one", "two"]
    # another process writes while this one holds the file open (a second shell's CLI)
    script = textwrap.dedent(
        f"""
        import asyncio
        from botweave.store import SQLiteStore
        async def main():
            other = SQLiteStore({str(path)!r})
            await other.connect()
            assert not await other.commit("turn:1", [])
            await other.set("approved:telegram:7", "1")
            await other.close()
        asyncio.run(main())
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert await reopened.get("approved:telegram:7") == "1"
    await reopened.close()


async def test_an_unusable_sqlite_path_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = SQLiteStore(blocker / "bot.db")
    with pytest.raises(StoreUnavailable, match="cannot open the SQLite store"):
        await store.connect()


class Flaky(MemoryStore):
    """Fails with an outage until `healthy` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.healthy = False
        self.calls = 0

    async def get(self, key):
        self.calls += 1
        if not self.healthy:
            raise StoreOutage(TIMEOUT)
        return await super().get(key)

    async def recover(self, after: float) -> None:
        await asyncio.sleep(after)
        self.healthy = True


TIMEOUT = "redis: TimeoutError: Timeout reading from socket"


def outage_lines(caplog) -> tuple[list[str], int, int]:
    """The patience log: its lines, how many said the store stopped answering, how many that
    it answers again."""
    lines = [r.getMessage() for r in caplog.records]
    return lines, sum("is not answering" in line for line in lines), sum("answers again" in line for line in lines)


async def test_a_patient_store_waits_out_an_outage_and_warns_once(caplog):
    inner = Flaky()
    patient = PatientStore(inner, grace=10)

    with caplog.at_level(logging.WARNING, logger="botweave.store.patient"):
        recovering = asyncio.create_task(inner.recover(after=0.8))
        results = await asyncio.gather(*(patient.get("k") for _ in range(5)))
        await recovering
    assert results == [None] * 5
    assert inner.calls > 5, "the operations were retried"
    lines, stopped, back = outage_lines(caplog)
    assert stopped == 1, lines
    assert back == 1, lines
    assert not any(r.exc_info for r in caplog.records), "no tracebacks"


async def test_a_call_that_times_out_after_the_store_came_back_does_not_report_a_new_outage(caplog):
    """Calls sent while the store stood still time out one by one, some after others already
    got answers: they belong to the outage that ended, not to a new one."""

    class SlowToFail(Flaky):
        async def get(self, key):
            if not self.healthy:
                await asyncio.sleep(0.3 if key == "stuck" else 0.05)  # "stuck" was sent into the pause
                if key == "stuck":
                    raise StoreOutage(TIMEOUT)
            return await super().get(key)

    inner = SlowToFail()
    patient = PatientStore(inner, grace=10)

    with caplog.at_level(logging.WARNING, logger="botweave.store.patient"):
        answers = await asyncio.gather(patient.get("first"), patient.get("stuck"), inner.recover(after=0.1))
    assert answers[:2] == [None, None]  # both answered in the end
    lines, stopped, back = outage_lines(caplog)
    assert stopped == 1, lines
    assert back == 1, lines


async def test_a_patient_store_gives_up_after_its_grace():
    patient = PatientStore(Flaky(), grace=0.5)
    with pytest.raises(StoreOutage):
        await patient.get("k")
