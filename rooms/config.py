"""A room's configuration and its cron schedule, validated with precise messages.

`rooms:` in bot.yaml is a mapping of room name to `RoomConfig`; each error names its YAML
path (`rooms.<name>.<field>`) and the accepted form, because the person reading it is fixing
a bot.yaml, not debugging Python. Cron expressions are read by the kernel's `cron_trigger`
(botweave.cron), the way crontab(5) reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from botweave.config import ConfigError, Section, format_errors, problem, raise_problems
from botweave.cron import cron_trigger
from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

__all__ = ["PLANNERS", "RoomConfig", "Rooms"]

PLANNERS = ("round_robin",)


def _roster_example(value: Any) -> str:
    """A list-form example built from what the user wrote, so the fix is copy-paste."""
    if isinstance(value, str):
        names = [n for n in value.replace(",", " ").split() if n]
    elif isinstance(value, Mapping):
        names = [str(k) for k in value]
    else:
        names = []
    return ", ".join(names or ["planner", "researcher"])


def _agent_name(value: str) -> str:
    if not value.strip():
        raise ValueError(f"must be an agent name (got {value!r})")
    return value


def _blank_is_unset(value: Any) -> Any:
    """`kickoff: ${VAR}` with VAR unset arrives as ""; treat it as not given, so the message
    is "a schedule needs `kickoff:`" rather than a complaint about an empty string."""
    return None if isinstance(value, str) and not value.strip() else value


def _address(example: str) -> Callable[[str | None], str | None]:
    """A check that a value reads `<platform>:<id>`, the form targets and recipients take."""

    def check(value: str | None) -> str | None:
        if value is not None:
            platform, sep, rest = value.partition(":")
            if not sep or not platform.strip() or not rest.strip():
                raise ValueError(f"must be written <platform>:<id>, e.g. {example} (got {value!r})")
        return value

    return check


def _positive_seconds(value: float) -> float:
    if value <= 0:
        raise ValueError(f"must be a number of seconds > 0 (got {value!r})")
    return value


AgentName = Annotated[StrictStr, AfterValidator(_agent_name)]
Text = Annotated[Optional[StrictStr], BeforeValidator(_blank_is_unset)]


class _MalformedRoster:
    """A roster that is missing or not a list, with the key it was (or should be) written
    under, so the roster's own validator can answer with the list form under that key while
    the room's other fields are still checked in the same run."""

    def __init__(self, key: str, value: Any) -> None:
        self.key, self.value = key, value


class RoomConfig(Section):
    """One room: its roster, planner caps, shared instructions and optional stand-up schedule.

    Validating it checks everything a room needs to run, so a RoomConfig that exists can run.
    The roster may be empty (the planner then never picks anyone). Inside bot.yaml the name
    is the room's key under `rooms:` and every roster entry must be a defined agent (the
    composed configuration checks that); built directly, a roster may name agents that do
    not exist, and the runtime records a pass for them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(exclude=True)
    roster: tuple[AgentName, ...] = Field(validation_alias=AliasChoices("roster", "agents"))
    """The agents in the room, in the order they answer (also accepted as `agents:`)."""
    planner: str = "round_robin"
    """Who speaks next: `round_robin`, every agent in roster order, then those @-mentioned."""
    max_rounds: Annotated[StrictInt, Field(ge=1)] = 3
    """Rounds of answers one human message (or kickoff) may set off."""
    max_messages: Annotated[StrictInt, Field(ge=1)] = 20
    """Agent messages one human message (or kickoff) may set off, across all rounds."""
    instructions: Optional[StrictStr] = None
    """Instructions every agent in the room gets besides its own."""
    schedule: Optional[StrictStr] = None
    """A crontab line (`0 9 * * 1-5`) that kicks a stand-up off in `target`."""
    timezone: StrictStr = "UTC"
    """The time zone `schedule` is read in, e.g. `Europe/Berlin`."""
    kickoff: Text = None
    """The message a scheduled stand-up starts with (required with `schedule`)."""
    target: Annotated[Text, AfterValidator(_address("discord:123456789012345678"))] = None
    """The conversation a scheduled kickoff is posted in: `<platform>:<chat>[:<thread>]`."""
    misfire_grace_seconds: Annotated[float, Field(strict=True), AfterValidator(_positive_seconds)] = 300.0
    """How late a scheduled kickoff may still run after downtime; older occurrences are recorded
    as missed and the owner is told."""
    owner: Annotated[Text, AfterValidator(_address("telegram:123456"))] = None
    """`<platform>:<user_id>` told when a stand-up fails or is missed."""

    @model_validator(mode="before")
    @classmethod
    def _one_roster_key(cls, data: Any) -> Any:
        """`roster:` and `agents:` mean the same; one of them, as a list, is required. An empty
        `planner:` or `timezone:` means the default, as it always has."""
        if data is None:
            data = {}
        if isinstance(data, RoomConfig):
            return data
        if not isinstance(data, Mapping):
            raise ValueError("must be a mapping with at least `roster: [agent, ...]`")
        if "roster" in data and "agents" in data:
            raise ValueError("give either `roster:` or `agents:` (they mean the same), not both")
        data = {k: v for k, v in data.items() if not (k in ("planner", "timezone") and v is None)}
        key = "agents" if "agents" in data else "roster"
        roster = data.get(key)
        if isinstance(roster, (str, Mapping)) or not isinstance(roster, Sequence):
            return {**data, key: _MalformedRoster(key, roster)}
        return data

    @field_validator("roster", mode="before")
    @classmethod
    def _a_list(cls, value: Any) -> Any:
        if isinstance(value, _MalformedRoster):
            example = f"{value.key}: [{_roster_example(value.value)}]"
            if value.value is None:
                raise ValueError(f"required, e.g. {example}")
            raise ValueError(f"must be a list of agent names, e.g. {example}")
        return value

    @field_validator("roster")
    @classmethod
    def _each_once(cls, roster: tuple[str, ...]) -> tuple[str, ...]:
        duplicates = sorted({m for m in roster if roster.count(m) > 1})
        if duplicates:
            raise ValueError(f"lists {', '.join(duplicates)} more than once")
        return roster

    @field_validator("name")
    @classmethod
    def _named(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("a room needs a non-empty name")
        return name

    @field_validator("planner")
    @classmethod
    def _known_planner(cls, planner: str) -> str:
        if planner not in PLANNERS:
            raise ValueError(f"unknown planner {planner!r}; known: {', '.join(PLANNERS)}")
        return planner

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, timezone: str) -> str:
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {timezone!r}; use an IANA name such as Europe/Berlin"
            ) from None
        return timezone

    @field_validator("schedule")
    @classmethod
    def _cron(cls, schedule: str | None) -> str | None:
        if schedule is not None:
            try:
                cron_trigger(schedule)  # the zone does not change whether a line is valid
            except ValueError as exc:
                raise ValueError(f"invalid cron expression {schedule!r}: {exc}") from None
        return schedule

    @model_validator(mode="after")
    def _schedule_has_somewhere_to_go(self) -> RoomConfig:
        if self.schedule is not None:
            missing = [n for n in ("kickoff", "target") if getattr(self, n) is None]
            if missing:
                raise ValueError(
                    f"a schedule needs {' and '.join(f'`{n}:`' for n in missing)} "
                    "(the opening prompt and the conversation to post it in, e.g. target: discord:123456)"
                )
        return self

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any] | None) -> RoomConfig:
        """One `rooms.<name>` block, validated exactly as bot.yaml's `rooms:` is; a
        ConfigError's lines name the path (`rooms.<name>.<field>: ...`)."""
        try:
            return _ROOMS.validate_python({name: data})[name]
        except ValidationError as exc:
            raise ConfigError(format_errors(exc, Rooms, prefix="rooms")) from None


def _named_by_key(value: Any) -> Any:
    """Each room is named by its key under `rooms:`; the key is handed to the model as its
    `name`, so a room block does not repeat it. `rooms:` with every room commented out reads
    as null, which means no rooms."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return value
    problems = []
    rooms: dict[Any, Any] = {}
    for key, block in value.items():
        if isinstance(block, RoomConfig):
            rooms[key] = block
            continue
        if not isinstance(key, str) or not key.strip():
            problems.append(problem((), f"a room needs a non-empty name (got {key!r})", key))
            continue
        if isinstance(block, Mapping) and "name" in block:
            problems.append(problem((key, "name"), f"a room is named by its key; remove `name:` (the key here is {key!r})"))
            continue
        rooms[key] = {**block, "name": key} if isinstance(block, Mapping) else (
            {"name": key} if block is None else block
        )
    raise_problems("rooms", problems)
    return rooms


#: The `rooms:` section: room name → RoomConfig, each named by its key.
Rooms = Annotated[dict[str, RoomConfig], BeforeValidator(_named_by_key)]
_ROOMS: TypeAdapter[dict[str, RoomConfig]] = TypeAdapter(Rooms)
