"""Cron schedules on APScheduler 3: room stand-ups and scheduled agents run on this.

An occurrence is either run (once) or recorded as missed, never run late, and never both.
APScheduler alone cannot guarantee that across restarts (its in-memory job store forgets
everything) nor even within one process (with `coalesce` it silently drops all but the newest
of a batch of overdue run times). So the scheduler keeps its own ledger in the store:
`<kind>:<name>:schedule:last` is the newest occurrence time already accounted for. Every time
we look at a job (at start, when APScheduler runs it, and when APScheduler reports a miss) we
walk the trigger's occurrences after that time up to now: those older than
`misfire_grace_seconds` are recorded as missed (`<kind>:<name>:missed`, a log warning and
`on_missed`), the newest one still within the grace runs, and the ledger moves to now.

On the very first start (no ledger yet) nothing is backfilled: the ledger starts at now.

Cron expressions are standard five-field crontab lines (or `@daily`-style nicknames), read
by croniter the way crontab(5) reads them: weekdays from Sunday = 0 (7 is Sunday too), and a
line that restricts both day of month and day of week fires when either matches. APScheduler
3's own crontab reading numbers weekdays from Monday, so `CrontabTrigger` hands croniter's
times to APScheduler instead.

This lives in the kernel because two features schedule (rooms, and the runtime's scheduled
agents) and features may not import each other.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.events import EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from botweave.store import Store
from botweave.tasks import TaskOwner
from croniter import CroniterBadDateError, croniter

log = logging.getLogger(__name__)

Run = Callable[[str, "datetime | None"], Awaitable[None]]
"""`run(job_name, scheduled_time)`: do the job; the time is None when run by hand."""
OnMissed = Callable[[str, datetime], Awaitable[None]]
"""`on_missed(job_name, scheduled_time)`: e.g. a `scheduled_task_failed` push notification."""
Clock = Callable[[], datetime]

MAX_OCCURRENCES = 10_000  # walking further back than this is pointless; older ones are summarised
MAX_MISSED_KEPT = 500

#: The fields of a crontab line, in order, as errors name them.
FIELDS = ("minute", "hour", "day of month", "month", "day of week")


class CrontabTrigger(BaseTrigger):
    """A crontab line as an APScheduler 3 trigger, read by croniter the way crontab(5) reads
    it: weekdays numbered from Sunday (0 and 7), day of month and day of week either
    matching when both are restricted, `@daily`-style nicknames. (APScheduler 3's own
    `CronTrigger.from_crontab` numbers weekdays from Monday and wants both days to match.)"""

    def __init__(self, expression: str, zone: ZoneInfo) -> None:
        self.expression = expression
        self.timezone = zone

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        """The first fire time at or after `now`, or right after `previous_fire_time` when
        that is earlier (how APScheduler learns which runs were missed); None if it never fires."""
        start = now if previous_fire_time is None else min(now, previous_fire_time + timedelta(microseconds=1))
        base = start.astimezone(self.timezone) - timedelta(microseconds=1)  # croniter answers strictly after
        try:
            return cast(datetime, croniter(self.expression, base).get_next(datetime))
        except CroniterBadDateError:
            return None

    def __str__(self) -> str:
        return f"cron[{self.expression}]"

    def __repr__(self) -> str:
        return f"<CrontabTrigger ({self.expression!r}, timezone={str(self.timezone)!r})>"


def cron_trigger(expr: str, timezone: str = "UTC") -> BaseTrigger:
    """The APScheduler trigger for a crontab line in `timezone`; ValueError when invalid."""
    try:
        tz = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {timezone!r}; use an IANA name such as Europe/Berlin") from None
    text = expr.strip()
    fields = text.split()
    if not text.startswith("@") and len(fields) != 5:
        raise ValueError(
            f"got {len(fields)} fields; a cron expression has 5: "
            "minute hour day-of-month month day-of-week, e.g. \"0 9 * * mon-fri\""
        )
    if not croniter.is_valid(text):
        raise ValueError(_what_is_wrong(fields))
    return CrontabTrigger(text, tz)


def _what_is_wrong(fields: Sequence[str]) -> str:
    """The first field croniter refuses on its own, named."""
    for index, (name, value) in enumerate(zip(FIELDS, fields)):
        alone = ["*"] * len(FIELDS)
        alone[index] = value
        if not croniter.is_valid(" ".join(alone)):
            return f"bad {name} {value!r}"
    return "not a crontab line (five fields, or a nickname such as @daily)"


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _occurrences(trigger: BaseTrigger, after: datetime, upto: datetime) -> tuple[list[datetime], bool]:
    """Fire times t with after < t <= upto (at most MAX_OCCURRENCES; the flag says if cut)."""
    found: list[datetime] = []
    previous: datetime | None = None
    cursor = after + timedelta(microseconds=1)
    while len(found) < MAX_OCCURRENCES:
        when = cast("datetime | None", trigger.get_next_fire_time(previous, cursor))
        if when is None or when > upto:
            return found, False
        if when > after:
            found.append(when)
        previous = when
        cursor = when + timedelta(microseconds=1)
    return found, True


@dataclass(frozen=True)
class Job:
    """One scheduled job: when it runs, and how late an occurrence may still run."""

    name: str
    trigger: BaseTrigger
    misfire_grace_seconds: float


class CronScheduler:
    """Runs jobs on their triggers with the ledger described in the module docstring.

    `kind` names the jobs in logs and store keys (`room`, `schedule`). `clock` is what "now"
    means for the ledger and must return an aware datetime.
    """

    kind = "job"

    def __init__(
        self,
        jobs: Iterable[Job],
        run: Run,
        store: Store,
        on_missed: OnMissed | None = None,
        clock: Clock = _utc_now,
    ) -> None:
        self.jobs = {job.name: job for job in jobs}
        self._run_job = run
        self.store = store
        self._on_missed = on_missed
        self._clock = clock
        self._locks = {name: asyncio.Lock() for name in self.jobs}
        self._scheduler: Any = None  # AsyncIOScheduler once started
        self._tasks = TaskOwner(f"{self.kind} schedule")

    @classmethod
    def last_key(cls, name: str) -> str:
        return f"{cls.kind}:{name}:schedule:last"

    @classmethod
    def missed_key(cls, name: str) -> str:
        return f"{cls.kind}:{name}:missed"

    @property
    def running(self) -> bool:
        return self._scheduler is not None and bool(self._scheduler.running)

    async def start(self, previous: CronScheduler | None = None) -> None:
        """Account for what happened while we were down, then hand the triggers to APScheduler.

        `previous` is the scheduler this one replaces (a reloaded configuration): a job it ran
        on the same trigger catches up as usual, but one that is new or whose timing changed
        starts its ledger now, so that the occurrences the new timing would have had before
        it existed are not recorded as missed."""
        for name, job in self.jobs.items():
            before = previous.jobs.get(name) if previous is not None else None
            if previous is not None and (before is None or repr(before.trigger) != repr(job.trigger)):
                await self.store.set(self.last_key(name), self._clock().isoformat())
            else:
                await self.catch_up(name)
        scheduler = AsyncIOScheduler(timezone=timezone.utc)
        scheduler.add_listener(self._job_missed, EVENT_JOB_MISSED)
        for name, job in self.jobs.items():
            scheduler.add_job(
                self._tick,
                trigger=job.trigger,
                args=[name],
                id=name,
                name=f"{self.kind} {name}",
                misfire_grace_time=max(1, int(job.misfire_grace_seconds)),
                coalesce=True,
                max_instances=1,
            )
        scheduler.start()
        self._scheduler = scheduler

    def halt(self) -> None:
        """Stop scheduling; runs already started go on (`stop` waits for them)."""
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        self._scheduler = None

    async def stop(self) -> None:
        """Stop scheduling and wait for runs and miss records in flight."""
        self.halt()
        await asyncio.sleep(0)  # AsyncIOScheduler shuts down on the loop's next turn
        await self.idle()

    def next_run(self, name: str) -> datetime | None:
        job = self.jobs.get(name)
        if job is None:
            return None
        scheduled = self._scheduler.get_job(name) if self._scheduler is not None else None
        if scheduled is not None:
            return cast("datetime | None", scheduled.next_run_time)
        return cast("datetime | None", job.trigger.get_next_fire_time(None, self._clock()))

    async def catch_up(self, name: str) -> None:
        """Account for what happened to `name` while nothing was watching (run at start)."""
        await self._account(name, self._clock(), fire_due=True, fallback=None)

    async def _tick(self, name: str) -> None:
        """APScheduler's job: the occurrence that woke us is due now (unless already counted)."""
        grace = timedelta(seconds=self.jobs[name].misfire_grace_seconds)
        await self._account(name, self._clock(), fire_due=True, fallback=grace)

    def _job_missed(self, event: JobExecutionEvent) -> None:
        """APScheduler decided a run time is too late; record it (and anything it coalesced)."""
        if event.job_id not in self.jobs:
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
            log.warning("%s %s: unreadable last-run time %r; starting afresh", self.kind, name, raw)
            return None

    async def _account(self, name: str, upto: datetime, *, fire_due: bool, fallback: timedelta | None) -> None:
        """Walk occurrences in (ledger, upto]; record the late ones, run the newest timely one.

        `fallback` is how far back to look when there is no ledger yet (None: start the ledger
        at `upto` and look at nothing, which is what a first start does).
        """
        job = self.jobs[name]
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
            occurrences, cut = _occurrences(job.trigger, last, upto)
            grace = timedelta(seconds=job.misfire_grace_seconds)
            due = [t for t in occurrences if fire_due and now - t <= grace]
            missed = [t for t in occurrences if t not in due]
            # Move the ledger first: a crash while running must not run again on restart.
            await self.store.set(self.last_key(name), upto.isoformat())
            if cut:
                log.warning("%s %s: more than %d occurrences since %s; recording the first ones",
                            self.kind, name, MAX_OCCURRENCES, last.isoformat())
            if missed:
                await self._record_missed(name, missed, now)
            if due:
                # Several overdue occurrences within the grace collapse into one run. It runs in
                # its own task: a run can take minutes and must not hold up start() or the ledger.
                self._spawn(self.run(name, due[-1]))

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(job, name="run")

    async def idle(self) -> None:
        """Wait until every run and miss record started so far has finished."""
        await self._tasks.drain()

    async def _record_missed(self, name: str, missed: Sequence[datetime], now: datetime) -> None:
        log.warning(
            "%s %s: %d scheduled run(s) missed (process down or busy longer than %ss): %s",
            self.kind, name, len(missed), self.jobs[name].misfire_grace_seconds,
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
            except Exception:  # boundary: the on_missed callback, the scheduler's user's code
                log.exception("%s %s: on_missed failed for %s", self.kind, name, when.isoformat())

    async def missed(self, name: str) -> list[datetime]:
        """The recorded missed occurrences of `name`, oldest first."""
        raw = await self.store.list_range(self.missed_key(name))
        return [datetime.fromisoformat(json.loads(item)["scheduled"]) for item in raw]

    async def run(self, name: str, when: datetime | None) -> None:
        """Run `name` once now; a failure is logged (the job itself reports it further)."""
        try:
            await self._run_job(name, when)
        except Exception:  # boundary: a scheduled job's own code; logged with its traceback
            log.exception("%s %s: the scheduled run failed", self.kind, name)
