"""The bot-loop guard (SPEC §5): two bots may talk, but not forever.

Each unordered pair of bots gets a budget of events per sliding window; exceeding it starts a
cooldown during which their messages are dropped before any agent runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from botweave.store import MemoryStore, Store


@dataclass(frozen=True, slots=True)
class BotLoopPolicy:
    enabled: bool = True
    max_events_per_window: int = 20
    window_seconds: float = 60.0
    cooldown_seconds: float = 60.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> BotLoopPolicy:
        """Tolerant on purpose: a typo in config must not crash the inbound path."""
        if not data:
            return cls()
        defaults = cls()
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = data.get(f.name, getattr(defaults, f.name))
            default = getattr(defaults, f.name)
            if f.name == "enabled":
                values[f.name] = raw if isinstance(raw, bool) else default
                continue
            try:
                number = float(raw)
            except (TypeError, ValueError):
                number = float(default)
            if number != number:  # NaN
                number = float(default)
            values[f.name] = number
        values["max_events_per_window"] = max(1, int(values["max_events_per_window"]))
        return cls(**values)


class BotLoopGuard:
    """Keeps its windows and cooldowns in the store, so every worker spends one shared budget
    per pair of bots (SPEC §5, §12)."""

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
