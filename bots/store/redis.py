"""The Redis store: state that survives restarts and is shared by every worker.

Each operation is one atomic Redis step (SET NX PX, a MULTI, or a small Lua script), so two
workers racing on one dedup key or loop-guard window cannot both win. Every key lives under
a prefix (`botweave:<deployment>:`) so deployments can share a server.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from botweave.metrics import STORE_ERRORS
from botweave.store.base import Store, StoreUnavailable, redact_url

log = logging.getLogger(__name__)

_INCR = """
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
if tonumber(value) == tonumber(ARGV[1]) and tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return value
"""

_WINDOW_ADD = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return redis.call('ZCARD', KEYS[1])
"""


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


class RedisStore(Store):
    def __init__(self, url: str, prefix: str = "botweave:default:") -> None:
        from redis.asyncio import BlockingConnectionPool
        from redis.backoff import ExponentialBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError
        from redis.retry import Retry

        self.prefix = prefix
        self._url = url
        # A bounded pool that waits for a free connection: a burst of turns must not open
        # hundreds of sockets at once.
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=64,
            timeout=30,
            decode_responses=True,
            retry=Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=8),
            retry_on_error=[RedisConnectionError, RedisTimeoutError],
            health_check_interval=15,
            socket_connect_timeout=5.0,
        )
        self._redis: Any = _counting_client(pool)
        self._incr = self._redis.register_script(_INCR)
        self._window = self._redis.register_script(_WINDOW_ADD)

    def _k(self, key: str) -> str:
        return self.prefix + key

    def key(self, key: str) -> str:
        """The full Redis key, for the stream and lock code that talks to Redis directly."""
        return self.prefix + key

    @property
    def client(self) -> Any:
        return self._redis

    async def connect(self) -> None:
        from redis.exceptions import RedisError

        try:
            await self._redis.ping()
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(f"cannot reach the Redis store at {redact_url(self._url)}: {exc}") from None

    async def close(self) -> None:
        await self._redis.aclose()

    async def get(self, key: str) -> str | None:
        value: str | None = await self._redis.get(self._k(key))
        return value

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        await self._redis.set(self._k(key), value, px=_ms(ttl))

    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        return bool(await self._redis.set(self._k(key), value, px=_ms(ttl), nx=True))

    async def delete(self, *keys: str) -> None:
        if keys:
            await self._redis.delete(*(self._k(k) for k in keys))

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        return int(await self._incr(keys=[self._k(key)], args=[amount, _ms(ttl) or 0]))

    async def list_append(self, key: str, *values: str, max_len: int | None = None) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(self._k(key), *values)
            if max_len is not None:
                pipe.ltrim(self._k(key), -max_len, -1)
            await pipe.execute()

    async def list_range(self, key: str, start: int = 0, end: int = -1) -> list[str]:
        return list(await self._redis.lrange(self._k(key), start, end))

    async def window_add(self, key: str, now: float, window: float) -> int:
        member = f"{now!r}:{uuid.uuid4().hex[:8]}"  # equal timestamps are still separate events
        return int(await self._window(keys=[self._k(key)], args=[now, now - window, member, _ms(window) or 0]))

    async def keys(self, prefix: str) -> list[str]:
        found = []
        async for key in self._redis.scan_iter(match=self._k(prefix) + "*", count=500):
            found.append(key.removeprefix(self.prefix))
        return found
