"""The operator's endpoints: `/metrics`, `/healthz` and `/readyz` on `ops.listen`.

Every process serves them whatever its role (an ingress holding the platform connections, a
worker answering from the shared stream, or both), so each one can be scraped and probed on
its own; `--ops-listen` gives each process on one host a port of its own.

- `/healthz`: the process is alive and its event loop runs (200 `{"status": "ok"}`); 503
  while the loop is stalled (see runtime/watchdog.py), so a supervisor's probe sees it.
- `/readyz`: 200 when every platform this process started is connected and the store
  answers; otherwise 503 with each failing part named and why, so a probe's log says what
  is wrong, not only that something is. When the configuration file on disk differs from
  what runs (a reload refused it, say), the answer says so under `config`, without changing
  the status: a bot serving its last good configuration is ready.
- `/metrics`: the Prometheus text format (see botweave.metrics for the series).

The endpoints are served from a thread of their own (the standard library's HTTP server),
not from the event loop: a stalled loop could not answer that it is stalled. `/readyz` asks
the loop for the readiness of the parts and waits a bounded time for its answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from botweave.metrics import CONTENT_TYPE, exposition
from botweave.runtime.config import parse_listen
from botweave.store import Store

log = logging.getLogger(__name__)

#: The failing parts of the process, by name ("store", "telegram", ...), each with why.
Readiness = Callable[[], Coroutine[Any, Any, dict[str, str]]]
#: How long /readyz waits for the store to answer before calling it unreachable.
STORE_PROBE_TIMEOUT_S = 2.0
#: How long /readyz waits for the event loop to hand over the readiness of the parts.
READINESS_TIMEOUT_S = STORE_PROBE_TIMEOUT_S + 2.0


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
    """`readiness` runs on the event loop; `notes` (what differs from the file on disk) and
    `stalled` (how long the loop has been stalled, or None) are read from the server's thread."""

    def __init__(
        self,
        listen: str,
        readiness: Readiness,
        *,
        notes: Callable[[], Mapping[str, str]] = dict,
        stalled: Callable[[], float | None] = lambda: None,
    ) -> None:
        self.host, self._port = parse_listen(listen)
        self._readiness = readiness
        self._notes = notes
        self._stalled = stalled
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = self._port  # the bound port once started (port 0 picks one)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        handler = _handler(self)
        server_class = _IPv6Server if ":" in self.host else ThreadingHTTPServer
        try:
            server = server_class((self.host, self._port), handler)
        except OSError as exc:
            raise OSError(f"ops: cannot listen on {self.host}:{self._port} ({exc.strerror or exc})") from None
        server.daemon_threads = True
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="botweave ops", daemon=True
        )
        self._thread.start()
        log.info("ops: /metrics, /healthz and /readyz on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()
        self._thread = None

    # --- answered in the server's threads -----------------------------------------------------

    def healthz(self) -> tuple[int, dict[str, Any]]:
        stalled = self._stalled()
        if stalled is not None:
            return 503, {"status": "stalled", "stalled_seconds": round(stalled, 1)}
        return 200, {"status": "ok"}

    def readyz(self) -> tuple[int, dict[str, Any]]:
        stalled = self._stalled()
        if stalled is not None:
            failing = {"event_loop": f"stalled for {stalled:.0f}s"}
        else:
            failing = self._ask_loop()
        body: dict[str, Any] = {"status": "unready", "failing": failing} if failing else {"status": "ready"}
        body.update(self._notes())
        return (503 if failing else 200), body

    def _ask_loop(self) -> dict[str, str]:
        loop = self._loop
        if loop is None or loop.is_closed():
            return {"app": "stopped"}
        future: concurrent.futures.Future[dict[str, str]] = asyncio.run_coroutine_threadsafe(self._readiness(), loop)
        try:
            return future.result(READINESS_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return {"event_loop": f"did not answer within {READINESS_TIMEOUT_S:.0f}s"}
        except Exception as exc:  # noqa: BLE001 - the probe reports it rather than failing
            return {"app": f"{type(exc).__name__}: {exc}"}


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def _handler(ops: OpsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self._json(*ops.healthz())
            elif path == "/readyz":
                self._json(*ops.readyz())
            elif path == "/metrics":
                self._send(200, exposition(), CONTENT_TYPE)
            else:
                self._json(404, {"error": f"no endpoint {path}; there are /healthz, /readyz and /metrics"})

        def _json(self, status: int, body: dict[str, Any]) -> None:
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
            """Probes every few seconds would drown the bot's own log."""

    return Handler
