"""The messaging endpoint: every request verified before its body is parsed.

The endpoint listens on 0.0.0.0 by default, so whatever reaches it is hostile until its token
says otherwise. Each request is checked cheapest first:

1. no bearer token, a token that is not a JWT, an algorithm the metadata does not allow
   (`none` among them), a key id the JWKS document does not list, a bad signature, a wrong
   issuer or audience, an expired token → 401, the body not read (auth.py);
2. the body is not an activity (not JSON, not an object, not the Activity schema) → 400;
3. the token was not issued for this activity (its key not endorsed for the activity's
   channel, its `serviceurl` claim not the activity's `serviceUrl`) → 401;
4. once a client (the attributed address, see `botweave.ingress`) kept failing 1 or 3, its
   failing requests get 429 instead, uncounted; a request with a valid token is served
   however many others failed from the same address;
5. otherwise the activity is handed to the inbound part and answered 200 once the runtime
   has it (a 503 if it did not take it, so the Bot Connector retries).

The OpenID metadata unreachable when the keys must be fetched is a 503 too: the Bot
Connector retries, and nobody is let in unchecked.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
from aiohttp import web
from botweave.ingress import IngressGuard, too_many_failures
from botweave.tasks import failure_line
from microsoft_agents.activity import Activity
from pydantic import ValidationError

from .auth import RequestVerifier, Unauthorized
from .inbound import TeamsInbound

log = logging.getLogger(__name__)


class MessagingEndpoint:
    def __init__(self, verifier: RequestVerifier, inbound: TeamsInbound, guard: IngressGuard) -> None:
        self._verifier = verifier
        self._inbound = inbound
        self.guard = guard

    async def __call__(self, request: web.Request) -> web.Response:
        client = self.guard.client(request)
        try:
            verified = await self._verifier.verify(request.headers.get("Authorization"))
        except Unauthorized as exc:
            return self._failed(client, str(exc))
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            log.error("teams: cannot check a request's token: the OpenID metadata is unavailable (%s)", failure_line(exc))
            return web.Response(status=503, text="service unavailable")
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return web.Response(status=413, text="too large")
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
            activity = Activity.model_validate(body)
        except (ValueError, ValidationError, RecursionError) as exc:
            reason = "not an activity" if isinstance(exc, ValidationError) else "not a JSON object"
            log.warning("teams: request from %s with a valid token but a body that is %s; answered 400", client, reason)
            return web.Response(status=400, text="bad request")
        try:
            verified.check_activity(str(activity.channel_id or ""), str(activity.service_url or ""))
        except Unauthorized as exc:
            return self._failed(client, str(exc))
        try:
            taken = await self._inbound.accept(activity)
        except Exception as exc:  # boundary: the Teams request handler, the inbound path's one net: a line, and Teams retries
            log.error("teams: could not read a %s activity (%s)", activity.type, failure_line(exc))
            return web.Response(status=503, text="not taken")
        if not taken:
            return web.Response(status=503, text="not taken")
        return web.Response(status=200)

    def _failed(self, client: str, reason: str) -> web.Response:
        refused = self.guard.failed(client, reason)
        return too_many_failures(refused) if refused else web.Response(status=401, text="unauthorized")
