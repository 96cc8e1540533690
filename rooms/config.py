"""A room's configuration (SPEC §10) and its cron schedule, validated with precise messages.

Every error names the YAML path (`rooms.<name>.<field>`) and the accepted form, because the
person reading it is fixing a bot.yaml, not debugging Python.

Cron expressions are standard five-field crontab lines, interpreted the way crontab(5) does,
not the way APScheduler 3 would read them raw: APScheduler 3 numbers weekdays from Monday = 0,
so a raw "0 9 * * 1-5" would run Tuesday to Saturday. We translate the day-of-week field to
names first (0 and 7 are Sunday), and when both day-of-month and day-of-week are restricted
the schedule fires when *either* matches, as cron does. `@daily`-style nicknames are accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger

__all__ = ["PLANNERS", "RoomConfig", "cron_trigger"]

PLANNERS = ("round_robin",)
_FIELDS = (
    "roster", "agents", "planner", "max_rounds", "max_messages", "instructions",
    "schedule", "timezone", "kickoff", "target", "misfire_grace_seconds", "owner",
)
_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _weekday(token: str) -> int:
    """A crontab weekday token as 0..7 (both 0 and 7 are Sunday)."""
    lowered = token.strip().lower()
    if lowered.isdigit():
        value = int(lowered)
        if 0 <= value <= 7:
            return value
    elif lowered[:3] in _DAYS and len(lowered) == 3:
        return _DAYS.index(lowered)
    raise ValueError(f"bad day of week {token!r} (use 0-7 or sun..sat)")


def _standard_day_of_week(expr: str) -> str:
    """Translate a crontab day-of-week field into APScheduler 3's day names."""
    if expr in ("*", "?"):
        return "*"
    days: set[int] = set()
    for item in expr.split(","):
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) < 1:
                raise ValueError(f"bad step in day of week {item!r}")
            step = int(step_text)
        if base in ("*", "?"):
            low, high = 0, 6
        elif "-" in base:
            start, _, end = base.partition("-")
            low, high = _weekday(start), _weekday(end)
            if low > high:
                raise ValueError(f"day-of-week range {base!r} runs backwards")
        else:
            low = _weekday(base)
            high = 7 if slash else low
        days.update(day % 7 for day in range(low, high + 1, step))
    if len(days) == 7:
        return "*"
    return ",".join(_DAYS[day] for day in sorted(days))


def cron_trigger(expr: str, timezone: str = "UTC") -> BaseTrigger:
    """The APScheduler trigger for a crontab line in `timezone`; ValueError when invalid."""
    try:
        tz = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {timezone!r}; use an IANA name such as Europe/Berlin") from None
    text = _NICKNAMES.get(expr.strip().lower(), expr)
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(
            f"got {len(fields)} fields; a cron expression has 5: "
            "minute hour day-of-month month day-of-week, e.g. \"0 9 * * mon-fri\""
        )
    minute, hour, day, month, day_of_week = fields
    weekday = _standard_day_of_week(day_of_week)
    if day.startswith(("*", "?")) or day_of_week.startswith(("*", "?")):
        day = "*" if day == "?" else day
        return CronTrigger.from_crontab(f"{minute} {hour} {day} {month} {weekday}", timezone=tz)
    # Both restricted: crontab(5) fires when either field matches.
    return OrTrigger([
        CronTrigger.from_crontab(f"{minute} {hour} {day} {month} *", timezone=tz),
        CronTrigger.from_crontab(f"{minute} {hour} * {month} {weekday}", timezone=tz),
    ])


def _positive_int(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: must be a whole number ≥ 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{where}: must be at least 1, got {value}")
    return value


def _optional_text(where: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}: must be text, got {type(value).__name__}")
    return value


def _roster_example(value: Any) -> str:
    """A list-form example built from what the user wrote, so the fix is copy-paste."""
    if isinstance(value, str):
        names = [n for n in value.replace(",", " ").split() if n]
    elif isinstance(value, Mapping):
        names = [str(k) for k in value]
    else:
        names = []
    return ", ".join(names or ["planner", "researcher"])


@dataclass(frozen=True)
class RoomConfig:
    """One room: its roster, planner caps, shared instructions and optional stand-up schedule.

    Constructing it validates it, so a RoomConfig that exists can run. The roster may be
    empty (the planner then never picks anyone) and may name agents that are not defined;
    the runtime records a pass for those (SPEC §10), and Config-level validation can warn.
    """

    name: str
    roster: tuple[str, ...]
    planner: str = "round_robin"
    max_rounds: int = 3
    max_messages: int = 20
    instructions: str | None = None
    schedule: str | None = None
    timezone: str = "UTC"
    kickoff: str | None = None
    target: str | None = None
    misfire_grace_seconds: float = 300
    owner: str | None = None  # `<platform>:<user_id>` told when a stand-up fails or is missed
    _roster_key: str = field(default="roster", repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("rooms: a room needs a non-empty name")
        where = f"rooms.{self.name}"
        key = self._roster_key
        if isinstance(self.roster, (str, Mapping)) or not isinstance(self.roster, Sequence):
            raise ValueError(
                f"{where}.{key}: must be a list of agent names, e.g. {key}: [{_roster_example(self.roster)}]"
            )
        roster = tuple(self.roster)
        for index, member in enumerate(roster):
            if not isinstance(member, str) or not member.strip():
                raise ValueError(f"{where}.{key}.{index}: must be an agent name, got {member!r}")
        duplicates = sorted({m for m in roster if roster.count(m) > 1})
        if duplicates:
            raise ValueError(f"{where}.{key}: lists {', '.join(duplicates)} more than once")
        object.__setattr__(self, "roster", roster)
        if self.planner not in PLANNERS:
            raise ValueError(f"{where}.planner: unknown planner {self.planner!r}; known: {', '.join(PLANNERS)}")
        _positive_int(f"{where}.max_rounds", self.max_rounds)
        _positive_int(f"{where}.max_messages", self.max_messages)
        for name in ("instructions", "schedule", "kickoff", "target"):
            _optional_text(f"{where}.{name}", getattr(self, name))
        grace = self.misfire_grace_seconds
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace <= 0:
            raise ValueError(f"{where}.misfire_grace_seconds: must be a number of seconds > 0, got {grace!r}")
        if not isinstance(self.timezone, str):
            raise ValueError(f"{where}.timezone: must be an IANA time zone name such as Europe/Berlin")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"{where}.timezone: unknown time zone {self.timezone!r}; use an IANA name such as Europe/Berlin"
            ) from None
        if self.schedule is not None:
            try:
                cron_trigger(self.schedule, self.timezone)
            except ValueError as exc:
                raise ValueError(f"{where}.schedule: invalid cron expression {self.schedule!r}: {exc}") from None
            missing = [n for n in ("kickoff", "target") if not (getattr(self, n) or "").strip()]
            if missing:
                raise ValueError(
                    f"{where}: a schedule needs {' and '.join(f'`{n}:`' for n in missing)} "
                    "(the opening prompt and the conversation to post it in, e.g. target: discord:123456)"
                )

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any] | None) -> RoomConfig:
        """Build from a `rooms.<name>` YAML mapping; accepts `roster:` or its alias `agents:`."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError("rooms: a room needs a non-empty name")
        where = f"rooms.{name}"
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: must be a mapping with at least `roster: [agent, ...]`")
        unknown = sorted(str(k) for k in data if k not in _FIELDS)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(_FIELDS)}")
        if "roster" in data and "agents" in data:
            raise ValueError(f"{where}: give either `roster:` or `agents:` (they mean the same), not both")
        key = "agents" if "agents" in data else "roster"
        if key not in data or data[key] is None:
            raise ValueError(f"{where}.roster: required, e.g. roster: [planner, researcher]")
        options = {k: v for k, v in data.items() if k not in ("roster", "agents")}
        if options.get("timezone") is None:
            options.pop("timezone", None)
        if options.get("planner") is None:
            options.pop("planner", None)
        roster = data[key]
        if isinstance(roster, list):
            roster = tuple(roster)
        return cls(name=name, roster=roster, _roster_key=key, **options)
