"""Pointing discord.py at another server (an emulator in tests, or a proxy).

discord.py builds every REST URL from the process-wide class attribute
`discord.http.Route.BASE` and connects its gateway to the process-wide
`DiscordWebSocket.DEFAULT_GATEWAY`. Changing those would move every client in the process, so
each adapter instead gives its own client's HTTPClient a subclass that rewrites URLs just
before use (`RebasedHTTPClient`, installed by re-classing that one HTTPClient instance, so the
connection state, aiohttp session and rate-limit buckets discord.py already wired to it stay as
they are). Nothing process-wide is modified. With `gateway_url` set, every main-gateway
connection of the client (resumes included) goes there; with only `api_base_url` set, the
gateway URL is asked from that server (GET /gateway/bot), as a proxy would answer.
"""

from __future__ import annotations

from typing import Any, cast

import discord
import yarl
from discord.http import HTTPClient, Route
from discord.webhook.async_ import AsyncWebhookAdapter


def _rebase_gateway(url: str, gateway: yarl.URL) -> str:
    """Move a main-gateway URL onto `gateway`, keeping discord.py's query (v, encoding, compress).

    Voice gateways are left alone: only the main gateway's URL carries an `encoding` parameter.
    """
    original = yarl.URL(url)
    if "encoding" not in original.query:
        return url
    return str(gateway.with_query(original.query))


class RebasedHTTPClient(HTTPClient):
    """discord.py's HTTPClient with this client's REST base and gateway URL replaced.

    Only URLs change; routes, rate-limit buckets (keyed on method + path), retries and the
    aiohttp session stay discord.py's own.
    """

    botweave_api_base: str | None = None
    botweave_gateway: yarl.URL | None = None

    async def request(self, route: Route, **kwargs: Any) -> Any:
        base = self.botweave_api_base
        if base and route.url.startswith(Route.BASE):
            route.url = base + route.url[len(Route.BASE) :]
        return await super().request(route, **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> Any:
        if self.botweave_gateway is not None:
            url = _rebase_gateway(url, self.botweave_gateway)
        return await super().ws_connect(url, compress=compress)


class RebasedWebhookAdapter(AsyncWebhookAdapter):
    """discord.py's webhook REST adapter with the REST base replaced, like `RebasedHTTPClient`.

    Webhook calls do not go through the client's HTTPClient: discord.py takes its webhook
    adapter from the `async_context` context variable and builds URLs from `Route.BASE`. The
    adapter sets this one into the context only around its own webhook calls (a context
    variable is per task), so nothing process-wide moves.
    """

    def __init__(self, api_base: str) -> None:
        super().__init__()
        self._api_base = api_base

    async def request(self, route: Route, session: Any, **kwargs: Any) -> Any:
        if route.url.startswith(Route.BASE):
            route.url = self._api_base + route.url[len(Route.BASE) :]
        return await super().request(route, session, **kwargs)


def rebase(client: discord.Client, *, api_base: str | None, gateway: str | None) -> None:
    """Point this one client's REST calls at `api_base` and its gateway at `gateway`.

    The HTTPClient instance is re-classed in place: same state, same session, same rate-limit
    buckets, only the URLs move.
    """
    if not (api_base or gateway):
        return
    client.http.__class__ = RebasedHTTPClient
    http = cast(RebasedHTTPClient, client.http)
    http.botweave_api_base = api_base.rstrip("/") if api_base else None
    http.botweave_gateway = yarl.URL(gateway) if gateway else None
