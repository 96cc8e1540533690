"""Admission: how many agent turns may run at once, and what happens to the rest.

A burst must not exhaust the LLM budget or let one busy server starve the others, so turns
take a slot (globally and per scope: a Telegram chat, a Discord guild, a Slack team). When
none is free, `overflow` decides: `reject` at once, `queue` up to `queue_depth` waiting
turns, or `shed_oldest` (queue, but when the queue is full drop its oldest turn for the new
one). The decision is a pure function; `Admission` only keeps the counts and the queue.

With several workers the limits are the deployment's, not each process's: given a shared
store (`slots`), a turn's slot is a record in it, taken in the global and the scope count
at once, renewed while the turn runs and expiring by itself if its worker dies. The queue
stays in each process (it holds that process's waiting turns); a waiting turn tries again
whenever a turn of this process ends, and every `SHARED_POLL_S` for the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from botweave.pipeline import Handler, Inbound, TurnOutcome, TurnStatus
from botweave.store import Store, store_failures
from botweave.tasks import spawn
from botweave.types import META_SCOPE

log = logging.getLogger(__name__)

#: A shared slot lives this long unless renewed; its holder renews it every third of that.
SLOT_TTL_S = 30.0
#: How often a turn waiting for a shared slot looks again.
SHARED_POLL_S = 0.2

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


#: Set in the task of a turn that a newer one pushed out of the full queue (its sender is
#: told so, rather than that we are busy).
_SHED: ContextVar[bool] = ContextVar("botweave_shed", default=False)


def _shed(waiter: _Waiter) -> None:
    waiter.admitted.set_result(False)


@dataclass
class Admission:
    limits: AdmissionLimits = field(default_factory=AdmissionLimits)
    #: A store shared by every worker: the limits then hold for all of them together.
    slots: Store | None = None
    _running: Counter[str] = field(default_factory=Counter)
    _total: int = 0
    _waiters: deque[_Waiter] = field(default_factory=deque)
    _released: asyncio.Event = field(default_factory=asyncio.Event)

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
            _shed(self._waiters.popleft())
        waiter = _Waiter(scope, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            admitted = await waiter.admitted
            _SHED.set(not admitted)
            return admitted
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

    # --- shared across workers ----------------------------------------------------------------

    def _claims(self, scope: str) -> list[tuple[str, int]]:
        claims = []
        if self.limits.max_concurrent_turns:
            claims.append(("admission:all", self.limits.max_concurrent_turns))
        if self.limits.max_concurrent_turns_per_scope:
            claims.append((f"admission:scope:{scope}", self.limits.max_concurrent_turns_per_scope))
        return claims

    async def _acquire_shared(self, store: Store, scope: str, holder: str) -> bool:
        claims = self._claims(scope)
        if await store.slots_acquire(claims, holder, SLOT_TTL_S):
            return True
        if self.limits.overflow == "reject":
            return False
        if len(self._waiters) >= self.limits.queue_depth:
            if self.limits.overflow != "shed_oldest":
                return False
            _shed(self._waiters.popleft())
        waiter = _Waiter(scope, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            while not waiter.admitted.done():
                self._released.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._released.wait(), timeout=SHARED_POLL_S)
                if waiter.admitted.done():
                    _SHED.set(True)
                    break  # shed while waiting
                if await store.slots_acquire(claims, holder, SLOT_TTL_S):
                    waiter.admitted.set_result(True)
            return waiter.admitted.result()
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    async def _renew(self, store: Store, scope: str, holder: str) -> None:
        claims = self._claims(scope)
        while True:
            await asyncio.sleep(SLOT_TTL_S / 3)
            try:
                await store.slots_acquire([(key, 0) for key, _ in claims], holder, SLOT_TTL_S)
            except store_failures() as exc:  # a missed renewal only risks the slot expiring
                log.debug("renewing admission slot failed: %s", exc)

    @asynccontextmanager
    async def _shared_slot(self, store: Store, scope: str) -> AsyncIterator[bool]:
        holder = uuid.uuid4().hex
        admitted = await self._acquire_shared(store, scope, holder)
        if not admitted:
            yield False
            return
        self._take(scope)
        renewal = spawn(self._renew(store, scope, holder), name=f"renew admission slot {scope}")
        try:
            yield True
        finally:
            renewal.cancel()
            self._total -= 1
            self._running[scope] -= 1
            if self._running[scope] <= 0:
                del self._running[scope]
            try:
                await store.slots_release([key for key, _ in self._claims(scope)], holder)
            finally:
                self._released.set()

    @asynccontextmanager
    async def slot(self, scope: str) -> AsyncIterator[bool]:
        if self.slots is not None and not self.limits.unlimited:
            async with self._shared_slot(self.slots, scope) as shared:
                yield shared
            return
        admitted = await self.acquire(scope)
        try:
            yield admitted
        finally:
            if admitted:
                self.release(scope)


#: Told to the sender of a waiting message that a newer one pushed out of a full queue.
DROPPED_MESSAGE = "Too many messages were waiting, so I dropped this one. Please send it again."


class AdmissionStep:
    """The pipeline step: a turn runs only with a slot. Nothing is dropped silently: the
    sender of a refused message gets the busy notice, the sender of one pushed out of a full
    queue is told it was dropped, each at most once a minute per person and chat, however
    large the burst (and once per message: the notice is keyed by it)."""

    @staticmethod
    def was_shed() -> bool:
        return _SHED.get()

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
        shed = self.was_shed()
        key = f"busy:{msg.platform}:{msg.channel.channel_id}:{msg.sender.user_id}:{'shed' if shed else 'busy'}"
        if await self._store.set_if_absent(key, "1", ttl=60):
            await inbound.reply.send_text(DROPPED_MESSAGE if shed else self._busy_message, purpose="notice")
        return TurnOutcome(TurnStatus.BUSY, detail="dropped from a full queue" if shed else "refused")
