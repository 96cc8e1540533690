"""The gateway under fuzz: a thousand frames on one connected WebSocket, mutated from real
requests of every method (and text that is not JSON at all, and binary frames). Each frame
gets exactly one answer, an error among the documented codes when it is one (never
`internal`, never a traceback in the logs), and the gateway still serves afterwards: the
same connection lists its sessions and a message sent on it is answered.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from botweave import App
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.strategies import encode, mutated, raw_bodies
from tests.fuzz.support import Tally, counting_tracebacks, describe

TOKEN = "fuzz-token-0123456789abcdef"
DOCUMENTED = {"not_json", "bad_frame", "bad_request", "unknown_method", "forbidden", "not_found", "conflict",
              "unavailable", "too_many_failures"}
SESSION = "s-fuzzfuzzfuzzfuzzfuzz"


def requests() -> list[dict[str, Any]]:
    """One real request of every method a client calls after connect."""
    conversation = f"web:{SESSION}"
    params: dict[str, Any] = {
        "sessions.list": {},
        "sessions.create": {"title": "fuzzed", "agent": "assistant"},
        "sessions.rename": {"session": SESSION, "title": "renamed"},
        "chat.history": {"conversation": conversation, "before": "w-1", "limit": 20},
        "chat.send": {"session": SESSION, "text": "hello", "attachments": [], "idempotency_key": "k1", "reply_to": None},
        "chat.stop": {"session": SESSION},
        "chat.edit": {"session": SESSION, "message_id": "w-1", "text": "edited"},
        "chat.delete": {"session": SESSION, "message_id": "w-1"},
        "conversations.list": {"platform": "web", "limit": 10},
        "subscribe": {"conversation": conversation, "last_seq": 0},
        "unsubscribe": {"conversation": conversation},
        "approvals.list": {},
        "approvals.resolve": {"id": "0123456789abcdef", "decision": "approve"},
        "pairing.list": {"platform": "telegram"},
        "pairing.approve": {"platform": "telegram", "user_id": "7"},
        "pairing.deny": {"platform": "telegram", "code": "ABCD2345"},
        "shares.create": {"session": SESSION, "expires_seconds": 60},
        "shares.revoke": {"share_id": "sh-0123"},
        "rooms.list": {},
        "presence": {},
        "health": {},
        "connect": {"min_protocol": 1, "max_protocol": 1, "auth": {"token": TOKEN}},
    }
    return [{"type": "req", "id": n, "method": method, "params": p} for n, (method, p) in enumerate(params.items())]


REQUESTS = requests()
MUTATED_TEXT = st.sampled_from(REQUESTS).flatmap(mutated).map(lambda frame: encode(frame).decode("ascii"))
RAW_TEXT = st.sampled_from(REQUESTS).map(encode).flatmap(raw_bodies).map(lambda body: body.decode("utf-8", "replace"))
FRAMES = st.one_of(
    MUTATED_TEXT, MUTATED_TEXT, MUTATED_TEXT, RAW_TEXT, st.binary(max_size=64).map(lambda b: b)
).filter(lambda frame: len(frame.encode("utf-8") if isinstance(frame, str) else frame) < 60_000)


async def _start() -> tuple[App, aiohttp.ClientSession, aiohttp.ClientWebSocketResponse]:
    config = {
        "agents": {"assistant": {"model": "offline/echo"}},
        "gateway": {"listen": "127.0.0.1:0", "tokens": [{"name": "fuzzer", "token": TOKEN, "scopes": ["admin"]}],
                    "max_buffered": 100_000},
    }
    app = App.from_config(config)
    await app.start()
    assert app.gateway is not None
    await app.gateway.sessions.create("fuzzer", "fuzzed", session_id=SESSION)
    http = aiohttp.ClientSession()
    ws = await http.ws_connect(app.gateway.url, max_msg_size=0)
    await ws.send_str(json.dumps({"type": "req", "id": "c", "method": "connect", "params": {"auth": {"token": TOKEN}}}))
    await _answer(ws)
    return app, http, ws


async def _answer(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    """The next answer (events in between are what subscriptions and sends cause)."""
    async with asyncio.timeout(20):
        while True:
            msg = await ws.receive()
            assert msg.type == aiohttp.WSMsgType.TEXT, f"the gateway closed the connection: {msg.type} {ws.close_code}"
            frame = json.loads(msg.data)
            if frame["type"] == "res":
                return frame


def test_a_thousand_fuzzed_frames_get_only_structured_answers_and_the_gateway_still_serves() -> None:
    tally = Tally("gateway frames")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        app, http, ws = runner.run(_start())
        try:

            @settings(max_examples=max(1000, settings.default.max_examples))
            @given(frame=FRAMES)
            def example(frame: str | bytes) -> None:
                tally.tried += 1
                send = ws.send_str(frame) if isinstance(frame, str) else ws.send_bytes(frame)
                runner.run(send)
                answer = runner.run(_answer(ws))
                if answer["ok"]:
                    tally.outcomes["ok"] += 1
                    return
                error = answer["error"]
                assert error["code"] in DOCUMENTED, error
                assert isinstance(error["message"], str) and isinstance(error["retryable"], bool)
                assert "Traceback" not in error["message"]
                tally.outcomes[error["code"]] += 1

            example()
            assert tally.tried >= 1000
            runner.run(ws.send_str(json.dumps({"type": "req", "id": "alive", "method": "sessions.create", "params": {}})))
            created = runner.run(_answer(ws))
            assert created["ok"], created
            session = created["result"]["session"]["id"]
            send = {"session": session, "text": "still there?", "idempotency_key": "after-fuzz"}
            runner.run(ws.send_str(json.dumps({"type": "req", "id": "send", "method": "chat.send", "params": send})))
            assert runner.run(_answer(ws))["ok"]
        finally:
            runner.run(ws.close())
            runner.run(http.close())
            runner.run(asyncio.wait_for(app.stop(), 15))
    assert tracebacks.records == [], describe(tracebacks.records)
    assert tally.outcomes["ok"] > 0 and sum(tally.outcomes.values()) == tally.tried
    tally.report()
