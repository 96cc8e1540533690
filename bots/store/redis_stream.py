"""The inbound stream: the carrier of a Redis store, shared by every worker (Redis Streams).

The process holding a platform connection appends each item to a stream before
acknowledging it; workers read it through a consumer group and acknowledge an entry only
after its turn finished. Entries a dead worker left pending are claimed by another once idle
for `lease` seconds (XAUTOCLAIM); a live worker keeps the entries whose turns it has
*started* from looking idle (XCLAIM as a heartbeat every third of the lease). A worker reads
ahead only a few entries it cannot start yet, and an entry that could run but that nobody
started for a second (its reader died) is taken by another worker at once, without waiting
for the lease: so a dead worker holds up only the conversations whose turn it had started,
until their locks expire.

Order: each message gets a per-conversation sequence number when it is appended. A worker
runs message n of a conversation only while holding that conversation's lock (a `Lease`,
store/redis_lease.py) and after message n-1 is done, so any number of workers keep every
conversation in order. An item may run more than once (at least once); the turn's atomic
commit and the outbox (bots/delivery.py) keep its effects to once, as far as each platform
allows (docs/delivery.md).

Store outages are waited out (`Patience`); an entry whose turn met an outage longer than the
grace is left pending for a retry, never acknowledged unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Protocol

from botweave.conversations import conversation_key
from botweave.store.carrier import Connection, Handler, InboundCarrier, Received, decode, dedup_key, encode
from botweave.store.errors import outage_errors, passing_errors
from botweave.store.patience import Patience
from botweave.store.redis_lease import Lease, RedisLeader
from botweave.store.redis_lease import pause as _pause
from botweave.tasks import TaskOwner, spawn
from botweave.types import BotMessage
from redis.exceptions import RedisError, ResponseError

log = logging.getLogger(__name__)

GROUP = "workers"
PUBLISH_PATIENCE_S = 60.0  # how long an inbound item waits for Redis before the adapter hears of it
PREDECESSOR_PATIENCE = 20  # leases to wait for an earlier message of a conversation
#: How often a worker looks for entries a stopped worker left.
CLAIM_TICK_S = 1.0
#: Entries a worker reads beyond those it can start at once (waiting for their predecessor).
READ_AHEAD = 32
#: An entry waiting this long stops counting against the read-ahead: its conversation is held
#: up (a long turn, or a dead worker's), and the conversations behind it in the stream must
#: not be. A worker holds at most `MAX_HELD` entries in all.
STALE_WAIT_S = 2.0
MAX_HELD = 1024
#: After the store was away, or answered a read very late, a worker takes nothing over for
#: this long: every holder's heartbeat was held up too, and they must get to renew first.
QUIET_AFTER_OUTAGE_S = 5.0
#: A read that took this much longer than its block time means the store stood still.
SLOW_READ_S = 2.0
#: How often a waiting entry looks whether its predecessor is done: soon at first, then less
#: often the longer it waits (a predecessor finished in this process wakes it at once).
WAIT_POLL_S = (0.005, 0.25)
#: How long the blocking read waits for new entries; also how fast an idle worker sees a stop.
READ_BLOCK_MS = 300
#: A read entry whose turn could run (its predecessor is done, its conversation unlocked) but
#: that nobody started for this long belongs to a worker that stopped: another takes it.
RESCUE_IDLE_S = 1.0
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


class LeaseLost(RuntimeError):
    """The conversation lock was taken over while a turn ran; the turn stops, unacknowledged."""


class Keyspace(Protocol):
    """The part of the Redis store the stream uses: its client and its key names (the store
    hands itself over, and this module never imports it, so the store can hand out its
    carrier without a circle)."""

    @property
    def client(self) -> Any: ...

    def key(self, key: str) -> str: ...


class InboundStream(InboundCarrier):
    """The Redis store's carrier: one stream, read by every worker through a consumer group."""

    shared: ClassVar[bool] = True

    def __init__(
        self,
        store: Keyspace,
        *,
        lease: float = 10.0,
        lock_ttl: float = 10.0,
        concurrency: int = 64,
        read_ahead: int = READ_AHEAD,
        claim_tick: float = CLAIM_TICK_S,
        max_len: int = 100_000,
        consumer: str | None = None,
        patience: Patience | None = None,
        dedup_ttl: float = 24 * 3600,
    ) -> None:
        self.store = store
        #: How long `record` remembers an item, to recognise a platform's retry of it.
        self.dedup_ttl = dedup_ttl
        self.redis = store.client
        self.stream = store.key("inbound")
        self.lease = lease
        self.lock_ttl = lock_ttl
        self.read_ahead = read_ahead
        self.claim_tick = min(claim_tick, lease / 2)
        self.max_len = max_len
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        #: Turns started at once; a worker reads no further entry while this many run.
        self.concurrency = concurrency
        self._patience = patience or Patience()
        self._in_flight: set[str] = set()
        self._started: set[str] = set()  # in flight and past the wait for a predecessor
        self._waiting_since: dict[str, float] = {}  # entry -> when it began waiting
        self._turn_ended: dict[str, asyncio.Event] = {}  # conversation -> set when a turn of it ends here
        self._suspects: set[str] = set()  # others' entries seen runnable and not started last tick
        self._tasks: dict[str, asyncio.Task[None]] = {}  # entry id -> its turn, while it runs
        self._owner = TaskOwner("inbound stream")
        self._room = asyncio.Event()
        self._publish = self.redis.register_script(_PUBLISH)

    async def open(self) -> None:
        await self.ensure_group()

    async def ensure_group(self) -> None:
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def record(self, item: Received, *, ordered: bool = True) -> str | None:
        return await self.publish(item, dedup_key(item), self.dedup_ttl, ordered=ordered)

    async def publish(
        self, item: Received, dedup: str | None = None, dedup_ttl: float = 0, *, ordered: bool = True
    ) -> str | None:
        """Append before the platform is acknowledged; returns the entry id, or None when
        `dedup` was seen already (a platform retry). Checking and appending is one atomic
        step, so a crash between them can neither lose nor double an item. While Redis is
        away the item waits (the platform is not acknowledged yet) for up to a minute.
        A message that is not `ordered` (a /stop) runs at once, not after its conversation's
        earlier messages, like an event."""
        conv = conversation_key(item) if isinstance(item, BotMessage) and ordered else ""
        keys = [self.stream, self.store.key(f"conv:seq:{conv}"), self.store.key(dedup or "unused")]
        ttl_ms = str(int(dedup_ttl * 1000)) if dedup else ""
        args = [encode(item), conv, self.max_len, ttl_ms]
        entry = await self._patience.run(
            lambda: self._publish(keys=keys, args=args), passing_errors(), grace=PUBLISH_PATIENCE_S
        )
        return entry or None

    async def pending(self) -> list[tuple[str, Received]]:
        """Nothing: `run`, in whichever worker, takes over what a stopped one left."""
        return []

    async def done(self, entry: str) -> None:
        await self.redis.xack(self.stream, GROUP, entry)

    def leader(self, platform: str, make_adapter: Callable[[], Connection]) -> RedisLeader:
        """A leader lock that lives as long as a conversation's (`lock_ttl`) after its holder
        stops renewing it."""
        return RedisLeader(platform, make_adapter, self.redis, self.store.key(f"leader:{platform}"), self.lock_ttl, self._patience)

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

    async def run(self, handler: Handler, stop: asyncio.Event, drain: Callable[[], float] = lambda: 5.0) -> None:
        """Consume until `stop` is set. Then no new entry is read; turns already started get
        `drain()` seconds to finish, and whatever is left is handed back at once (marked idle,
        so another worker's next claim takes it) instead of waiting out its lease."""
        await self._patience.run(self.ensure_group, passing_errors(), grace=float("inf"))
        helpers = [
            self._owner.spawn(self._keep_claims(stop), name="keep claims"),
            self._owner.spawn(self._reclaim(handler, stop), name="reclaim"),
        ]
        try:
            while not stop.is_set():
                free = min(
                    self.concurrency - len(self._started),
                    self.read_ahead - self._fresh_waiting(),
                    MAX_HELD - len(self._in_flight),
                )
                if free <= 0:
                    self._room.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._room.wait(), timeout=0.05)
                    continue
                for entry_id, fields in await self._read(free, stop):
                    self._start(entry_id, fields, handler)
        finally:
            await asyncio.wait(helpers, timeout=2.0)
            for helper in helpers:
                helper.cancel()
            await self._wind_down(drain())

    async def _wind_down(self, drain: float) -> None:
        tasks = dict(self._tasks)  # entry id -> task; finished tasks leave self._tasks
        if not tasks:
            return
        running = {e: t for e, t in tasks.items() if e in self._started}
        waiting = {e: t for e, t in tasks.items() if e not in running}
        for task in waiting.values():  # not started: nothing to finish, hand them back now
            task.cancel()
        if running:
            await asyncio.wait(running.values(), timeout=drain)
        left = {e: t for e, t in running.items() if not t.done()}
        for task in left.values():
            task.cancel()
        if waiting or left:
            await asyncio.wait([*waiting.values(), *left.values()], timeout=1.0)
        unfinished = sorted({*waiting, *left})
        if unfinished:
            with contextlib.suppress(*outage_errors(), RedisError):
                await self.redis.xclaim(
                    self.stream, GROUP, self.consumer, min_idle_time=0, message_ids=unfinished,
                    idle=int(self.lease * 1000) * 10, justid=True,
                )
            log.info("handed %d unfinished inbound item(s) back to the other workers", len(unfinished))

    def _fresh_waiting(self) -> int:
        cutoff = asyncio.get_running_loop().time() - STALE_WAIT_S
        return sum(1 for since in self._waiting_since.values() if since > cutoff)

    def _start(self, entry_id: str, fields: dict[str, str], handler: Handler) -> None:
        self._in_flight.add(entry_id)
        task = self._owner.spawn(self._process(entry_id, fields, handler), name=f"entry {entry_id}")
        self._tasks[entry_id] = task
        task.add_done_callback(lambda _: self._finished(entry_id))

    def _finished(self, entry_id: str) -> None:
        self._tasks.pop(entry_id, None)
        self._in_flight.discard(entry_id)
        self._started.discard(entry_id)
        self._waiting_since.pop(entry_id, None)
        self._room.set()

    async def _read(self, count: int, stop: asyncio.Event) -> list[tuple[str, dict[str, str]]]:
        began = asyncio.get_running_loop().time()
        asked = self._patience.clock()
        try:
            read = await self.redis.xreadgroup(
                GROUP, self.consumer, {self.stream: ">"}, count=count, block=READ_BLOCK_MS
            )
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                log.warning("the inbound stream's consumer group is gone (Redis restarted empty?); creating it again")
                with contextlib.suppress(*outage_errors(), RedisError):
                    await self.ensure_group()
                return []
            raise
        except passing_errors() as exc:
            self._patience.failed(exc, began=asked)
            await _pause(stop, 0.5)
            return []
        self._patience.succeeded()
        if asyncio.get_running_loop().time() - began > READ_BLOCK_MS / 1000 + SLOW_READ_S:
            self._patience.stalled()
        return [entry for _, batch in read or [] for entry in batch]

    async def _reclaim(self, handler: Handler, stop: asyncio.Event) -> None:
        """Take over entries a stopped worker left. Runs whatever this worker's load: such an
        entry may be the predecessor that all our waiting turns need."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            await _pause(stop, self.claim_tick)
            if stop.is_set():
                return
            if self._patience.troubled_within(QUIET_AFTER_OUTAGE_S):
                continue  # the others' heartbeats were held up too: let them renew first
            began = loop.time()
            asked = self._patience.clock()
            abandoned: list[tuple[str, dict[str, str]]] = []
            expired: list[tuple[str, dict[str, str]]] = []
            try:
                abandoned = await self._rescue()
                expired = await self._expired()
            except passing_errors() as exc:
                self._patience.failed(exc, began=asked)
            except Exception as exc:  # boundary: the claim loop, a background loop that must outlive any one look
                log.warning("looking for abandoned inbound items failed (%s); retrying", exc)
            if loop.time() - began > SLOW_READ_S:
                # The store stood still while we looked: what seemed abandoned may only have
                # missed its heartbeats. Leave it; if it really is, the next looks find it.
                self._patience.stalled()
                continue
            if abandoned:
                log.warning("took over %d inbound item(s) that a stopped worker had read and not started", len(abandoned))
            if expired:
                log.warning("took over %d inbound item(s) left unacknowledged longer than the lease", len(expired))
            for entry_id, fields in abandoned + expired:
                if entry_id not in self._in_flight:
                    self._start(entry_id, fields, handler)

    async def _expired(self) -> list[tuple[str, dict[str, str]]]:
        """Entries nobody touched for a whole lease (their worker stopped mid-turn)."""
        start = "0-0"
        taken: list[tuple[str, dict[str, str]]] = []
        for _ in range(10):  # at most 1000 entries a tick
            claimed = await self.redis.xautoclaim(
                self.stream, GROUP, self.consumer, min_idle_time=int(self.lease * 1000), start_id=start, count=100
            )
            # A busy event loop can miss a heartbeat of our own: never take over what we run.
            taken += [e for e in claimed[1] if e[1] and e[0] not in self._in_flight]
            start = claimed[0]
            if start in ("0-0", b"0-0"):
                break
        return taken

    async def _rescue(self) -> list[tuple[str, dict[str, str]]]:
        """Claim entries other workers read but did not start although they could run: their
        predecessor is done and nobody holds their conversation. A live reader starts such an
        entry within a poll; one seen so on two looks a tick apart (and idle for at least
        `RESCUE_IDLE_S`) lost its reader."""
        idle_ms = int(RESCUE_IDLE_S * 1000)
        pending = await self.redis.xpending_range(self.stream, GROUP, "-", "+", 200, idle=idle_ms)
        candidates = [
            str(p["message_id"]) for p in pending
            if p["consumer"] != self.consumer and str(p["message_id"]) not in self._in_flight
        ]
        if not candidates:
            self._suspects.clear()
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry_id in candidates:
                pipe.xrange(self.stream, entry_id, entry_id)
            ranges = await pipe.execute()
        located = []
        for entry_id, found in zip(candidates, ranges):
            fields = found[0][1] if found else {}
            conv, seq = fields.get("conv", ""), int(fields.get("seq") or 0)
            if conv and seq:
                located.append((entry_id, conv, seq))
        if not located:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for _, conv, _ in located:
                pipe.get(self.store.key(f"conv:done:{conv}"))
                pipe.exists(self.store.key(f"lock:conv:{conv}"))
            states = await pipe.execute()
        runnable_now = {
            entry_id for (entry_id, _, seq), done, locked in zip(located, states[::2], states[1::2])
            if int(done or 0) == seq - 1 and not locked
        }
        runnable = sorted(runnable_now & self._suspects)
        self._suspects = runnable_now - set(runnable)
        if not runnable:
            return []
        claimed = await self.redis.xclaim(self.stream, GROUP, self.consumer, min_idle_time=idle_ms, message_ids=runnable)
        return [e for e in claimed if e[1] and e[0] not in self._in_flight]

    async def _keep_claims(self, stop: asyncio.Event) -> None:
        """Touch started entries so a long turn is not mistaken for a dead worker's. Entries
        still waiting for their predecessor are left alone: if this worker dies, they are
        free for others as soon as their lease runs out, whatever their wait."""
        while not stop.is_set():
            await _pause(stop, self.lease / 3)
            started = list(self._started)
            if not started:
                continue
            asked = self._patience.clock()
            try:
                await self.redis.xclaim(
                    self.stream, GROUP, self.consumer, min_idle_time=0, message_ids=started, justid=True
                )
            except passing_errors() as exc:
                self._patience.failed(exc, began=asked)
            except RedisError:
                log.debug("touching in-flight entries failed", exc_info=True)

    async def _process(self, entry_id: str, fields: dict[str, str], handler: Handler) -> None:
        seq = int(fields.get("seq") or 0)
        conv = fields.get("conv", "")
        try:
            item: Received | None = decode(fields["item"])
        except (KeyError, ValueError, TypeError):
            log.error("inbound entry %s is malformed; skipped", entry_id)
            item = None
        try:
            if item is not None:
                if seq:
                    await self._in_order(conv, seq, entry_id, lambda: self._run(handler, item, entry_id))
                else:
                    self._started.add(entry_id)
                    await self._run(handler, item, entry_id)
        except outage_errors() as exc:
            log.warning("inbound entry %s: the store stayed away (%s); left pending for a retry", entry_id, exc)
            return
        except LeaseLost:
            log.warning("inbound entry %s: its conversation was taken over; left to the new holder", entry_id)
            return
        with contextlib.suppress(*outage_errors(), RedisError):
            await self._patience.run(
                lambda: self.redis.xack(self.stream, GROUP, entry_id), passing_errors(), grace=PUBLISH_PATIENCE_S
            )

    @staticmethod
    async def _run(handler: Handler, item: Received, entry_id: str) -> None:
        try:
            await handler(item)
        except outage_errors():
            raise
        except Exception:  # boundary: a turn read from the stream
            log.exception("turn for inbound entry %s failed; acknowledged so it is not retried forever", entry_id)

    async def _get_done(self, done_key: str) -> int:
        raw = await self._patience.run(lambda: self.redis.get(done_key), passing_errors())
        return int(raw or 0)

    async def _in_order(
        self, conv: str, seq: int, entry_id: str, turn: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        """Run message `seq` of `conv` once message `seq - 1` is done, holding the lock."""
        done_key = self.store.key(f"conv:done:{conv}")
        lock_key = self.store.key(f"lock:conv:{conv}")
        loop = asyncio.get_running_loop()
        since = self._waiting_since.setdefault(entry_id, loop.time())
        pause = WAIT_POLL_S[0]
        try:
            while True:
                done = await self._get_done(done_key)
                if done >= seq:  # handled already (a worker died between finishing and acknowledging)
                    return
                waited = loop.time() - since
                # Only a predecessor lost for good (trimmed from the stream) is ever skipped.
                if done == seq - 1 or waited > PREDECESSOR_PATIENCE * self.lease:
                    lease = Lease(self.redis, lock_key, self.lock_ttl, self._patience)
                    await lease.acquire(poll=0.01)
                    try:
                        done = await self._get_done(done_key)
                        if done >= seq:
                            return
                        if done == seq - 1 or waited > PREDECESSOR_PATIENCE * self.lease:
                            if done != seq - 1:
                                log.warning("conversation %s: message %d never came; continuing at %d", conv, done + 1, seq)
                            self._waiting_since.pop(entry_id, None)
                            self._started.add(entry_id)
                            await self._guarded(turn, lease)
                            await self._patience.run(lambda: self.redis.set(done_key, seq), passing_errors())
                            return
                    finally:
                        await lease.release()  # whatever happened: a held lock must never outlive us
                ended = self._turn_ended.setdefault(conv, asyncio.Event())
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(ended.wait(), timeout=pause)
                pause = min(WAIT_POLL_S[1], pause * 2)
        finally:
            self._waiting_since.pop(entry_id, None)
            if conv in self._turn_ended:  # wake this conversation's next message here
                self._turn_ended.pop(conv).set()

    @staticmethod
    async def _guarded(turn: Callable[[], Coroutine[Any, Any, None]], lease: Lease) -> None:
        """Run the turn, stopping it if its conversation lock is lost meanwhile (this worker
        was cut off from Redis longer than the lock lives, and another took over)."""
        running = asyncio.create_task(turn())
        lost = spawn(lease.lost.wait(), name=f"watch lease {lease.key}")
        try:
            await asyncio.wait({running, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
            if not running.done():
                running.cancel()
                with contextlib.suppress(BaseException):  # boundary: a cancelled turn, reported by its own
                    await running
        if running.cancelled():
            raise LeaseLost(lease.key)
        running.result()
