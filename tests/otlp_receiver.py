"""An OTLP/HTTP trace receiver on 127.0.0.1: what a collector would get, decoded with the
protobuf definitions of opentelemetry-proto."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    failed: bool
    start: int
    end: int
    role: str = ""  # the exporting process's `botweave.role` (all, ingress, worker, model)


@dataclass
class OtlpReceiver:
    port: int = 0
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    delay: float = 0.0  # seconds each export waits before it is answered (a slow collector)
    _runner: web.AppRunner | None = None

    async def start(self) -> OtlpReceiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _traces(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        service=str(resource.get("service.name", "")),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        events=[(e.name, {a.key: _value(a.value) for a in e.attributes}) for e in span.events],
                        failed=span.status.code == 2,
                        start=span.start_time_unix_nano,
                        end=span.end_time_unix_nano,
                        role=str(resource.get("botweave.role", "")),
                    ))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]
