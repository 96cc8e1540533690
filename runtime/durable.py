"""Durable inbound over Redis Streams: nothing is lost on a crash, nothing answered twice.

The process holding a platform connection appends each inbound item to a stream *before*
the platform is acknowledged. Workers read it through a consumer group and acknowledge an
entry only after its reply went out; entries left pending by a dead worker are claimed by
another after `lease` seconds (XAUTOCLAIM), while a live worker keeps its long turns from
being claimed by touching them (XCLAIM) as a heartbeat.

Order: each message gets a per-conversation sequence number when it is appended. A worker
runs message n of a conversation only while holding that conversation's lock and after
message n-1 is done, so any number of workers keep every conversation in order. Delivery
is at least once; the outbox (bots/delivery.py) makes the visible effect exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from botweave.router import conversation_key
from botweave.runtime.locks import Lease
from botweave.store.redis import RedisStore
from botweave.types import BotMessage, PlatformEvent

log = logging.getLogger(__name__)

GROUP = "workers"
PUBLISH_PATIENCE_S = 60.0  # how long an inbound item waits for Redis before the adapter hears of it
PREDECESSOR_PATIENCE = 20  # leases to wait for an earlier message of a conversation
_PUBLISH = """
if ARGV[4] ~= '' and not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[4]) then
  return false
end
local seq = 0
if ARGV[2] ~= '' then
  seq = redis.call('INCR', KEYS[2])
end
return redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'item', ARGV[1], 'conv', ARGV[2], 'seq', seq)
"""

Handler = Callable[[BotMessage | PlatformEvent], Awaitable[Any]]


def dedup_key(item: BotMessage | PlatformEvent) -> str | None:
    """The identity a platform retry repeats: (platform, chat, message or event id); None for
    an event the platform gave no id, which nothing could recognise as repeated anyway."""
    if isinstance(item, BotMessage):
        return f"dedup:{item.platform}:{item.channel.channel_id}:{item.message_id}"
    return f"dedup:{item.platform}:{item.chat_id}:event:{item.event_id}" if item.event_id else None


def encode(item: BotMessage | PlatformEvent) -> str:
    kind = "message" if isinstance(item, BotMessage) else "event"
    return json.dumps({"kind": kind, "data": item.to_dict()}, ensure_ascii=False)


def decode(raw: str) -> BotMessage | PlatformEvent:
    payload = json.loads(raw)
    if payload["kind"] == "message":
        return BotMessage.from_dict(payload["data"])
    return PlatformEvent(**payload["data"])


class InboundStream:
    def __init__(
        self,
        store: RedisStore,
        *,
        lease: float = 30.0,
        lock_ttl: float = 15.0,
        concurrency: int = 64,
        max_len: int = 100_000,
        consumer: str | None = None,
    ) -> None:
        self.store = store
        self.redis = store.client
        self.stream = store.key("inbound")
        self.lease = lease
        self.lock_ttl = lock_ttl
        self.max_len = max_len
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._concurrency = concurrency
        self._in_flight: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._publish = self.redis.register_script(_PUBLISH)

    async def ensure_group(self) -> None:
        from redis.exceptions import ResponseError

        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def publish(self, item: BotMessage | PlatformEvent, dedup: str | None = None, dedup_ttl: float = 0) -> str | None:
        """Append before the platform is acknowledged; returns the entry id, or None when
        `dedup` was seen already (a platform retry). Checking and appending is one atomic
        step, so a crash between them can neither lose nor double an item."""
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        conv = conversation_key(item) if isinstance(item, BotMessage) else ""
        keys = [self.stream, self.store.key(f"conv:seq:{conv}"), self.store.key(dedup or "unused")]
        ttl_ms = str(int(dedup_ttl * 1000)) if dedup else ""
        pause, waited = 0.1, 0.0
        while True:  # Redis away for a moment: hold the item (the platform is not acked yet)
            try:
                entry = await self._publish(keys=keys, args=[encode(item), conv, self.max_len, ttl_ms])
                return entry or None
            except (RedisConnectionError, RedisTimeoutError) as exc:
                if waited >= PUBLISH_PATIENCE_S:
                    raise
                log.warning("recording an inbound item failed (%s); retrying in %.1fs", exc, pause)
                await asyncio.sleep(pause)
                waited += pause
                pause = min(2.0, pause * 2)

    async def pending_count(self) -> int:
        info = await self.redis.xpending(self.stream, GROUP)
        return int(info["pending"])

    async def backlog(self) -> int:
        """Entries not yet delivered to any worker plus those delivered but not acknowledged."""
        groups = await self.redis.xinfo_groups(self.stream)
        for group in groups:
            if group["name"] == GROUP:
                return int(group.get("lag") or 0) + int(group["pending"])
        return 0

    # --- worker side ------------------------------------------------------------------------

    async def run(self, handler: Handler, stop: asyncio.Event) -> None:
        """Consume until `stop` is set; in-flight entries finish (or stay pending for others)."""
        await self.ensure_group()
        helpers = [asyncio.create_task(self._keep_claims(stop)), asyncio.create_task(self._reclaim(handler, stop))]
        try:
            while not stop.is_set():
                free = self._concurrency - len(self._in_flight)
                if free <= 0:
                    await asyncio.sleep(0.01)
                    continue
                for entry_id, fields in await self._read(free):
                    self._start(entry_id, fields, handler)
        finally:
            await asyncio.wait(helpers, timeout=self.lease)
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=5)

    def _start(self, entry_id: str, fields: dict[str, str], handler: Handler) -> None:
        self._in_flight.add(entry_id)
        task = asyncio.create_task(self._process(entry_id, fields, handler))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _read(self, count: int) -> list[tuple[str, dict[str, str]]]:
        from redis.exceptions import RedisError, ResponseError

        try:
            read = await self.redis.xreadgroup(GROUP, self.consumer, {self.stream: ">"}, count=count, block=500)
        except RedisError as exc:
            if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
                log.warning("the inbound stream's consumer group is gone (Redis restarted empty?); creating it again")
                with contextlib.suppress(RedisError):
                    await self.ensure_group()
                return []
            log.warning("reading the inbound stream failed (%s: %s); retrying", type(exc).__name__, exc)
            await asyncio.sleep(1.0)
            return []
        return [entry for _, batch in read for entry in batch]

    async def _reclaim(self, handler: Handler, stop: asyncio.Event) -> None:
        """Take over entries a dead worker left. Runs whatever this worker's load: such an
        entry may be the predecessor that all our waiting turns need."""
        while not stop.is_set():
            await asyncio.sleep(self.lease / 2)
            try:
                claimed = await self.redis.xautoclaim(
                    self.stream, GROUP, self.consumer, min_idle_time=int(self.lease * 1000), start_id="0-0", count=100
                )
            except Exception as exc:
                log.warning("claiming stale inbound items failed (%s); retrying", exc)
                continue
            # A busy event loop can miss a heartbeat of our own: never take over what we run.
            entries = [e for e in claimed[1] if e[1] and e[0] not in self._in_flight]
            if entries:
                log.warning("claimed %d inbound item(s) left by a stopped worker", len(entries))
            for entry_id, fields in entries:
                self._start(entry_id, fields, handler)

    async def _keep_claims(self, stop: asyncio.Event) -> None:
        """Touch in-flight entries so a long turn is not mistaken for a dead worker's."""
        while not stop.is_set():
            await asyncio.sleep(self.lease / 3)
            if not self._in_flight:
                continue
            with contextlib.suppress(Exception):
                await self.redis.xclaim(
                    self.stream, GROUP, self.consumer, min_idle_time=0, message_ids=list(self._in_flight), justid=True
                )

    async def _process(self, entry_id: str, fields: dict[str, str], handler: Handler) -> None:
        from redis.exceptions import RedisError

        seq = int(fields.get("seq") or 0)
        conv = fields.get("conv", "")
        try:
            item: BotMessage | PlatformEvent | None = decode(fields["item"])
        except (KeyError, ValueError, TypeError):
            log.error("inbound entry %s is malformed; skipped", entry_id)
            item = None
        try:
            for attempt in range(1, 11):
                try:
                    if seq:
                        await self._in_order(conv, seq, lambda: self._run(handler, item, entry_id))
                    else:
                        await self._run(handler, item, entry_id)
                    await self.redis.xack(self.stream, GROUP, entry_id)
                    return
                except RedisError as exc:
                    log.warning("Redis failed on entry %s (attempt %d: %s); retrying", entry_id, attempt, exc)
                    await asyncio.sleep(min(5.0, 0.1 * 2**attempt))
            log.error("entry %s left pending after repeated Redis failures; it will be claimed again", entry_id)
        finally:
            self._in_flight.discard(entry_id)

    @staticmethod
    async def _run(handler: Handler, item: BotMessage | PlatformEvent | None, entry_id: str) -> None:
        if item is None:
            return
        try:
            await handler(item)
        except Exception:
            log.exception("turn for inbound entry %s failed; acknowledged so it is not retried forever", entry_id)

    async def _in_order(self, conv: str, seq: int, turn: Callable[[], Awaitable[None]]) -> None:
        """Run message `seq` of `conv` once message `seq - 1` is done, holding the lock."""
        done_key = self.store.key(f"conv:done:{conv}")
        lock_key = self.store.key(f"lock:conv:{conv}")
        pause, waited = 0.005, 0.0
        while True:
            done = int(await self.redis.get(done_key) or 0)
            if done >= seq:  # handled already (a worker died between finishing and acknowledging)
                return
            # Only a predecessor lost for good (trimmed from the stream) is ever skipped.
            if done == seq - 1 or waited > PREDECESSOR_PATIENCE * self.lease:
                lease = Lease(self.redis, lock_key, self.lock_ttl)
                await lease.acquire(poll=0.01)
                try:
                    done = int(await self.redis.get(done_key) or 0)
                    if done >= seq:
                        return
                    if done == seq - 1 or waited > PREDECESSOR_PATIENCE * self.lease:
                        if done != seq - 1:
                            log.warning("conversation %s: message %d never came; continuing at %d", conv, done + 1, seq)
                        await turn()
                        await self.redis.set(done_key, seq)
                        return
                finally:
                    await lease.release()  # whatever happened: a held lock must never outlive us
            await asyncio.sleep(pause)
            waited += pause
            pause = min(0.05, pause * 2)

    async def _ack(self, entry_id: str) -> None:
        with contextlib.suppress(Exception):
            await self.redis.xack(self.stream, GROUP, entry_id)


class PlatformLeader:
    """Holds one platform connection for the whole deployment: whoever holds the leader lock
    receives; when it dies, a standby takes over once the lock expires."""

    def __init__(self, platform: str, make_adapter: Callable[[], Any], store: RedisStore, ttl: float) -> None:
        self.platform = platform
        self._make_adapter = make_adapter
        self._redis = store.client
        self._key = store.key(f"leader:{platform}")
        self._ttl = ttl
        #: The receiving adapter while this process holds the connection (readiness reads it).
        self.adapter: Any = None

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            lease = Lease(self._redis, self._key, self._ttl)
            if not await lease.try_acquire():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self._ttl / 3)
                continue
            adapter = self._make_adapter()
            try:
                await adapter.start(inbound=True)
                self.adapter = adapter
                log.info("%s: this process now holds the platform connection (%s)", self.platform, adapter.mode or "receiving")
                stopped, lost = asyncio.create_task(stop.wait()), asyncio.create_task(lease.lost.wait())
                await asyncio.wait({stopped, lost}, return_when=asyncio.FIRST_COMPLETED)
                stopped.cancel()
                lost.cancel()
            except Exception:
                log.exception("%s: the platform connection failed; retrying", self.platform)
                await asyncio.sleep(1.0)
            finally:
                self.adapter = None
                with contextlib.suppress(Exception):
                    await adapter.stop()
                await lease.release()
