"""Durable inbound over Redis Streams with several workers in one process (real redis-server).

Subprocess crash and scale tests against a platform emulator live in test_durable_processes.py.
"""

import asyncio
import time
import uuid

import pytest
from botweave import App, PlatformCapabilities
from botweave.store.redis import RedisStore
from botweave.store.redis_lease import Lease
from botweave.store.redis_stream import InboundStream

from tests.support import RecordingAdapter, message


class Wide(RecordingAdapter):
    capabilities = PlatformCapabilities(max_message_length=2000)


def config(redis_url: str, prefix: str, **store) -> dict:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo", "max_history": 5}},
        "store": {"url": redis_url, "prefix": prefix, **store},
    }


async def worker(redis_url: str, prefix: str, spans: list, **store) -> tuple[App, Wide]:
    app = App.from_config(config(redis_url, prefix, **store), role="worker")
    adapter = Wide()
    app.add_adapter(adapter)
    starts: dict[str, float] = {}
    app.hooks.register("message_received", lambda e: starts.__setitem__(e.message.message_id, time.monotonic()))
    app.hooks.register(
        "message_sent",
        lambda e: spans.append((e.message.channel.channel_id, e.message.message_id, starts[e.message.message_id], time.monotonic())),
    )
    await app.start(platforms=[])
    return app, adapter


async def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


@pytest.fixture
def prefix() -> str:
    return f"durable-{uuid.uuid4().hex[:8]}:"


async def test_two_workers_answer_every_message_once_in_order(redis_url, prefix):
    spans: list = []
    apps = [await worker(redis_url, prefix, spans) for _ in range(2)]
    publisher = RedisStore(redis_url, prefix)
    stream = InboundStream(publisher)
    await stream.ensure_group()
    total, conversations = 200, 20
    for i in range(total):
        conv = i % conversations
        await stream.publish(message(f"n{i // conversations}", message_id=f"m{i}", chat_id=f"c{conv}", user_id=f"u{conv}"))
    try:
        await wait_until(lambda: len(spans) == total)
        await asyncio.sleep(0.3)  # a duplicate would show up now
        assert len(spans) == total
        sent = [s for _, adapter in apps for s in adapter.sent]
        assert len(sent) == total and len({s.reply_to for s in sent}) == total
        assert all(adapter.sent for _, adapter in apps), "both workers took a share"
        by_conv: dict[str, list] = {}
        for chat, mid, start, end in sorted(spans, key=lambda s: s[2]):
            by_conv.setdefault(chat, []).append((int(mid[1:]), start, end))
        for chat, turns in by_conv.items():
            ids = [t[0] for t in turns]
            assert ids == sorted(ids), f"{chat} answered out of order"
            for (_, _, end), (_, start, _) in zip(turns, turns[1:]):
                assert end <= start, f"{chat}: two turns overlapped"
    finally:
        for app, _ in apps:
            await app.stop()
        await publisher.close()


async def test_an_item_left_pending_by_a_dead_worker_is_claimed_and_answered_once(redis_url, prefix):
    store = RedisStore(redis_url, prefix)
    stream = InboundStream(store, lease=0.5)
    await stream.ensure_group()
    await stream.publish(message("rescue me", message_id="r1"))
    # a "worker" reads the entry and dies without acknowledging it
    await store.client.xreadgroup("workers", "dead-worker", {stream.stream: ">"}, count=1)
    assert await stream.pending_count() == 1
    spans: list = []
    app, adapter = await worker(redis_url, prefix, spans, stream_lease_seconds=0.5)
    try:
        await wait_until(lambda: len(adapter.sent) == 1, timeout=10)
        await asyncio.sleep(1.2)
        assert [s.text for s in adapter.sent] == ["assistant (offline echo) heard: rescue me"]
        await wait_until(lambda: True)
        assert await stream.pending_count() == 0
    finally:
        await app.stop()
        await store.close()


async def test_a_turn_that_runs_again_never_resends_a_delivered_chunk(redis_url, prefix):
    app = App.from_config(config(redis_url, prefix))
    adapter = RecordingAdapter()  # 100-character chunks
    app.add_adapter(adapter)
    await app.store.connect()
    msg = message("word " * 40, message_id="again")
    await app.handle(msg, deduplicated=True)
    first = list(adapter.texts())
    assert len(first) > 1
    await app.store.delete("dedup:test:c1:again")  # as if the worker died before recording
    await app.handle(message("word " * 40, message_id="again"), deduplicated=True)
    assert adapter.texts() == first
    await app.store.close()


async def test_a_lock_outlives_its_ttl_while_its_holder_lives(redis_url, prefix):
    store = RedisStore(redis_url, prefix)
    holder = Lease(store.client, store.key("lock:conv:x"), ttl=0.3)
    assert await holder.try_acquire()
    rival = Lease(store.client, store.key("lock:conv:x"), ttl=0.3)
    await asyncio.sleep(1.0)  # more than three TTLs: the heartbeat kept it
    assert not await rival.try_acquire()
    assert not holder.lost.is_set()
    await holder.release()
    assert await rival.try_acquire()
    await rival.release()
    # a holder that dies (no heartbeat) loses the lock after the TTL
    dead = Lease(store.client, store.key("lock:conv:y"), ttl=0.3)
    await store.client.set(dead.key, "someone-dead", px=300)
    assert await dead.acquire(timeout=2)
    await dead.release()
    await store.close()


async def test_a_long_turn_keeps_its_conversation_lock_and_no_second_turn_starts(redis_url, prefix):
    spans: list = []
    apps = [await worker(redis_url, prefix, spans, lock_ttl_seconds=0.3, stream_lease_seconds=0.6) for _ in range(2)]
    for app, adapter in apps:
        adapter.send_delay = 1.5  # each turn lasts five lock TTLs
    publisher = RedisStore(redis_url, prefix)
    stream = InboundStream(publisher)
    for i in range(3):
        await stream.publish(message(f"slow {i}", message_id=f"s{i}"))
    try:
        await wait_until(lambda: len(spans) == 3, timeout=20)
        turns = sorted(spans, key=lambda s: s[2])
        assert [t[1] for t in turns] == ["s0", "s1", "s2"]
        for a, b in zip(turns, turns[1:]):
            assert a[3] <= b[2], "a second turn started while the first still ran"
        assert sum(len(adapter.sent) for _, adapter in apps) == 3
    finally:
        for app, _ in apps:
            await app.stop()
        await publisher.close()


async def test_redis_lost_while_running_is_retried_and_work_resumes(tmp_path, prefix):
    """Redis goes away for a moment: nothing crashes, the message sent meanwhile is answered."""
    import shutil
    import subprocess

    from tests.conftest import free_port

    port = free_port()

    def redis_server() -> subprocess.Popen:
        proc = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                import socket

                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return proc
            except OSError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    server = redis_server()
    spans: list = []
    app, adapter = await worker(f"redis://127.0.0.1:{port}/0", prefix, spans)
    publisher = App.from_config(config(f"redis://127.0.0.1:{port}/0", prefix))
    publisher.add_adapter(Wide())
    await publisher.start(platforms=[], receive=False)
    try:
        await publisher.submit(message("before", message_id="b1"))
        await wait_until(lambda: len(adapter.sent) == 1, timeout=20)
        server.terminate()
        server.wait(timeout=10)
        sending = asyncio.create_task(publisher.submit(message("during", message_id="b2", chat_id="c2", user_id="u2")))
        await asyncio.sleep(1.5)  # Redis is down: the append waits, retrying with backoff
        assert not sending.done()
        server = redis_server()  # Redis is back (empty: a restart without persistence)
        await asyncio.wait_for(sending, timeout=20)
        await wait_until(lambda: len(adapter.sent) == 2, timeout=30)
        assert [s.text.rsplit(" ", 1)[-1] for s in adapter.sent] == ["before", "during"]
    finally:
        await app.stop()
        await publisher.stop()
        server.terminate()
        server.wait(timeout=10)


async def test_admission_limits_hold_across_workers(redis_url, prefix):
    """max_concurrent_turns is the deployment's budget: two workers never run two turns at once."""
    apps = []
    for _ in range(2):
        app = App.from_config(
            config(redis_url, prefix) | {"admission": {"max_concurrent_turns": 1, "overflow": "queue"}}, role="worker"
        )
        adapter = Wide(send_delay=0.2)  # each turn holds its slot while it sends, 0.2 s
        app.add_adapter(adapter)
        await app.start(platforms=[])
        apps.append((app, adapter))
    publisher = RedisStore(redis_url, prefix)
    stream = InboundStream(publisher)
    for i in range(6):  # six conversations: nothing but the limit keeps them apart
        await stream.publish(message(f"turn {i}", message_id=f"a{i}", chat_id=f"chat{i}", user_id=f"u{i}"))
    try:
        await wait_until(lambda: sum(len(adapter.sent) for _, adapter in apps) == 6, timeout=30)
        assert all(adapter.sent for _, adapter in apps), "both workers took turns"
        sends = sorted((s.at - 0.2, s.at) for _, adapter in apps for s in adapter.sent)
        for (_, end), (begin, _) in zip(sends, sends[1:]):
            assert begin >= end - 0.02, f"two turns ran at once across workers: {sends}"
    finally:
        for app, _ in apps:
            await app.stop()
        await publisher.close()
