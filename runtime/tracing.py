"""OpenTelemetry traces, when `ops.tracing` is configured: one trace per turn.

The tracer here is the kernel's `Tracer`, written for what botweave's turns need of it rather
than made of the OpenTelemetry SDK: a span is a small record with slots (ids, times, its
attributes and events), made current for its `with` block by a context variable of this
module, and appended to the exporter's queue when it ends; encoding and posting happen on the
exporter's thread (`otlp_export`). The SDK's general machinery (span processors, attribute
validation, locks, a context API for any library) cost a plain message some 200 µs, an
eighth of its turn; here it is about 25 (and 10 more to encode, off the turn). What a
collector receives is the same OTLP: W3C trace context, the GenAI semantic conventions, one
resource per process.

A turn's trace starts at intake: `intake` opens the root span and writes its context (a W3C
`traceparent`) into the message's metadata, which travels with it through the journal or the
Redis stream, so the worker that answers (`turn`) continues the same trace; a model process
(`models.processes`) gets the context with each call and continues it too (`joined`). Within a
turn the kernel's spans (tools, delivery) and the ones made here (model calls, the pipeline
step that decided) nest by the current span.

Nothing here is imported unless tracing is configured, and no OpenTelemetry package at all.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from random import getrandbits
from types import TracebackType
from typing import Any
from urllib.parse import unquote

from botweave import tracing
from botweave.model_calls import ModelCalls, ModelOutput
from botweave.pipeline import Inbound, TurnOutcome
from botweave.runtime.config import TracingConfig
from botweave.runtime.otlp_export import Encoder, OtlpHttpExporter
from botweave.types import BotMessage, PlatformEvent
from botweave.version import __version__

#: Where a message carries its trace's context (W3C traceparent) from intake to its turn.
META_TRACE = "traceparent"
#: Where a carrier takes the event the next model call's span records (a failover) to a
#: model process.
CARRIED_BEFORE_CALL = "botweave-before-call"
#: Seconds one export may take; the exporter then drops the batch.
EXPORT_TIMEOUT_S = 5.0
#: The instrumentation scope of every span.
SCOPE = "botweave"

_TRACEPARENT = re.compile(r"^\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*$")
_ROOT_SAMPLE_BOUND = 1 << 64


class Parent:
    """A span's context as another process handed it over (W3C `traceparent`)."""

    __slots__ = ("sampled", "span_id", "trace_id")
    remote = True

    def __init__(self, trace_id: int, span_id: int, sampled: bool) -> None:
        self.trace_id, self.span_id, self.sampled = trace_id, span_id, sampled


def parse_traceparent(header: str) -> Parent | None:
    """The W3C `traceparent` header's context; None when it is malformed or invalid."""
    found = _TRACEPARENT.match(header)
    if found is None:
        return None
    version, trace_hex, span_hex, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    return Parent(trace_id, span_id, bool(int(flags, 16) & 1))


def traceparent(context: Span | Parent) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{'01' if context.sampled else '00'}"


#: The current span of this context: spans opened now are its children.
_ACTIVE: ContextVar[Span | Parent | None] = ContextVar("botweave_span", default=None)
#: An event the next model call's span records first (see `tracing.before_call`).
_BEFORE_CALL: ContextVar[tuple[str, tracing.Attributes] | None] = ContextVar("botweave_before_call", default=None)


class Span:
    """One span: its record and, for its `with` block, the current span (the kernel's `Span`).

    Everything a collector is sent is kept here as plain values; the exporter's thread encodes
    it. A span the sampler dropped keeps only its context (for its children and carriers)."""

    __slots__ = (
        "_token", "attributes", "end", "events", "failed", "name", "parent_id", "remote_parent", "sampled",
        "span_id", "start", "trace_id", "tracer",
    )
    remote = False

    def __init__(self, tracer: OtelTracer, name: str, attributes: tracing.Attributes,
                 parent: Span | Parent | None, start: int = 0) -> None:
        self.tracer, self.name = tracer, name
        self.attributes: dict[str, tracing.AttributeValue] = dict(attributes)
        self.events: list[tuple[int, str, tracing.Attributes]] | None = None
        self.failed = False
        self.span_id = getrandbits(64) or 1
        if parent is None:
            self.trace_id = trace_id = getrandbits(128) or 1
            self.sampled = tracer.sample(trace_id)
            self.parent_id, self.remote_parent = 0, False
        else:
            self.trace_id, self.sampled, self.parent_id, self.remote_parent = (
                parent.trace_id, parent.sampled, parent.span_id, parent.remote)
        self.start = start or time.time_ns()
        self.end = 0

    def __enter__(self) -> Span:
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.fail(kind.__name__)
        try:
            _ACTIVE.reset(self._token)
        except ValueError:
            pass  # ended in another context than it began (an async generator closed elsewhere)
        self.finish()

    def finish(self) -> None:
        """The span ended now: it goes to the exporter (once, and only when sampled)."""
        if not self.end:
            self.end = time.time_ns()
            if self.sampled:
                self.tracer.exporter.add(self)

    def set(self, key: str, value: tracing.AttributeValue) -> None:
        self.attributes[key] = value

    def fail(self, error_type: str) -> None:
        self.attributes["error.type"] = error_type
        self.failed = True

    def add_event(self, name: str, attributes: tracing.Attributes) -> None:
        if self.events is None:
            self.events = []
        self.events.append((time.time_ns(), name, attributes))


class _Turn(AbstractContextManager["Span | None"]):
    """The span of an item's turn, with this tracer the kernel's for its duration."""

    __slots__ = ("_current", "_span", "_tracer")

    def __init__(self, tracer: OtelTracer, span: Span | None) -> None:
        self._tracer, self._span = tracer, span

    def __enter__(self) -> Span | None:
        self._current = tracing.CURRENT.set(self._tracer)
        return None if self._span is None else self._span.__enter__()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self._span is not None:
                self._span.__exit__(kind, exc, tb)
        finally:
            tracing.CURRENT.reset(self._current)


class OtelTracer:
    """The kernel's `Tracer`, exporting over OTLP/HTTP; see the module docstring."""

    def __init__(self, config: TracingConfig, *, role: str = "all") -> None:
        ratio = config.sample_ratio
        self._bound = None if ratio >= 1 else round(ratio * _ROOT_SAMPLE_BOUND)
        encoder = Encoder(resource_attributes(config.service_name, role), SCOPE)
        headers = {name: value.get_secret_value() for name, value in config.headers.items()}
        self.exporter = OtlpHttpExporter(f"{config.endpoint}/v1/traces", headers, EXPORT_TIMEOUT_S, encoder)

    def sample(self, trace_id: int) -> bool:
        """Whether a new trace is kept: all of them, or `sample_ratio` of them by the trace id
        (as OpenTelemetry's TraceIdRatioBased, so every process decides alike); a span with a
        parent follows its parent."""
        return self._bound is None or (trace_id & 0xFFFF_FFFF_FFFF_FFFF) < self._bound

    # --- the kernel's Tracer ----------------------------------------------------------------

    def span(self, name: str, attributes: tracing.Attributes) -> Span:
        return Span(self, name, attributes, _ACTIVE.get())

    def event(self, name: str, attributes: tracing.Attributes) -> None:
        current = _ACTIVE.get()
        if isinstance(current, Span) and current.sampled:
            current.add_event(name, attributes)

    def before_call(self, name: str, attributes: tracing.Attributes) -> None:
        _BEFORE_CALL.set((name, attributes))

    def carrier(self) -> dict[str, str]:
        current = _ACTIVE.get()
        carried = {} if current is None else {META_TRACE: traceparent(current)}
        pending = _BEFORE_CALL.get()
        if pending is not None:  # the model process's span of the call records it
            _BEFORE_CALL.set(None)
            carried[CARRIED_BEFORE_CALL] = json.dumps([pending[0], dict(pending[1])])
        return carried

    # --- a turn ---------------------------------------------------------------------------------

    def intake(self, item: BotMessage | PlatformEvent) -> AbstractContextManager[object]:
        """The root span of an item's trace, its context written into the message."""
        if not isinstance(item, BotMessage):
            return tracing.UNTRACED
        span = Span(self, "botweave.intake", {
            "botweave.platform": item.platform, "botweave.channel_type": item.channel.channel_type,
        }, _ACTIVE.get())
        item.metadata[META_TRACE] = traceparent(span)
        return _Finishing(span)

    def turn(self, item: BotMessage | PlatformEvent) -> AbstractContextManager[Span | None]:
        """The span of the item's turn, continuing the trace its intake began (in this
        process or another); the kernel's spans within it are this tracer's."""
        if not isinstance(item, BotMessage):
            return _Turn(self, None)
        carried = item.metadata.get(META_TRACE)
        parent = parse_traceparent(carried) if isinstance(carried, str) else None
        return _Turn(self, Span(self, "botweave.turn", {
            "botweave.platform": item.platform, "botweave.channel_type": item.channel.channel_type,
        }, parent))

    @contextmanager
    def joined(self, carried: Mapping[str, str] | None) -> Iterator[None]:
        """Work another process handed over (a model call in a model process): its spans
        continue the trace whose context came with it."""
        token = tracing.CURRENT.set(self)
        header = carried.get(META_TRACE) if carried else None
        attached = _ACTIVE.set(parse_traceparent(header)) if header else None
        pending = carried.get(CARRIED_BEFORE_CALL) if carried else None
        before = _BEFORE_CALL.set(_carried_event(pending)) if pending else None
        try:
            yield
        finally:
            if before is not None:
                _BEFORE_CALL.reset(before)
            if attached is not None:
                _ACTIVE.reset(attached)
            tracing.CURRENT.reset(token)

    @contextmanager
    def run(self, name: str, attributes: tracing.Attributes) -> Iterator[tracing.Span]:
        """A turn nobody wrote (a schedule's): its own trace."""
        token = tracing.CURRENT.set(self)
        try:
            with self.span(name, attributes) as span:
                yield span
        finally:
            tracing.CURRENT.reset(token)

    def decided(self, step: object, started_ns: int, inbound: Inbound, outcome: TurnOutcome) -> None:
        """A pipeline step that ended the item's way (a refusal, a command, a room): its span,
        from when the step began, naming it and why (the pipeline's `decided` observer)."""
        name = str(getattr(step, "__qualname__", "") or type(step).__name__)
        Span(self, "botweave.step", {
            "botweave.step": name, "botweave.outcome": outcome.status.value, "botweave.reason": outcome.detail[:200],
        }, _ACTIVE.get(), started_ns).finish()

    def close(self) -> None:
        """Export what is queued (briefly: a collector that is down does not hold a stop up)."""
        self.exporter.close()


class _Finishing(AbstractContextManager[Span]):
    """A span that ends with the `with` block without becoming the current span (intake's:
    the turn continues its trace through the message, not through this context)."""

    __slots__ = ("_span",)

    def __init__(self, span: Span) -> None:
        self._span = span

    def __enter__(self) -> Span:
        return self._span

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self._span.fail(kind.__name__)
        self._span.finish()


def _carried_event(text: str) -> tuple[str, tracing.Attributes] | None:
    """The event a carrier brought for the next model call's span; None when it is garbled."""
    try:
        name, attributes = json.loads(text)
    except ValueError:
        return None
    if not isinstance(name, str) or not isinstance(attributes, dict):
        return None
    return name, {str(k): v for k, v in attributes.items() if isinstance(v, str | int | float | bool)}


def resource_attributes(service_name: str, role: str) -> dict[str, tracing.AttributeValue]:
    """The process's resource: OpenTelemetry's `telemetry.sdk.*` and `service.instance.id`,
    what `OTEL_RESOURCE_ATTRIBUTES` adds (`key=value,...`, values percent-encoded), then the
    service's name and the process's role, which win."""
    found: dict[str, tracing.AttributeValue] = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "botweave",
        "telemetry.sdk.version": __version__,
        "service.instance.id": str(uuid.uuid4()),
    }
    for pair in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            found[key.strip()] = unquote(value.strip())
    found["service.name"] = service_name
    found["botweave.role"] = role
    return found


def system_of(model: str) -> str:
    """`gen_ai.system` of a litellm model id: its provider prefix (`openai/gpt-4o` → openai)."""
    provider, sep, _ = model.partition("/")
    return provider if sep else "openai"


class TracedCalls:
    """Model calls, each a span with OpenTelemetry's GenAI attributes; a failover the guard
    decided before the call (`tracing.before_call`) is the span's first event."""

    def __init__(self, inner: ModelCalls, tracer: OtelTracer) -> None:
        self.inner = inner
        self.tracer = tracer

    def __getattr__(self, name: str) -> Any:  # open/close and whatever else the calls offer
        return getattr(self.inner, name)

    def _span(self, request: dict[str, Any], streamed: bool) -> Span:
        model = str(request.get("model", ""))
        span = self.tracer.span(f"chat {model}", {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": system_of(model),
            "gen_ai.request.model": model,
            "botweave.streamed": streamed,
        })
        before = _BEFORE_CALL.get()
        if before is not None:
            _BEFORE_CALL.set(None)
            if span.sampled:
                span.add_event(*before)
        return span

    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        with self._span(request, False) as span:
            output = await self.inner.answer(request)
            _answered(span, output)
            return output

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        with self._span(request, True) as span:
            named = False
            async for piece in self.inner.stream(request):
                if piece.usage is not None or (piece.model and not named):
                    named = named or bool(piece.model)
                    _answered(span, piece)
                yield piece


def _answered(span: Span, output: ModelOutput) -> None:
    """What the provider's answer says: the model that answered, and the tokens."""
    if output.model:
        span.set("gen_ai.response.model", output.model)
    if output.usage is not None:
        span.set("gen_ai.usage.input_tokens", output.usage[0])
        span.set("gen_ai.usage.output_tokens", output.usage[1])
