"""Spans leaving the process: queued as they end, posted to an OTLP/HTTP collector
(`<endpoint>/v1/traces`, protobuf) by a thread of their own.

Why botweave encodes the protobuf itself: its spans are all of one resource and one scope,
with plain str/int/float/bool attribute values and no links, and most attributes repeat from
turn to turn (the platform, the model, the outcome). Written out field by field, with each
attribute's encoding remembered, a span costs a few microseconds to encode; built as
opentelemetry-proto messages it cost about ten, and through the OTLP exporter package about
thirty. The wire format is OTLP's `ExportTraceServiceRequest` exactly: the tests decode what
is posted with opentelemetry-proto.

The turn only appends a finished span to a bounded queue. A collector that is down or slow
costs the turn nothing: a full queue drops the span and a failed post drops its batch, each
counted in `botweave_trace_spans_dropped_total`, never retried.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import requests
from botweave.metrics import TRACE_SPANS_DROPPED
from botweave.tracing import AttributeValue

log = logging.getLogger(__name__)

#: Spans waiting for the exporter; past this, a span is dropped (and counted).
QUEUE_CAPACITY = 16384
#: Spans in one post, at most; a queue this long wakes the exporter before its time.
BATCH_SIZE = 2048
#: Seconds between posts: each post costs about the same whatever it carries.
EXPORT_EVERY_S = 2.0

#: `Span.flags`: the flags say whether the parent was remote (another process's span).
HAS_IS_REMOTE = 0x100
IS_REMOTE = 0x200
#: `Status.code` of a failed span.
STATUS_ERROR = 2
#: `Span.kind`: every span botweave makes is internal work of the service.
KIND_INTERNAL = 1


class Finished(Protocol):
    """A span as it ended (the tracer's span record): what the encoder reads of it."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int
    remote_parent: bool
    start: int
    end: int
    attributes: dict[str, AttributeValue]
    events: list[tuple[int, str, Mapping[str, AttributeValue]]] | None
    failed: bool


# --- protobuf, written out -------------------------------------------------------------------

_SMALL = [bytes((n,)) for n in range(128)]
_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
#: start (field 7) and end (field 8) of a span, each a fixed64 behind its tag.
_TIMES = struct.Struct("<BQBQ").pack
#: `flags` (field 16, fixed32) behind its two-byte tag.
_FLAGS = {flags: b"\x85\x01" + struct.pack("<I", flags) for flags in (HAS_IS_REMOTE, HAS_IS_REMOTE | IS_REMOTE)}
_KIND = b"\x30" + _SMALL[KIND_INTERNAL]
_STATUS_ERROR = b"\x7a\x02\x18" + _SMALL[STATUS_ERROR]  # status (field 15): code (field 3) = error


def varint(n: int) -> bytes:
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def any_value(value: object) -> bytes:
    """An `AnyValue`: str, bool, int (int64) or float; anything else shown as its text."""
    if isinstance(value, str):
        return _delimited(b"\x0a", value.encode())
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value & 0xFFFF_FFFF_FFFF_FFFF)  # int64: two's complement, 10 bytes when negative
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    return _delimited(b"\x0a", str(value).encode())


#: Encoded attribute fields by (key, type, value), one table per field they are in (a span's,
#: an event's): the same few recur in every turn.
_SPAN_ATTRIBUTES: dict[tuple[str, type, object], bytes] = {}
_EVENT_ATTRIBUTES: dict[tuple[str, type, object], bytes] = {}
_ATTRIBUTES_KEPT = 8192


def key_value(key: str, value: object) -> bytes:
    """A `KeyValue` (key field 1, value field 2)."""
    return _delimited(b"\x0a", key.encode()) + _delimited(b"\x12", any_value(value))


def _attributes(tag: bytes, attributes: Mapping[str, object], known: dict[tuple[str, type, object], bytes]) -> bytes:
    """Each attribute as the field `tag` of its message, remembered in `known`."""
    fields = []
    for key, value in attributes.items():
        entry = (key, value.__class__, value)
        found = known.get(entry)
        if found is None:
            found = _delimited(tag, key_value(key, value))
            if len(known) >= _ATTRIBUTES_KEPT:
                known.clear()  # token counts and the like: keep the table small, not exact
            known[entry] = found
        fields.append(found)
    return b"".join(fields)


def span_bytes(span: Finished) -> bytes:
    """One `Span` message (the fields of opentelemetry/proto/trace/v1/trace.proto)."""
    parent = span.parent_id
    name = span.name.encode()
    parts = [
        b"\x0a\x10", span.trace_id.to_bytes(16, "big"),
        b"\x12\x08", span.span_id.to_bytes(8, "big"),
        b"\x22\x08" + parent.to_bytes(8, "big") if parent else b"",
        b"\x2a", varint(len(name)), name,
        _KIND,
        _TIMES(0x39, span.start, 0x41, span.end),
        _attributes(b"\x4a", span.attributes, _SPAN_ATTRIBUTES),
    ]
    if span.events:
        for at, event_name, attributes in span.events:
            encoded = event_name.encode()
            event = b"\x09" + _FIXED64(at) + b"\x12" + varint(len(encoded)) + encoded + _attributes(b"\x1a", attributes, _EVENT_ATTRIBUTES)
            parts.append(_delimited(b"\x5a", event))
    if span.failed:
        parts.append(_STATUS_ERROR)
    parts.append(_FLAGS[HAS_IS_REMOTE | IS_REMOTE if span.remote_parent else HAS_IS_REMOTE])
    return b"".join(parts)


class Encoder:
    """`ExportTraceServiceRequest`s of one resource and one instrumentation scope."""

    def __init__(self, resource: Mapping[str, AttributeValue], scope: str) -> None:
        resource_bytes = _delimited(b"\x0a", b"".join(  # resource (field 1): its attributes (field 1)
            [_delimited(b"\x0a", key_value(key, value)) for key, value in resource.items()]))
        self._resource = resource_bytes
        self._scope = _delimited(b"\x0a", _delimited(b"\x0a", scope.encode()))  # scope (field 1): name

    def encode(self, spans: Iterable[Finished]) -> bytes:
        scope_spans = self._scope + b"".join([_delimited(b"\x12", span_bytes(span)) for span in spans])
        resource_spans = self._resource + _delimited(b"\x12", scope_spans)
        return _delimited(b"\x0a", resource_spans)


# --- the exporter ----------------------------------------------------------------------------


class OtlpHttpExporter:
    """Finished spans, queued by the turns and posted in batches by a thread of its own (its
    owner: it logs what fails and never ends before `close`)."""

    def __init__(self, url: str, headers: Mapping[str, str], timeout: float, encoder: Encoder, *,
                 capacity: int = QUEUE_CAPACITY, batch: int = BATCH_SIZE, every: float = EXPORT_EVERY_S) -> None:
        self.url = url
        self.timeout = timeout
        self.encoder = encoder
        self.capacity = capacity
        self.batch = batch
        self.every = every
        self.queue: deque[Finished] = deque()
        self._headers = {"Content-Type": "application/x-protobuf", **headers}
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def add(self, span: Finished) -> None:
        """A span that ended (the turn's only cost: an append)."""
        queue = self.queue
        if len(queue) >= self.capacity:
            TRACE_SPANS_DROPPED.inc()
            return
        queue.append(span)
        if self._thread is None:
            self._start()
        elif len(queue) == self.batch:
            self._wake.set()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._closing:
                self._thread = threading.Thread(target=self._run, name="botweave traces", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        with requests.Session() as session:
            session.headers.update(self._headers)
            while True:
                self._wake.wait(self.every)
                self._wake.clear()
                closing = self._closing
                queue = self.queue
                while queue:
                    self.send(session, [queue.popleft() for _ in range(min(len(queue), self.batch))])
                if closing:
                    return

    def send(self, session: requests.Session, spans: Sequence[Finished]) -> bool:
        """One batch posted; what the collector did not take is counted as dropped."""
        try:
            answer = session.post(self.url, data=self.encoder.encode(spans), timeout=self.timeout)
        except requests.RequestException as exc:
            log.debug("tracing: export failed: %s", type(exc).__name__)
            TRACE_SPANS_DROPPED.inc(len(spans))
            return False
        except Exception:  # boundary: the exporter's thread; a batch is lost, never the exporter
            log.exception("tracing: %d spans could not be exported", len(spans))
            TRACE_SPANS_DROPPED.inc(len(spans))
            return False
        if not 200 <= answer.status_code < 300:
            log.debug("tracing: the collector answered HTTP %d", answer.status_code)
            TRACE_SPANS_DROPPED.inc(len(spans))
            return False
        return True

    def close(self) -> None:
        """Post what is queued and stop (briefly: a collector that is down does not hold a stop
        up; what is still queued after `timeout` is left, and counted)."""
        with self._start_lock:
            self._closing = True
            thread = self._thread
        if thread is None:
            if self.queue:
                TRACE_SPANS_DROPPED.inc(len(self.queue))
                self.queue.clear()
            return
        self._wake.set()
        thread.join(self.timeout + 1.0)
        if thread.is_alive():
            log.warning("tracing: the collector at %s did not take the last spans in time", self.url)
