"""The order and pace of Bot API calls, and when a failed call may be made again.

Two rules shape this module:
- A chat's messages go out in order. Each chat has a FIFO lock; a 429 holds that chat's lock
  for its `retry_after` and then retries the same call, so later messages wait behind it
  while other chats carry on.
- A message that may have been delivered is never sent again. Only failures that prove the
  request did not reach Telegram (429, connection refused, pool exhausted) are retried for
  `sendMessage`; edits, deletes and reactions are idempotent and may be retried more freely.

Before any call, token buckets keep the bot inside Telegram's published limits (about 30
requests a second overall, 20 messages a minute into one group), so 429s stay rare.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from botweave.metrics import RATE_LIMIT_WAIT
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError, TimedOut

from .transport import never_sent

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ATTEMPTS = 6  # per call: 429s and provably-unsent failures
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 5.0
GLOBAL_LIMIT = (30, 1.0)  # requests per period (seconds), all chats together
GROUP_LIMIT = (20, 60.0)  # new messages per period into one group or channel


def retry_after_seconds(exc: RetryAfter) -> float:
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def surely_unsent(exc: TelegramError) -> bool:
    """True only when the request provably never reached Telegram's servers."""
    if isinstance(exc, RetryAfter):
        return True
    # a timeout or a network failure of the transport (transport.py), which says which of
    # its failures happen before a request leaves
    return isinstance(exc, NetworkError) and not isinstance(exc, BadRequest) and never_sent(exc.__cause__)


def transient(exc: TelegramError) -> bool:
    """Worth retrying for idempotent calls: timeouts and network/5xx failures."""
    return isinstance(exc, (TimedOut, RetryAfter)) or (
        isinstance(exc, NetworkError) and not isinstance(exc, (BadRequest, Forbidden))
    )


class ChatGate:
    """Per-chat FIFO ordering and 429 cool-downs.

    `asyncio.Lock` wakes waiters in arrival order, so holding a chat's lock across a
    `retry_after` wait keeps that chat's messages in the order they were requested.
    """

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}
        self._cool_until: dict[str, float] = {}

    def cooling(self, chat_id: str) -> bool:
        return self._cool_until.get(chat_id, 0.0) > time.monotonic()

    def cool(self, chat_id: str, seconds: float) -> None:
        self._cool_until[chat_id] = max(self._cool_until.get(chat_id, 0.0), time.monotonic() + seconds)

    async def wait_cool(self, chat_id: str) -> None:
        remaining = self._cool_until.get(chat_id, 0.0) - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)
        else:
            self._cool_until.pop(chat_id, None)

    async def run(self, chat_id: str, call: Callable[[], Awaitable[T]]) -> T:
        lock = self._locks.setdefault(chat_id, asyncio.Lock())
        self._users[chat_id] = self._users.get(chat_id, 0) + 1
        try:
            async with lock:
                return await call()
        finally:
            self._users[chat_id] -= 1
            if self._users[chat_id] == 0:  # forget idle chats so the maps stay small
                del self._users[chat_id]
                del self._locks[chat_id]


class Bucket:
    """A token bucket: bursts of up to `capacity`, refilled at `capacity` per `period` seconds."""

    def __init__(self, capacity: int, period: float) -> None:
        self.capacity = capacity
        self.period = period
        self._tokens = float(capacity)
        self._stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.capacity / self.period)
        self._stamp = now

    @property
    def idle(self) -> bool:
        self._refill()
        return self._tokens >= self.capacity

    async def take(self) -> None:
        while True:
            self._refill()
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) * self.period / self.capacity)


def is_group_chat(chat_id: str) -> bool:
    """Groups, supergroups and channels have negative ids; `@name` targets are channels."""
    return chat_id.startswith(("-", "@"))


class Pacer:
    """Runs Bot API calls under the chat gate, the rate buckets and the retry rules above."""

    def __init__(
        self,
        gate: ChatGate | None = None,
        *,
        global_limit: tuple[int, float] = GLOBAL_LIMIT,
        group_limit: tuple[int, float] = GROUP_LIMIT,
    ) -> None:
        self.gate = gate or ChatGate()
        self._global = Bucket(*global_limit)
        self._group_limit = group_limit
        self._groups: dict[str, Bucket] = {}

    def _group_bucket(self, chat_id: str) -> Bucket:
        bucket = self._groups.get(chat_id)
        if bucket is None:
            if len(self._groups) > 512:  # forget groups whose budget is full again
                self._groups = {k: b for k, b in self._groups.items() if not b.idle}
            bucket = self._groups[chat_id] = Bucket(*self._group_limit)
        return bucket

    async def call(
        self, chat_id: str, fn: Callable[[], Awaitable[T]], *, idempotent: bool, new_message: bool = False
    ) -> T:
        """Run `fn` for `chat_id` in order, retrying only where a retry cannot duplicate.

        `new_message` marks calls that post a message, which count against a group's budget.
        """
        return await self.gate.run(chat_id, lambda: self._attempts(chat_id, fn, idempotent, new_message))

    async def _attempts(self, chat_id: str, fn: Callable[[], Awaitable[T]], idempotent: bool, new_message: bool) -> T:
        attempt = 0
        while True:
            attempt += 1
            paced = time.monotonic()
            await self.gate.wait_cool(chat_id)
            if new_message and is_group_chat(chat_id):
                await self._group_bucket(chat_id).take()
            await self._global.take()
            waited = time.monotonic() - paced
            if waited > 0.001:
                RATE_LIMIT_WAIT.labels("telegram").inc(waited)
            try:
                return await fn()
            except RetryAfter as exc:
                if attempt >= MAX_ATTEMPTS:
                    raise
                seconds = retry_after_seconds(exc)
                log.info("telegram: rate limited in chat %s; retrying after %.1fs", chat_id, seconds)
                self.gate.cool(chat_id, seconds)
            except TelegramError as exc:
                retry = surely_unsent(exc) or (idempotent and transient(exc))
                if not retry or attempt >= MAX_ATTEMPTS:
                    raise
                delay = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
                log.info("telegram: transient error in chat %s (%s); retry in %.2fs", chat_id, exc, delay)
                await asyncio.sleep(delay)
