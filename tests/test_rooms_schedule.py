"""Room stand-ups on APScheduler: firing, missed occurrences across restarts and in-process."""

import asyncio
import logging
import time
from datetime import datetime, timedelta, timezone

import pytest
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from botweave.rooms import Room, RoomConfig, RoomScheduler
from botweave.store import MemoryStore

UTC = timezone.utc


def standup(**overrides) -> RoomConfig:
    data = {
        "roster": ["planner", "critic"],
        "schedule": "0 9 * * *",
        "kickoff": "Stand-up: yesterday, today, blockers?",
        "target": "discord:42",
        **overrides,
    }
    return RoomConfig.from_dict("standup", data)


class Fired:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.event = asyncio.Event()

    async def __call__(self, room: str, target: str, kickoff: str) -> None:
        self.calls.append((room, target, kickoff))
        self.event.set()


class Missed:
    def __init__(self) -> None:
        self.calls: list[tuple[str, datetime]] = []

    async def __call__(self, room: str, when: datetime) -> None:
        self.calls.append((room, when))


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Member:
    def __init__(self, name: str) -> None:
        self.name = name

    async def complete(self, history, user_turn, turn=None):
        return f"{self.name}: all good"


async def test_a_short_trigger_fires_the_kickoff_into_the_target_conversation():
    store = MemoryStore()
    posted: list[tuple[str, str, str]] = []

    async def post(conversation: str, speaker: str, text: str) -> None:
        posted.append((conversation, speaker, text))

    config = standup()
    room = Room(config, {n: Member(n) for n in config.roster}, store, post)
    done = asyncio.Event()

    async def fire(name: str, target: str, kickoff: str) -> None:
        assert name == "standup"
        await room.kickoff(target, kickoff)
        done.set()

    scheduler = RoomScheduler(
        [config], fire, store, trigger_for=lambda room: CronTrigger(second="*", timezone=UTC)
    )
    await scheduler.start()
    try:
        await asyncio.wait_for(done.wait(), 3)
    finally:
        await scheduler.stop()
    assert posted[:2] == [("discord:42", "planner", "planner: all good"), ("discord:42", "critic", "critic: all good")]
    transcript = await room.load_transcript("discord:42")
    assert transcript[0].speaker == "schedule" and transcript[0].content == config.kickoff
    assert await store.get(RoomScheduler.last_key("standup")) is not None
    assert await scheduler.missed("standup") == []


async def test_downtime_longer_than_the_grace_records_misses_and_fires_nothing():
    store = MemoryStore()
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    await store.set(RoomScheduler.last_key("standup"), (now - timedelta(days=2, hours=4)).isoformat())
    fired, missed = Fired(), Missed()
    scheduler = RoomScheduler([standup()], fired, store, missed, clock=Clock(now))
    await scheduler.start()
    await scheduler.stop()
    expected = [datetime(2026, 11, d, 9, 0, tzinfo=UTC) for d in (28, 29, 30)]
    assert fired.calls == []
    assert await scheduler.missed("standup") == expected
    assert missed.calls == [("standup", t) for t in expected]
    assert await store.get(RoomScheduler.last_key("standup")) == now.isoformat()

    # A second restart does not record them again.
    again = RoomScheduler([standup()], fired, store, missed, clock=Clock(now + timedelta(minutes=1)))
    await again.start()
    await again.stop()
    assert len(await again.missed("standup")) == 3 and fired.calls == []


async def test_an_occurrence_still_within_the_grace_fires_once_and_older_ones_are_missed():
    store = MemoryStore()
    now = datetime(2026, 11, 30, 9, 4, tzinfo=UTC)  # 4 minutes late, grace 5 minutes
    await store.set(RoomScheduler.last_key("standup"), datetime(2026, 11, 28, 10, 0, tzinfo=UTC).isoformat())
    fired, missed = Fired(), Missed()
    scheduler = RoomScheduler([standup()], fired, store, missed, clock=Clock(now))
    await scheduler.start()
    await scheduler.stop()
    assert fired.calls == [("standup", "discord:42", "Stand-up: yesterday, today, blockers?")]
    assert await scheduler.missed("standup") == [datetime(2026, 11, 29, 9, 0, tzinfo=UTC)]


async def test_grace_and_time_zone_come_from_the_room():
    store = MemoryStore()
    room = standup(timezone="America/New_York", misfire_grace_seconds=30)
    now = datetime(2026, 11, 30, 14, 0, 45, tzinfo=UTC)  # 09:00:45 in New York: 45 s late
    await store.set(RoomScheduler.last_key("standup"), (now - timedelta(hours=1)).isoformat())
    fired = Fired()
    scheduler = RoomScheduler([room], fired, store, clock=Clock(now))
    await scheduler.start()
    await scheduler.stop()
    assert fired.calls == []
    (miss,) = await scheduler.missed("standup")
    assert miss == datetime(2026, 11, 30, 14, 0, tzinfo=UTC)


async def test_first_start_backfills_nothing():
    store = MemoryStore()
    now = datetime(2026, 11, 30, 9, 1, tzinfo=UTC)
    fired = Fired()
    scheduler = RoomScheduler([standup()], fired, store, clock=Clock(now))
    await scheduler.start()
    await scheduler.stop()
    assert fired.calls == [] and await scheduler.missed("standup") == []
    assert await store.get(RoomScheduler.last_key("standup")) == now.isoformat()


async def test_a_miss_reported_by_apscheduler_is_recorded_not_fired(caplog):
    """The process is alive but its loop is blocked past the grace: APScheduler's own misfire."""
    caplog.set_level(logging.INFO)
    store = MemoryStore()
    fired, missed = Fired(), Missed()
    at = datetime.now(UTC) + timedelta(milliseconds=300)
    scheduler = RoomScheduler(
        [standup(misfire_grace_seconds=1)], fired, store, missed,
        trigger_for=lambda room: DateTrigger(run_date=at, timezone=UTC),
    )
    await scheduler.start()
    try:
        time.sleep(1.6)  # block the event loop: the run time passes by more than the grace
        for _ in range(100):
            if missed.calls:
                break
            await asyncio.sleep(0.02)
        await scheduler.idle()
    finally:
        await scheduler.stop()
    assert "was missed by" in caplog.text  # APScheduler's EVENT_JOB_MISSED path, not our tick
    assert fired.calls == []
    assert missed.calls == [("standup", at)]
    assert await scheduler.missed("standup") == [at]


async def test_run_now_and_describe():
    store = MemoryStore()
    fired = Fired()
    plain = RoomConfig.from_dict("chat", {"roster": ["a"]})
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)  # Sunday
    weekdays = standup(schedule="30 8 * * 1-5", timezone="Europe/Berlin")
    scheduler = RoomScheduler([weekdays, plain], fired, store, clock=Clock(now))
    rows = scheduler.describe()
    assert [(r.room, r.schedule) for r in rows] == [("standup", "30 8 * * 1-5"), ("chat", None)]
    assert rows[0].next_run == datetime(2026, 11, 30, 7, 30, tzinfo=UTC)  # Monday 08:30 Berlin
    assert rows[1].next_run is None

    await scheduler.run_now("standup")
    await scheduler.run_now("chat", target="telegram:-100")
    assert fired.calls == [
        ("standup", "discord:42", "Stand-up: yesterday, today, blockers?"),
        ("chat", "telegram:-100", "Time for the chat stand-up: each of you, please give a short update."),
    ]
    with pytest.raises(ValueError, match="unknown room 'nope'"):
        await scheduler.run_now("nope")
    with pytest.raises(ValueError, match="room chat has no `target:`"):
        await scheduler.run_now("chat")

    await scheduler.start()
    try:
        (row, _) = scheduler.describe()
        assert row.next_run is not None and row.next_run.weekday() < 5
    finally:
        await scheduler.stop()


async def test_a_failing_kickoff_is_logged_not_raised(caplog):
    store = MemoryStore()
    now = datetime(2026, 11, 30, 9, 1, tzinfo=UTC)
    await store.set(RoomScheduler.last_key("standup"), (now - timedelta(minutes=5)).isoformat())

    async def fire(room: str, target: str, kickoff: str) -> None:
        raise RuntimeError("platform down")

    scheduler = RoomScheduler([standup()], fire, store, clock=Clock(now))
    await scheduler.start()
    await scheduler.stop()
    assert "kickoff into discord:42 failed" in caplog.text
