"""The operator's endpoints: `/metrics`, `/healthz` and `/readyz` on `ops.listen`.

Every process serves them whatever its role (an ingress holding the platform connections, a
worker answering from the shared stream, or both), so each one can be scraped and probed on
its own; `--ops-listen` gives each process on one host a port of its own.

- `/healthz`: the process is alive and its event loop answers (200 `{"status": "ok"}`).
- `/readyz`: 200 when every platform this process started is connected and the store
  answers; otherwise 503 with each failing part named and why, so a probe's log says what
  is wrong, not only that something is.
- `/metrics`: the Prometheus text format (see botweave.metrics for the series).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from botweave.metrics import CONTENT_TYPE, exposition
from botweave.runtime.config import parse_listen
from botweave.store import Store

log = logging.getLogger(__name__)

#: The failing parts of the process, by name ("store", "telegram", ...), each with why.
Readiness = Callable[[], Awaitable[dict[str, str]]]
#: How long /readyz waits for the store to answer before calling it unreachable.
STORE_PROBE_TIMEOUT_S = 2.0


async def store_problem(store: Store) -> str | None:
    """Why the store cannot serve right now (one read, within `STORE_PROBE_TIMEOUT_S`), or None."""
    try:
        await asyncio.wait_for(store.get("ops:ready"), STORE_PROBE_TIMEOUT_S)
    except asyncio.TimeoutError:
        return f"no answer within {STORE_PROBE_TIMEOUT_S:.0f}s"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


class OpsServer:
    def __init__(self, listen: str, readiness: Readiness) -> None:
        self.host, self._port = parse_listen(listen)
        self._readiness = readiness
        self._runner: web.AppRunner | None = None
        self.port = self._port  # the bound port once started (port 0 picks one)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(f"ops: cannot listen on {self.host}:{self._port} ({exc.strerror or exc})") from None
        self._runner = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("ops: /metrics, /healthz and /readyz on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        failing = await self._readiness()
        if failing:
            return web.json_response({"status": "unready", "failing": failing}, status=503)
        return web.json_response({"status": "ready"})

    async def _metrics(self, request: web.Request) -> web.Response:
        response = web.Response(body=exposition())
        response.headers["Content-Type"] = CONTENT_TYPE
        return response
