"""OpenTelemetry traces, when `ops.tracing` is configured: one trace per turn.

The tracer here is the kernel's `Tracer` made of the OpenTelemetry SDK, on a provider of its
own (the program's global provider, if it has one, is left alone). A turn's trace starts at
intake: `intake` opens the root span and writes its context into the message's metadata,
which travels with it through the journal or the Redis stream, so the worker that answers
(`turn`) continues the same trace; a model process (`models.processes`) gets the context
with each call and continues it too (`joined`). Within a turn the kernel's spans (tools, delivery) and the
ones made here (model calls, the pipeline step that decided) nest by OpenTelemetry's own
context. Spans leave through a batch processor on its own thread: a collector that is down
or slow costs a turn nothing, and what could not be exported is counted, not retried.

Nothing here is imported unless tracing is configured.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any

from botweave import tracing
from botweave.metrics import TRACE_SPANS_DROPPED
from botweave.model_calls import ModelCalls, ModelOutput
from botweave.pipeline import Inbound, TurnOutcome
from botweave.runtime.config import TracingConfig
from botweave.runtime.otlp_export import OtlpHttpExporter
from botweave.types import BotMessage, PlatformEvent
from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

#: Where a message carries its trace's context (W3C traceparent) from intake to its turn.
META_TRACE = "traceparent"
#: Seconds one export may take; the batch thread then drops the batch.
EXPORT_TIMEOUT_S = 5.0
#: The instrumentation scope of every span.
SCOPE = "botweave"

_PROPAGATOR = TraceContextTextMapPropagator()


class _CountingExporter(SpanExporter):
    """The OTLP/HTTP exporter, with what it failed to export counted."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # noqa: BLE001 - the batch thread's one boundary: count, never raise
            log.debug("tracing: export failed: %s", type(exc).__name__)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            TRACE_SPANS_DROPPED.inc(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _set_each(span: trace.Span, attributes: tracing.Attributes) -> None:
    """Attributes set one at a time: the SDK checks a mapping given whole against the abstract
    `Sequence` first, which is slow in a process whose ABC caches are often invalidated."""
    for key, value in attributes.items():
        span.set_attribute(key, value)


class _Span:
    """The kernel's `Span` over an OpenTelemetry span, current for the `with` block.

    A class rather than `start_as_current_span`: a turn opens several spans, and the generator
    context managers and the attribute mapping's checks cost more than the span itself.
    Attributes are set one by one, each value a plain str/int/float/bool."""

    __slots__ = ("_attributes", "_name", "_parent", "_span", "_token", "_tracer")

    def __init__(self, tracer: trace.Tracer, name: str, attributes: tracing.Attributes,
                 parent: Context | None = None) -> None:
        self._tracer, self._name, self._attributes, self._parent = tracer, name, attributes, parent

    def __enter__(self) -> _Span:
        self._span = span = self._tracer.start_span(self._name, context=self._parent)
        _set_each(span, self._attributes)
        self._token = context.attach(trace.set_span_in_context(span))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.fail(kind.__name__)
        context.detach(self._token)
        self._span.end()

    def set(self, key: str, value: tracing.AttributeValue) -> None:
        self._span.set_attribute(key, value)

    def fail(self, error_type: str) -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR))


class OtelTracer:
    """The kernel's `Tracer`, exporting over OTLP/HTTP; see the module docstring."""

    def __init__(self, config: TracingConfig, *, role: str = "all") -> None:
        resource = Resource.create({"service.name": config.service_name, "botweave.role": role})
        self.provider = TracerProvider(resource=resource, sampler=_sampler(config.sample_ratio))
        exporter = OtlpHttpExporter(
            f"{config.endpoint}/v1/traces", {name: value.get_secret_value() for name, value in config.headers.items()},
            EXPORT_TIMEOUT_S, resource, SCOPE,
        )
        # Large batches, sent every two seconds: each post costs the same whatever it carries.
        self.provider.add_span_processor(BatchSpanProcessor(
            _CountingExporter(exporter), schedule_delay_millis=2000, max_queue_size=16384, max_export_batch_size=2048,
        ))
        self.tracer = self.provider.get_tracer(SCOPE)

    # --- the kernel's Tracer ----------------------------------------------------------------

    def span(self, name: str, attributes: tracing.Attributes) -> _Span:
        return _Span(self.tracer, name, attributes)

    def event(self, name: str, attributes: tracing.Attributes) -> None:
        trace.get_current_span().add_event(name, attributes)

    def carrier(self) -> dict[str, str]:
        carried: dict[str, str] = {}
        _PROPAGATOR.inject(carried)
        return carried

    # --- a turn ---------------------------------------------------------------------------------

    def intake(self, item: BotMessage | PlatformEvent) -> AbstractContextManager[object]:
        """The root span of an item's trace, its context written into the message."""
        if not isinstance(item, BotMessage):
            return tracing.UNTRACED
        return self._intake(item)

    @contextmanager
    def _intake(self, msg: BotMessage) -> Iterator[object]:
        span = self.tracer.start_span("botweave.intake")
        span.set_attribute("botweave.platform", msg.platform)
        span.set_attribute("botweave.channel_type", msg.channel.channel_type)
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
        if META_TRACE in carrier:
            msg.metadata[META_TRACE] = carrier[META_TRACE]
        try:
            yield span
        finally:
            span.end()

    @contextmanager
    def turn(self, item: BotMessage | PlatformEvent) -> Iterator[tracing.Span | None]:
        """The span of the item's turn, continuing the trace its intake began (in this
        process or another); the kernel's spans within it are this tracer's."""
        if not isinstance(item, BotMessage):
            yield None
            return
        carried = item.metadata.get(META_TRACE)
        parent = _PROPAGATOR.extract({META_TRACE: carried}) if isinstance(carried, str) else None
        attributes = {"botweave.platform": item.platform, "botweave.channel_type": item.channel.channel_type}
        token = tracing.CURRENT.set(self)
        try:
            with _Span(self.tracer, "botweave.turn", attributes, parent) as span:
                yield span
        finally:
            tracing.CURRENT.reset(token)

    @contextmanager
    def joined(self, carried: dict[str, str] | None) -> Iterator[None]:
        """Work another process handed over (a model call in a model process): its spans
        continue the trace whose context came with it."""
        token = tracing.CURRENT.set(self)
        attached = context.attach(_PROPAGATOR.extract(carried)) if carried else None
        try:
            yield
        finally:
            if attached is not None:
                context.detach(attached)
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
        span = self.tracer.start_span("botweave.step", start_time=started_ns)
        _set_each(span, {"botweave.step": name, "botweave.outcome": outcome.status.value,
                         "botweave.reason": outcome.detail[:200]})
        span.end()

    def close(self) -> None:
        """Export what is queued (briefly: a collector that is down does not hold a stop up)."""
        self.provider.force_flush(int(EXPORT_TIMEOUT_S * 1000))
        self.provider.shutdown()


def _sampler(ratio: float) -> Sampler:
    """A turn's spans are all kept or all dropped, by the trace's root; every trace kept needs
    no draw at all."""
    return ParentBased(ALWAYS_ON if ratio >= 1 else TraceIdRatioBased(ratio))


def system_of(model: str) -> str:
    """`gen_ai.system` of a litellm model id: its provider prefix (`openai/gpt-4o` → openai)."""
    provider, sep, _ = model.partition("/")
    return provider if sep else "openai"


class TracedCalls:
    """Model calls, each a span with OpenTelemetry's GenAI attributes."""

    def __init__(self, inner: ModelCalls, tracer: OtelTracer) -> None:
        self.inner = inner
        self.tracer = tracer

    def __getattr__(self, name: str) -> Any:  # open/close and whatever else the calls offer
        return getattr(self.inner, name)

    def _span(self, request: dict[str, Any], streamed: bool) -> AbstractContextManager[tracing.Span]:
        model = str(request.get("model", ""))
        return self.tracer.span(f"chat {model}", {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": system_of(model),
            "gen_ai.request.model": model,
            "botweave.streamed": streamed,
        })

    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        with self._span(request, False) as span:
            output = await self.inner.answer(request)
            _usage(span, request, output)
            return output

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        with self._span(request, True) as span:
            async for piece in self.inner.stream(request):
                if piece.usage is not None:
                    _usage(span, request, piece)
                yield piece


def _usage(span: tracing.Span, request: dict[str, Any], output: ModelOutput) -> None:
    span.set("gen_ai.response.model", str(request.get("model", "")))
    if output.usage is not None:
        span.set("gen_ai.usage.input_tokens", output.usage[0])
        span.set("gen_ai.usage.output_tokens", output.usage[1])

