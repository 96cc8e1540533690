"""Redis locks that outlive nobody: a lease renewed by a heartbeat while its holder lives.

A conversation lock keeps one turn per conversation across all workers; a leader lock keeps
one process per platform connection. Both expire `ttl` after their holder stops renewing
them (a crash, a `kill -9`), so a successor takes over within seconds, and both are released
only by the token that took them, so a late holder cannot free someone else's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from botweave.tasks import spawn

log = logging.getLogger(__name__)

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
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
    def __init__(self, redis: Any, key: str, ttl: float) -> None:
        self._redis = redis
        self.key = key
        self.ttl = ttl
        self.token = uuid.uuid4().hex
        self._heartbeat: asyncio.Task[None] | None = None
        self.lost = asyncio.Event()
        self._released = asyncio.Event()

    async def try_acquire(self) -> bool:
        taken = bool(await self._redis.set(self.key, self.token, px=int(self.ttl * 1000), nx=True))
        if taken:
            self._heartbeat = spawn(self._beat(), name=f"renew lock {self.key}")
        return taken

    async def acquire(self, poll: float = 0.05, timeout: float | None = None) -> bool:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not await self.try_acquire():
            if deadline is not None and loop.time() >= deadline:
                return False
            await asyncio.sleep(poll)
        return True

    async def _beat(self) -> None:
        # Stopped by an event, not by cancellation: redis-py may turn a cancellation inside a
        # command into a TimeoutError, and a heartbeat that survived its own cancel would
        # keep renewing a lock nobody holds.
        interval = self.ttl / 3
        while True:
            try:
                await asyncio.wait_for(self._released.wait(), timeout=interval)
                return
            except asyncio.TimeoutError:
                pass
            try:
                renewed = await self._redis.eval(_RENEW, 1, self.key, self.token, int(self.ttl * 1000))
            except Exception as exc:
                log.warning("could not renew lock %s (%s); retrying", self.key, exc)
                continue
            if not renewed:
                log.error("lock %s was lost (expired or taken over)", self.key)
                self.lost.set()
                return

    async def release(self) -> None:
        self._released.set()
        if self._heartbeat is not None:
            await asyncio.wait({self._heartbeat}, timeout=self.ttl)
            self._heartbeat = None
        with contextlib.suppress(Exception):
            await self._redis.eval(_RELEASE, 1, self.key, self.token)
