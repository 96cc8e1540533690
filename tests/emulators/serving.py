"""What every emulator's web server shares."""

from __future__ import annotations

from typing import Any

from aiohttp import web


@web.middleware
async def client_gone(request: web.Request, handler: Any) -> web.StreamResponse:
    """A client that went away mid-request (an adapter stopping, a process killed by a test)
    is not a server error: answer it quietly, as a real API's front end drops the request."""
    try:
        return await handler(request)
    except ConnectionResetError:
        return web.Response(status=499, text="client closed the request")
