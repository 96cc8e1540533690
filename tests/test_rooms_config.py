"""RoomConfig: accepted forms, precise errors, crontab semantics."""

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from botweave.config import ConfigError, format_errors
from botweave.rooms import RoomConfig, cron_trigger
from pydantic import ValidationError

STANDUP = {
    "roster": ["planner", "researcher", "critic"],
    "schedule": "0 9 * * 1-5",
    "timezone": "Europe/Berlin",
    "kickoff": "Stand-up: what did you do, what's next?",
    "target": "discord:123",
}


def test_defaults():
    room = RoomConfig.from_dict("team", {"roster": ["a", "b"]})
    assert room.roster == ("a", "b")
    assert (room.planner, room.max_rounds, room.max_messages) == ("round_robin", 3, 20)
    assert (room.instructions, room.schedule, room.timezone, room.kickoff, room.target) == (None, None, "UTC", None, None)
    assert room.misfire_grace_seconds == 300


def test_empty_planner_or_zone_means_the_default():
    room = RoomConfig.from_dict("team", {"roster": ["a"], "planner": None, "timezone": None})
    assert (room.planner, room.timezone) == ("round_robin", "UTC")


def test_a_built_room_validates_as_itself():
    room = RoomConfig(name="team", roster=("a",))
    assert RoomConfig.model_validate(room) is room


def test_agents_is_an_alias_of_roster():
    assert RoomConfig.from_dict("team", {"agents": ["a", "b"]}) == RoomConfig(name="team", roster=("a", "b"))


def test_full_standup():
    room = RoomConfig.from_dict("standup", {**STANDUP, "max_rounds": 2, "max_messages": 9, "instructions": "Be brief."})
    assert room.schedule == "0 9 * * 1-5" and room.timezone == "Europe/Berlin"
    assert room.max_rounds == 2 and room.instructions == "Be brief."


ERRORS = [
    ("", {"roster": ["a"]}, "rooms: a room needs a non-empty name"),
    ("  ", {"roster": ["a"]}, "rooms: a room needs a non-empty name"),
    (
        "standup",
        {"roster": "planner, researcher"},
        "rooms.standup.roster: must be a list of agent names, e.g. roster: [planner, researcher]",
    ),
    (
        "standup",
        {"agents": "planner critic"},
        "rooms.standup.agents: must be a list of agent names, e.g. agents: [planner, critic]",
    ),
    (
        "standup",
        {"roster": {"planner": {}, "critic": {}}},
        "rooms.standup.roster: must be a list of agent names, e.g. roster: [planner, critic]",
    ),
    ("standup", {}, "rooms.standup.roster: required, e.g. roster: [planner, researcher]"),
    ("standup", {"roster": ["a"], "agents": ["a"]}, "rooms.standup: give either `roster:` or `agents:`"),
    ("standup", {"roster": ["a", ""]}, "rooms.standup.roster.1: must be an agent name"),
    ("standup", {"roster": ["a", "b", "a"]}, "rooms.standup.roster: lists a more than once"),
    ("standup", {"roster": ["a"], "max_rounds": 0}, "rooms.standup.max_rounds: must be at least 1 (got 0)"),
    ("standup", {"roster": ["a"], "max_messages": -3}, "rooms.standup.max_messages: must be at least 1 (got -3)"),
    ("standup", {"roster": ["a"], "max_rounds": "3"}, "rooms.standup.max_rounds: must be a whole number"),
    ("standup", {"roster": ["a"], "max_rounds": True}, "rooms.standup.max_rounds: must be a whole number"),
    ("standup", {"roster": ["a"], "planner": "llm"}, "rooms.standup.planner: unknown planner 'llm'; known: round_robin"),
    (
        "standup",
        {"roster": ["a"], "colour": "red"},
        "rooms.standup.colour: unknown key; allowed keys: roster, agents, planner, max_rounds",
    ),
    ("standup", {"roster": ["a"], "name": "standup"}, "rooms.standup.name: a room is named by its key; remove `name:`"),
    ("standup", {"agents": None}, "rooms.standup.agents: required, e.g. agents: [planner, researcher]"),
    ("standup", {"roster": [1]}, "rooms.standup.roster.0: must be text (got 1)"),
    ("standup", {"roster": ["a"], "planner": 3}, "rooms.standup.planner: must be text (got 3)"),
    ("standup", {**STANDUP, "target": "123"}, "rooms.standup.target: must be written <platform>:<id>, e.g. discord:"),
    ("standup", {"roster": ["a"], "owner": "boss"}, "rooms.standup.owner: must be written <platform>:<id>, e.g. telegram:"),
    ("standup", {**STANDUP, "misfire_grace_seconds": "soon"}, "rooms.standup.misfire_grace_seconds: must be a number (got 'soon')"),
    ("standup", {**STANDUP, "timezone": "Mars/Base"}, "rooms.standup.timezone: unknown time zone 'Mars/Base'"),
    ("standup", {**STANDUP, "schedule": "every morning"}, "rooms.standup.schedule: invalid cron expression"),
    ("standup", {**STANDUP, "schedule": "0 9 * *"}, "a cron expression has 5"),
    ("standup", {**STANDUP, "schedule": "61 9 * * *"}, "rooms.standup.schedule: invalid cron expression"),
    ("standup", {**STANDUP, "schedule": "0 9 * * 8"}, "bad day of week '8'"),
    ("standup", {**STANDUP, "kickoff": None}, "rooms.standup: a schedule needs `kickoff:`"),
    ("standup", {**STANDUP, "target": ""}, "rooms.standup: a schedule needs `target:`"),
    ("standup", {"roster": ["a"], "schedule": "0 9 * * *"}, "a schedule needs `kickoff:` and `target:`"),
    ("standup", {**STANDUP, "misfire_grace_seconds": 0}, "rooms.standup.misfire_grace_seconds: must be a number of seconds > 0"),
    ("standup", ["a", "b"], "rooms.standup: must be a mapping"),
]


@pytest.mark.parametrize(("name", "data", "message"), ERRORS)
def test_errors_name_the_field_and_the_fix(name, data, message):
    with pytest.raises(ValueError) as info:
        RoomConfig.from_dict(name, data)
    assert message in str(info.value)


def test_every_problem_of_a_room_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        RoomConfig.from_dict("standup", {"max_rounds": 0, "planner": "llm", "schedule": "soon"})
    assert [line.split(":")[0] for line in info.value.problems] == [
        "rooms.standup.roster",
        "rooms.standup.planner",
        "rooms.standup.max_rounds",
        "rooms.standup.schedule",
    ]


def test_an_unset_variable_reads_as_a_missing_value():
    with pytest.raises(ConfigError, match="a schedule needs `target:`"):
        RoomConfig.from_dict("standup", {**STANDUP, "target": ""})


def test_constructor_validates_too():
    with pytest.raises(ValidationError) as info:
        RoomConfig(name="x", roster=("a",), max_rounds=0)
    assert format_errors(info.value, RoomConfig) == ["max_rounds: must be at least 1 (got 0)"]
    with pytest.raises(ValidationError) as info:
        RoomConfig(name="x", roster="a")  # type: ignore[arg-type]
    assert format_errors(info.value, RoomConfig) == ["roster: must be a list of agent names, e.g. roster: [a]"]


def test_rooms_are_frozen_and_hashable():
    room = RoomConfig(name="x", roster=["a", "b"])  # type: ignore[arg-type]
    assert room.roster == ("a", "b") and hash(room) == hash(RoomConfig(name="x", roster=("a", "b")))
    with pytest.raises(ValidationError):
        room.max_rounds = 5  # type: ignore[misc]


def _next(expr: str, after: datetime, tz: str = "UTC") -> datetime:
    fire = cron_trigger(expr, tz).get_next_fire_time(None, after)
    assert fire is not None
    return fire


SUNDAY = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)  # a Sunday


@pytest.mark.parametrize(
    ("expr", "weekday"),
    [
        ("0 9 * * 1-5", 0),  # crontab 1 is Monday (APScheduler 3 alone would say Tuesday)
        ("0 9 * * 1", 0),
        ("0 9 * * 0", 6),  # Sunday, next week
        ("0 9 * * 7", 6),
        ("0 9 * * sat", 5),
        ("0 9 * * mon-fri", 0),
        ("0 9 * * 5-7", 4),  # Friday..Sunday
        ("0 9 * * */2", 1),  # Sunday, Tuesday, ...
    ],
)
def test_cron_weekdays_follow_crontab(expr, weekday):
    assert _next(expr, SUNDAY).weekday() == weekday


def test_cron_day_of_month_or_weekday_as_crontab():
    # "the 1st, and every Monday": from Sunday 29 Nov the next is Monday 30 Nov.
    assert _next("0 9 1 * mon", SUNDAY) == datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)


def test_cron_nicknames_and_time_zones():
    assert _next("@daily", SUNDAY) == datetime(2026, 11, 30, 0, 0, tzinfo=timezone.utc)
    berlin = _next("0 9 * * *", SUNDAY, "Europe/Berlin")
    assert berlin.utcoffset() is not None
    assert berlin == datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("Europe/Berlin"))
