"""Admission: how many agent turns may run at once, and what happens to the rest.

A burst must not exhaust the LLM budget or let one busy server starve the others, so turns
take a slot (globally and per scope: a Telegram chat, a Discord guild, a Slack team). When
none is free, `overflow` decides: `reject` at once, `queue` up to `queue_depth` waiting
turns, or `shed_oldest` (queue, but when the queue is full drop its oldest turn for the new
one). The decision is a pure function; `Admission` only keeps the counts and the queue.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

from botweave.pipeline import Handler, Inbound, TurnOutcome, TurnStatus
from botweave.store import Store
from botweave.types import META_SCOPE

Overflow = Literal["reject", "queue", "shed_oldest"]
AdmissionAction = Literal["run", "wait", "reject", "shed_oldest"]


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    max_concurrent_turns: int = 0  # 0 = unlimited
    max_concurrent_turns_per_scope: int = 0  # 0 = no per-scope limit
    overflow: Overflow = "queue"
    queue_depth: int = 100

    @property
    def unlimited(self) -> bool:
        return self.max_concurrent_turns == 0 and self.max_concurrent_turns_per_scope == 0


def has_room(limits: AdmissionLimits, running_total: int, running_in_scope: int) -> bool:
    total_ok = limits.max_concurrent_turns == 0 or running_total < limits.max_concurrent_turns
    scope_ok = limits.max_concurrent_turns_per_scope == 0 or running_in_scope < limits.max_concurrent_turns_per_scope
    return total_ok and scope_ok


def decide_admission(limits: AdmissionLimits, running_total: int, running_in_scope: int, queued: int) -> AdmissionAction:
    if has_room(limits, running_total, running_in_scope):
        return "run"
    if limits.overflow == "reject":
        return "reject"
    if queued < limits.queue_depth:
        return "wait"
    return "shed_oldest" if limits.overflow == "shed_oldest" else "reject"


@dataclass(slots=True)
class _Waiter:
    scope: str
    admitted: asyncio.Future[bool]


@dataclass
class Admission:
    limits: AdmissionLimits = field(default_factory=AdmissionLimits)
    _running: Counter[str] = field(default_factory=Counter)
    _total: int = 0
    _waiters: deque[_Waiter] = field(default_factory=deque)

    @property
    def running(self) -> int:
        return self._total

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def _take(self, scope: str) -> None:
        self._total += 1
        self._running[scope] += 1

    async def acquire(self, scope: str) -> bool:
        """True once a slot is held; False when this turn was rejected or shed."""
        if self.limits.unlimited:
            self._take(scope)
            return True
        action = decide_admission(self.limits, self._total, self._running[scope], len(self._waiters))
        if action == "run":
            self._take(scope)
            return True
        if action == "reject":
            return False
        if action == "shed_oldest":
            self._waiters.popleft().admitted.set_result(False)
        waiter = _Waiter(scope, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            return await waiter.admitted
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.admitted.done() and not waiter.admitted.cancelled() and waiter.admitted.result():
                self.release(scope)
            raise

    def release(self, scope: str) -> None:
        self._total -= 1
        self._running[scope] -= 1
        if self._running[scope] <= 0:
            del self._running[scope]
        for waiter in list(self._waiters):  # oldest first; a waiter whose scope is full waits on
            if has_room(self.limits, self._total, self._running[waiter.scope]):
                self._waiters.remove(waiter)
                self._take(waiter.scope)
                waiter.admitted.set_result(True)

    @asynccontextmanager
    async def slot(self, scope: str) -> AsyncIterator[bool]:
        admitted = await self.acquire(scope)
        try:
            yield admitted
        finally:
            if admitted:
                self.release(scope)


class AdmissionStep:
    """The pipeline step: a turn runs only with a slot; a refused one gets at most one busy
    notice per chat per minute, however large the burst."""

    def __init__(self, admission: Admission, store: Store, busy_message: str) -> None:
        self._admission = admission
        self._store = store
        self._busy_message = busy_message

    async def __call__(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        msg = inbound.message
        scope = str(msg.metadata.get(META_SCOPE) or f"{msg.platform}:{msg.channel.channel_id}")
        async with self._admission.slot(scope) as admitted:
            if admitted:
                return await call_next(inbound)
        if await self._store.set_if_absent(f"busy:{msg.platform}:{msg.channel.channel_id}", "1", ttl=60):
            await inbound.reply.send_text(self._busy_message, purpose="notice")
        return TurnOutcome(TurnStatus.BUSY)
