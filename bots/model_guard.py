"""Everything around one model call that is not the call: which candidate to ask (through
`failover.decide`), the cool-downs and usage counters in the store, the waits, the budget
check, the metrics, and the owner's alerts.

An agent opens a `ModelSession` per turn and, for each model call, asks it for the next
candidate (`next`), reports a failure (`failed`) or an answer (`answered`). The decision is
the kernel's one pure function, so the in-process clients and the model processes (whose
failures arrive as `ModelCallFailed` with the status and `Retry-After` they had) behave the
same.

Store traffic per call: one read before it (`get_many`: the candidates' cool-downs when the
store is shared by several workers, and the day's counters of the limits that apply), and,
after an answer, one write adding its tokens and cost (`incr_many`), which the turn does not
wait for: the next call of the same turn waits for it before reading, so a turn sees its own
usage. A store only this process uses keeps the cool-downs in this process as well, so a
turn without budgets reads nothing. A cool-down is written on the failure path only.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from botweave.budgets import (
    DAY_TTL_S,
    MICRO,
    PREFIX,
    BudgetsConfig,
    Limit,
    Scope,
    Spent,
    UsageView,
    Who,
    day_of,
    keys_to_read,
    limit_notice,
    limits_for,
    month_of,
    next_midnight,
    over_budget,
    usage_increments,
    usage_keys,
    user_of_day_key,
)
from botweave.config import AgentConfig, ModelPrice
from botweave.failover import Attempt, Call, Candidate, Failure, GiveUp, classify, cooldown_seconds, decide
from botweave.identity import person_of
from botweave.metrics import COST_USD, MODEL_COOLDOWNS, MODEL_FAILOVERS
from botweave.model_info import Price, load_cost_map, price_of, window_of
from botweave.store import MemoryStore, Store
from botweave.tasks import TaskOwner, redact
from botweave.tracing import before_call

log = logging.getLogger(__name__)

#: Told to the owner: (category, platform of the turn or None, what happened in a few words
#: naming nobody, for a lock screen; the whole text).
Alert = Callable[[str, "str | None", str, str], Coroutine[Any, Any, None]]
COOLDOWN_PREFIX = "cooldown:"
STRIKES_PREFIX = "cooldown-strikes:"
#: How often the owner hears of one key being refused.
AUTH_ALERT_EVERY_S = 3600.0
#: The event on the span of a model call that took over from a failed one: from, to and why.
FAILOVER_EVENT = "botweave.failover"


#: Failures of a model call (as litellm names them) that no retry mends: the key is missing or
#: refused, or the model does not exist for it. Whoever set the bot up has to act.
MISCONFIGURED = frozenset({"AuthenticationError", "PermissionDeniedError", "NotFoundError"})


class AgentError(RuntimeError):
    """The model could not answer; the message is safe to log (no keys, no prompt).
    `misconfigured` when the bot's settings are the cause (see `MISCONFIGURED`), so the person
    asking is not told to try again."""

    def __init__(self, message: str, *, misconfigured: bool = False) -> None:
        super().__init__(message)
        self.misconfigured = misconfigured


class CallRefused(AgentError):
    """No model call was made; `notice` is what the person is told (None: nothing, they were
    told already today)."""

    def __init__(self, detail: str, notice: str | None) -> None:
        super().__init__(detail)
        self.notice = notice


class OverBudget(CallRefused):
    """A daily limit is spent."""


class ModelsResting(CallRefused):
    """Every candidate is cooled down for longer than a turn waits."""


@dataclass(frozen=True)
class GuardSettings:
    """`models.max_cooldown_seconds` and `models.max_wait_seconds`."""

    max_cooldown_seconds: float = 300.0
    max_wait_seconds: float = 20.0


@dataclass(frozen=True, slots=True)
class Route:
    """A candidate and how to ask it."""

    candidate: Candidate
    api_base: str | None
    api_key: str | None
    price: ModelPrice | None

    def request(self, base: dict[str, Any]) -> dict[str, Any]:
        """The agent's request sent to this candidate: its model, server and key, and no
        retries of the client's own (another candidate is the retry)."""
        asked = {**base, "model": self.candidate.model, "num_retries": 0, "max_retries": 0}
        asked.pop("api_base", None)
        asked.pop("api_key", None)
        if self.api_base:
            asked["api_base"] = self.api_base
        if self.api_key is not None:
            asked["api_key"] = self.api_key
        return asked


def fingerprint(key: str | None) -> str:
    """A name for a credential that reveals nothing of it."""
    return hashlib.sha256(key.encode()).hexdigest()[:12] if key else "-"


def _provider(model: str) -> str:
    return model.partition("/")[0] if "/" in model else ""


def routes_of(config: AgentConfig, turn: int = 0) -> list[Route]:
    """The agent's candidates in order: its model once per key (starting at key `turn` modulo
    their number, so keys are used in turn), then each fallback the same way."""
    entries: list[tuple[str, str | None, list[str | None], ModelPrice | None]] = []
    keys: list[str | None] = [k.get_secret_value() for k in config.api_keys] or [
        config.api_key.get_secret_value() if config.api_key is not None else None
    ]
    entries.append((config.model, config.api_base, list(keys), config.price))
    for fallback in config.fallbacks:
        own: list[str | None] = [k.get_secret_value() for k in fallback.api_keys] or (
            [fallback.api_key.get_secret_value()] if fallback.api_key is not None else []
        )
        base = fallback.api_base
        if not own and base is None and _provider(fallback.model) == _provider(config.model):
            own, base = list(keys), config.api_base  # the same provider: the agent's server and keys
        entries.append((fallback.model, base, list(own) or [None], fallback.price))
    routes = []
    for model, base, model_keys, price in entries:
        start = turn % len(model_keys)
        for key in model_keys[start:] + model_keys[:start]:
            candidate = Candidate(f"{model}|{base or ''}|{fingerprint(key)}", model)
            routes.append(Route(candidate, base, key, price))
    return routes


class ModelGuard:
    """What every agent of an App shares around its model calls (see the module docstring).
    `shared`: whether other processes use the same store (then cool-downs are read from it
    before each call)."""

    def __init__(
        self,
        store: Store | None = None,
        settings: GuardSettings | None = None,
        budgets: BudgetsConfig | None = None,
        *,
        shared: bool = False,
        alert: Alert | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.store = store if store is not None else MemoryStore()
        self.settings = settings or GuardSettings()
        self.budgets = budgets or BudgetsConfig()
        self.shared = shared
        self.alert = alert
        self.clock = clock
        self.sleep = sleep
        self.tasks = TaskOwner("model guard")
        self._cooled: dict[str, float] = {}
        self._recalled = False
        self._turns: dict[str, itertools.count[int]] = {}
        self._prices: dict[str, Price | None] = {}
        #: Each agent's candidates in every rotation of its keys, made once per configuration.
        self._routes: dict[int, tuple[AgentConfig, list[list[Route]]]] = {}
        #: The day's limits and counter keys per person and chat (the day's, cleared at midnight).
        self._checks: dict[tuple[Who, str], tuple[list[tuple[Scope, str, Limit]], list[str]]] = {}
        self._calendar: tuple[int, str, str, datetime] | None = None
        #: Usage not written yet (key → [amount, ttl]): written together by one task at a time.
        self._unwritten: dict[str, list[Any]] = {}
        #: The batch being written now: counted too until the write is done (a moment's
        #: double count at most, never a call past a limit because a write was slow).
        self._in_flight: dict[str, list[Any]] = {}
        self._writing: asyncio.Task[None] | None = None

    def configure(self, settings: GuardSettings, budgets: BudgetsConfig) -> None:
        """The settings of a (re)loaded configuration; cool-downs and counters stay."""
        self.settings = settings
        self.budgets = budgets
        self._checks.clear()
        self._calendar = None

    def session(self, agent: str, config: AgentConfig, who: Who | None = None) -> ModelSession:
        counter = self._turns.setdefault(agent, itertools.count())
        made = self._routes.get(id(config))
        if made is None or made[0] is not config:
            keys = max(len(config.api_keys), 1)
            made = self._routes[id(config)] = (config, [routes_of(config, turn) for turn in range(keys)])
        rotations = made[1]
        return ModelSession(self, agent, config, who or Who(agent), rotations[next(counter) % len(rotations)])

    def calendar(self, now: float) -> tuple[str, str, datetime]:
        """(day, month, next midnight) in the budgets' zone at `now`, worked out once a minute."""
        minute = int(now // 60)
        cached = self._calendar
        if cached is None or cached[0] != minute:
            moment = datetime.fromtimestamp(now, timezone.utc)
            zone = self.budgets.zone
            cached = self._calendar = (minute, day_of(moment, zone), month_of(moment, zone), next_midnight(moment, zone))
        return cached[1], cached[2], cached[3]

    def checks(self, who: Who, day: str) -> tuple[list[tuple[Scope, str, Limit]], list[str]]:
        """The limits a call for `who` is checked against today, and the counters they read."""
        found = self._checks.get((who, day))
        if found is None:
            if len(self._checks) > 10_000 or any(key[1] != day for key in itertools.islice(self._checks, 1)):
                self._checks.clear()
            limits = limits_for(self.budgets, who)
            found = self._checks[(who, day)] = (limits, keys_to_read(limits, day))
        return found

    async def close(self) -> None:
        await self.settle()
        await self.tasks.close(2.0)

    # --- the store ------------------------------------------------------------------------

    async def read(self, routes: Sequence[Route], keys: Sequence[str]) -> tuple[dict[str, float], dict[str, int]]:
        """The candidates' cool-downs (key → until) and the counters `keys` name, in at most one
        store round trip (and, once per process on a store no other process uses, the cool-downs
        an earlier run of this bot left there)."""
        if not self.shared and not self._recalled:
            await self._recall()
        cooled = {route.candidate.key: self._cooled[route.candidate.key] for route in routes if route.candidate.key in self._cooled}
        cool_keys = [COOLDOWN_PREFIX + route.candidate.key for route in routes] if self.shared else []
        if not cool_keys and not keys:
            return cooled, {}
        values = await self.store.get_many([*cool_keys, *keys])
        for route, value in zip(routes, values[: len(cool_keys)]):
            until = _float(value)
            if until is not None:
                cooled[route.candidate.key] = max(until, cooled.get(route.candidate.key, 0.0))
        unwritten, in_flight = self._unwritten, self._in_flight
        counts = {
            key: int(_float(value) or 0)
            + (unwritten[key][0] if key in unwritten else 0)
            + (in_flight[key][0] if key in in_flight else 0)
            for key, value in zip(keys, values[len(cool_keys) :])
        }
        return cooled, counts

    async def _recall(self) -> None:
        self._recalled = True
        keys = await self.store.keys(COOLDOWN_PREFIX)
        for key, value in zip(keys, await self.store.get_many(keys)):
            until = _float(value)
            if until is not None:
                name = key[len(COOLDOWN_PREFIX) :]
                self._cooled[name] = max(until, self._cooled.get(name, 0.0))

    async def cool(self, candidate: Candidate, retry_after: float | None) -> float:
        """Cool `candidate` down for every worker; returns when it comes back."""
        cap = self.settings.max_cooldown_seconds
        strikes = await self.store.incr(STRIKES_PREFIX + candidate.key, ttl=4 * cap)
        seconds = cooldown_seconds(retry_after, strikes, cap)
        until = self.clock() + seconds
        self._cooled[candidate.key] = until
        await self.store.set(COOLDOWN_PREFIX + candidate.key, repr(until), ttl=seconds)
        MODEL_COOLDOWNS.labels(candidate.model).inc()
        log.warning("model %s cooled down for %.0fs (strike %d)", candidate.model, seconds, strikes)
        return until

    async def price(self, route: Route) -> Price | None:
        """What the route's model costs: its configured `price`, else litellm's public one."""
        if route.price is not None:
            return Price(route.price.input_per_mtok / 1e6, route.price.output_per_mtok / 1e6)
        model = route.candidate.model
        if model not in self._prices:
            await load_cost_map()
            self._prices[model] = price_of(model)
        return self._prices[model]

    def count(self, who: Who, tokens: int, micro_usd: int) -> None:
        """Add one answer's usage to the counters. The turn does not wait: the amounts join
        those not written yet and one task writes them all in one round trip (under load, many
        answers' together); until then `read` adds them to what the store says."""
        if not tokens and not micro_usd:
            return
        day, month, _ = self.calendar(self.clock())
        for key, (amount, ttl) in usage_increments(who, day, month, tokens, micro_usd).items():
            entry = self._unwritten.get(key)
            if entry is None:
                self._unwritten[key] = [amount, ttl]
            else:
                entry[0] += amount
        if self._writing is None or self._writing.done():
            self._writing = self.tasks.spawn(self._write(), name="count usage")

    async def _write(self) -> None:
        while self._unwritten:
            batch = self._in_flight = self._unwritten
            self._unwritten = {}
            try:
                await self.store.incr_many({key: (amount, ttl) for key, (amount, ttl) in batch.items()})
            finally:
                self._in_flight = {}

    async def settle(self) -> None:
        """Until the usage counted so far is in the store."""
        while self._writing is not None and not self._writing.done():
            await asyncio.wait({self._writing})

    def warn_owner(self, category: str, platform: str | None, headline: str, text: str) -> None:
        if self.alert is not None:
            self.tasks.spawn(self.alert(category, platform, headline, text), name=f"alert {category}")

    async def usage_of(self, user: str) -> UsageView:
        """`user`'s usage today and this month, against the daily limits that apply to them."""
        await self.settle()
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        zone = self.budgets.zone
        values = await self.store.get_many(usage_keys(user, day_of(now, zone), month_of(now, zone)))
        tokens, cost, month_tokens, month_cost = (int(_float(value) or 0) for value in values)
        limit = self.budgets.per_user if user not in self.budgets.exempt_users else None
        return UsageView(
            user, tokens, cost / MICRO, month_tokens, month_cost / MICRO,
            limit.tokens_per_day if limit is not None else None, limit.cost_per_day if limit is not None else None,
            next_midnight(now, zone),
        )

    async def top_users(self, count: int = 10) -> list[tuple[str, int, float]]:
        """Today's heaviest users: (user, tokens, US dollars), most cost (then tokens) first."""
        await self.settle()
        now = datetime.fromtimestamp(self.clock(), timezone.utc)
        day = day_of(now, self.budgets.zone)
        keys = [key for key in await self.store.keys(f"{PREFIX}user:") if user_of_day_key(key, day) is not None]
        totals: dict[str, list[int]] = {}
        for key, value in zip(keys, await self.store.get_many(keys)):
            found = user_of_day_key(key, day)
            assert found is not None
            user, measure = found
            totals.setdefault(user, [0, 0])[0 if measure == "tokens" else 1] += int(_float(value) or 0)
        ranked = sorted(totals.items(), key=lambda item: (item[1][1], item[1][0]), reverse=True)
        return [(user, tokens, micro / MICRO) for user, (tokens, micro) in ranked[:count]]

    async def once(self, key: str, ttl: float) -> bool:
        """True the first time `key` is claimed within `ttl` (by any worker)."""
        return await self.store.set_if_absent(key, "1", ttl=ttl)


def _float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


@dataclass
class ModelSession:
    """One turn's model calls through the guard."""

    guard: ModelGuard
    agent: str
    config: AgentConfig
    who: Who
    routes: list[Route]
    attempts: list[Attempt] = field(default_factory=list)
    #: The last call failed: the next one takes over from it (a failover; a later round's
    #: call after an answer is not one, though the failed candidate stays out of the turn).
    _failing: bool = False
    _windows_known: bool = False
    _person_known: bool = False

    @property
    def secrets(self) -> list[str]:
        return [route.api_key for route in self.routes if route.api_key]

    async def next(self, request: dict[str, Any]) -> tuple[Route, dict[str, Any]]:
        """The candidate to ask now and the request to send it; raises when none may be asked
        (`CallRefused` with what to tell the person, else `AgentError` naming the failure)."""
        guard = self.guard
        if not self._person_known:
            await self._person()
        now = guard.clock()
        day, _, midnight = guard.calendar(now)
        limits, keys = guard.checks(self.who, day)
        cooled, counts = await guard.read(self.routes, keys)
        spent = over_budget(limits, counts, day) if limits else None
        if spent is not None:
            raise await self._over_budget(spent, day, midnight)
        decision = decide(
            [route.candidate for route in self.routes], self.attempts, cooled, now,
            max_wait=guard.settings.max_wait_seconds,
        )
        if isinstance(decision, GiveUp):
            raise self._gave_up(decision, now)
        assert isinstance(decision, Call)
        if decision.wait > 0:
            log.info("agent %s: waiting %.1fs for %s", self.agent, decision.wait, decision.candidate.model)
            await guard.sleep(decision.wait)
        route = next(r for r in self.routes if r.candidate.key == decision.candidate.key)
        if self._failing:
            last = self.attempts[-1]
            failed = next(r.candidate.model for r in self.routes if r.candidate.key == last.candidate)
            MODEL_FAILOVERS.labels(self.agent, failed, route.candidate.model, last.failure.kind).inc()
            before_call(FAILOVER_EVENT, {"botweave.failover.from_model": failed,
                                         "botweave.failover.to_model": route.candidate.model,
                                         "botweave.failover.reason": last.failure.kind})
        return route, route.request(request)

    async def _person(self) -> None:
        """Accounts a person linked (`/link`) share one budget: with per-person limits set, a
        turn counts against the person its account belongs to (one read, once a turn)."""
        self._person_known = True
        user, budgets = self.who.user, self.guard.budgets
        if user is None or budgets.per_user is None or user in budgets.exempt_users:
            return
        platform, _, user_id = user.partition(":")
        person = await person_of(self.guard.store, platform, user_id)
        if person != user:
            self.who = replace(self.who, user=person)

    async def failed(self, route: Route, exc: BaseException) -> Failure:
        """Note a failed call: cool its candidate down when the provider asked for a pause,
        tell the owner when its key was refused."""
        failure = classify(exc)
        self.attempts.append(Attempt(route.candidate.key, failure))
        self._failing = True
        log.warning(
            "agent %s: %s failed (%s: %s)%s", self.agent, route.candidate.model, failure.name,
            self._masked(failure.detail)[:300], "; trying another model" if failure.retryable else "",
        )
        if failure.cools:
            await self.guard.cool(route.candidate, failure.retry_after)
        elif failure.kind == "auth":
            key = f"model-alert:{route.candidate.key}"
            if await self.guard.once(key, AUTH_ALERT_EVERY_S):
                self.guard.warn_owner(
                    "model_failed", _platform(self.who), f"agent {self.agent}: {route.candidate.model} refused its key",
                    f"Agent {self.agent}: {route.candidate.model} refused its credentials ({failure.name}); "
                    "other models answer meanwhile. Check the key.",
                )
        elif failure.kind == "context_window" and not self._windows_known:
            await load_cost_map()
            self.routes = [
                Route(Candidate(r.candidate.key, r.candidate.model, window_of(r.candidate.model)), r.api_base, r.api_key, r.price)
                for r in self.routes
            ]
            self._windows_known = True
        return failure

    async def answered(self, route: Route, usage: tuple[int, int] | None) -> None:
        """Count an answer's tokens and cost (the counters are written in the background)."""
        self._failing = False
        if not usage or not any(usage):
            return
        prompt, completion = usage
        price = await self.guard.price(route)
        cost = price.cost(prompt, completion) if price is not None else 0.0
        if cost:
            COST_USD.labels(self.agent, route.candidate.model).inc(cost)
        self.guard.count(self.who, prompt + completion, round(cost * MICRO))

    def _masked(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return redact(text)

    def _gave_up(self, decision: GiveUp, now: float) -> AgentError:
        failure = decision.failure
        if decision.retry_at is not None and (failure is None or failure.retryable):
            back = datetime.fromtimestamp(decision.retry_at, timezone.utc).astimezone(self.guard.budgets.zone)
            minutes = max(1, round((decision.retry_at - now) / 60))
            when = f"{back:%H:%M} {back.tzname() or 'UTC'}"
            notice = f"The model is busy right now. Please try again after {when} (in about {minutes} min)."
            return ModelsResting(f"agent {self.agent}: every model is cooled down until {when}", notice)
        if failure is None:
            return AgentError(f"agent {self.agent} ({self.config.model}) failed: no model could be asked")
        model = next((r.candidate.model for r in self.routes if r.candidate.key == self.attempts[-1].candidate), "")
        return AgentError(
            f"agent {self.agent} ({model or self.config.model}) failed: {failure.name}: {self._masked(failure.detail)[:300]}",
            misconfigured=failure.kind == "auth" or failure.name in MISCONFIGURED,
        )

    async def _over_budget(self, spent: Spent, day: str, resets: datetime) -> OverBudget:
        guard = self.guard
        notice = limit_notice(spent, resets)
        person = self.who.user or self.who.chat or self.who.agent
        told = await guard.once(f"budget-notice:{person}:{spent.scope}:{spent.who}:{day}", DAY_TTL_S)
        if await guard.once(f"budget-alert:{spent.scope}:{spent.who}:{day}", DAY_TTL_S):
            guard.warn_owner(
                "budget", _platform(self.who), f"agent {self.agent}: a daily {spent.scope} limit reached",
                f"Daily {spent.scope} limit of {spent.limit} reached by {spent.who} (agent {self.agent}); "
                f"it resets at {resets:%H:%M} {resets.tzname() or 'UTC'}.",
            )
        return OverBudget(f"agent {self.agent}: {spent.scope} {spent.who} is over its daily limit ({spent.limit})", notice if told else None)


def _platform(who: Who) -> str | None:
    source = who.user or who.chat
    return source.partition(":")[0] if source else None


def who_of(agent: str, platform: str | None, user_id: str | None, chat_id: str | None) -> Who:
    """Whose usage a turn is: the agent's, and the person's and chat's when a message started it."""
    return Who(
        agent,
        f"{platform}:{user_id}" if platform and user_id else None,
        f"{platform}:{chat_id}" if platform and chat_id else None,
    )

