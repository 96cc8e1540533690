"""Conversations: what a message belongs to, and one turn at a time per conversation, many
conversations at once.

asyncio.Lock hands itself to waiters in arrival order, so messages of one conversation are
answered in the order they came; a lock exists only while someone holds or waits for it, so
a million one-off chats leave nothing behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]
