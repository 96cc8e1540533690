"""The wire, spoken frame by frame: the handshake and its answer, every way it can be refused
(and the close code that says so), what a connected client's bad frames get, the origin and
query-string rules, and the failed-authentication budget."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from botweave import App
from botweave.config import ConfigError
from botweave.events import EVENT_NAMES

from tests.gateway.support import TOKENS, Raw, config


@pytest.fixture
async def app(start_app, llm) -> App:
    return await start_app(config(llm))


async def test_connect_is_answered_with_who_what_and_a_snapshot(app: App) -> None:
    async with Raw(app.gateway.url) as ws:
        answer = await ws.connect(TOKENS["ann"])
    assert answer["ok"] and answer["id"] == "hello"
    result = answer["result"]
    assert result["protocol"] == 1
    assert result["server"]["conn_id"].startswith("c-") and result["server"]["version"]
    assert result["principal"] == {"name": "ann", "kind": "token", "user": "telegram:1"}
    assert result["scopes"] == ["approvals", "pairing", "read", "write"]
    assert "chat.send" in result["methods"] and "approvals.resolve" in result["methods"]
    assert "shares.create" in result["methods"] and "connect" not in result["methods"]
    assert sorted(result["events"]) == sorted(EVENT_NAMES)
    assert result["policy"] == {"max_frame_bytes": 65536, "heartbeat_ms": 30000, "max_upload_bytes": 20000000,
                                "max_buffered": 1000}
    assert result["snapshot"] == {"sessions": [], "approvals": [], "pairing": []}


async def test_a_reader_is_offered_only_the_methods_it_may_call(app: App) -> None:
    async with Raw(app.gateway.url) as ws:
        result = (await ws.connect(TOKENS["eve"]))["result"]
    assert result["scopes"] == ["read"]
    assert "chat.history" in result["methods"] and "subscribe" in result["methods"]
    assert "chat.send" not in result["methods"] and "approvals.resolve" not in result["methods"]


@pytest.mark.parametrize(
    ("params", "code", "close"),
    [
        ({"min_protocol": 2, "max_protocol": 3}, "protocol_unsupported", 4002),
        ({"auth": {"token": "not-a-token-of-this-gateway"}}, "unauthorized", 4001),
        ({}, "unauthorized", 4001),  # tokens exist: one is needed
        ({"resume": "not a mapping"}, "bad_request", 4004),
    ],
    ids=["protocol", "bad-token", "no-token", "bad-params"],
)
async def test_a_connect_that_cannot_be_accepted_gets_an_error_and_a_close_code(app: App, params, code, close) -> None:
    body = {"min_protocol": 1, "max_protocol": 1, **params}
    if "auth" not in params and code != "unauthorized":
        body["auth"] = {"token": TOKENS["ann"]}
    async with Raw(app.gateway.url) as ws:
        answer = await ws.request(1, "connect", body)
        assert answer["ok"] is False and answer["error"]["code"] == code
        assert set(answer["error"]) >= {"code", "message", "retryable"} and "Traceback" not in answer["error"]["message"]
        assert await ws.closed() == close


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ({"type": "req", "id": 1, "method": "sessions.list", "params": {}}, "not_connected"),
        ("this is not json", "not_json"),
        ("[1, 2, 3]", "not_json"),
        ({"type": "event", "id": 3}, "bad_frame"),
    ],
    ids=["request", "text", "array", "not-a-request"],
)
async def test_anything_but_connect_first_is_refused_with_4004(app: App, frame, code) -> None:
    async with Raw(app.gateway.url) as ws:
        await ws.send(frame)
        answer = await ws.next()
        assert answer is not None and answer["ok"] is False and answer["error"]["code"] == code
        assert await ws.closed() == 4004


async def test_a_frame_over_64_kib_is_never_read_before_or_after_connect(app: App) -> None:
    async with Raw(app.gateway.url) as ws:
        await ws.send("x" * (64 * 1024 + 1))
        assert await ws.closed() == 1009
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["ann"])
        just_fits = {"type": "req", "id": 2, "method": "sessions.list", "params": {}, "pad": "y" * (64 * 1024 - 100)}
        assert (await ws.request(2, "sessions.list", {}))["ok"]
        await ws.send(just_fits)  # at the limit: read (and answered)
        assert (await ws.answer(2))["ok"]
        await ws.send({"type": "req", "id": 3, "method": "sessions.list", "pad": "z" * (64 * 1024)})
        assert await ws.closed() == 1009


async def test_no_connect_within_ten_seconds_closes_with_4003(app: App) -> None:
    async with Raw(app.gateway.url) as ws:
        answer = await ws.next(timeout=15)
        assert answer is not None and answer["error"]["code"] == "handshake_timeout"
        assert await ws.closed() == 4003


async def test_after_connect_every_bad_frame_gets_a_structured_error_and_the_connection_goes_on(app: App) -> None:
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["ann"])
        await ws.send("{not json")
        assert (await ws.answer(None))["error"]["code"] == "not_json"
        await ws.send({"type": "req", "method": "sessions.list"})  # no id
        assert (await ws.answer(None))["error"]["code"] == "bad_frame"
        assert (await ws.request(4, "no.such.method", {}))["error"]["code"] == "unknown_method"
        assert (await ws.request(5, "chat.send", {"session": 7}))["error"]["code"] == "bad_request"
        answer = await ws.request(6, "sessions.create", {"title": "x", "colour": "red"})
        assert answer["error"]["code"] == "bad_request" and "colour" in answer["error"]["message"]
        assert (await ws.request(7, "sessions.list", [1, 2]))["error"]["code"] == "bad_request"
        assert (await ws.request(8, "connect", {}))["error"]["code"] == "bad_request"  # connected already
        assert ws.ws is not None
        await ws.ws.send_bytes(b"\x00\x01")
        assert (await ws.answer(None))["error"]["code"] == "bad_frame"
        assert (await ws.request("still-here", "sessions.list", {}))["ok"]


async def test_a_token_in_the_query_string_is_refused_before_anything_else(app: App) -> None:
    for query in ("token=" + TOKENS["ann"], "access_token=x", "auth=y"):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            async with Raw(f"{app.gateway.url}?{query}"):
                pass
        assert refused.value.status == 400
    base = app.gateway.url.replace("ws://", "http://").removesuffix("/ws")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/uploads?token={TOKENS['ann']}", data=b"x") as response:
            assert response.status == 400 and (await response.json())["error"]["code"] == "token_in_url"


async def test_a_page_on_another_origin_cannot_drive_a_local_gateway(start_app, llm) -> None:
    """No token is configured and the gateway listens on loopback: programs on this machine
    connect without one, but a browser page from another site must not."""
    app = await start_app(config(llm, tokens=False, gateway={"allowed_origins": ["https://ops.example.com"]}))
    port = app.gateway.port
    for origin in ("https://evil.example", "http://localhost.evil.example", "null"):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            async with Raw(app.gateway.url, origin=origin):
                pass
        assert refused.value.status == 403, origin
    rebound = Raw(app.gateway.url, origin=f"http://attacker.example:{port}", headers={"Host": f"attacker.example:{port}"})
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        async with rebound:
            pass
    assert refused.value.status == 403, "a DNS name rebound to 127.0.0.1 is not the gateway's own origin"
    for origin in (f"http://127.0.0.1:{port}", "https://ops.example.com", None):
        async with Raw(app.gateway.url, origin=origin) as ws:
            answer = await ws.connect(None)
            assert answer["ok"] and answer["result"]["principal"]["kind"] == "local", origin


async def test_failed_authentication_is_budgeted_but_a_valid_token_is_always_let_in(app: App) -> None:
    codes = []
    for _ in range(25):
        async with Raw(app.gateway.url) as ws:
            codes.append((await ws.connect("wrong-token-0123456789"))["error"])
    assert [c["code"] for c in codes[:20]] == ["unauthorized"] * 20
    assert {c["code"] for c in codes[20:]} == {"too_many_failures"}
    assert all(c["retryable"] and c["retry_after_ms"] > 0 for c in codes[20:])
    async with Raw(app.gateway.url) as ws:  # same address, a real token: in
        assert (await ws.connect(TOKENS["bob"]))["ok"]


async def test_a_gateway_open_to_other_machines_needs_a_token(llm) -> None:
    app = App.from_config(config(llm, tokens=False, gateway={"listen": "0.0.0.0:0"}))
    try:
        with pytest.raises(ConfigError, match="gateway.listen: 0.0.0.0:0 is reachable from other machines"):
            await app.start()
    finally:
        await asyncio.wait_for(app.stop(), 15)
    app = App.from_config(config(llm, gateway={"listen": "0.0.0.0:0"}))
    try:
        await app.start()
        assert app.gateway is not None and app.gateway.port > 0
    finally:
        await asyncio.wait_for(app.stop(), 15)


async def test_a_lone_surrogate_in_a_json_escape_is_replaced_not_stored_or_echoed(app: App) -> None:
    """A JSON escape can carry what no UTF-8 encoder takes (a lone surrogate): it becomes
    U+FFFD as the frame is read, so neither the store nor the answer chokes on it."""
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["ann"])
        await ws.send('{"type": "req", "id": 9, "method": "sessions.create", "params": {"title": "a\\ud800b\\u0000"}}')
        answer = await ws.answer(9)
        assert answer["ok"] and answer["result"]["session"]["title"] == "a\ufffdb\ufffd"
        assert (await ws.request(10, "sessions.list", {}))["ok"], "the connection still answers"


async def test_the_first_frame_is_the_answer_even_while_others_connect(start_app, llm, tmp_path) -> None:
    """Presence notices of other connections never come before a connection's own answer
    (on SQLite, whose reads let other connections in while one is being answered)."""
    app = await start_app(config(llm, store={"url": f"sqlite:///{tmp_path / 'state.db'}"}))

    async def first_frame() -> dict:
        async with Raw(app.gateway.url) as ws:
            await ws.send({"type": "req", "id": "c", "method": "connect", "params": {"auth": {"token": TOKENS["eve"]}}})
            frame = await ws.next()
            assert frame is not None
            return frame

    frames = await asyncio.gather(*(first_frame() for _ in range(30)))
    assert [f["type"] for f in frames] == ["res"] * 30 and all(f["ok"] for f in frames)


async def test_an_event_carrying_a_lone_surrogate_reaches_its_follower_as_its_json_escape(app: App) -> None:
    """A model can answer with a lone surrogate (it arrives in a JSON escape from the
    provider); the event still goes out, the surrogate escaped as it came."""
    assert app.events is not None
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["eve"], resume={"telegram:5": 0})
        await app.events.publish("telegram:5", "delta", {"run_id": "r", "message_id": "m", "text": "a\ud800b"})
        frame = await ws.event()
        assert frame is not None and frame["data"]["text"] == "a\ud800b"
        assert (await ws.request(1, "sessions.list", {}))["ok"]


@pytest.mark.parametrize("request_id", ["k", "x" * 200, 0, -3, 7, 2**53 + 1, 1.5, -0.25, 1e300], ids=repr)
async def test_a_request_id_is_any_string_up_to_200_characters_or_any_number(app: App, request_id) -> None:
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["ann"])
        answer = await ws.request(request_id, "sessions.list", {})
        assert answer["ok"] and answer["id"] == request_id and type(answer["id"]) is type(request_id)


@pytest.mark.parametrize("request_id", ["x" * 201, True, None, [1], {"a": 1}], ids=["201-chars", "true", "null", "list", "object"])
async def test_any_other_request_id_is_a_bad_frame_answered_without_an_id(app: App, request_id) -> None:
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["ann"])
        await ws.send({"type": "req", "id": request_id, "method": "sessions.list", "params": {}})
        answer = await ws.answer(None)
        assert answer["error"]["code"] == "bad_frame"
        assert "200 characters" in answer["error"]["message"] and "number" in answer["error"]["message"]
        await ws.send('{"type": "req", "id": NaN, "method": "sessions.list"}')  # not JSON's, but Python reads it
        assert (await ws.answer(None))["error"]["code"] == "bad_frame"
        assert (await ws.request("still-served", "sessions.list", {}))["ok"]


async def test_the_page_learns_whether_this_gateway_asks_for_a_token(start_app, llm) -> None:
    """`GET /session`: a loopback gateway with no token anywhere lets the page connect as
    `local` without showing a sign-in form; one with tokens asks for one. Another site's page
    is refused."""
    for tokens, needed in ((False, False), (True, True)):
        app = await start_app(config(llm, tokens=tokens))
        base = app.gateway.url.replace("ws://", "http://").removesuffix("/ws")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/session", headers={"Origin": base}) as response:
                assert response.status == 200 and await response.json() == {"token_needed": needed, "links": False}
                assert response.headers["Cache-Control"] == "no-store"
            async with http.get(f"{base}/session", headers={"Origin": "http://evil.test"}) as response:
                assert response.status == 403
        async with Raw(app.gateway.url, origin=base) as ws:  # what the page does next, without a token
            answer = await ws.connect(None)
        if needed:
            assert answer["error"]["code"] == "unauthorized"
        else:
            assert answer["result"]["principal"] == {"name": "local", "kind": "local"}
