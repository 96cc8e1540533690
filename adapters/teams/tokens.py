"""The bot's own token for the Bot Connector: a client-credentials grant, kept until it expires.

A plain form POST to `token_url` (OAuth 2.0 client credentials, scope
`https://api.botframework.com/.default`), as Microsoft's "Authenticate requests from your bot
to the Bot Connector service" describes. MSAL (what the SDK's `MsalAuth` uses) would do the
same POST, but it insists on an https authority and on discovering it, so it cannot be pointed
at an emulator's `token_url`; the request is simple enough to make directly.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from botweave.adapter import PlatformRejected

SCOPE = "https://api.botframework.com/.default"
#: A token is renewed this long before it expires, so no request leaves with a dying one.
RENEW_MARGIN_S = 300.0
TOKEN_TIMEOUT_S = 15.0


class TokenRefused(PlatformRejected):
    """The token endpoint refused the app id or the password: trying again cannot help."""


class TokenSource:
    def __init__(self, session: aiohttp.ClientSession, token_url: str, app_id: str, password: str) -> None:
        self._session = session
        self._url = token_url
        self._app_id = app_id
        self._password = password
        self._token = ""
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        """A token valid for at least `RENEW_MARGIN_S` more (fetched when the one held is not)."""
        if self._token and time.monotonic() < self._expires - RENEW_MARGIN_S:
            return self._token
        async with self._lock:
            if not self._token or time.monotonic() >= self._expires - RENEW_MARGIN_S:
                self._token, lifetime = await self.fetch()
                self._expires = time.monotonic() + lifetime
        return self._token

    async def fetch(self) -> tuple[str, float]:
        """One client-credentials request: (access token, seconds it is valid)."""
        form = {
            "grant_type": "client_credentials",
            "client_id": self._app_id,
            "client_secret": self._password,
            "scope": SCOPE,
        }
        async with self._session.post(self._url, data=form, timeout=aiohttp.ClientTimeout(total=TOKEN_TIMEOUT_S)) as resp:
            raw = await resp.read()
            status = resp.status
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        if status in (400, 401, 403):
            error = str(body.get("error") or f"HTTP {status}")
            raise TokenRefused(
                f"teams: the token endpoint refused the credentials ({error}); check platforms.teams.app_id "
                "and app_password (and tenant_id for a single-tenant bot)"
            )
        token = body.get("access_token")
        if status != 200 or not isinstance(token, str) or not token:
            raise RuntimeError(f"teams: the token endpoint answered HTTP {status} without a token")
        try:
            lifetime = float(body.get("expires_in") or 3600)
        except (TypeError, ValueError):
            lifetime = 3600.0
        return token, lifetime
