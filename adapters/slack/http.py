"""The Events API endpoint (HTTP mode): verified on the raw bytes before anything is parsed.

The endpoint listens on 0.0.0.0 by default, so whatever reaches it is hostile until its
signature says otherwise. Each request is checked cheapest first, and nothing of it reaches
slack-bolt before it is signed and usable:

1. no `X-Slack-Signature` / `X-Slack-Request-Timestamp`, a timestamp that is not a number or
   is more than five minutes away from now → 401, the body not read;
2. the signature of the raw body (bounded by the server's body limit) does not match
   (slack_sdk's `SignatureVerifier`, the HMAC-SHA256 of `v0:<timestamp>:<body>`), or the body
   is not UTF-8 (Slack signs text, so such a body cannot be verified) → 401;
3. once a client (the attributed address, see `botweave.ingress`) kept failing 1 or 2, its
   failing requests get 429 instead of 401, uncounted and unlogged, and still never reach
   parsing or bolt. A signed request is served however many others failed from the same
   address (behind a proxy, every client's): the limit only makes failures cheaper;
4. signed, but not a body the app can use (not a JSON object or a form, nested too deep, no
   event `type` / slash command) → 400;
5. otherwise the body, sanitised (`schema.sanitise_body`: wrong-typed fields are absent), goes
   to bolt, which routes it to the listeners and acknowledges; a kind of request no listener
   takes (an interaction, with no buttons here) or one bolt fails to read is a 400 too.

Bolt's own signature check is off: it would verify the body as bolt receives it, which is the
sanitised one, re-encoded.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from urllib.parse import parse_qsl, urlencode

from aiohttp import web
from botweave.ingress import IngressGuard, too_many_failures
from botweave.payload import Dropped
from botweave.tasks import failure_line
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.signature import Clock, SignatureVerifier

from .schema import form_fields, sanitise_body

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Slack-Signature"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
MAX_CLOCK_SKEW_S = 300  # Slack's own rule for replayed requests
MAX_FORM_FIELDS = 100


class Unusable(ValueError):
    """A signed request body the app cannot use; the message says why (never its content)."""


class _Clock(Clock):
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now

    def now(self) -> float:
        return self._now()


class Signatures:
    """Slack's v0 request signatures, checked on the raw body: the headers alone first (so a
    request that fails on them is refused unread), then slack_sdk's verifier."""

    def __init__(self, secret: str, *, clock: Callable[[], float] = time.time) -> None:
        self._verifier = SignatureVerifier(secret, clock=_Clock(clock))
        self._clock = clock

    def header_problem(self, timestamp: str | None, signature: str | None) -> str | None:
        """Why the headers alone already fail the request, or None."""
        if not signature or not timestamp:
            return "unsigned"
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
            return "malformed timestamp"
        if abs(self._clock() - int(timestamp)) > MAX_CLOCK_SKEW_S:
            return "stale timestamp"
        if not signature.isascii() or not signature.startswith("v0="):
            return "malformed signature"
        return None

    def matches(self, timestamp: str, body: bytes, signature: str) -> bool:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return False  # Slack signs text: a body that is not UTF-8 is not one it signed
        return self._verifier.is_valid(text, timestamp, signature)


def usable_body(raw: bytes, content_type: str) -> tuple[str, str, Dropped]:
    """A signed (so UTF-8) body as bolt should get it: (text, content type, fields left out).

    JSON bodies (events) and form bodies (slash commands; interactions carry JSON in a
    `payload` field) are read, sanitised and written again; anything else is `Unusable`.
    """
    text = raw.decode("utf-8")  # verified already: the signature is over text
    dropped = Dropped()
    if content_type == "application/json" or (content_type != "application/x-www-form-urlencoded" and
                                               text.lstrip().startswith("{")):
        body = sanitise_body(_json(text), dropped)
        if body is None:
            raise Unusable("not an event envelope")
        return json.dumps(body), "application/json", dropped
    if content_type != "application/x-www-form-urlencoded":
        raise Unusable(f"content type {content_type[:60]!r}")
    try:
        fields = form_fields(parse_qsl(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS))
    except ValueError:
        raise Unusable("not a form") from None
    if "payload" in fields:  # an interaction: its JSON in one field
        payload = sanitise_body(_json(fields["payload"]), dropped)
        if payload is None or "type" not in payload:
            raise Unusable("not an interaction payload")
        return urlencode({"payload": json.dumps(payload)}), "application/x-www-form-urlencoded", dropped
    command = sanitise_body(fields, dropped)
    if command is None:
        raise Unusable("neither a slash command nor an SSL check")
    return urlencode(command), "application/x-www-form-urlencoded", dropped


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise Unusable("not JSON, or nested too deep") from None


class EventsEndpoint:
    """The aiohttp handler for POSTs to `http_path`; see the module docstring."""

    def __init__(self, bolt: AsyncApp, signatures: Signatures, guard: IngressGuard) -> None:
        self._bolt = bolt
        self._signatures = signatures
        self.guard = guard

    async def __call__(self, request: web.Request) -> web.Response:
        client = self.guard.client(request)
        timestamp = request.headers.get(TIMESTAMP_HEADER)
        signature = request.headers.get(SIGNATURE_HEADER)
        problem = self._signatures.header_problem(timestamp, signature)
        if problem is not None:
            return self._failed(client, problem, 401, "unauthorized")
        assert timestamp is not None and signature is not None
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._failed(client, "body too large", 413, "too large")
        if not self._signatures.matches(timestamp, raw, signature):
            return self._failed(client, "signature mismatch", 401, "unauthorized")
        try:
            body, content_type, dropped = usable_body(raw, request.content_type)
        except Unusable as exc:
            log.warning("slack: signed request from %s that cannot be used (%s); answered 400", client, exc)
            return web.Response(status=400, text="bad request")
        if dropped:
            log.warning("slack: request from %s: ignored malformed field(s) %s", client, ", ".join(dropped[:8]))
        headers: dict[str, str | Sequence[str]] = {
            name: value for name, value in request.headers.items() if name.lower() != "content-type"
        }
        headers["Content-Type"] = content_type
        try:
            response = await self._bolt.async_dispatch(
                AsyncBoltRequest(body=body, query=request.query_string, headers=headers)
            )
        except Exception as exc:  # boundary: the Events API request handler; bolt itself failed on a body
            log.error("slack: a signed request from %s could not be handled (%s)", client, failure_line(exc))
            return web.Response(status=400, text="bad request")
        if response.status == 404:  # a kind of request no listener takes
            log.info("slack: signed request from %s that nothing here handles; answered 400", client)
            return web.Response(status=400, text="bad request")
        if response.status == 500:  # bolt's answer when reading the body failed (it logged why)
            return web.Response(status=400, text="bad request")
        return await to_aiohttp_response(response)

    def _failed(self, client: str, reason: str, status: int, text: str) -> web.Response:
        refused = self.guard.failed(client, reason)
        return too_many_failures(refused) if refused else web.Response(status=status, text=text)
