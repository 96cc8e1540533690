"""Corner Coffee's own program: its web server (aiohttp) and its chat bot in one process and
one event loop. The program owns the process: it starts its web server, then serves the bot
with `App.serve()` until SIGINT/SIGTERM (or the console's input ends), then stops both.
Nothing of the loop or the interpreter is changed by botweave; logging is the program's.

    GET  /orders     the orders taken in chat, as JSON
    POST /announce   the body is posted to every chat that ordered something
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import shop_plugin
from aiohttp import web
from botweave import App


def web_app(bot: App) -> web.Application:
    async def orders(request: web.Request) -> web.Response:
        return web.json_response(shop_plugin.ORDERS)

    async def announce(request: web.Request) -> web.Response:
        text = (await request.text()).strip()
        if not text:
            return web.json_response({"error": "the body is the announcement"}, status=400)
        results = [await bot.send_to(target, f"📣 {text}") for target in sorted(shop_plugin.CUSTOMERS)]
        return web.json_response({"sent": sum(1 for result in results if result.ok)})

    app = web.Application()
    app.router.add_get("/orders", orders)
    app.router.add_post("/announce", announce)
    return app


async def main() -> int:
    bot = App.from_config(Path(__file__).with_name("bot.yaml"))  # loads shop_plugin from `plugins:`
    runner = web.AppRunner(web_app(bot))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(os.environ.get("SHOP_PORT", "8080"))).start()
    try:
        return await bot.serve()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise SystemExit(asyncio.run(main()))
