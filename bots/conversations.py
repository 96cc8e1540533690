"""Conversations: what a message belongs to, and one turn at a time per conversation, many
conversations at once.

asyncio.Lock hands itself to waiters in arrival order, so messages of one conversation are
answered in the order they came; a lock exists only while someone holds or waits for it, so
a million one-off chats leave nothing behind. A `Place` is that order taken apart: the place
in line is taken at once, and waited for later, so an item's place is the moment it arrived
however long it then takes to record it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from botweave.tasks import spawn
from botweave.types import META_CONVERSATION, BotMessage


def direct_conversation(platform: str, user_id: str) -> str:
    """The key of a person's direct conversation on a platform. It names the person, not the
    chat: every post there (an answer, a welcome, an approval request) is found under it,
    whatever chat id the platform gives the direct chat."""
    return f"{platform}:dm:{user_id}"


def conversation_key(msg: BotMessage) -> str:
    """`platform:chat_id[:thread_id]`; a DM is keyed by its user so history follows the person.
    A platform whose chats are conversations of their own (web sessions) names the key itself."""
    named = msg.metadata.get(META_CONVERSATION)
    if named:
        return str(named)
    if msg.channel.channel_type == "dm":
        return direct_conversation(msg.platform, msg.sender.user_id)
    base = f"{msg.platform}:{msg.channel.channel_id}"
    return f"{base}:{msg.thread_id}" if msg.thread_id else base


class Place:
    """A place in one conversation's line, taken when `ConversationLocks.place` is called (no
    await before it), waited for with `wait`, and given up with `release` (exactly once, waited
    for or not: a place given up before its turn came leaves the line)."""

    __slots__ = ("_lock", "_taking", "_leave", "_released")

    def __init__(self, lock: asyncio.Lock, leave: Callable[[], None]) -> None:
        self._lock = lock
        # Tasks start in the order they were made, so the lock is asked for in the order the
        # places were taken, whatever the taker awaits meanwhile.
        self._taking = spawn(lock.acquire(), name="take a conversation's place")
        self._leave = leave
        self._released = False

    async def wait(self) -> None:
        """Until it is this place's turn (at once when it is already)."""
        await self._taking

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if not self._taking.done():
            self._taking.cancel()  # still in line: asyncio.Lock passes a cancelled turn on
        elif not self._taking.cancelled():
            self._lock.release()
        self._leave()


class ConversationLocks:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            self._leave(key, users)

    def place(self, key: str) -> Place:
        """Take a place in `key`'s line now; its turn comes after everyone's before it (those
        holding or waiting, and places taken earlier)."""
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        return Place(lock, lambda: self._leave(key, users))

    def _leave(self, key: str, users: list[int]) -> None:
        users[0] -= 1
        if users[0] == 0:
            del self._locks[key]
