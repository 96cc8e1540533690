"""Spans posted to an OTLP/HTTP collector (`<endpoint>/v1/traces`, protobuf), from the batch
processor's thread.

Why not the OTLP exporter package: its encoder is written for any span any library makes, and
per span it hashes the resource (a JSON dump of its attributes), looks up the scope and checks
each attribute's type against abstract base classes: about 28 µs a span, against 10 µs here,
and a turn makes four or five spans, so that difference alone was a twentieth of a turn's
CPU. botweave's spans are all of one resource and one scope, their attribute values plain
str/int/float/bool (the kernel's `AttributeValue`), with no links: each is built in place
in an opentelemetry-proto `ExportTraceServiceRequest`. A failed post is not retried (the
collector being down must cost nothing; the caller counts what was lost).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode
from opentelemetry.util.types import Attributes

Message = TypeVar("Message", covariant=True)


class Repeated(Protocol[Message]):
    """A repeated message field, whose `add` builds the next element in place."""

    def add(self, **fields: Any) -> Message: ...


#: `Span.flags`: the flags say whether the parent was remote (another process's span).
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


def put(into: AnyValue, found: object) -> None:
    if isinstance(found, str):
        into.string_value = found
    elif isinstance(found, bool):
        into.bool_value = found
    elif isinstance(found, int):
        into.int_value = found
    elif isinstance(found, float):
        into.double_value = found
    else:
        into.string_value = str(found)  # a sequence, were one ever set: shown, not lost


def add_attributes(into: Repeated[KeyValue], attributes: Attributes) -> None:
    for key, found in (attributes or {}).items():
        put(into.add(key=key).value, found)


def add_span(into: Repeated[Span], span: ReadableSpan) -> None:
    """One span as an OTLP protobuf `Span`, built in place (a message passed to a constructor
    would be copied)."""
    context, parent = span.context, span.parent
    assert context is not None  # a recorded span always has one
    flags = _HAS_IS_REMOTE | _IS_REMOTE if parent is not None and parent.is_remote else _HAS_IS_REMOTE
    built = into.add(
        trace_id=context.trace_id.to_bytes(16, "big"),
        span_id=context.span_id.to_bytes(8, "big"),
        trace_state=context.trace_state.to_header() if context.trace_state else "",
        parent_span_id=parent.span_id.to_bytes(8, "big") if parent is not None else b"",
        name=span.name,
        kind=span.kind.value + 1,  # the protobuf's 0 is "unspecified"
        start_time_unix_nano=span.start_time or 0,
        end_time_unix_nano=span.end_time or 0,
        dropped_attributes_count=span.dropped_attributes,
        dropped_events_count=span.dropped_events,
        flags=flags,
    )
    add_attributes(built.attributes, span.attributes)
    for event in span.events:
        add_attributes(built.events.add(time_unix_nano=event.timestamp, name=event.name).attributes, event.attributes)
    status = span.status
    if status.status_code is not StatusCode.UNSET:
        built.status.code = Status.STATUS_CODE_ERROR if status.status_code is StatusCode.ERROR else Status.STATUS_CODE_OK
        if status.description:
            built.status.message = status.description


class OtlpHttpExporter(SpanExporter):
    """Posts each batch as one `ExportTraceServiceRequest`; a 2xx answer is success."""

    def __init__(self, url: str, headers: Mapping[str, str], timeout: float, resource: Resource, scope: str) -> None:
        self.url = url
        self.timeout = timeout
        self._session = requests.Session()
        self._session.headers.update({"Content-Type": "application/x-protobuf", **headers})
        self._resource = resource
        self._scope = scope

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        request = ExportTraceServiceRequest()
        batch = request.resource_spans.add()
        add_attributes(batch.resource.attributes, self._resource.attributes)
        scoped = batch.scope_spans.add()
        scoped.scope.name = self._scope
        for span in spans:
            add_span(scoped.spans, span)
        return request.SerializeToString()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        answer = self._session.post(self.url, data=self.encode(spans), timeout=self.timeout)
        return SpanExportResult.SUCCESS if 200 <= answer.status_code < 300 else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self._session.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # nothing is held here: the batch processor holds what waits
