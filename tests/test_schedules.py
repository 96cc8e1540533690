"""Scheduled agents end to end on Telegram (python-telegram-bot against the Bot API emulator):
a schedule fires on its trigger and the agent's answer is posted into a group; missed and
failed runs are recorded and the schedule's owner gets a DM."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from apscheduler.triggers.cron import CronTrigger
from botweave import App, ConfigError
from botweave.cron import Job
from botweave.runtime.scheduled_agents import AgentSchedules

from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)

ANN = TelegramEmulator.user(1, "Ann", "ann")
TEAM = -1001


def config(emu: TelegramEmulator, **schedule: Any) -> dict[str, Any]:
    return {
        "agents": {"reporter": {"model": "offline/echo"}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu)}},
        "schedules": {
            "digest": {
                "cron": "0 8 * * *", "agent": "reporter", "prompt": "Summarise the night.",
                "target": f"telegram:{TEAM}", "owner": "telegram:1", **schedule,
            }
        },
        "push": {"recipients": {"telegram:1": {"categories": ["scheduled_task_failed"], "detail": "detailed"}}},
    }


async def test_a_scheduled_agent_posts_into_a_group_on_its_trigger(telegram_emulator):
    emu = telegram_emulator
    emu.group(TEAM)
    app = App.from_config(config(emu))
    assert app.schedules is not None
    app.schedules.jobs["digest"] = Job("digest", CronTrigger(second="*", timezone=timezone.utc), 300)
    await app.start()
    try:
        await wait_until(lambda: emu.sent_texts(TEAM), timeout=10, what="the scheduled post")
        await app.schedules.stop()
    finally:
        await app.stop()
    first = emu.sent_texts(TEAM)[0]
    assert first == "reporter (offline echo) heard: [schedule digest] Summarise the night."
    assert "reply_to_message" not in emu.sent(TEAM)[0], "a scheduled post answers nobody's message"
    # The run is a turn of the group's conversation, so the agent remembers what it posted.
    history = await app.history.load(f"telegram:{TEAM}", 50)
    assert history[:2] == [
        {"role": "user", "content": "[schedule digest] Summarise the night."},
        {"role": "assistant", "content": first},
    ]
    assert emu.sent_texts(ANN["id"]) == [], "nothing went wrong, so the owner hears nothing"


async def test_missed_runs_are_recorded_and_the_owner_is_told(telegram_emulator):
    emu = telegram_emulator
    emu.group(TEAM)
    app = App.from_config(config(emu, cron="0 * * * *", misfire_grace_seconds=1))
    assert app.schedules is not None
    await app.store.set(
        AgentSchedules.last_key("digest"), (datetime.now(timezone.utc) - timedelta(hours=3)).isoformat()
    )
    await app.start()
    try:
        missed = await app.schedules.missed("digest")
        assert len(missed) >= 2
        await wait_until(lambda: len(emu.sent_texts(ANN["id"])) == len(missed), timeout=10, what="the owner's DMs")
    finally:
        await app.stop()
    assert emu.sent_texts(ANN["id"]) == [f"Schedule digest: the run due at {t.isoformat()} was missed" for t in missed]
    assert emu.sent_texts(TEAM) == [], "a missed run is never run late"


async def test_a_failed_run_is_recorded_and_the_owner_is_told(telegram_emulator):
    emu = telegram_emulator
    app = App.from_config(config(emu, target="discord:123"))
    assert app.schedules is not None
    await app.start()
    try:
        await asyncio.wait_for(app.schedules.run_now("digest"), 10)
        (failure,) = await app.schedules.failures("digest")
        await wait_until(lambda: emu.sent_texts(ANN["id"]), timeout=10, what="the owner's DM")
    finally:
        await app.stop()
    assert failure["detail"].startswith("target 'discord:123' does not resolve to a chat")
    (dm,) = emu.sent_texts(ANN["id"])
    assert dm.startswith(f"Schedule digest: the run for {failure['scheduled']} failed: target 'discord:123'")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"agent": "nobody"}, "schedules.digest.agent: unknown agent 'nobody'; defined agents: reporter"),
        ({"cron": "every morning"}, "schedules.digest: invalid cron expression 'every morning'"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"owner": "ann"}, "owner: must be <platform>:<user_id>"),
    ],
)
def test_schedule_mistakes_are_named(change: dict[str, Any], problem: str) -> None:
    emu = TelegramEmulator()
    with pytest.raises(ConfigError) as caught:
        App.from_config(config(emu, **change))
    assert problem in str(caught.value)
