"""What botweave counts, for Prometheus, and what one turn used.

The series live in a registry of their own rather than prometheus_client's process-wide
default: `/metrics` then shows botweave's series and nothing else a program embedding botweave
registered, and the names are a contract that dashboards and alerts are written against. They
are process-wide, as Prometheus clients are by design: one process is one scrape target,
whatever role it plays.

Each part counts where it already decides: the Adapter base for every outbound action, the
agent for every model call, the runtime for inbound items and turns, a platform's pacing for
the time it waits on rate limits, the shared store's client for its failures.

`TurnUsage` is what the per-turn log line reports: the model calls a turn made, counted in a
context variable so the agent (which makes the calls) and the runtime (which logs the turn)
need not pass it through every layer in between.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

#: The registry `/metrics` serves.
REGISTRY = CollectorRegistry(auto_describe=True)

#: Seconds: a quick command answers in milliseconds, a model with tools may take minutes.
_TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)

INBOUND = Counter(
    "botweave_inbound_total",
    "Inbound items handled, by platform, kind (message type or event kind) and outcome (why the pipeline stopped)",
    ["platform", "kind", "outcome"],
    registry=REGISTRY,
)
TURNS = Counter(
    "botweave_turns_total",
    "Agent turns, by agent and outcome (replied, silent, cancelled, agent_error)",
    ["agent", "outcome"],
    registry=REGISTRY,
)
TURN_SECONDS = Histogram(
    "botweave_turn_seconds",
    "Seconds from the start of an agent turn to its reply delivered",
    buckets=_TURN_BUCKETS,
    registry=REGISTRY,
)
MODEL_SECONDS = Histogram(
    "botweave_model_seconds",
    "Seconds each model call took (a streamed call: until its last piece)",
    buckets=_TURN_BUCKETS,
    registry=REGISTRY,
)
TOKENS = Counter(
    "botweave_tokens_total",
    "Tokens the model reported, by agent, the model that answered and kind (prompt, completion)",
    ["agent", "model", "kind"],
    registry=REGISTRY,
)
COST_USD = Counter(
    "botweave_cost_usd_total",
    "US dollars the model calls cost (litellm's public prices or the agent's `price`), by agent and model",
    ["agent", "model"],
    registry=REGISTRY,
)
MODEL_FAILOVERS = Counter(
    "botweave_model_failovers_total",
    "Model calls handed to another candidate after a failure, by agent, the model that failed, the one asked "
    "next and why",
    ["agent", "from_model", "to_model", "reason"],
    registry=REGISTRY,
)
MODEL_COOLDOWNS = Counter(
    "botweave_model_cooldowns_total",
    "Cool-downs a model (with one of its keys) was put in after a rate limit or an overload",
    ["model"],
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    "botweave_tool_calls_total",
    "Tool calls agents made, by tool and outcome",
    ["tool", "outcome"],
    registry=REGISTRY,
)
OUTBOUND = Counter(
    "botweave_outbound_total",
    "Outbound platform actions (send, edit, delete, react), by platform, action and result",
    ["platform", "action", "result"],
    registry=REGISTRY,
)
RATE_LIMIT_WAIT = Counter(
    "botweave_rate_limit_wait_seconds_total",
    "Seconds spent waiting on a platform's rate limits (its 429 answers and our own pacing)",
    ["platform"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "botweave_queue_depth",
    "Inbound items this process accepted and has not finished (waiting for their turn or running)",
    registry=REGISTRY,
)
STORE_ERRORS = Counter(
    "botweave_store_errors_total",
    "Store operations that failed (the store unreachable, timing out or refusing)",
    registry=REGISTRY,
)
LOOP_STALL_SECONDS = Gauge(
    "botweave_loop_stall_seconds",
    "Seconds the event loop is behind on the loop watchdog's callback, measured from a thread (0 while it keeps up)",
    registry=REGISTRY,
)
LOOP_STALLS = Counter(
    "botweave_loop_stalls_total",
    "Times the event loop went without running a callback for longer than ops.loop_stall_seconds",
    registry=REGISTRY,
)
STARTUP_SECONDS = Gauge(
    "botweave_startup_seconds",
    "Seconds this process took from its start until it served (its platforms started)",
    registry=REGISTRY,
)
CONFIG_RELOADS = Counter(
    "botweave_config_reloads_total",
    "Configuration reloads, by outcome (applied, unchanged, invalid: refused, nothing changed)",
    ["outcome"],
    registry=REGISTRY,
)


class _Exposed:
    """The registry as scraped: without the `_created` sample prometheus_client adds to every
    counter and histogram (a start timestamp per series that doubles the output and that no
    query here uses). Filtered at exposition, so nothing process-wide is switched off."""

    def collect(self) -> Iterable[Metric]:
        for family in REGISTRY.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


CONTENT_TYPE = CONTENT_TYPE_LATEST


def exposition() -> bytes:
    """The text format Prometheus scrapes."""
    return generate_latest(_Exposed())


# --- what one turn used ---------------------------------------------------------------------


@dataclass
class TurnUsage:
    """The model calls of one turn: how many, how long, and the tokens they reported."""

    calls: int = 0
    seconds: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    #: The model that gave the latest answer ("" before one did).
    model: str = ""


_USAGE: ContextVar[TurnUsage | None] = ContextVar("botweave_turn_usage", default=None)


@contextmanager
def counting_usage() -> Iterator[TurnUsage]:
    """Count the model calls made inside this block (in this task and what it awaits)."""
    usage = TurnUsage()
    token = _USAGE.set(usage)
    try:
        yield usage
    finally:
        _USAGE.reset(token)


def model_call(agent: str, seconds: float, tokens_in: int = 0, tokens_out: int = 0, *, model: str = "") -> None:
    """One model call finished (or failed) after `seconds`, reporting these token counts;
    `model` is the model that answered (empty for a call that failed)."""
    MODEL_SECONDS.observe(seconds)
    if tokens_in:
        TOKENS.labels(agent, model, "prompt").inc(tokens_in)
    if tokens_out:
        TOKENS.labels(agent, model, "completion").inc(tokens_out)
    usage = _USAGE.get()
    if usage is not None:
        usage.calls += 1
        usage.seconds += seconds
        usage.tokens_in += tokens_in
        usage.tokens_out += tokens_out
        if model:
            usage.model = model


def answered_by() -> str:
    """The model that gave the current turn's latest answer ("" when none did yet)."""
    usage = _USAGE.get()
    return usage.model if usage is not None else ""


TRACE_SPANS_DROPPED = Counter(
    "botweave_trace_spans_dropped_total",
    "Trace spans that could not be exported (the collector down, slow or refusing); turns never wait for it",
    registry=REGISTRY,
)
