"""The bot-loop guard: two bots may talk, but not forever.

Each unordered pair of bots gets a budget of events per sliding window; exceeding it starts a
cooldown during which their messages are dropped before any agent runs.
"""

from __future__ import annotations

from botweave.config import BotLoopPolicy
from botweave.store import MemoryStore, Store

__all__ = ["BotLoopGuard", "BotLoopPolicy"]

# BotLoopPolicy, the guard's settings, is defined in the kernel's config module: it is the
# type of `BotConfig.bot_loop_protection`, and the kernel may not import this package. It is
# handed on from here because this is where the guard that reads it lives.


class BotLoopGuard:
    """Keeps its windows and cooldowns in the store, so every worker spends one shared budget
    per pair of bots."""

    def __init__(self, policy: BotLoopPolicy | None = None, store: Store | None = None) -> None:
        self.policy = policy or BotLoopPolicy()
        self._store = store if store is not None else MemoryStore()

    @staticmethod
    def _pair(self_id: str, other_bot_id: str) -> str:
        return ":".join(sorted((self_id, other_bot_id)))

    async def observe(self, self_id: str, other_bot_id: str, now: float) -> bool:
        """Record one bot-to-bot event; False means drop it."""
        if not self.policy.enabled:
            return True
        pair = self._pair(self_id, other_bot_id)
        cooldown_key, events_key = f"loop:cooldown:{pair}", f"loop:events:{pair}"
        until = await self._store.get(cooldown_key)
        if until is not None:
            if now < float(until):
                return False
            await self._store.delete(cooldown_key, events_key)
        count = await self._store.window_add(events_key, now, self.policy.window_seconds)
        if count > self.policy.max_events_per_window:
            # Kept a while past its end so the "cooldown over: forget the history" step runs.
            linger = 2 * self.policy.cooldown_seconds + self.policy.window_seconds
            await self._store.set(cooldown_key, repr(now + self.policy.cooldown_seconds), ttl=linger)
            await self._store.delete(events_key)
            return False
        return True

    async def cooldown_left(self, self_id: str, other_bot_id: str, now: float) -> float:
        until = await self._store.get(f"loop:cooldown:{self._pair(self_id, other_bot_id)}")
        return max(0.0, float(until) - now) if until is not None else 0.0
