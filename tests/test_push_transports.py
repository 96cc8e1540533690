"""Transports: a real aiohttp receiver on 127.0.0.1 checks signatures and retry behaviour."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pytest
from aiohttp import web
from botweave.push import (
    DELIVERY_ID_HEADER,
    SIGNATURE_HEADER,
    DeliveryResult,
    DirectMessageTransport,
    PushMessage,
    Recipient,
    WebhookTransport,
    sign_body,
    verify_signature,
)
from botweave.types import MessageActionResult

SECRET = "hunter2-webhook-secret"
ALICE = Recipient("telegram", "42", name="alice")
MESSAGE = PushMessage(
    text="Activity in room standup",
    category="human_mentioned",
    recipient=ALICE,
    created_at=datetime(2026, 1, 15, 12, tzinfo=timezone.utc),
    identity="room standup",
)


@dataclass
class Receiver:
    """A webhook endpoint that answers with the scripted statuses, then 200."""

    url: str = ""
    script: list[int] = field(default_factory=list)
    requests: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)
    verified: list[bool] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append((body, dict(request.headers)))
        self.verified.append(verify_signature(SECRET, body, request.headers.get(SIGNATURE_HEADER)))
        status = self.script.pop(0) if self.script else 200
        return web.json_response({"status": status}, status=status)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    recv = Receiver()
    app = web.Application()
    app.router.add_post("/hook/{token}", recv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    recv.url = f"http://127.0.0.1:{port}/hook/tok3n"
    yield recv
    await asyncio.wait_for(runner.cleanup(), 5)


def no_sleep_recorder() -> tuple[list[float], object]:
    delays: list[float] = []

    async def sleep(delay: float) -> None:
        delays.append(delay)

    return delays, sleep


async def test_signed_json_body_verifies_on_the_receiver(receiver: Receiver) -> None:
    hook = WebhookTransport(receiver.url, SECRET, timeout=5)
    result = await asyncio.wait_for(hook.deliver(ALICE, MESSAGE), 10)
    assert result == DeliveryResult(True, "webhook", "HTTP 200", 1)
    body, headers = receiver.requests[0]
    assert receiver.verified == [True]
    assert headers["Content-Type"] == "application/json"
    payload = json.loads(body)
    assert payload["text"] == "Activity in room standup"
    assert payload["category"] == "human_mentioned"
    assert payload["recipient"] == {"platform": "telegram", "user_id": "42"}
    assert payload["identity"] == "room standup"


def test_tampered_body_does_not_verify() -> None:
    body = b'{"text":"hi"}'
    assert verify_signature(SECRET, body, sign_body(SECRET, body))
    assert not verify_signature(SECRET, body + b" ", sign_body(SECRET, body))
    assert not verify_signature("other", body, sign_body(SECRET, body))
    assert not verify_signature(SECRET, body, None)


async def test_unsigned_without_a_secret(receiver: Receiver) -> None:
    result = await asyncio.wait_for(WebhookTransport(receiver.url, timeout=5).deliver(ALICE, MESSAGE), 10)
    assert result.ok
    assert SIGNATURE_HEADER not in receiver.requests[0][1]


async def test_a_500_is_retried_with_backoff_and_the_same_delivery_id(receiver: Receiver) -> None:
    receiver.script = [500]
    delays, sleep = no_sleep_recorder()
    hook = WebhookTransport(receiver.url, SECRET, retries=3, backoff=0.25, timeout=5, sleep=sleep)  # type: ignore[arg-type]
    result = await asyncio.wait_for(hook.deliver(ALICE, MESSAGE), 10)
    assert result.ok and result.attempts == 2
    assert delays == [0.25]
    assert receiver.verified == [True, True]
    first, second = (h[DELIVERY_ID_HEADER] for _, h in receiver.requests)
    assert first == second


async def test_a_400_is_not_retried(receiver: Receiver) -> None:
    receiver.script = [400]
    delays, sleep = no_sleep_recorder()
    hook = WebhookTransport(receiver.url, SECRET, retries=3, timeout=5, sleep=sleep)  # type: ignore[arg-type]
    result = await asyncio.wait_for(hook.deliver(ALICE, MESSAGE), 10)
    assert not result.ok and result.attempts == 1 and "HTTP 400" in result.detail
    assert len(receiver.requests) == 1 and delays == []


async def test_gives_up_after_the_retries_with_growing_delays(receiver: Receiver) -> None:
    receiver.script = [503, 502, 500]
    delays, sleep = no_sleep_recorder()
    hook = WebhookTransport(receiver.url, SECRET, retries=2, backoff=0.1, timeout=5, sleep=sleep)  # type: ignore[arg-type]
    result = await asyncio.wait_for(hook.deliver(ALICE, MESSAGE), 10)
    assert not result.ok and result.attempts == 3 and "HTTP 500" in result.detail
    assert delays == [0.1, 0.2]


async def test_connection_errors_are_retried_and_reported() -> None:
    from tests.conftest import free_port

    delays, sleep = no_sleep_recorder()
    hook = WebhookTransport(f"http://127.0.0.1:{free_port()}/x", retries=1, backoff=0.05, timeout=2, sleep=sleep)  # type: ignore[arg-type]
    result = await asyncio.wait_for(hook.deliver(ALICE, MESSAGE), 10)
    assert not result.ok and result.attempts == 2 and delays == [0.05]
    assert "127.0.0.1" in result.detail


async def test_the_secret_never_reaches_logs_or_reprs(receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    receiver.script = [500, 400]
    _, sleep = no_sleep_recorder()
    hook = WebhookTransport(receiver.url, SECRET, retries=2, timeout=5, sleep=sleep)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG):
        result = await asyncio.wait_for(hook.deliver(ALICE, MESSAGE), 10)
    assert not result.ok
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name != "aiohttp.access")  # not the receiver's
    assert "retrying" in ours
    for text in (ours, repr(hook), result.detail):
        assert SECRET not in text and "tok3n" not in text


async def test_dm_transport_reports_the_adapter_outcome() -> None:
    sent: list[tuple[str, str, str]] = []

    async def send_direct(platform: str, user_id: str, text: str) -> MessageActionResult:
        sent.append((platform, user_id, text))
        if user_id == "blocked":
            return MessageActionResult("failed", user_id, "bot was blocked by the user")
        return MessageActionResult("ok", user_id, message_id="m1")

    dm = DirectMessageTransport(send_direct)
    assert await dm.deliver(ALICE, MESSAGE) == DeliveryResult(True, "dm", "ok", 1)
    assert sent == [("telegram", "42", "Activity in room standup")]
    failed = await dm.deliver(Recipient("telegram", "blocked"), MESSAGE)
    assert not failed.ok and "blocked by the user" in failed.detail


async def test_dm_transport_turns_exceptions_into_results() -> None:
    async def broken(platform: str, user_id: str, text: str) -> MessageActionResult:
        raise RuntimeError("adapter not started")

    result = await DirectMessageTransport(broken).deliver(ALICE, MESSAGE)
    assert not result.ok and "RuntimeError" in result.detail


def test_bad_webhook_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="http"):
        WebhookTransport("ftp://example.org/x")
    with pytest.raises(ValueError, match="retries"):
        WebhookTransport("https://example.org/x", retries=-1)
