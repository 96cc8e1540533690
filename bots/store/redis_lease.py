"""Redis locks that outlive nobody: a lease renewed by a heartbeat while its holder lives, and
the platform leader that holds one.

A conversation lock keeps one turn per conversation across all workers (the stream,
store/redis_stream.py); a leader lock keeps one process per platform connection
(`RedisLeader`). Both expire `ttl` after their holder stops renewing them (a crash, a
`kill -9`), so a successor takes over within seconds, and both are released only by the
token that took them, so a late holder cannot free someone else's lock.

A heartbeat that meets a store outage keeps trying; the lock counts as lost only when the
store says it is someone else's. One that expired while the store stood still (every
holder's renewal was late) is simply taken again by its holder; workers hold back from
taking anything over for a while after an outage (store/redis_stream.py), so the holders get
there first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

from botweave.store.carrier import Connection
from botweave.store.errors import passing_errors
from botweave.store.patience import Patience
from botweave.tasks import spawn

log = logging.getLogger(__name__)

# Renew the lock if it is ours; take it again if it expired while nobody else took it (Redis
# stood still longer than the lock lives: every holder's renewal was late, not just ours).
_RENEW = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class Lease:
    def __init__(self, redis: Any, key: str, ttl: float, patience: Patience | None = None) -> None:
        self._redis = redis
        self.key = key
        self.ttl = ttl
        self.token = uuid.uuid4().hex
        self._patience = patience or Patience()
        self._heartbeat: asyncio.Task[None] | None = None
        self.lost = asyncio.Event()
        self._released = asyncio.Event()
        self._uncertain = False  # an attempt failed without an answer: it may have taken the lock

    async def try_acquire(self) -> bool:
        try:
            taken = bool(await self._redis.set(self.key, self.token, px=int(self.ttl * 1000), nx=True))
            if not taken and self._uncertain:
                # The earlier attempt may have landed with its answer lost: then it is ours.
                taken = await self._redis.get(self.key) == self.token
        except passing_errors():
            self._uncertain = True
            raise
        self._uncertain = False
        if taken:
            self._heartbeat = spawn(self._beat(), name=f"renew lock {self.key}")
        return taken

    async def acquire(self, poll: float = 0.05, timeout: float | None = None) -> bool:
        """Wait for the lock (store outages included); False only when `timeout` ran out."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            asked = self._patience.clock()
            try:
                if await self.try_acquire():
                    self._patience.succeeded()
                    return True
            except passing_errors() as exc:
                self._patience.failed(exc, began=asked)
                await asyncio.sleep(max(poll, 0.2))
            if deadline is not None and loop.time() >= deadline:
                return False
            await asyncio.sleep(poll)

    async def _beat(self) -> None:
        # Stopped by an event, not by cancellation: redis-py may turn a cancellation inside a
        # command into a TimeoutError, and a heartbeat that survived its own cancel would
        # keep renewing a lock nobody holds.
        from redis.exceptions import RedisError

        interval = self.ttl / 3
        while True:
            try:
                await asyncio.wait_for(self._released.wait(), timeout=interval)
                return
            except asyncio.TimeoutError:
                pass
            asked = self._patience.clock()
            try:
                renewed = await self._redis.eval(_RENEW, 1, self.key, self.token, int(self.ttl * 1000))
            except passing_errors() as exc:
                self._patience.failed(exc, began=asked)
                interval = min(self.ttl / 3, 0.5)  # try again soon; the lock is still ours
                continue
            except RedisError as exc:  # a refusal (a read-only replica, out of memory): still ours until the ttl
                log.warning("could not renew lock %s (%s); retrying", self.key, exc)
                continue
            self._patience.succeeded()
            interval = self.ttl / 3
            if renewed == 2:
                log.info("lock %s had expired while the store was away; taken again", self.key)
            if not renewed:
                log.error("lock %s was lost (expired or taken over)", self.key)
                self.lost.set()
                return

    async def release(self) -> None:
        from redis.exceptions import RedisError

        self._released.set()
        if self._heartbeat is not None:
            await asyncio.wait({self._heartbeat}, timeout=self.ttl)
            self._heartbeat = None
        # Through a short outage too: a lock left behind would hold its conversation up for
        # a whole ttl.
        with contextlib.suppress(RedisError, OSError):  # then it expires with its ttl
            await self._patience.run(
                lambda: self._redis.eval(_RELEASE, 1, self.key, self.token), passing_errors(), grace=self.ttl
            )


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep, but wake as soon as `stop` is set."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


class RedisLeader:
    """Holds one platform connection for the whole deployment: whoever holds the leader lock
    receives; when it dies, a standby takes over once the lock expires. A reload that changes
    the platform's connection settings `renew`s the leader: the connection it holds is given
    up and the lock taken again, by whichever process gets it first, on the new settings."""

    def __init__(
        self,
        platform: str,
        make_adapter: Callable[[], Connection],
        redis: Any,
        key: str,
        ttl: float,
        patience: Patience | None = None,
    ) -> None:
        self.platform = platform
        self._make_adapter: Callable[[], Connection] | None = make_adapter
        self._redis = redis
        self._key = key
        self._ttl = ttl
        #: The receiving adapter while this process holds the connection (readiness reads it).
        self.adapter: Any = None
        self._patience = patience or Patience()
        self._renewed = asyncio.Event()

    def renew(self, make_adapter: Callable[[], Connection] | None) -> None:
        """Connect with `make_adapter` from now on, or not at all (None: the platform was
        switched off, and `run` returns)."""
        self._make_adapter = make_adapter
        self._renewed.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and self._make_adapter is not None:
            self._renewed.clear()
            lease = Lease(self._redis, self._key, self._ttl, self._patience)
            asked = self._patience.clock()
            try:
                taken = await lease.try_acquire()
            except passing_errors() as exc:
                self._patience.failed(exc, began=asked)
                taken = False
            if not taken:
                await pause(stop, self._ttl / 3)
                continue
            adapter = self._make_adapter()
            try:
                await adapter.start(inbound=True)
                self.adapter = adapter
                log.info("%s: this process now holds the platform connection (%s)", self.platform, adapter.mode or "receiving")
                waits = {
                    spawn(stop.wait(), name=f"{self.platform} leader: wait for stop"),
                    spawn(lease.lost.wait(), name=f"{self.platform} leader: wait for a lost lease"),
                    spawn(self._renewed.wait(), name=f"{self.platform} leader: wait for new settings"),
                }
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for wait in waits:
                    wait.cancel()
            except Exception:  # boundary: a platform's connection, started again after a pause
                log.exception("%s: the platform connection failed; retrying", self.platform)
                await pause(stop, 1.0)
            finally:
                self.adapter = None
                with contextlib.suppress(Exception):  # boundary: a platform's stop, on the way out
                    await adapter.stop()
                await lease.release()
