"""Which model to ask next when a call failed: the one decision every model client shares.

An agent has candidates: its model (once per key in `api_keys`, in turn) and then its
`fallbacks`, in order. After a failed call, `classify` says what kind of failure it was,
whichever client made the call (botweave's own OpenAI-compatible client, litellm, or either
in a model process, whose failures cross a pipe as `ModelCallFailed`). `decide` then picks
what happens next from the candidates, the turn's attempts so far, the cool-downs every
worker shares and the time: call a candidate (perhaps after waiting for it to come back),
or give up. It does no I/O and reads no clock, so it is the same decision in every process
and is tested as a table.

The rules, in the order `decide` applies them:

- a failure that is not worth another candidate (a bad request, content refused, anything
  unknown) ends the turn with that error;
- a candidate whose credentials were refused, or whose context window was too small, is not
  asked again in this turn; after a context-window failure only candidates with a larger
  window (as litellm's model information gives it) are asked;
- each candidate is asked at most `TRIES_EACH` times in one turn, candidates not yet asked
  before those asked already, in configuration order;
- a cooled-down candidate is skipped; when every one left is cooled, the turn waits for the
  first to come back if that is within `max_wait` seconds, else gives up saying when.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Literal

#: What went wrong with a call, as far as choosing the next candidate goes.
FailureKind = Literal[
    "rate_limited",
    "overloaded",
    "timeout",
    "server_error",
    "connection",
    "stream_cut",
    "context_window",
    "auth",
    "bad_request",
    "other",
]

#: Failures that move the turn on to the next candidate.
RETRYABLE: frozenset[str] = frozenset(
    {"rate_limited", "overloaded", "timeout", "server_error", "connection", "stream_cut", "context_window", "auth"}
)
#: Failures that cool the candidate down for every worker: the provider asked for a pause.
COOLING: frozenset[str] = frozenset({"rate_limited", "overloaded"})
#: Failures after which a candidate is not asked again within the turn.
FINAL_FOR_CANDIDATE: frozenset[str] = frozenset({"auth", "context_window"})
#: How often one candidate may be asked in one turn.
TRIES_EACH = 2
#: The first cool-down without a `Retry-After`, doubled for each one after it.
FIRST_COOLDOWN_S = 5.0
#: The pause before asking a candidate again after a passing failure (timeout, broken stream).
RETRY_PAUSE_S = 0.5

_CONTEXT = re.compile(r"context[ _-]?(length|window)|maximum context|too many tokens|prompt is too long", re.I)
_OVERLOADED = re.compile(r"overloaded", re.I)
_CUT = re.compile(r"ended before|without a finish", re.I)


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed call as `decide` reads it; `detail` is the error's own text (for the log)."""

    kind: FailureKind
    status: int | None = None
    retry_after: float | None = None
    name: str = ""
    detail: str = ""

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE

    @property
    def cools(self) -> bool:
        return self.kind in COOLING


@dataclass(frozen=True, slots=True)
class Candidate:
    """One way to answer: a model with one set of credentials. `key` names it in cool-downs
    (the model and a fingerprint of the credential, never the credential); `window` is the
    model's context in tokens when known."""

    key: str
    model: str
    window: int | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    """A call this turn made and how it failed."""

    candidate: str
    failure: Failure


@dataclass(frozen=True, slots=True)
class Call:
    """Ask `candidate`, after waiting `wait` seconds."""

    candidate: Candidate
    wait: float = 0.0


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No candidate is left: `failure` is the error that ends the turn (None when nothing was
    tried because every candidate is cooled down); `retry_at` is when the first cooled
    candidate comes back (None when none is cooled)."""

    failure: Failure | None
    retry_at: float | None = None


Decision = Call | GiveUp


def decide(
    candidates: Sequence[Candidate],
    attempts: Sequence[Attempt],
    cooled: Mapping[str, float],
    now: float,
    *,
    max_wait: float,
) -> Decision:
    """What to do next; `cooled` maps candidate keys to when their cool-down ends (seconds,
    the same clock as `now`)."""
    last = attempts[-1].failure if attempts else None
    if last is not None and not last.retryable:
        return GiveUp(last, _earliest(candidates, cooled, now))
    tries = Counter(attempt.candidate for attempt in attempts)
    done = {attempt.candidate for attempt in attempts if attempt.failure.kind in FINAL_FOR_CANDIDATE}
    floor = _window_floor(candidates, attempts)
    left = [
        (position, candidate)
        for position, candidate in enumerate(candidates)
        if candidate.key not in done
        and tries[candidate.key] < TRIES_EACH
        and (floor is None or (candidate.window or 0) > floor)
    ]
    ready = [(tries[c.key], position, c) for position, c in left if cooled.get(c.key, 0.0) <= now]
    if ready:
        asked, _, candidate = min(ready, key=lambda entry: (entry[0], entry[1]))
        return Call(candidate, RETRY_PAUSE_S * 2 ** (asked - 1) if asked else 0.0)
    if left:
        back, _, candidate = min((cooled[c.key], position, c) for position, c in left)
        if back - now <= max_wait:
            return Call(candidate, back - now)
        return GiveUp(last, back)
    return GiveUp(last, _earliest(candidates, cooled, now))


def _window_floor(candidates: Sequence[Candidate], attempts: Sequence[Attempt]) -> int | None:
    """The largest context that was too small this turn; None when none was."""
    windows = {candidate.key: candidate.window or 0 for candidate in candidates}
    failed = [windows.get(a.candidate, 0) for a in attempts if a.failure.kind == "context_window"]
    return max(failed) if failed else None


def _earliest(candidates: Sequence[Candidate], cooled: Mapping[str, float], now: float) -> float | None:
    times = [cooled[c.key] for c in candidates if cooled.get(c.key, 0.0) > now]
    return min(times) if times else None


def cooldown_seconds(retry_after: float | None, strikes: int, cap: float) -> float:
    """How long a candidate rests: what the provider asked (`Retry-After`), else 5 s doubled
    for each cool-down in a row (`strikes` counts this one), never longer than `cap`."""
    if retry_after is not None and retry_after > 0:
        return min(retry_after, cap)
    return float(min(FIRST_COOLDOWN_S * 2 ** max(strikes - 1, 0), cap))


# --- reading a failure ----------------------------------------------------------------------

_KIND_BY_NAME: dict[str, FailureKind] = {
    "RateLimitError": "rate_limited",
    "ServiceUnavailableError": "overloaded",
    "Timeout": "timeout",
    "APITimeoutError": "timeout",
    "TimeoutError": "timeout",
    "APIConnectionError": "connection",
    "ModelProcessExited": "connection",
    "InternalServerError": "server_error",
    "BadGatewayError": "server_error",
    "ContextWindowExceededError": "context_window",
    "AuthenticationError": "auth",
    "PermissionDeniedError": "auth",
}


def classify(exc: BaseException) -> Failure:
    """What kind of failure `exc` is, from its status, type name, error code and text: the
    same for botweave's client's errors, litellm's and those a model process passes on."""
    name = str(getattr(exc, "kind", "") or type(exc).__name__)
    status = _status(exc)
    detail = str(exc)
    code = str(getattr(exc, "code", "") or "")
    retry_after = _number(getattr(exc, "retry_after", None))
    if retry_after is None:
        retry_after = retry_after_of(_headers(exc))
    kind = _kind(name, status, code, detail, isinstance(exc, asyncio.TimeoutError))
    return Failure(kind, status, retry_after, name, detail)


def _kind(name: str, status: int | None, code: str, detail: str, timed_out: bool) -> FailureKind:
    if name == "ContextWindowExceededError" or code == "context_length_exceeded" or (
        status in (400, 413, None) and _CONTEXT.search(detail)
    ):
        return "context_window"
    if _OVERLOADED.search(detail) or status == 529:
        return "overloaded"
    if status == 429:
        return "rate_limited"
    if status == 503:
        return "overloaded"
    if status in (401, 403):
        return "auth"
    if status == 408 or timed_out:
        return "timeout"
    if status is not None and status >= 500:
        return "server_error"
    if name == "APIConnectionError" and _CUT.search(detail):
        return "stream_cut"
    by_name = _KIND_BY_NAME.get(name)
    if by_name is not None:
        return by_name
    return "bad_request" if status is not None and 400 <= status < 500 else "other"


def _status(exc: BaseException) -> int | None:
    for attribute in ("status", "status_code"):
        value = getattr(exc, attribute, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _headers(exc: BaseException) -> Any:
    """The HTTP headers of the answer that failed, where the exception carries them (litellm
    keeps them as `litellm_response_headers`, the SDKs on `response`)."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    return headers


def retry_after_of(headers: Any, now: float | None = None) -> float | None:
    """The seconds a server's `retry-after-ms` or `Retry-After` (seconds or an HTTP date) asks
    for; None without one."""
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return float(millis) / 1000
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            moment = parsedate_to_datetime(value).timestamp()
            return max(0.0, moment - (time.time() if now is None else now))
    except (TypeError, ValueError, AttributeError):
        return None
