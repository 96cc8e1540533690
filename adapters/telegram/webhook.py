"""Our own webhook server for Telegram (aiohttp), in place of python-telegram-bot's.

PTB's built-in server (`Updater.start_webhook`) answers 200 as soon as an update is queued,
before any handler ran; a crash right after that 200 loses the update, because Telegram
never sends it again. Following PTB's "custom webhook" pattern, this server instead runs
each update through the application's handlers itself and answers only when they finished.

Each request is checked before anything of it is parsed, cheapest first:

- a missing or wrong `X-Telegram-Bot-Api-Secret-Token` → 403, nothing read or processed; once
  a client (the attributed address, see `botweave.ingress`) kept failing this check, its
  failing requests get 429 instead, uncounted and unlogged. The secret is compared first and
  in constant time, so a request that carries it is served however many others failed from
  the same address (behind a proxy, every client's);
- a content type other than `application/json` → 415, the body not read;
- a body that is not JSON, or JSON that is not an `Update` (sanitised first, see
  `schema.read_update`) → one log line and 200, so Telegram does not redeliver it forever
  (polling skips such updates too); fields of the wrong type are dropped, with one line;
- otherwise `handle(update)`: it returning → 200 (the runtime has the update); it raising
  → 500, so Telegram delivers the update again later.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web
from botweave.ingress import IngressGuard, IPNetwork, too_many_failures
from botweave.payload import Dropped
from botweave.tasks import failure_line
from telegram import Bot, Update

from .schema import read_update

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_DROPPED_NAMED = 8  # fields named in the "ignored" line; the rest are counted

UpdateHandler = Callable[[Update], Awaitable[None]]


class WebhookServer:
    """POST `path` on `listen:port`; see the module docstring for the answers it gives."""

    def __init__(
        self,
        *,
        bot: Bot,
        handle: UpdateHandler,
        listen: str,
        port: int,
        path: str,
        secret: str | None,
        trusted_proxies: Sequence[IPNetwork] = (),
        guard: IngressGuard | None = None,
        handle_timeout: float = 30.0,
        shutdown_timeout: float = 5.0,
    ) -> None:
        self._bot = bot
        self._handle = handle
        self._listen = listen
        self._port = port
        self.path = "/" + path.lstrip("/")
        self._secret = secret.encode() if secret else None
        self._handle_timeout = handle_timeout
        self._shutdown_timeout = shutdown_timeout
        self._runner: web.AppRunner | None = None
        #: Client attribution and the limit on failed secret checks, per client address.
        self.guard = guard or IngressGuard("telegram: webhook", trusted_proxies)

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post(self.path, self._on_post)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=self._shutdown_timeout)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._listen, self._port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def stop(self) -> None:
        """Stop accepting; requests in flight get `shutdown_timeout` to finish (a request cut
        off gets no 200, so Telegram delivers that update again)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def _authorised(self, request: web.Request) -> bool:
        if self._secret is None:
            return True
        given = request.headers.get(SECRET_HEADER)
        if given is None:
            return False
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self._secret)

    async def _on_post(self, request: web.Request) -> web.Response:
        client = self.guard.client(request)
        if not self._authorised(request):
            refused = self.guard.failed(client, "missing or wrong secret token")
            if refused:
                return too_many_failures(refused)
            return web.Response(status=403, text="forbidden")
        if request.content_type != "application/json":
            log.warning("telegram: webhook request from %s with content type %r; answered 415",
                        client, request.content_type[:100])
            return web.Response(status=415, text="application/json expected")
        dropped = Dropped()
        try:
            body = await request.read()
            update = read_update(json.loads(body), self._bot, dropped)
        except web.HTTPRequestEntityTooLarge:
            log.error("telegram: skipped a webhook update from %s: the body is too large", client)
            return web.Response(status=200)
        except Exception as exc:  # boundary: the webhook request handler: whatever the body is, it is skipped with one line
            log.error("telegram: skipped a malformed webhook update from %s (%s)", client, failure_line(exc))
            return web.Response(status=200)
        if dropped:
            named = ", ".join(dropped[:MAX_DROPPED_NAMED]) + (f" and {len(dropped) - MAX_DROPPED_NAMED} more"
                                                              if len(dropped) > MAX_DROPPED_NAMED else "")
            log.warning("telegram: update %s: ignored malformed field(s) %s", update.update_id, named)
        try:
            async with asyncio.timeout(self._handle_timeout):
                await self._handle(update)
        except Exception as exc:  # boundary: the webhook request handler's hand-over: answered 500 so Telegram redelivers
            log.warning(
                "telegram: update %s was not handed over (%s); answering 500 so Telegram redelivers it",
                update.update_id,
                type(exc).__name__ if isinstance(exc, TimeoutError) else exc,
            )
            return web.Response(status=500, text="not handed over")
        return web.Response(status=200)
