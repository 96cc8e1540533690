"""Scheduled kickoffs for rooms: each room with a `schedule:` is a job of the kernel's cron
scheduler (botweave.cron), which keeps the ledger that makes an occurrence either fire
once or be recorded as missed (`room:<name>:schedule:last`, `room:<name>:missed`), across
restarts too. This module adds what is particular to rooms: the kickoff text, the target
conversation, and `botweave room run` / `room list`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timezone
from typing import NamedTuple

from apscheduler.triggers.base import BaseTrigger
from botweave.cron import Clock, CronScheduler, Job, OnMissed, cron_trigger
from botweave.rooms.config import RoomConfig
from botweave.store import Store, store_failures

__all__ = ["Fire", "OnMissed", "RoomScheduler", "ScheduleInfo"]

log = logging.getLogger(__name__)

Fire = Callable[[str, str, str], Awaitable[None]]
"""`fire(room_name, target, kickoff)`: open an activity in the target conversation."""

DEFAULT_KICKOFF = "Time for the {room} stand-up: each of you, please give a short update."


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class ScheduleInfo(NamedTuple):
    """One row of `botweave room list`."""

    room: str
    schedule: str | None
    next_run: datetime | None


class RoomScheduler(CronScheduler):
    """Runs the `schedule:` of every room that has one; `run_now` and `describe` serve the CLI.

    `trigger_for` builds a room's trigger (the cron expression by default); tests inject a
    seconds-level trigger. `clock` is what "now" means for the ledger and must return an
    aware datetime.
    """

    kind = "room"

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
        build = trigger_for or (lambda room: cron_trigger(room.schedule or "", room.timezone))
        jobs = [
            Job(name, build(room), room.misfire_grace_seconds)
            for name, room in self.rooms.items()
            if room.schedule is not None
        ]
        super().__init__(jobs, self._scheduled, store, on_missed, clock)

    async def _scheduled(self, name: str, when: datetime | None) -> None:
        room = self.rooms[name]
        await self._run(name, room.target or "", room.kickoff or "", when)

    async def _run(self, name: str, target: str, kickoff: str, when: datetime | None) -> None:
        text = kickoff or DEFAULT_KICKOFF.format(room=name)
        log.info("room %s: kickoff into %s%s", name, target, f" (scheduled {when.isoformat()})" if when else "")
        try:
            await self._fire(name, target, text)
        except store_failures(RuntimeError):  # the hub's own signals (no chat, nothing delivered) and the store's
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
        return [ScheduleInfo(name, room.schedule, self.next_run(name)) for name, room in self.rooms.items()]
