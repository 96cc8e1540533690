"""Daily budgets of tokens and money, and the usage they are checked against.

`budgets:` in bot.yaml limits each person (`per_user`, across all agents), each agent
(`per_agent`) and each chat (`per_chat`) to so many tokens and so many US dollars a day; a day
starts at midnight in `timezone`. Usage is what the providers reported after each call, kept
in the store as counters (one per scope, day and measure, expiring two days later; a month's
per person for `/usage`), so every worker adds to and reads the same numbers.

What is here is pure: the configuration, the counters' keys, and `over_budget`, which reads
the counters' values and says which limit, if any, is spent. The reading and adding happen in
`botweave.model_guard`, once per model call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from botweave.config import Section
from pydantic import Field, field_validator

Scope = Literal["user", "agent", "chat"]
Measure = Literal["tokens", "cost"]
#: Cost is counted in millionths of a dollar, so the store's integer counters can add it.
MICRO = 1_000_000
#: How long a day's counter is kept: two days, so yesterday's is still there at midnight.
DAY_TTL_S = 2 * 86400
#: How long a month's counter is kept.
MONTH_TTL_S = 62 * 86400
PREFIX = "usage:"


def _not_negative(value: Any, what: str) -> Any:
    if value is not None and not isinstance(value, bool) and isinstance(value, (int, float)) and value < 0:
        raise ValueError(f"{value} is negative; a daily {what} is 0 or more (leave it out for no limit)")
    return value


class Limit(Section):
    """How much one person, agent or chat may use in a day; a limit left out is no limit."""

    tokens_per_day: Optional[int] = None
    """Tokens (prompt and completion together, as the provider reported them) a day."""
    cost_per_day: Optional[float] = None
    """US dollars a day, priced from litellm's public prices or the agent's `price`."""

    @field_validator("tokens_per_day", mode="after")
    @classmethod
    def _tokens(cls, value: Any) -> Any:
        return _not_negative(value, "number of tokens")

    @field_validator("cost_per_day", mode="after")
    @classmethod
    def _cost(cls, value: Any) -> Any:
        return _not_negative(value, "cost in US dollars")

    @property
    def empty(self) -> bool:
        return self.tokens_per_day is None and self.cost_per_day is None


class BudgetsConfig(Section):
    """`budgets:` daily limits of tokens and cost; over a limit, no model call is made and the
    person is told once a day which limit it was and when it resets."""

    per_user: Optional[Limit] = None
    """What each person may use a day, across all agents."""
    per_agent: dict[str, Limit] = Field(default_factory=dict)
    """What each named agent may use a day, for everyone together."""
    per_chat: Optional[Limit] = None
    """What each chat (a group, a channel, a direct conversation) may use a day."""
    timezone: str = "UTC"
    """The IANA time zone whose midnight starts a new day, e.g. `Europe/Berlin`."""
    exempt_users: list[str] = Field(default_factory=list)
    """People no limit applies to, as `platform:user_id` (e.g. `telegram:123`)."""

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}; use an IANA name such as UTC or Europe/Berlin") from None
        return value

    @field_validator("exempt_users")
    @classmethod
    def _platform_ids(cls, value: list[str]) -> list[str]:
        for entry in value:
            if ":" not in str(entry):
                raise ValueError(f"{entry!r} is not platform:user_id (e.g. telegram:123)")
        return [str(entry) for entry in value]

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def any(self) -> bool:
        """Whether any limit is set."""
        return bool(
            (self.per_user and not self.per_user.empty)
            or (self.per_chat and not self.per_chat.empty)
            or any(not limit.empty for limit in self.per_agent.values())
        )


@dataclass(frozen=True, slots=True)
class Who:
    """Whose usage a call counts as: the agent, and the person and chat when a message started
    the turn (`platform:id` each)."""

    agent: str
    user: str | None = None
    chat: str | None = None

    def scopes(self) -> list[tuple[Scope, str]]:
        found: list[tuple[Scope, str]] = [("agent", self.agent)]
        if self.user:
            found.append(("user", self.user))
        if self.chat:
            found.append(("chat", self.chat))
        return found


def day_of(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime("%Y-%m-%d")


def month_of(moment: datetime, zone: ZoneInfo) -> str:
    return moment.astimezone(zone).strftime("%Y-%m")


def next_midnight(moment: datetime, zone: ZoneInfo) -> datetime:
    local = moment.astimezone(zone)
    tomorrow = (local + timedelta(days=1)).date()
    return datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=zone)


def day_key(scope: Scope, who: str, day: str, measure: Measure) -> str:
    return f"{PREFIX}{scope}:{who}:d:{day}:{measure}"


def month_key(scope: Scope, who: str, month: str, measure: Measure) -> str:
    return f"{PREFIX}{scope}:{who}:m:{month}:{measure}"


def limits_for(config: BudgetsConfig, who: Who) -> list[tuple[Scope, str, Limit]]:
    """The limits a call for `who` is checked against (none for an exempt person)."""
    if who.user is not None and who.user in config.exempt_users:
        return []
    found: list[tuple[Scope, str, Limit]] = []
    agent = config.per_agent.get(who.agent)
    if agent is not None and not agent.empty:
        found.append(("agent", who.agent, agent))
    if who.user and config.per_user is not None and not config.per_user.empty:
        found.append(("user", who.user, config.per_user))
    if who.chat and config.per_chat is not None and not config.per_chat.empty:
        found.append(("chat", who.chat, config.per_chat))
    return found


def keys_to_read(limits: Sequence[tuple[Scope, str, Limit]], day: str) -> list[str]:
    keys = []
    for scope, who, limit in limits:
        if limit.tokens_per_day is not None:
            keys.append(day_key(scope, who, day, "tokens"))
        if limit.cost_per_day is not None:
            keys.append(day_key(scope, who, day, "cost"))
    return keys


@dataclass(frozen=True, slots=True)
class Spent:
    """A limit that is used up: whose, and what it was (`1.00 USD`, `200,000 tokens`)."""

    scope: Scope
    who: str
    limit: str


def format_limit(measure: Measure, amount: float) -> str:
    return f"{amount:.2f} USD" if measure == "cost" else f"{int(amount):,} tokens"


def over_budget(limits: Sequence[tuple[Scope, str, Limit]], counts: Mapping[str, int], day: str) -> Spent | None:
    """The first limit that is spent, given the day's counters (`counts` by key; cost in
    millionths of a dollar); None while every limit has room."""
    for scope, who, limit in limits:
        if limit.tokens_per_day is not None and counts.get(day_key(scope, who, day, "tokens"), 0) >= limit.tokens_per_day:
            return Spent(scope, who, format_limit("tokens", limit.tokens_per_day))
        if limit.cost_per_day is not None and counts.get(day_key(scope, who, day, "cost"), 0) >= round(
            limit.cost_per_day * MICRO
        ):
            return Spent(scope, who, format_limit("cost", limit.cost_per_day))
    return None


def usage_increments(who: Who, day: str, month: str, tokens: int, micro_usd: int) -> dict[str, tuple[int, float]]:
    """What one call adds to the counters: key → (amount, time to live)."""
    added: dict[str, tuple[int, float]] = {}
    for scope, name in who.scopes():
        for measure, amount in (("tokens", tokens), ("cost", micro_usd)):
            if amount:
                added[day_key(scope, name, day, measure)] = (amount, DAY_TTL_S)  # type: ignore[arg-type]
                if scope == "user":
                    added[month_key(scope, name, month, measure)] = (amount, MONTH_TTL_S)  # type: ignore[arg-type]
    return added


def limit_notice(spent: Spent, resets: datetime) -> str:
    """What the person is told, once a day, when a limit stops their turns."""
    zone = resets.tzname() or "UTC"
    return f"Daily limit reached ({spent.limit}). It resets at {resets:%H:%M} {zone}."


@dataclass(frozen=True, slots=True)
class UsageView:
    """One person's usage: today's and this month's tokens and cost (US dollars), and the
    daily limits that apply to them (None: no limit)."""

    user: str
    tokens_today: int
    cost_today: float
    tokens_month: int
    cost_month: float
    token_limit: int | None
    cost_limit: float | None
    resets: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "today": {"tokens": self.tokens_today, "cost_usd": round(self.cost_today, 6)},
            "month": {"tokens": self.tokens_month, "cost_usd": round(self.cost_month, 6)},
            "limits": {"tokens_per_day": self.token_limit, "cost_per_day": self.cost_limit},
            "resets_at": self.resets.isoformat(),
        }

    def text(self) -> str:
        """What `/usage` answers."""
        limits = []
        if self.token_limit is not None:
            limits.append(f"{self.token_limit:,} tokens")
        if self.cost_limit is not None:
            limits.append(f"{self.cost_limit:.2f} USD")
        limit = f" of your daily limit of {' and '.join(limits)}" if limits else ""
        return (
            f"Today: {self.tokens_today:,} tokens, {self.cost_today:.4f} USD{limit}. "
            f"It resets at {self.resets:%H:%M} {self.resets.tzname() or 'UTC'}.\n"
            f"This month: {self.tokens_month:,} tokens, {self.cost_month:.4f} USD."
        )


def usage_keys(user: str, day: str, month: str) -> list[str]:
    """The counters `UsageView` reads, in its order."""
    return [
        day_key("user", user, day, "tokens"),
        day_key("user", user, day, "cost"),
        month_key("user", user, month, "tokens"),
        month_key("user", user, month, "cost"),
    ]


def user_of_day_key(key: str, day: str) -> tuple[str, Measure] | None:
    """(user, measure) of a person's day counter for `day`; None for any other key."""
    start = f"{PREFIX}user:"
    measures: tuple[Measure, ...] = ("tokens", "cost")
    for measure in measures:
        end = f":d:{day}:{measure}"
        if key.startswith(start) and key.endswith(end):
            return key[len(start) : -len(end)], measure
    return None
