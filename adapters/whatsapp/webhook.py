"""The webhook Meta calls: verification on GET, signed notifications on POST.

The server listens on a public address, so a request is hostile until it proves otherwise,
and each is checked before anything of it is parsed, cheapest first:

- GET (Meta's subscription check): `hub.mode=subscribe` and a `hub.verify_token` equal
  (constant time) to `verify_token` → 200 with `hub.challenge` as the body; anything else →
  403. A failed check counts as a failed authentication.
- POST without `X-Hub-Signature-256: sha256=<hex>` → 401, the body not read; with one that is
  not the HMAC-SHA256 of the raw body under `app_secret` (compared in constant time) → 401.
  Once a client (the attributed address, see `botweave.ingress`) kept failing, its failing
  requests get 429 instead, uncounted and unlogged. A signed request is served however many
  others failed from the same address: only failures are counted, so a stranger's forgeries
  never lock out Meta's own deliveries.
- Signed, but not a JSON object → one log line and 200 (Meta would only send it again).
- Otherwise `handle(body)`: it returning → 200; it raising → 500, so Meta delivers the
  notification again later (it retries for up to seven days).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web
from botweave.ingress import IngressGuard, IPNetwork, too_many_failures
from botweave.tasks import failure_line

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Hub-Signature-256"
#: Meta's notifications are small; a batch of 1,000 is far below this.
MAX_BODY_BYTES = 3 * 1024 * 1024

NotificationHandler = Callable[[dict[str, Any]], Awaitable[None]]


def signature_of(secret: bytes, body: bytes) -> str:
    """The header value Meta sends with `body`: `sha256=` and the hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signed(secret: bytes, body: bytes, header: str | None) -> bool:
    """Whether `header` is Meta's signature of `body` (constant-time comparison)."""
    if not header:
        return False
    return hmac.compare_digest(header.strip().encode("utf-8", "surrogateescape"), signature_of(secret, body).encode())


class WebhookServer:
    """GET and POST on `path` at `host:port`; see the module docstring for the answers."""

    def __init__(
        self,
        *,
        handle: NotificationHandler,
        host: str,
        port: int,
        path: str,
        app_secret: str,
        verify_token: str,
        trusted_proxies: Sequence[IPNetwork] = (),
        guard: IngressGuard | None = None,
    ) -> None:
        self._handle = handle
        self._host = host
        self._port = port
        self.path = path
        self._secret = app_secret.encode()
        self._verify_token = verify_token.encode()
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # the bound port, known once started (listen port 0 picks one)
        #: Client attribution and the limit on failed authentications, per client address.
        self.guard = guard or IngressGuard("whatsapp: webhook", trusted_proxies)

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get(self.path, self._on_get)
        app.router.add_post(self.path, self._on_post)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        try:
            # Bound here rather than by aiohttp, so the port is known when `listen` asked for any (0).
            family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
            sock = socket.create_server((self._host, self._port), family=family)
            self.port = int(sock.getsockname()[1])
            await web.SockSite(runner, sock).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @property
    def running(self) -> bool:
        return self._runner is not None

    def _refuse(self, client: str, reason: str, status: int) -> web.Response:
        refused = self.guard.failed(client, reason)
        return too_many_failures(refused) if refused else web.Response(status=status, text="forbidden")

    async def _on_get(self, request: web.Request) -> web.Response:
        client = self.guard.client(request)
        query = request.query
        given = query.get("hub.verify_token", "").encode("utf-8", "surrogateescape")
        if query.get("hub.mode") != "subscribe" or not hmac.compare_digest(given, self._verify_token):
            return self._refuse(client, "verification with a wrong verify_token", 403)
        log.info("whatsapp: webhook verified by %s", client)
        return web.Response(text=query.get("hub.challenge", ""))

    async def _on_post(self, request: web.Request) -> web.Response:
        client = self.guard.client(request)
        header = request.headers.get(SIGNATURE_HEADER)
        if not header:
            return self._refuse(client, "unsigned request", 401)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._refuse(client, "body too large", 413)
        if not signed(self._secret, raw, header):
            return self._refuse(client, "signature mismatch", 401)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            log.error("whatsapp: skipped a signed notification from %s that is not JSON (%s)", client, failure_line(exc))
            return web.Response(status=200)
        if not isinstance(body, dict):
            log.error("whatsapp: skipped a signed notification from %s that is not a JSON object", client)
            return web.Response(status=200)
        try:
            await self._handle(body)
        except Exception as exc:  # boundary: the webhook request handler's hand-over; Meta redelivers what was not taken
            log.warning("whatsapp: a notification was not handed over (%s); answering 500 so Meta redelivers it",
                        failure_line(exc))
            return web.Response(status=500, text="not handed over")
        return web.Response(status=200)
