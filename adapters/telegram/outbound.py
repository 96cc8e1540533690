"""Outbound Bot API calls: pacing, retries, and Telegram's errors as typed outcomes.

Three rules shape this module:
- A chat's messages go out in order. Each chat has a FIFO lock; a 429 holds that chat's lock
  for its `retry_after` and then retries the same call, so later messages wait behind it
  while other chats carry on.
- A message that may have been delivered is never sent again. Only failures that prove the
  request did not reach Telegram (429, connection refused, pool exhausted) are retried for
  `sendMessage`; edits, deletes and reactions are idempotent and may be retried more freely.
- Every failure is read by `TelegramOutbound.classify`; the adapter makes it a result.

Before any call, token buckets keep the bot inside Telegram's published limits (about 30
requests a second overall, 20 messages a minute into one group), so 429s stay rare. A group
that became a supergroup has a new id; calls follow it once and remember it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import httpx
from botweave.adapter import ActionError, Outbound, Outcome
from botweave.types import ActionStatus
from telegram import Bot, ReactionTypeCustomEmoji, ReactionTypeEmoji, ReplyParameters
from telegram.constants import ReactionEmoji
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from .format import Formatted, description

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_ATTEMPTS = 6  # per call: 429s and provably-unsent failures
BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 5.0
GLOBAL_LIMIT = (30, 1.0)  # requests per period (seconds), all chats together
GROUP_LIMIT = (20, 60.0)  # new messages per period into one group or channel
REACTION_EMOJI = {str(e.value) for e in ReactionEmoji}

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


class TelegramOutbound(Outbound):
    """sendMessage, editMessageText, deleteMessage, setMessageReaction and sendChatAction,
    each under the pacer and following migrated groups."""

    def __init__(self, bot: Bot, pacer: Pacer) -> None:
        self.bot = bot
        self.pacer = pacer
        self._migrated: dict[str, str] = {}

    def _target(self, chat_id: str) -> str:
        return self._migrated.get(chat_id, chat_id)

    async def _paced(
        self, chat_id: str, call: Callable[[str], Awaitable[T]], *, idempotent: bool, new_message: bool = False
    ) -> T:
        """`call` for the chat's current id, under the pacer; a group that became a supergroup
        is followed once and remembered."""
        target = self._target(chat_id)
        try:
            return await self.pacer.call(target, lambda: call(target), idempotent=idempotent, new_message=new_message)
        except ChatMigrated as exc:
            new_id = str(exc.new_chat_id)
            log.info("telegram: chat %s migrated to %s", chat_id, new_id)
            self._migrated[chat_id] = new_id
            return await self.pacer.call(new_id, lambda: call(new_id), idempotent=idempotent, new_message=new_message)

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str:
        """Post one chunk; rendered markdown first, plain text if Telegram rejects the entities."""
        formatted = Formatted(text, self.bot)
        reply_id = _as_int(reply_to)
        reply = ReplyParameters(message_id=reply_id, allow_sending_without_reply=True) if reply_id else None

        async def post(target: str) -> Any:
            return await formatted.apply(
                lambda body, entities: self.bot.send_message(
                    chat_id=_as_chat(target),
                    text=body,
                    entities=entities,
                    message_thread_id=_as_int(thread_id),
                    reply_parameters=reply,
                )
            )

        message = await self._paced(chat_id, post, idempotent=False, new_message=True)
        return str(message.message_id)

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        """Replace a message's text; 'not modified' counts as success (the text is there)."""
        number = _message_number(message_id, "edit")
        formatted = Formatted(text, self.bot)

        async def change(target: str) -> Any:
            return await formatted.apply(
                lambda body, entities: self.bot.edit_message_text(
                    chat_id=_as_chat(target), message_id=number, text=body, entities=entities
                )
            )

        await self._paced(chat_id, change, idempotent=True)

    async def delete(self, chat_id: str, message_id: str) -> None:
        number = _message_number(message_id, "delete")
        await self._paced(
            chat_id, lambda target: self.bot.delete_message(chat_id=_as_chat(target), message_id=number), idempotent=True
        )

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        """setMessageReaction; emoji outside Telegram's reaction set are `unsupported`."""
        reaction = _reaction(emoji)
        if reaction is None:
            raise ActionError("unsupported", f"react: Telegram does not allow {emoji!r} as a reaction")
        number = _message_number(message_id, "react")
        await self._paced(
            chat_id,
            lambda target: self.bot.set_message_reaction(
                chat_id=_as_chat(target), message_id=number, reaction=reaction
            ),
            idempotent=True,
        )

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        """Skipped while the chat is cooling down from a 429: no typing spam into it."""
        target = self._target(chat_id)
        if self.pacer.gate.cooling(target):
            return
        await self.bot.send_chat_action(chat_id=_as_chat(target), action="typing", message_thread_id=_as_int(thread_id))

    def classify(self, exc: Exception, action: str) -> Outcome:
        """Telegram's own message for each refusal, as the status it means."""
        if not isinstance(exc, TelegramError):
            return "failed", f"{action}: {type(exc).__name__}: {exc}"
        if isinstance(exc, ChatMigrated):
            return "no_route", f"{action}: chat migrated to {exc.new_chat_id}"
        if isinstance(exc, RetryAfter):
            return "failed", f"{action}: still rate limited ({exc.message})"
        if action == "edit" and not_modified(exc):
            return "ok", "edit: message is not modified"
        if action == "send" and transient(exc) and not surely_unsent(exc):
            return "failed", f"send: outcome unknown ({exc.message}); not resent to avoid a duplicate"
        return status_for(exc), f"{action}: {exc.message}"


def _as_chat(chat_id: str) -> int | str:
    """Numeric ids go out as ints; `@channelname` targets are passed through."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


def _as_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _message_number(message_id: str, action: str) -> int:
    number = _as_int(message_id)
    if number is None:
        raise ActionError("no_route", f"{action}: {message_id!r} is not a Telegram message id")
    return number


def _reaction(emoji: str) -> ReactionTypeEmoji | ReactionTypeCustomEmoji | None:
    """Telegram accepts only its fixed reaction set (and custom emoji by id)."""
    if emoji.startswith("custom:") and len(emoji) > len("custom:"):
        return ReactionTypeCustomEmoji(emoji[len("custom:"):])
    if emoji in REACTION_EMOJI:
        return ReactionTypeEmoji(emoji)
    bare = emoji.replace("\ufe0f", "")
    for allowed in REACTION_EMOJI:
        if allowed.replace("\ufe0f", "") == bare:
            return ReactionTypeEmoji(allowed)
    return None
