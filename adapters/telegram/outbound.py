"""Outbound calls to the Bot API: formatting, rate limits, retries and error mapping (SPEC §9).

Three rules shape this module:
- A chat's messages go out in order. Each chat has a FIFO lock; a 429 holds that chat's lock
  for its `retry_after` and then retries the same call, so later messages wait behind it
  while other chats carry on.
- A message that may have been delivered is never sent again. Only failures that prove the
  request did not reach Telegram (429, connection refused, pool exhausted) are retried for
  `sendMessage`; edits, deletes and reactions are idempotent and may be retried more freely.
- Every outcome becomes a `MessageActionResult`; Bot API errors never escape.

Before any call, token buckets keep the bot inside Telegram's published limits (about 30
requests a second overall, 20 messages a minute into one group), so 429s stay rare.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import httpx
import telegramify_markdown
from botweave.types import ActionStatus, MessageActionResult
from telegram import Bot, MessageEntity
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

TELEGRAM_MAX_UTF16 = 4096
MAX_ATTEMPTS = 6  # per call: 429s and provably-unsent failures
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 5.0
GLOBAL_LIMIT = (30, 1.0)  # requests per period (seconds), all chats together
GROUP_LIMIT = (20, 60.0)  # new messages per period into one group or channel

# Bot API descriptions (lower-cased fragments) and what they mean for the caller.
_NOT_FOUND = (
    "message to edit not found",
    "message to delete not found",
    "message to react not found",
    "message_id_invalid",
    "chat not found",
    "message thread not found",
    "topic_deleted",
    "topic not found",
)
_ENTITY_PROBLEMS = ("can't parse entities", "can't find end of", "entity", "entities")


def utf16_len(text: str) -> int:
    return telegramify_markdown.utf16_len(text)


@dataclass(frozen=True, slots=True)
class Rendered:
    """Plain text plus Telegram entities; `entities` is None when sending as plain text."""

    text: str
    entities: list[MessageEntity] | None


def render(markdown: str, bot: Bot) -> Rendered:
    """Model markdown → text + entities, so no MarkdownV2 escaping can ever break a reply.

    If conversion fails or the rendered text would not fit one message, the original text is
    sent unformatted: a readable reply beats a pretty one that Telegram refuses.
    """
    try:
        text, entities = telegramify_markdown.convert(markdown)
    except Exception:  # the converter is third-party; formatting is never worth a lost reply
        log.warning("telegram: markdown conversion failed; sending plain text", exc_info=True)
        return Rendered(markdown, None)
    if not text.strip() or utf16_len(text) > TELEGRAM_MAX_UTF16:
        return Rendered(markdown, None)
    native = [MessageEntity.de_json(entity.to_dict(), bot) for entity in entities]
    return Rendered(text, native or None)


class Formatted:
    """One outgoing text: rendered first, and plain for good once Telegram rejects the entities.

    The switch sticks, so a retry after a 429 does not try the rejected formatting again.
    """

    def __init__(self, markdown: str, bot: Bot) -> None:
        self.raw = markdown
        self.current = render(markdown, bot)

    async def apply(self, call: Callable[[str, list[MessageEntity] | None], Awaitable[T]]) -> T:
        current = self.current
        try:
            return await call(current.text, current.entities)
        except BadRequest as exc:
            if current.entities is None or not entity_problem(exc):
                raise
            log.warning("telegram: formatting rejected (%s); sending plain text", exc.message)
            self.current = Rendered(self.raw, None)  # a rejected request was not delivered
            return await call(self.raw, None)


def description(exc: TelegramError) -> str:
    return str(exc.message).lower()


def entity_problem(exc: TelegramError) -> bool:
    return isinstance(exc, BadRequest) and any(fragment in description(exc) for fragment in _ENTITY_PROBLEMS)


def status_for(exc: TelegramError) -> ActionStatus:
    """`no_route` when the target is gone or unknown, `failed` for any other refusal."""
    text = description(exc)
    if isinstance(exc, Forbidden):
        return "no_route" if "chat not found" in text else "failed"
    if isinstance(exc, BadRequest) and any(fragment in text for fragment in _NOT_FOUND):
        return "no_route"
    return "failed"


def not_modified(exc: TelegramError) -> bool:
    return isinstance(exc, BadRequest) and "message is not modified" in description(exc)


def retry_after_seconds(exc: RetryAfter) -> float:
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def surely_unsent(exc: TelegramError) -> bool:
    """True only when the request provably never reached Telegram's servers."""
    if isinstance(exc, RetryAfter):
        return True
    cause = exc.__cause__
    if isinstance(exc, TimedOut):
        return isinstance(cause, (httpx.PoolTimeout, httpx.ConnectTimeout))
    if isinstance(exc, NetworkError) and not isinstance(exc, BadRequest):
        return isinstance(cause, httpx.ConnectError)
    return False


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


class Outbound:
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
            await self.gate.wait_cool(chat_id)
            if new_message and is_group_chat(chat_id):
                await self._group_bucket(chat_id).take()
            await self._global.take()
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


def failure(exc: TelegramError, target: str, action: str) -> MessageActionResult:
    """Translate a Bot API error into the typed result; the message is Telegram's own."""
    if isinstance(exc, ChatMigrated):
        return MessageActionResult("no_route", target, f"{action}: chat migrated to {exc.new_chat_id}")
    if isinstance(exc, RetryAfter):
        return MessageActionResult("failed", target, f"{action}: still rate limited ({exc.message})")
    if not surely_unsent(exc) and action == "send" and transient(exc):
        return MessageActionResult(
            "failed", target, f"send: outcome unknown ({exc.message}); not resent to avoid a duplicate"
        )
    return MessageActionResult(status_for(exc), target, f"{action}: {exc.message}")
