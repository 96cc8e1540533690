"""Who is told what, and when: the pure notification policy.

`evaluate` is a pure function of the category, the recipient's preference and the time, so
the same decision can be made by any worker and tested as a table. Everything that talks to
the outside world (the store, adapters, webhooks) lives in `push.notifier` and
`push.transports`.

Time rules:
- `now` may be aware (any zone) or naive; a naive `now` is taken to be UTC, because the
  runtime's clocks are UTC and a naive local time would silently depend on the host's zone.
  Either way it is converted into the recipient's IANA zone before the quiet window is checked.
- A quiet window `[start, end)` may wrap midnight (22:00–07:30); `start == end` means no
  window at all (not "quiet all day"), so a typo cannot silence someone forever.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time, timezone
from enum import Enum
from typing import Annotated, Any, Literal, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BeforeValidator, field_validator, model_validator
from pydantic.dataclasses import dataclass as validated_dataclass

__all__ = [
    "Category",
    "DEFAULT_PREFERENCE",
    "DetailLevel",
    "DecisionReason",
    "NotificationCategory",
    "NotificationDecision",
    "NotificationPreference",
    "PRIVATE_TEXT",
    "Detail",
    "ZoneName",
    "evaluate",
    "format_time",
    "load_zone",
    "redact",
]

PRIVATE_TEXT = "You have new activity"


class NotificationCategory(str, Enum):
    """What happened. The values are the names users type in `/notify on <category>`."""

    APPROVAL_REQUESTED = "approval_requested"
    AGENT_FINISHED = "agent_finished"
    AGENT_QUESTION = "agent_question"
    HUMAN_MENTIONED = "human_mentioned"
    SCHEDULED_TASK_FAILED = "scheduled_task_failed"
    BACKGROUND_TASK_FAILED = "background_task_failed"
    MODEL_FAILED = "model_failed"
    BUDGET = "budget"

    @classmethod
    def parse(cls, value: NotificationCategory | str) -> NotificationCategory:
        """Accept `agent_question`, `agent-question` or `Agent_Question`; name the choices if not."""
        if isinstance(value, cls):
            return value
        key = str(value).strip().lower().replace("-", "_")
        try:
            return cls(key)
        except ValueError:
            choices = ", ".join(c.value for c in cls)
            raise ValueError(f"unknown notification category {value!r}; choose one of: {choices}") from None


class DetailLevel(str, Enum):
    """How much of a notification reaches the lock screen of the recipient's phone."""

    PRIVATE = "private"  # "You have new activity"
    IDENTIFIED = "identified"  # "Activity in <identity>"
    DETAILED = "detailed"  # the content itself

    @classmethod
    def parse(cls, value: DetailLevel | str) -> DetailLevel:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            choices = ", ".join(d.value for d in cls)
            raise ValueError(f"unknown detail level {value!r}; choose one of: {choices}") from None


DecisionReason = Literal["ok", "category_not_subscribed", "quiet_hours", "urgent_override"]


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone `name`, or a ValueError naming it: an unknown zone is a config error, never
    a silent fall back to UTC (which would wake people at the wrong hour)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"time zone must be an IANA name such as 'Europe/Berlin', got {name!r}")
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin'") from None


def format_time(value: time) -> str:
    """`22:00`, or `22:00:30` when seconds matter; the form `/notify` shows and config accepts."""
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")


def _zone_name(name: Any) -> str:
    return load_zone(name).key


def _naive(value: time | None) -> time | None:
    if value is not None and value.tzinfo is not None:
        raise ValueError("must be a wall-clock time without a zone; set `timezone`")
    return value


#: A category as users write it (`agent-question`, `Agent_Question`), checked by name.
Category = Annotated[NotificationCategory, BeforeValidator(NotificationCategory.parse)]
#: A detail level as users write it, in any case.
Detail = Annotated[DetailLevel, BeforeValidator(DetailLevel.parse)]
#: An IANA time zone name, checked against the zone database.
ZoneName = Annotated[str, BeforeValidator(_zone_name)]
_WallClock = Annotated[Optional[time], AfterValidator(_naive)]


@validated_dataclass(frozen=True)
class NotificationPreference:
    """One recipient's settings. Validated at construction (and on `dataclasses.replace`), so
    a preference that exists can be evaluated without further checks: an unknown zone fails
    when bot.yaml is loaded, not when the first notification is due."""

    categories: frozenset[Category] = field(
        default_factory=lambda: frozenset(
            {NotificationCategory.APPROVAL_REQUESTED, NotificationCategory.AGENT_QUESTION}
        )
    )
    quiet_start: _WallClock = None
    quiet_end: _WallClock = None
    timezone: ZoneName = "UTC"
    detail_level: Detail = DetailLevel.IDENTIFIED
    urgent_overrides_quiet: bool = True
    digest: bool = False

    @field_validator("categories", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, NotificationCategory)) else value  # not letters

    @model_validator(mode="after")
    def _whole_window(self) -> NotificationPreference:
        if (self.quiet_start is None) != (self.quiet_end is None):
            raise ValueError("quiet hours need both a start and an end (or neither)")
        return self

    @property
    def zone(self) -> ZoneInfo:
        return load_zone(self.timezone)

    @property
    def has_quiet_hours(self) -> bool:
        """start == end is documented as "no quiet hours", not "quiet all day"."""
        return self.quiet_start is not None and self.quiet_end is not None and self.quiet_start != self.quiet_end

    def local_time(self, now: datetime | None = None) -> datetime:
        """`now` in the recipient's zone; naive means UTC (see the module docstring)."""
        if now is None:
            now = datetime.now(timezone.utc)
        elif now.tzinfo is None or now.utcoffset() is None:
            now = now.replace(tzinfo=timezone.utc)
        return now.astimezone(self.zone)

    def in_quiet_hours(self, now: datetime | None = None) -> bool:
        if not self.has_quiet_hours:
            return False
        assert self.quiet_start is not None and self.quiet_end is not None
        wall = self.local_time(now).time().replace(tzinfo=None)
        if self.quiet_start < self.quiet_end:
            return self.quiet_start <= wall < self.quiet_end
        return wall >= self.quiet_start or wall < self.quiet_end  # the window wraps midnight

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form for the store; `from_dict` reverses it."""
        return {
            "categories": sorted(c.value for c in self.categories),
            "quiet_start": None if self.quiet_start is None else format_time(self.quiet_start),
            "quiet_end": None if self.quiet_end is None else format_time(self.quiet_end),
            "timezone": self.timezone,
            "detail_level": self.detail_level.value,
            "urgent_overrides_quiet": self.urgent_overrides_quiet,
            "digest": self.digest,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> NotificationPreference:
        def _time(value: object) -> time | None:
            return None if value is None else time.fromisoformat(str(value))

        categories = data.get("categories", [])
        if not isinstance(categories, list):
            raise ValueError(f"categories must be a list, got {categories!r}")
        return cls(
            categories=frozenset(NotificationCategory.parse(str(c)) for c in categories),
            quiet_start=_time(data.get("quiet_start")),
            quiet_end=_time(data.get("quiet_end")),
            timezone=str(data.get("timezone", "UTC")),
            detail_level=DetailLevel.parse(str(data.get("detail_level", DetailLevel.IDENTIFIED.value))),
            urgent_overrides_quiet=bool(data.get("urgent_overrides_quiet", True)),
            digest=bool(data.get("digest", False)),
        )


#: Approval requests and agents' questions, identified, no quiet hours.
DEFAULT_PREFERENCE = NotificationPreference()


@dataclass(frozen=True)
class NotificationDecision:
    """The outcome of `evaluate`.

    `content` is the text redacted to the recipient's detail level. It is set whenever the
    category is subscribed, including `quiet_hours` (so a digest can carry it later), and is
    None only for `category_not_subscribed`.
    """

    send: bool
    reason: DecisionReason
    content: str | None = None


def redact(level: DetailLevel | str, content: str | None, identity: str | None) -> str:
    """The text a recipient may see at `level`.

    Fallbacks never reveal more than asked: `identified` without an identity is the private
    text (we do not invent a name), and `detailed` without content falls back to `identified`.
    """
    level = DetailLevel.parse(level)
    identity = (identity or "").strip() or None
    if level is DetailLevel.DETAILED and content is not None and content.strip():
        return content
    if level in (DetailLevel.IDENTIFIED, DetailLevel.DETAILED) and identity is not None:
        return f"Activity in {identity}"
    return PRIVATE_TEXT


def evaluate(
    category: NotificationCategory | str,
    prefs: NotificationPreference | None = None,
    *,
    now: datetime | None = None,
    is_urgent: bool = False,
    content: str | None = None,
    identity: str | None = None,
) -> NotificationDecision:
    """Decide whether one notification goes out now and what it may say.

    Order: an unsubscribed category is never sent (urgency does not override an opt-out);
    inside quiet hours only an urgent event goes out, and only if the recipient lets urgent
    events through; otherwise it is sent. `prefs=None` means `DEFAULT_PREFERENCE`.
    """
    category = NotificationCategory.parse(category)
    prefs = DEFAULT_PREFERENCE if prefs is None else prefs
    if category not in prefs.categories:
        return NotificationDecision(False, "category_not_subscribed", None)
    text = redact(prefs.detail_level, content, identity)
    if prefs.in_quiet_hours(now):
        if is_urgent and prefs.urgent_overrides_quiet:
            return NotificationDecision(True, "urgent_override", text)
        return NotificationDecision(False, "quiet_hours", text)
    return NotificationDecision(True, "ok", text)
