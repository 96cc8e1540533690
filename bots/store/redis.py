"""The Redis store: state that survives restarts and is shared by every worker.

Each operation is one atomic Redis step (SET NX PX, a MULTI, or a small Lua script), so two
workers racing on one dedup key or loop-guard window cannot both win. Every key lives under
a prefix (`botweave:<deployment>:`) so deployments can share a server.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from botweave.store.base import CappedSet, Store, StoreUnavailable, redact_url

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


def _ms(ttl: float | None) -> int | None:
    return None if ttl is None else max(1, int(ttl * 1000))


class RedisStore(Store):
    def __init__(self, url: str, prefix: str = "botweave:default:") -> None:
        from redis.asyncio import BlockingConnectionPool, Redis
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
        self._redis: Any = Redis(connection_pool=pool)
        self._incr = self._redis.register_script(_INCR)
        self._window = self._redis.register_script(_WINDOW_ADD)
        self._capped = self._redis.register_script(_SET_IF_ABSENT_CAPPED)

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

    async def set_if_absent_capped(
        self, key: str, value: str, *, prefix: str, cap: int, ttl: float | None = None
    ) -> CappedSet:
        ttl_ms = _ms(ttl)
        index = self.prefix + "capped-index:" + prefix
        outcome = await self._capped(
            keys=[self._k(key), index], args=[value, cap, "" if ttl_ms is None else ttl_ms]
        )
        return "set" if outcome == "set" else "exists" if outcome == "exists" else "full"

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
