"""The bot-loop guard (SPEC §5): two bots may talk, but not forever.

Each unordered pair of bots gets a budget of events per sliding window; exceeding it starts a
cooldown during which their messages are dropped before any agent runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


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


@dataclass
class BotLoopGuard:
    policy: BotLoopPolicy = field(default_factory=BotLoopPolicy)
    _events: dict[frozenset[str], list[float]] = field(default_factory=dict)
    _cooldown_until: dict[frozenset[str], float] = field(default_factory=dict)

    def observe(self, self_id: str, other_bot_id: str, now: float) -> bool:
        """Record one bot-to-bot event; False means drop it."""
        if not self.policy.enabled:
            return True
        pair = frozenset((self_id, other_bot_id))
        until = self._cooldown_until.get(pair)
        if until is not None:
            if now < until:
                return False
            del self._cooldown_until[pair]
            self._events.pop(pair, None)
        events = self._events.setdefault(pair, [])
        events.append(now)
        horizon = now - self.policy.window_seconds
        events[:] = [t for t in events if t >= horizon]
        if len(events) > self.policy.max_events_per_window:
            self._cooldown_until[pair] = now + self.policy.cooldown_seconds
            events.clear()
            return False
        return True

    def cooldown_left(self, self_id: str, other_bot_id: str, now: float) -> float:
        until = self._cooldown_until.get(frozenset((self_id, other_bot_id)))
        return max(0.0, until - now) if until is not None else 0.0
