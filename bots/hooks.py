"""Hooks: user code that observes, rewrites or stops the pipeline.

Ordering is by priority (lower first; ties in registration order). Neighbouring hooks of the
same mode form a group: a sequential group runs one by one and may deny, a parallel group runs
concurrently and only observes. A hook that raises is logged and skipped, because a broken
plug-in must not take the bot down.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count, groupby
from typing import Any, Literal

from botweave.types import BotMessage

log = logging.getLogger(__name__)

HookMode = Literal["sequential", "parallel"]

HOOK_EVENTS = frozenset(
    {
        "message_received",
        "message_sending",
        "message_sent",
        "reaction_received",
        "message_edited",
        "message_deleted",
        "member_joined",
        "member_left",
        "thread_created",
        "button_pressed",
    }
)


@dataclass(slots=True)
class HookEvent:
    """What a hook sees. `message_received` hooks may replace `message`; `message_sending`
    hooks may replace `text`. Returning False (or calling `deny()`) stops the pipeline."""

    name: str
    payload: dict[str, Any] = field(default_factory=dict)
    message: BotMessage | None = None
    text: str | None = None
    denied: bool = False

    def deny(self) -> None:
        self.denied = True


@dataclass(frozen=True, slots=True)
class _Hook:
    fn: Callable[[HookEvent], Any]
    priority: int
    mode: HookMode
    order: int


class HookRegistry:
    """Functions called at points of a message's life (`message_received`, `message_sending`,
    `message_sent`, reactions, edits, presses); `app.hooks` is the bot's. Hooks run in
    priority order, lower first; one that raises is logged and the others still run."""

    def __init__(self) -> None:
        self._hooks: dict[str, list[_Hook]] = {}
        self._order = count()

    def register(
        self, event: str, fn: Callable[[HookEvent], Any], priority: int = 100, *, mode: HookMode = "sequential"
    ) -> None:
        if event not in HOOK_EVENTS:
            raise ValueError(f"unknown hook event {event!r}; one of {', '.join(sorted(HOOK_EVENTS))}")
        if mode not in ("sequential", "parallel"):
            raise ValueError(f"hook mode must be 'sequential' or 'parallel' (got {mode!r})")
        hooks = self._hooks.setdefault(event, [])
        hooks.append(_Hook(fn, priority, mode, next(self._order)))
        hooks.sort(key=lambda h: (h.priority, h.order))

    def has(self, event: str) -> bool:
        return bool(self._hooks.get(event))

    async def run(self, event: HookEvent) -> HookEvent:
        """Run every hook for `event.name`; `event.denied` tells the caller to stop."""
        for mode, group in groupby(self._hooks.get(event.name, ()), key=lambda h: h.mode):
            hooks = list(group)
            if mode == "parallel":
                await asyncio.gather(*(self._call(h, event) for h in hooks))
                continue
            for hook in hooks:
                if await self._call(hook, event) is False:
                    event.denied = True
                if event.denied:
                    return event
        return event

    async def _call(self, hook: _Hook, event: HookEvent) -> Any:
        try:
            result = hook.fn(event)
            if inspect.isawaitable(result):
                result = await result
            return result
        except Exception:  # boundary: a user's hook; the others still run
            log.exception("hook %s for %s failed; continuing", getattr(hook.fn, "__name__", hook.fn), event.name)
            return None
