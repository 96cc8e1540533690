"""Scheduled kickoffs for rooms on APScheduler 3.

An occurrence is either fired (once) or recorded as missed, never fired late, and never both.
APScheduler alone cannot guarantee that across restarts (its in-memory job store forgets
everything) nor even within one process (with `coalesce` it silently drops all but the newest
of a batch of overdue run times). So the scheduler keeps its own ledger in the store:
`room:<name>:schedule:last` is the newest occurrence time already accounted for. Every time we
look at a room (at start, when APScheduler runs the job, and when APScheduler reports a miss)
we walk the trigger's occurrences after that time up to now: those older than
`misfire_grace_seconds` are recorded as missed (`room:<name>:missed`, a log warning and
`on_missed`), the newest one still within the grace fires, and the ledger moves to now.

On the very first start (no ledger yet) nothing is backfilled: the ledger starts at now.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from apscheduler.events import EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from botweave.rooms.config import RoomConfig, cron_trigger
from botweave.store import Store
from botweave.tasks import TaskOwner

__all__ = ["Fire", "OnMissed", "RoomScheduler", "ScheduleInfo"]

log = logging.getLogger(__name__)

Fire = Callable[[str, str, str], Awaitable[None]]
"""`fire(room_name, target, kickoff)`: open an activity in the target conversation."""
OnMissed = Callable[[str, datetime], Awaitable[None]]
"""`on_missed(room_name, scheduled_time)`: e.g. a `scheduled_task_failed` push notification."""
Clock = Callable[[], datetime]

DEFAULT_KICKOFF = "Time for the {room} stand-up: each of you, please give a short update."
MAX_OCCURRENCES = 10_000  # walking further back than this is pointless; older ones are summarised
MAX_MISSED_KEPT = 500


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class ScheduleInfo(NamedTuple):
    """One row of `botweave room list`."""

    room: str
    schedule: str | None
    next_run: datetime | None


def _occurrences(trigger: BaseTrigger, after: datetime, upto: datetime) -> tuple[list[datetime], bool]:
    """Fire times t with after < t <= upto (at most MAX_OCCURRENCES; the flag says if cut)."""
    found: list[datetime] = []
    previous: datetime | None = None
    cursor = after + timedelta(microseconds=1)
    while len(found) < MAX_OCCURRENCES:
        when = trigger.get_next_fire_time(previous, cursor)
        if when is None or when > upto:
            return found, False
        if when > after:
            found.append(when)
        previous = when
        cursor = when + timedelta(microseconds=1)
    return found, True


class RoomScheduler:
    """Runs the `schedule:` of every room that has one; `run_now` and `describe` serve the CLI.

    `trigger_for` builds a room's trigger (the cron expression by default); tests inject a
    seconds-level trigger. `clock` is what "now" means for the ledger and must return an
    aware datetime.
    """

    def __init__(
        self,
        rooms: Iterable[RoomConfig],
        fire: Fire,
        store: Store,
        on_missed: OnMissed | None = None,
        clock: Clock = _utc_now,
        *,
        trigger_for: Callable[[RoomConfig], BaseTrigger] | None = None,
    ) -> None:
        self.rooms = {room.name: room for room in rooms}
        self._fire = fire
        self.store = store
        self._on_missed = on_missed
        self._clock = clock
        self._trigger_for = trigger_for or (lambda room: cron_trigger(room.schedule or "", room.timezone))
        self._triggers: dict[str, BaseTrigger] = {
            name: self._trigger_for(room) for name, room in self.rooms.items() if room.schedule is not None
        }
        self._locks = {name: asyncio.Lock() for name in self._triggers}
        self._scheduler: AsyncIOScheduler | None = None
        self._tasks = TaskOwner("room schedule")

    @staticmethod
    def last_key(room: str) -> str:
        return f"room:{room}:schedule:last"

    @staticmethod
    def missed_key(room: str) -> str:
        return f"room:{room}:missed"

    @property
    def running(self) -> bool:
        return self._scheduler is not None and self._scheduler.running

    async def start(self) -> None:
        """Account for what happened while we were down, then hand the triggers to APScheduler."""
        for name in self._triggers:
            await self.catch_up(name)
        scheduler = AsyncIOScheduler(timezone=timezone.utc)
        scheduler.add_listener(self._job_missed, EVENT_JOB_MISSED)
        for name, trigger in self._triggers.items():
            scheduler.add_job(
                self._tick,
                trigger=trigger,
                args=[name],
                id=name,
                name=f"room {name}",
                misfire_grace_time=max(1, int(self.rooms[name].misfire_grace_seconds)),
                coalesce=True,
                max_instances=1,
            )
        scheduler.start()
        self._scheduler = scheduler

    async def stop(self) -> None:
        """Stop scheduling and wait for in-flight kickoffs and miss records."""
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)
            await asyncio.sleep(0)  # AsyncIOScheduler shuts down on the loop's next turn
        self._scheduler = None
        await self.idle()

    async def catch_up(self, name: str) -> None:
        """Account for what happened to `name` while nothing was watching (run at start)."""
        await self._account(name, self._clock(), fire_due=True, fallback=None)

    async def _tick(self, name: str) -> None:
        """APScheduler's job: the occurrence that woke us is due now (unless already counted)."""
        grace = timedelta(seconds=self.rooms[name].misfire_grace_seconds)
        await self._account(name, self._clock(), fire_due=True, fallback=grace)

    def _job_missed(self, event: JobExecutionEvent) -> None:
        """APScheduler decided a run time is too late; record it (and anything it coalesced)."""
        if event.job_id not in self._triggers:
            return
        when = event.scheduled_run_time
        self._spawn(self._account(event.job_id, when, fire_due=False, fallback=timedelta(microseconds=1)))

    async def _last(self, name: str) -> datetime | None:
        raw = await self.store.get(self.last_key(name))
        if raw is None:
            return None
        try:
            return datetime.fromisoformat(raw)
        except ValueError:
            log.warning("room %s: unreadable last-run time %r; starting afresh", name, raw)
            return None

    async def _account(self, name: str, upto: datetime, *, fire_due: bool, fallback: timedelta | None) -> None:
        """Walk occurrences in (ledger, upto]; record the late ones, fire the newest timely one.

        `fallback` is how far back to look when there is no ledger yet (None: start the ledger
        at `upto` and look at nothing, which is what a first start does).
        """
        room = self.rooms[name]
        async with self._locks[name]:
            last = await self._last(name)
            if last is None:
                if fallback is None:
                    await self.store.set(self.last_key(name), upto.isoformat())
                    return
                last = upto - fallback
            if upto <= last:
                return
            now = self._clock()
            occurrences, cut = _occurrences(self._triggers[name], last, upto)
            grace = timedelta(seconds=room.misfire_grace_seconds)
            due = [t for t in occurrences if fire_due and now - t <= grace]
            missed = [t for t in occurrences if t not in due]
            # Move the ledger first: a crash while firing must not fire again on restart.
            await self.store.set(self.last_key(name), upto.isoformat())
            if cut:
                log.warning("room %s: more than %d occurrences since %s; recording the first ones",
                            name, MAX_OCCURRENCES, last.isoformat())
            if missed:
                await self._record_missed(name, missed, now)
            if due:
                # Several overdue occurrences within the grace collapse into one kickoff. It runs
                # in its own task: a room's drain can take minutes and must not hold up start()
                # or the ledger.
                self._spawn(self._run(name, room.target or "", room.kickoff or "", due[-1]))

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(job, name="kickoff")

    async def idle(self) -> None:
        """Wait until every kickoff and miss record started so far has finished."""
        await self._tasks.drain()

    async def _record_missed(self, name: str, missed: Sequence[datetime], now: datetime) -> None:
        log.warning(
            "room %s: %d scheduled kickoff(s) missed (process down or busy longer than %ss): %s",
            name, len(missed), self.rooms[name].misfire_grace_seconds,
            ", ".join(t.isoformat() for t in missed[:5]) + (" …" if len(missed) > 5 else ""),
        )
        await self.store.list_append(
            self.missed_key(name),
            *(json.dumps({"scheduled": t.isoformat(), "recorded": now.isoformat()}) for t in missed),
            max_len=MAX_MISSED_KEPT,
        )
        if self._on_missed is None:
            return
        for when in missed:
            try:
                await self._on_missed(name, when)
            except Exception:
                log.exception("room %s: on_missed failed for %s", name, when.isoformat())

    async def missed(self, name: str) -> list[datetime]:
        """The recorded missed occurrences of `name`, oldest first."""
        raw = await self.store.list_range(self.missed_key(name))
        return [datetime.fromisoformat(json.loads(item)["scheduled"]) for item in raw]

    async def _run(self, name: str, target: str, kickoff: str, when: datetime | None) -> None:
        text = kickoff or DEFAULT_KICKOFF.format(room=name)
        log.info("room %s: kickoff into %s%s", name, target, f" (scheduled {when.isoformat()})" if when else "")
        try:
            await self._fire(name, target, text)
        except Exception:
            log.exception("room %s: kickoff into %s failed", name, target)

    async def run_now(self, name: str, target: str | None = None) -> None:
        """Fire one kickoff now (`botweave room run NAME [--target T]`); the schedule is untouched.

        Raises ValueError for an unknown room or when neither `target` nor the room has one, and
        whatever made the kickoff fail: the person who asked for it is waiting for the answer.
        """
        room = self.rooms.get(name)
        if room is None:
            raise ValueError(f"unknown room {name!r}; rooms: {', '.join(sorted(self.rooms)) or '(none)'}")
        chosen = target or room.target
        if not chosen:
            raise ValueError(f"room {name} has no `target:`; pass one, e.g. --target discord:123456")
        log.info("room %s: kickoff into %s (run by hand)", name, chosen)
        await self._fire(name, chosen, room.kickoff or DEFAULT_KICKOFF.format(room=name))

    def describe(self) -> list[ScheduleInfo]:
        """Every room with its schedule and next run time (None when unscheduled)."""
        rows = []
        now = self._clock()
        for name, room in self.rooms.items():
            next_run: datetime | None = None
            if name in self._triggers:
                job = self._scheduler.get_job(name) if self._scheduler is not None else None
                next_run = job.next_run_time if job is not None else self._triggers[name].get_next_fire_time(None, now)
            rows.append(ScheduleInfo(name, room.schedule, next_run))
        return rows
