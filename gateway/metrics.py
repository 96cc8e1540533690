"""What the gateway counts, in botweave's own metrics registry (served at `/metrics`)."""

from __future__ import annotations

from botweave.metrics import REGISTRY
from prometheus_client import Counter, Gauge

CONNECTIONS = Gauge(
    "botweave_gateway_connections",
    "WebSocket clients connected to this gateway (past the handshake)",
    registry=REGISTRY,
)
FRAMES = Counter(
    "botweave_gateway_frames_total",
    "WebSocket frames, by direction (in: from clients, out: to clients)",
    ["direction"],
    registry=REGISTRY,
)
RESUMES = Counter(
    "botweave_gateway_resumes_total",
    "Conversations clients resumed from a seq (at connect or subscribe)",
    registry=REGISTRY,
)
RESYNCS = Counter(
    "botweave_gateway_resyncs_total",
    "Resyncs sent: a client's cursor was older than the conversation's event log",
    registry=REGISTRY,
)
SLOW_CONSUMERS = Counter(
    "botweave_gateway_slow_consumer_closes_total",
    "Connections closed because the client fell max_buffered events behind",
    registry=REGISTRY,
)
