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

`ProcessOps` is what operators and the bot's other processes see of this process: the
endpoint, the loop watch behind its `/healthz` (and the watchdogs), and, on a store other
processes open, the process's record through which `botweave reload` and `doctor` reach it
(runtime/presence.py). Reloading a process from outside goes through it.

The endpoints are served from a thread of their own (the standard library's HTTP server),
not from the event loop: a stalled loop could not answer that it is stalled. `/readyz` asks
the loop for the readiness of the parts and waits a bounded time for its answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from botweave.metrics import CONTENT_TYPE, exposition
from botweave.runtime.config import Config, parse_listen
from botweave.runtime.generation import Live
from botweave.runtime.lifecycle import Lifecycle, Role
from botweave.runtime.presence import Presence
from botweave.runtime.reload import Reloading
from botweave.runtime.reload_plan import ReloadResult
from botweave.runtime.watchdog import LoopWatch
from botweave.store import Store
from botweave.tasks import TaskOwner

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
    except Exception as exc:  # boundary: the readiness probe reports why, whatever it was
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
        except Exception as exc:  # boundary: the readiness probe, from the ops server's thread, reports it rather than failing
            return {"app": f"{type(exc).__name__}: {exc}"}


class ProcessOps:
    """The process as others see it (see the module docstring): `serve_endpoint` starts the
    ops endpoint (and the loop watch it answers `/healthz` from), `started` keeps the
    process's record on a shared store, `reload` reloads this process and, `everywhere`,
    asks every other one of the bot to reload too."""

    def __init__(
        self, reloading: Reloading, store: Store, live: Live, life: Lifecycle, background: TaskOwner, *, role: Role,
        stall_seconds: float,
    ) -> None:
        self._reloading = reloading
        self._store = store
        self._live = live
        self._life = life
        self._background = background
        self._role = role
        #: How far behind the event loop is, watched from a thread while the ops endpoint is
        #: served or the process's watchdogs are on (runtime/watchdog.py).
        self.loop_watch = LoopWatch(stall_seconds)
        reloading.on_swap(lambda generation: self.loop_watch.set_threshold(generation.config.ops.loop_stall_seconds))
        #: The ops endpoint, while it is served.
        self.endpoint: OpsServer | None = None
        self._presence: Presence | None = None

    async def serve_endpoint(self, listen: str, readiness: Readiness) -> None:
        """Serve the ops endpoint on `listen`, answering `/healthz` from the loop watch
        (started here) and naming in `/readyz` how the file on disk differs from what runs."""
        self.loop_watch.start(asyncio.get_running_loop())
        endpoint = OpsServer(listen, readiness, notes=self._reloading.drift, stalled=self.loop_watch.stalled)
        self.endpoint = endpoint
        await endpoint.start()

    def started(self, *, receive: bool) -> None:
        """`App.start` is done: a process that receives on a store others open keeps its
        record there."""
        if receive and self._store.external:
            live = self._live
            self._presence = Presence(
                self._store, role=self._role, revision=lambda: live.generation.revision,
                source=lambda: str(live.generation.config.source) if live.generation.config.source else None,
                drift=self._reloading.drift, reload=self.reload,
            )
            self._background.spawn(self._presence.run(self._life.stopping), name="presence")

    async def reload(
        self, source: str | os.PathLike[str] | Config | None = None, *, everywhere: bool = False
    ) -> ReloadResult:
        """See `App.reload`."""
        result = await self._reloading.reload(source)
        if everywhere and self._presence is not None:
            await self._presence.ask_others()
        if self._presence is not None:
            await self._presence.announce()
        return result

    async def stop(self) -> None:
        """The loop watch ends and the endpoint closes (the last thing an App stops)."""
        self.loop_watch.stop()
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            await endpoint.stop()


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
