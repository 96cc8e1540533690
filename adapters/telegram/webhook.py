"""Our own webhook server for Telegram (aiohttp), in place of python-telegram-bot's.

PTB's built-in server (`Updater.start_webhook`) answers 200 as soon as an update is queued,
before any handler ran; a crash right after that 200 loses the update, because Telegram
never sends it again. Following PTB's "custom webhook" pattern, this server instead runs
each update through the application's handlers itself and answers only when they finished:

- a missing or wrong `X-Telegram-Bot-Api-Secret-Token` → 403, nothing read or processed;
- a body that is not JSON, or JSON that is not an `Update` → one log line and 200, so
  Telegram does not redeliver it forever (polling skips such updates too);
- otherwise `handle(update)`: it returning → 200 (the runtime has the update); it raising
  → 500, so Telegram delivers the update again later.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from telegram import Bot, Update

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

UpdateHandler = Callable[[Update], Awaitable[None]]


def parse_update(data: Any, bot: Bot) -> Update:
    """An `Update` from a decoded webhook body; raises if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
        raise ValueError("not an update object")
    update = Update.de_json(data, bot)
    if update is None:
        raise ValueError("empty update")
    insert = getattr(bot, "insert_callback_data", None)  # ExtBot: arbitrary callback data
    if insert is not None:
        insert(update)
    return update


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
        if not self._authorised(request):
            log.warning("telegram: webhook request from %s without the right secret token; rejected", request.remote)
            return web.Response(status=403, text="forbidden")
        try:
            body = await request.read()
            update = parse_update(json.loads(body), self._bot)
        except Exception as exc:
            log.error("telegram: skipped a malformed webhook update (%s: %s)", type(exc).__name__, exc)
            return web.Response(status=200)
        try:
            async with asyncio.timeout(self._handle_timeout):
                await self._handle(update)
        except Exception as exc:
            log.warning(
                "telegram: update %s was not handed over (%s); answering 500 so Telegram redelivers it",
                update.update_id,
                type(exc).__name__ if isinstance(exc, TimeoutError) else exc,
            )
            return web.Response(status=500, text="not handed over")
        return web.Response(status=200)
