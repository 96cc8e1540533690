"""The Redis store: state that survives restarts and is shared by every worker.

Each operation is one atomic Redis step (SET NX PX, a MULTI, or a small Lua script), so two
workers racing on one dedup key or loop-guard window cannot both win. Every key lives under
a prefix (`botweave:<deployment>:`) so deployments can share a server.

Timeouts are explicit: a command that gets no answer within `SOCKET_TIMEOUT_S` fails with
`StoreOutage` instead of hanging, and redis-py reconnects once on a broken connection and
otherwise leaves retrying to the caller, which knows whether waiting is worth it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from botweave.metrics import STORE_ERRORS
from botweave.store.base import (
    Append,
    CappedSet,
    LogEntry,
    LogFeed,
    LogSlice,
    Operation,
    Put,
    Store,
    redact_url,
)
from botweave.store.errors import StoreOutage, StoreUnavailable, passing_errors
from botweave.tasks import spawn

if TYPE_CHECKING:
    from botweave.store.carrier import InboundCarrier
    from botweave.store.patience import Patience

log = logging.getLogger(__name__)

#: How long one command may go unanswered before it counts as failed.
SOCKET_TIMEOUT_S = 5.0
SOCKET_CONNECT_TIMEOUT_S = 3.0
#: How long a batch of deferred writes is retried through an outage before it is dropped.
DEFERRED_GRACE_S = 60.0
#: How long closing waits for deferred writes still on their way.
DEFERRED_CLOSE_S = 5.0

_INCR = """
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
if tonumber(value) == tonumber(ARGV[1]) and tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return value
"""

# Adds ARGV[i] to KEYS[i]; a counter without an expiry gets ARGV[n + i] milliseconds (0: none).
_INCR_MANY = """
local n = #KEYS
for i = 1, n do
  redis.call('INCRBY', KEYS[i], ARGV[i])
  local ttl = tonumber(ARGV[n + i])
  if ttl > 0 and redis.call('PTTL', KEYS[i]) == -1 then
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
return n
"""

_WINDOW_ADD = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return redis.call('ZCARD', KEYS[1])
"""

# KEYS[1] the key, KEYS[2] the index of the keys this script put under the prefix (a set kept
# outside the prefix, living as long as its longest-lived member). The index is pruned of keys
# that were deleted or expired, then counted; the cap is small, so the loop is short.
_SET_IF_ABSENT_CAPPED = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 'exists'
end
local live = 0
for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if redis.call('EXISTS', member) == 1 then
    live = live + 1
  else
    redis.call('SREM', KEYS[2], member)
  end
end
if live >= tonumber(ARGV[2]) then
  return 'full'
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
local left = redis.call('PTTL', KEYS[2])
redis.call('SADD', KEYS[2], KEYS[1])
if ARGV[3] == '' then
  redis.call('PERSIST', KEYS[2])
elseif left ~= -1 and left < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 'set'
"""

# KEYS[1] the marker, KEYS[2..] one key per operation; ARGV: marker value, marker ttl (ms, 0
# for none), the operations as JSON ([kind, value(s), max_len or ttl]).
_COMMIT = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local ops = cjson.decode(ARGV[3])
for i, op in ipairs(ops) do
  local key = KEYS[i + 1]
  if op[1] == 'a' then
    if #op[2] > 0 then
      redis.call('RPUSH', key, unpack(op[2]))
    end
    if op[3] > 0 then
      redis.call('LTRIM', key, -op[3], -1)
    end
  elseif op[1] == 'p' then
    if op[3] > 0 then
      redis.call('SET', key, op[2], 'PX', op[3])
    else
      redis.call('SET', key, op[2])
    end
  else
    redis.call('DEL', key)
  end
end
if tonumber(ARGV[2]) > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
"""

# Slots are sorted-set members scored by their expiry in the server's clock, so workers whose
# clocks disagree still agree on when a crashed holder's slot comes back.
_SLOTS_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local limit = tonumber(ARGV[i + 2])
  if limit > 0 and not redis.call('ZSCORE', key, ARGV[1]) and redis.call('ZCARD', key) >= limit then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', key, ARGV[2])
end
return 1
"""

_SLOTS_HELD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""

# KEYS[1] the log (a list), KEYS[2] its head counter, KEYS[3] the append's unique key (when
# ARGV[3] is not ''); ARGV: the value, max_len, the unique key's ttl in ms ('' without one, 0
# for none), the feed's channel. The number, the append and the feed's message are one step,
# so the feed carries a log's entries in the order of their numbers.
_LOG_APPEND = """
if ARGV[3] ~= '' then
  local claimed
  if tonumber(ARGV[3]) > 0 then
    claimed = redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[3])
  else
    claimed = redis.call('SET', KEYS[3], '1', 'NX')
  end
  if not claimed then
    return 0
  end
end
local seq = redis.call('INCR', KEYS[2])
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('PUBLISH', ARGV[4], seq .. ':' .. ARGV[1])
return seq
"""

# The log's entries are numbered one after the other and trimmed from the front, so the list
# index of a seq is its distance from the oldest one held.
_LOG_READ = """
local head = tonumber(redis.call('GET', KEYS[2]) or '0')
local held = redis.call('LLEN', KEYS[1])
local first = head - held + 1
local start = tonumber(ARGV[1]) + 1 - first
if start < 0 then
  start = 0
end
local items = {}
local limit = tonumber(ARGV[2])
if limit > 0 and start < held then
  items = redis.call('LRANGE', KEYS[1], start, start + limit - 1)
end
return {head, first, start, items}
"""

#: How long the feed waits before subscribing again after its connection failed.
FEED_RETRY_S = 0.5

P = ParamSpec("P")
R = TypeVar("R")


def _ms(ttl: float | None) -> int | None:
    return None if ttl is None else max(1, int(ttl * 1000))


def _count_failure(exc: BaseException) -> None:
    """Count a failed Redis command as a store error, unless it is an answer the callers
    expect and handle (a script to load first, a consumer group that already exists)."""
    from redis.exceptions import NoScriptError, RedisError

    if isinstance(exc, NoScriptError) or "BUSYGROUP" in str(exc):
        return
    if isinstance(exc, (RedisError, OSError)):
        STORE_ERRORS.inc()


def _counting_client(pool: Any) -> Any:
    """A redis-py client whose failed commands (and pipelines) are counted, whoever sends
    them: this store, the inbound stream and the locks all talk through it."""
    from redis.asyncio import Redis
    from redis.asyncio.client import Pipeline

    class CountingPipeline(Pipeline):
        async def execute(self, raise_on_error: bool = True) -> Any:
            try:
                return await super().execute(raise_on_error)
            except Exception as exc:
                _count_failure(exc)
                raise

    class CountingRedis(Redis):
        async def execute_command(self, *args: Any, **options: Any) -> Any:
            try:
                return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
            except Exception as exc:
                _count_failure(exc)
                raise

        def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Any:
            return CountingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)

    return CountingRedis(connection_pool=pool)


def _outages(
    method: Callable[Concatenate[RedisStore, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[RedisStore, P], Coroutine[Any, Any, R]]:
    """Report a timeout or a lost connection as `StoreOutage`, the backend-neutral signal;
    and run after the deferred writes queued before the call (read-your-writes)."""

    @functools.wraps(method)
    async def call(store: RedisStore, *args: P.args, **kwargs: P.kwargs) -> R:
        if store._applied < store._queued:
            await store.settled()
        try:
            return await method(store, *args, **kwargs)
        except passing_errors() as exc:
            raise StoreOutage(f"redis: {type(exc).__name__}: {exc}") from exc

    return call


class RedisStore(Store):
    def __init__(self, url: str, prefix: str = "botweave:default:") -> None:
        from redis.asyncio import BlockingConnectionPool
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError

        self.prefix = prefix
        self._url = url
        # A bounded pool that waits for a free connection: a burst of turns must not open
        # hundreds of sockets at once. One quick reconnect covers a connection that went stale
        # (Redis restarted); anything longer is the caller's to wait out.
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=64,
            timeout=30,
            decode_responses=True,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
            retry_on_error=[RedisConnectionError],
            health_check_interval=15,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_CONNECT_TIMEOUT_S,
            socket_keepalive=True,
        )
        self._redis: Any = _counting_client(pool)
        self._incr = self._redis.register_script(_INCR)
        self._incr_many = self._redis.register_script(_INCR_MANY)
        self._window = self._redis.register_script(_WINDOW_ADD)
        self._capped = self._redis.register_script(_SET_IF_ABSENT_CAPPED)
        self._commit = self._redis.register_script(_COMMIT)
        self._acquire = self._redis.register_script(_SLOTS_ACQUIRE)
        self._held = self._redis.register_script(_SLOTS_HELD)
        self._log_append = self._redis.register_script(_LOG_APPEND)
        self._log_read = self._redis.register_script(_LOG_READ)
        # Writes handed to `later`: waiting to be sent, how many were ever queued, how many
        # have been sent (or given up on), and who waits for them.
        self._deferred: list[Operation] = []
        self._queued = 0
        self._applied = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._flusher: asyncio.Task[None] | None = None

    def _k(self, key: str) -> str:
        return self.prefix + key

    def key(self, key: str) -> str:
        """The full Redis key, for the stream and lock code that talks to Redis directly."""
        return self.prefix + key

    @property
    def client(self) -> Any:
        return self._redis

    def describe(self) -> str:
        return redact_url(self._url)

    @property
    def shared(self) -> bool:
        return True

    def inbound_carrier(
        self, *, dedup_ttl: float, lease: float, lock_ttl: float, patience: Patience | None = None, via: Store | None = None
    ) -> InboundCarrier:
        """The shared stream, which every worker reads; it talks to Redis directly (`via` is
        not needed: its own calls wait out outages with `patience`)."""
        from botweave.store.redis_stream import InboundStream

        return InboundStream(self, lease=lease, lock_ttl=lock_ttl, patience=patience, dedup_ttl=dedup_ttl)

    async def connect(self) -> None:
        from redis.exceptions import RedisError

        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"cannot reach the Redis store at {redact_url(self._url)}: {exc}") from None

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.settled(), DEFERRED_CLOSE_S)
        except asyncio.TimeoutError:
            log.warning("closing the Redis store with %d deferred write(s) unsent", self._queued - self._applied)
        await self._redis.aclose()

    def later(self, *operations: Operation) -> None:
        if not operations:
            return
        self._deferred.extend(operations)
        self._queued += len(operations)
        if self._flusher is None or self._flusher.done():
            self._flusher = spawn(self._flush(), name="send the Redis store's deferred writes")

    async def settled(self) -> None:
        target = self._queued
        while self._applied < target:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    async def _flush(self) -> None:
        """Send what was deferred, in order: what queued up while a batch was on its way goes
        in the next one, one pipeline (one round trip) each."""
        while self._deferred:
            batch, self._deferred = self._deferred, []
            try:
                await self._send_patiently(batch)
            finally:
                self._applied += len(batch)
                waiters, self._waiters = self._waiters, []
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)

    async def _send_patiently(self, batch: list[Operation]) -> None:
        """A batch that meets an outage is sent again with growing pauses (later calls wait
        for it, as they would wait out the outage themselves), for up to `DEFERRED_GRACE_S`."""
        from redis.exceptions import RedisError

        loop = asyncio.get_running_loop()
        started = loop.time()
        pause = 0.1
        while True:
            try:
                await self._send(batch)
                return
            except passing_errors() as exc:
                if loop.time() - started + pause > DEFERRED_GRACE_S:
                    failure: BaseException = exc
                    break
                await asyncio.sleep(pause)
                pause = min(2.0, pause * 2)
            except RedisError as exc:
                failure = exc
                break
        keys = ", ".join(op.key for op in batch[:5]) + (", ..." if len(batch) > 5 else "")
        log.warning("%d deferred write(s) to Redis failed and were dropped (%s): %s", len(batch), keys, failure)

    async def _send(self, batch: Sequence[Operation]) -> None:
        """One MULTI/EXEC: the batch lands whole and in order. A command Redis refuses (an
        append onto a plain value) fails alone, as an awaited one would, and is logged by
        key and error only (the command would carry the value)."""
        owners: list[Operation] = []  # the operation each command of the pipeline belongs to
        async with self._redis.pipeline(transaction=True) as pipe:
            for op in batch:
                key = self._k(op.key)
                if isinstance(op, Put):
                    pipe.set(key, op.value, px=_ms(op.ttl))
                    owners.append(op)
                elif isinstance(op, Append):
                    if op.values:
                        pipe.rpush(key, *op.values)
                        owners.append(op)
                    if op.max_len is not None:
                        pipe.ltrim(key, -op.max_len, -1)
                        owners.append(op)
                else:
                    pipe.delete(key)
                    owners.append(op)
            results = await pipe.execute(raise_on_error=False)
        for op, result in zip(owners, results, strict=False):
            if isinstance(result, Exception):
                reason = str(result.args[0]) if result.args else type(result).__name__
                log.warning("a deferred write to Redis failed and was dropped (%s): %s", op.key, reason)

    @_outages
    async def get(self, key: str) -> str | None:
        value: str | None = await self._redis.get(self._k(key))
        return value

    @_outages
    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        await self._redis.set(self._k(key), value, px=_ms(ttl))

    @_outages
    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        return bool(await self._redis.set(self._k(key), value, px=_ms(ttl), nx=True))

    @_outages
    async def set_if_absent_capped(
        self, key: str, value: str, *, prefix: str, cap: int, ttl: float | None = None
    ) -> CappedSet:
        ttl_ms = _ms(ttl)
        index = self.prefix + "capped-index:" + prefix
        outcome = await self._capped(
            keys=[self._k(key), index], args=[value, cap, "" if ttl_ms is None else ttl_ms]
        )
        return "set" if outcome == "set" else "exists" if outcome == "exists" else "full"

    @_outages
    async def delete(self, *keys: str) -> None:
        if keys:
            await self._redis.delete(*(self._k(k) for k in keys))

    @_outages
    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        return int(await self._incr(keys=[self._k(key)], args=[amount, _ms(ttl) or 0]))

    @_outages
    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        return list(await self._redis.mget([self._k(key) for key in keys]))

    @_outages
    async def incr_many(self, amounts: Mapping[str, tuple[int, float | None]]) -> None:
        if not amounts:
            return
        keys = [self._k(key) for key in amounts]
        args = [amount for amount, _ in amounts.values()] + [_ms(ttl) or 0 for _, ttl in amounts.values()]
        await self._incr_many(keys=keys, args=args)

    @_outages
    async def list_append(self, key: str, *values: str, max_len: int | None = None) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(self._k(key), *values)
            if max_len is not None:
                pipe.ltrim(self._k(key), -max_len, -1)
            await pipe.execute()

    @_outages
    async def list_range(self, key: str, start: int = 0, end: int = -1) -> list[str]:
        return list(await self._redis.lrange(self._k(key), start, end))

    @_outages
    async def window_add(self, key: str, now: float, window: float) -> int:
        member = f"{now!r}:{uuid.uuid4().hex[:8]}"  # equal timestamps are still separate events
        return int(await self._window(keys=[self._k(key)], args=[now, now - window, member, _ms(window) or 0]))

    @_outages
    async def keys(self, prefix: str) -> list[str]:
        found = []
        async for key in self._redis.scan_iter(match=self._k(prefix) + "*", count=500):
            found.append(key.removeprefix(self.prefix))
        return found

    @_outages
    async def commit(
        self, marker: str, operations: Sequence[Operation], *, value: str = "1", ttl: float | None = None
    ) -> bool:
        encoded: list[list[Any]] = []
        for op in operations:
            if isinstance(op, Append):
                encoded.append(["a", list(op.values), op.max_len or 0])
            elif isinstance(op, Put):
                encoded.append(["p", op.value, _ms(op.ttl) or 0])
            else:
                encoded.append(["d", "", 0])
        keys = [self._k(marker), *(self._k(op.key) for op in operations)]
        applied = await self._commit(keys=keys, args=[value, _ms(ttl) or 0, json.dumps(encoded)])
        return bool(applied)

    @_outages
    async def slots_acquire(self, claims: Sequence[tuple[str, int]], holder: str, ttl: float) -> bool:
        if not claims:
            return True
        keys = [self._k(key) for key, _ in claims]
        return bool(await self._acquire(keys=keys, args=[holder, _ms(ttl) or 1, *(limit for _, limit in claims)]))

    @_outages
    async def slots_release(self, keys: Sequence[str], holder: str) -> None:
        if keys:
            async with self._redis.pipeline(transaction=True) as pipe:
                for key in keys:
                    pipe.zrem(self._k(key), holder)
                await pipe.execute()

    @_outages
    async def slots_held(self, key: str) -> int:
        return int(await self._held(keys=[self._k(key)]))

    def _feed_channel(self, key: str) -> str:
        return f"{self.prefix}logfeed:{key}"

    @_outages
    async def log_append(
        self, key: str, value: str, *, max_len: int, unique: str | None = None, unique_ttl: float | None = None
    ) -> int:
        keys = [self._k(f"log:{key}"), self._k(f"loghead:{key}")]
        ttl = ""
        if unique is not None:
            keys.append(self._k(unique))
            ttl = str(_ms(unique_ttl) or 0)
        args = [value, max(max_len, 1), ttl, self._feed_channel(key)]
        return int(await self._log_append(keys=keys, args=args))

    @_outages
    async def log_read(self, key: str, *, after: int = 0, limit: int = 100) -> LogSlice:
        head, first, start, items = await self._log_read(
            keys=[self._k(f"log:{key}"), self._k(f"loghead:{key}")], args=[after, max(limit, 0)]
        )
        base = int(first) + int(start)
        return LogSlice(tuple((base + i, str(v)) for i, v in enumerate(items)), int(first), int(head))

    def log_feed(self, prefix: str) -> LogFeed:
        return _RedisLogFeed(self._redis, self._feed_channel(prefix), len(self._feed_channel("")))


class _RedisLogFeed(LogFeed):
    """Redis pub/sub on the appends' channels. A connection that fails is opened again (by
    redis-py itself, or here); what was published meanwhile is lost to the feed (pub/sub keeps
    nothing), so the feed reports a gap once it listens again, and its reader reads the logs."""

    def __init__(self, client: Any, channel_prefix: str, strip: int) -> None:
        self._client = client
        self._pattern = channel_prefix + "*"
        self._strip = strip
        self._pubsub: Any = None
        self._closed = False
        self._reconnected = False

    async def _subscribe(self) -> None:
        self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        await self._pubsub.psubscribe(self._pattern)
        # redis-py reconnects a broken subscription by itself and subscribes again; this
        # callback (kept by redis-py as a weak method) is how the feed hears of it.
        self._pubsub.connection.register_connect_callback(self._on_reconnect)

    def _on_reconnect(self, connection: Any) -> None:
        self._reconnected = True

    async def _drop(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            from redis.exceptions import RedisError

            try:
                await pubsub.aclose()
            except (RedisError, OSError) as exc:  # a connection that broke may not close cleanly
                log.debug("closing a broken log feed: %s", exc)

    async def __aiter__(self) -> AsyncIterator[LogEntry]:
        from redis.exceptions import RedisError

        broken = False
        while not self._closed:
            try:
                if self._pubsub is None:
                    await self._subscribe()
                    if broken:
                        broken = False
                        yield LogEntry(None)
                message = await self._pubsub.get_message(timeout=1.0)
                if self._reconnected:
                    self._reconnected = False
                    yield LogEntry(None)
            except (RedisError, OSError) as exc:
                if self._closed:
                    return
                if not broken:
                    log.warning("the log feed lost Redis (%s: %s); subscribing again", type(exc).__name__, exc)
                broken = True
                await self._drop()
                await asyncio.sleep(FEED_RETRY_S)
                continue
            if message is None or message.get("type") != "pmessage":
                continue
            seq, _, value = str(message["data"]).partition(":")
            if seq.isdigit():
                yield LogEntry(str(message["channel"])[self._strip :], int(seq), value)

    async def close(self) -> None:
        self._closed = True
        await self._drop()
