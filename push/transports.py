"""How a notification reaches a person: a DM on their platform, or a signed webhook.

Both transports report every outcome as a `DeliveryResult` instead of raising, for the same
reason adapters return `MessageActionResult`: one unreachable recipient must not stop the
others from being told.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import aiohttp
from botweave.push.model import PushMessage, Recipient
from botweave.types import MessageActionResult

__all__ = [
    "DeliveryResult",
    "DirectMessageTransport",
    "SendDirect",
    "SIGNATURE_HEADER",
    "DELIVERY_ID_HEADER",
    "Transport",
    "WebhookTransport",
    "check_webhook_url",
    "safe_url",
    "sign_body",
    "verify_signature",
]

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Botweave-Signature"
#: The same id on every attempt of one delivery, so a receiver can drop a retried duplicate
#: (a 5xx or a timeout does not prove the first attempt was not processed).
DELIVERY_ID_HEADER = "X-Botweave-Delivery"

#: The runtime's DM sender: (platform, user_id, text) -> the adapter's outcome.
SendDirect = Callable[[str, str, str], Awaitable[MessageActionResult]]


@dataclass(frozen=True)
class DeliveryResult:
    """What happened to one delivery; `attempts` counts HTTP attempts or DM sends."""

    ok: bool
    transport: str
    detail: str = ""
    attempts: int = 1


class Transport(Protocol):
    """Anything that can put a `PushMessage` in front of a recipient."""

    name: str

    async def deliver(self, recipient: Recipient, message: PushMessage) -> DeliveryResult: ...


class DirectMessageTransport:
    """A DM on the recipient's own platform through the adapters' `send_direct`.

    No retries here: the adapters' outbound path already retries transient errors and
    refuses to resend what may have been delivered.
    """

    name = "dm"

    def __init__(self, send_direct: SendDirect) -> None:
        self._send_direct = send_direct

    async def deliver(self, recipient: Recipient, message: PushMessage) -> DeliveryResult:
        try:
            result = await self._send_direct(recipient.platform, recipient.user_id, message.text)
        except Exception as exc:  # boundary: the push layer's call into the platforms (delivery, hooks, an adapter); the others still get theirs
            log.exception("push: DM to %s raised", recipient.key)
            return DeliveryResult(False, self.name, f"error: {type(exc).__name__}")
        detail = result.status if result.ok else f"{result.status}: {result.detail}".rstrip(": ")
        return DeliveryResult(result.ok, self.name, detail)


def sign_body(secret: str, body: bytes) -> str:
    """The `X-Botweave-Signature` value: `sha256=` + hex HMAC-SHA256 of the raw body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Receiver-side check, constant-time; exported so users' receivers can reuse it."""
    return header is not None and hmac.compare_digest(sign_body(secret, body), header)


def safe_url(url: str) -> str:
    """scheme://host[:port] only: webhook paths and queries often embed tokens (Slack-style)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a malformed port: still show something recognisable
        port = None
    return f"{parts.scheme}://{parts.hostname or '?'}" + (f":{port}" if port else "")


def check_webhook_url(url: str) -> str:
    """`url` if it can be posted to (http or https, with a host); ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"webhook url must be http(s)://host/..., got {safe_url(url)!r}")
    return url


class WebhookTransport:
    """POST the message as JSON to a URL, signed when a secret is set, retried with backoff.

    Retried: 5xx answers, 429 (honouring `Retry-After`, capped at `max_backoff`), connection
    errors and timeouts. Not retried: other 4xx, because the receiver has said the request
    itself is wrong and sending it again cannot help. `retries` counts the attempts *after*
    the first, so at most `retries + 1` requests are made; the delay before retry n is
    `backoff * 2**(n-1)`, capped at `max_backoff`.
    """

    name = "webhook"

    def __init__(
        self,
        url: str,
        secret: str | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        *,
        max_backoff: float = 10.0,
        timeout: float = 10.0,
        session: aiohttp.ClientSession | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        check_webhook_url(url)
        if retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("webhook retries and backoff must be >= 0 and timeout > 0")
        self.url = url
        self._secret = secret or None
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self._session = session
        self._sleep = sleep

    def __repr__(self) -> str:  # the secret and the URL's path never appear in logs or dumps
        signed = "signed" if self._secret else "unsigned"
        return f"WebhookTransport({safe_url(self.url)}, {signed}, retries={self.retries})"

    def _delay(self, retry: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), self.max_backoff)
            except ValueError:
                pass  # an HTTP-date or garbage: fall back to our own backoff
        return min(self.backoff * 2 ** (retry - 1), self.max_backoff)

    async def deliver(self, recipient: Recipient, message: PushMessage) -> DeliveryResult:
        body = json.dumps(message.to_dict(), ensure_ascii=False, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", DELIVERY_ID_HEADER: uuid.uuid4().hex}
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = sign_body(self._secret, body)
        owns_session = self._session is None
        session = self._session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        where = safe_url(self.url)
        detail = ""
        try:
            for attempt in range(1, self.retries + 2):
                retry_after: str | None = None
                try:
                    async with session.post(
                        self.url,
                        data=body,
                        headers=headers,
                        timeout=aiohttp.ClientTimeout(total=self.timeout),
                    ) as response:
                        status = response.status
                        retry_after = response.headers.get("Retry-After")
                    if 200 <= status < 300:
                        return DeliveryResult(True, self.name, f"HTTP {status}", attempt)
                    detail = f"HTTP {status} from {where}"
                    if status < 500 and status != 429:
                        log.warning("push: webhook %s rejected a notification: HTTP %s", where, status)
                        return DeliveryResult(False, self.name, detail, attempt)
                except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                    detail = f"{type(exc).__name__} posting to {where}"
                if attempt <= self.retries:
                    delay = self._delay(attempt, retry_after)
                    log.info("push: webhook attempt %d failed (%s); retrying in %.2fs", attempt, detail, delay)
                    await self._sleep(delay)
            log.warning("push: webhook gave up after %d attempts: %s", self.retries + 1, detail)
            return DeliveryResult(False, self.name, detail, self.retries + 1)
        finally:
            if owns_session:
                await session.close()
