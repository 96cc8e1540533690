"""A room's configuration and its cron schedule, validated with precise messages.

Every error names the YAML path (`rooms.<name>.<field>`) and the accepted form, because the
person reading it is fixing a bot.yaml, not debugging Python. Cron expressions are read by
the kernel's `cron_trigger` (botweave.schedule), the way crontab(5) reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from botweave.schedule import cron_trigger

__all__ = ["PLANNERS", "RoomConfig"]

PLANNERS = ("round_robin",)
_FIELDS = (
    "roster", "agents", "planner", "max_rounds", "max_messages", "instructions",
    "schedule", "timezone", "kickoff", "target", "misfire_grace_seconds", "owner",
)


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
    the runtime records a pass for those, and Config-level validation can warn.
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
