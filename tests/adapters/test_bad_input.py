"""Hostile and broken inbound payloads, case by case, through the real SDK clients and emulators.

Each inbound surface validates before it parses (Slack's signature on the raw bytes; Telegram's
secret, then content type), answers every request with a status that means something (never a
500 or a traceback for what a sender got wrong), and normalises whatever it accepts totally:
a wrong-typed field is absent, lone surrogates never reach the model call.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from botweave.adapters.slack.adapter import SlackAdapter
from botweave.adapters.slack.config import SlackConfig
from botweave.adapters.telegram.adapter import TelegramAdapter
from botweave.types import BotMessage, PlatformEvent

from tests.adapters.platforms import discord_into_a_list
from tests.emulators.discord import CHANNEL_ID, DM_CHANNEL_ID
from tests.emulators.openai import OpenAIEmulator
from tests.emulators.slack import (
    SIGNING_SECRET,
    SlackEmulator,
    event_callback,
    slack_section,
)
from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)

ANN = TelegramEmulator.user(1, "Ann", "ann")
SECRET = "s3cret-token"
JSON = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET}
Item = BotMessage | PlatformEvent


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]


async def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
            return response.status, dict(response.headers)


# --- Telegram webhook ---------------------------------------------------------------------------


@pytest_asyncio.fixture
async def telegram(telegram_emulator: TelegramEmulator, unused_tcp_port: int) -> AsyncIterator[Any]:
    """A webhook-mode adapter on the emulator; `start(**settings)` returns (adapter, received, url)."""
    adapters: list[TelegramAdapter] = []

    async def start(**overrides: Any) -> tuple[TelegramAdapter, list[Item], str]:
        received: list[Item] = []

        async def sink(item: Item) -> None:
            received.append(item)

        settings = {
            "mode": "webhook", "webhook_url": f"http://127.0.0.1:{unused_tcp_port}/tg", "webhook_port": unused_tcp_port,
            "webhook_path": "/tg", "webhook_secret": SECRET, **overrides,
        }
        adapter = TelegramAdapter(adapter_config(telegram_emulator, **settings))
        adapter.bind(sink)
        adapters.append(adapter)
        await adapter.start()
        return adapter, received, f"http://127.0.0.1:{unused_tcp_port}/tg"

    yield start
    for adapter in adapters:
        await adapter.stop()


async def test_the_webhook_checks_the_secret_first_then_the_content_type(telegram, telegram_emulator):
    _, received, url = await telegram()
    update = json.dumps({"update_id": 1, "message": telegram_emulator.message(telegram_emulator.private_chat(ANN), ANN, "hi")})
    assert (await post(url, b"not even json", {"Content-Type": "text/plain"}))[0] == 403
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""):
        headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET, "Content-Type": content_type}
        assert (await post(url, update.encode(), headers))[0] == 415
    assert received == []
    assert (await post(url, update.encode(), {**JSON, "Content-Type": "application/json; charset=utf-8"}))[0] == 200
    assert [i.text for i in received if isinstance(i, BotMessage)] == ["hi"]


async def test_wrong_typed_fields_are_absent_and_answered_200(telegram, telegram_emulator, caplog):
    """A text that is a number or a list, a quote whose text is a number, a chat id that is an
    object: never a crash, never a 500 (Telegram would redeliver it forever)."""
    caplog.set_level(logging.INFO)
    emu = telegram_emulator
    _, received, url = await telegram()
    chat = emu.private_chat(ANN)
    original = emu.message(chat, ANN, "the original")
    cases = [
        dict(emu.message(chat, ANN, "x"), text=42),
        dict(emu.message(chat, ANN, "x"), text=["a", "list"]),
        dict(emu.message(chat, ANN, "quoting", reply_to=original), quote={"text": 7, "position": 0}),
        dict(emu.message(chat, ANN, "x"), chat={"id": {"nested": 1}, "type": "private"}),
        dict(emu.message(chat, ANN, "x"), date=10**30),
        dict(emu.message(chat, ANN, "ok"), entities=[{"type": "mention", "offset": "0", "length": 2}]),
    ]
    for update_id, message in enumerate(cases, start=100):
        status, _ = await post(url, json.dumps({"update_id": update_id, "message": message}).encode(), JSON)
        assert status == 200
    texts = [i.text for i in received if isinstance(i, BotMessage)]
    assert texts == ["quoting", "ok"]  # a number or list is no text; no chat or no date, no message
    quoting = next(i for i in received if isinstance(i, BotMessage) and i.text == "quoting")
    assert quoting.quoted is not None and quoting.quoted.text == "the original"  # the whole replied message
    ignored = [r.getMessage() for r in caplog.records if "ignored malformed field" in r.getMessage()]
    assert len(ignored) == len(cases)
    assert "telegram: update 100: ignored malformed field(s) message.text" in ignored
    assert tracebacks(caplog) == []


async def test_an_update_the_runtime_cannot_take_is_still_answered_500(telegram, telegram_emulator):
    emu = telegram_emulator
    adapter, _, url = await telegram()

    async def failing(item: Item) -> None:
        raise ConnectionError("the store is away")

    adapter.bind(failing)
    update = {"update_id": 5, "message": emu.message(emu.private_chat(ANN), ANN, "keep me")}
    assert (await post(url, json.dumps(update).encode(), JSON))[0] == 500


async def test_lone_surrogates_are_replaced_before_the_model_is_called(start_app, telegram_emulator, unused_tcp_port):
    """Text the model call would choke on (lone surrogates, NUL) is cleaned at the edge: the
    turn reaches the model with U+FFFD in their place and the answer goes out."""
    emu = telegram_emulator
    llm = OpenAIEmulator(reply="understood")
    await llm.start()
    try:
        telegram_section = adapter_config(
            emu, mode="webhook", webhook_url=f"http://127.0.0.1:{unused_tcp_port}/tg",
            webhook_port=unused_tcp_port, webhook_path="/tg", webhook_secret=SECRET,
        )
        await start_app({
            "bot": {"unknown_user_policy": "allow"},
            "agents": {"remote": {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-x"}},
            "platforms": {"telegram": telegram_section},
        })
        chat = emu.private_chat(ANN)
        message = emu.message(chat, ANN, "broken \ud800 text\x00 here")
        assert await emu.post_to_webhook({"update_id": 9, "message": message}, headers=JSON) == 200
        await wait_until(lambda: emu.sent_texts(ANN["id"]), timeout=10, what="the answer")
        assert emu.sent_texts(ANN["id"]) == ["understood"]
        assert llm.requests[-1]["messages"][-1]["content"] == "broken \ufffd text\ufffd here"
    finally:
        await llm.stop()


# --- Slack HTTP endpoint ------------------------------------------------------------------------


def signed(body: bytes, *, timestamp: int | None = None, content_type: str = "application/json") -> dict[str, str]:
    ts = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"Content-Type": content_type, "X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": f"v0={digest}"}


@pytest_asyncio.fixture
async def slack() -> AsyncIterator[Callable[..., Awaitable[tuple[SlackEmulator, SlackAdapter, list[Item], str]]]]:
    started: list[tuple[SlackEmulator, SlackAdapter]] = []

    async def start(mode: str = "http", **overrides: Any) -> tuple[SlackEmulator, SlackAdapter, list[Item], str]:
        emu = SlackEmulator()
        await emu.start()
        emu.add_user("U0ALICE", "Alice")
        emu.add_channel("C0GENERAL", "channel")
        received: list[Item] = []

        async def sink(item: Item) -> None:
            received.append(item)

        adapter = SlackAdapter(SlackConfig(**slack_section(emu, mode, **overrides)))
        adapter.bind(sink)
        await adapter.start()
        started.append((emu, adapter))
        return emu, adapter, received, f"http://127.0.0.1:{adapter.http_port}{adapter.config.http_path}"

    yield start
    for emu, adapter in started:
        await adapter.stop()
        await emu.stop()


async def settled(adapter: SlackAdapter) -> None:
    stats = adapter.inbound_stats
    await wait_until(lambda: stats["settled"] >= stats["received"], what="the adapter to finish reading")


UNSIGNED_JUNK = [
    b'{"type": "event_callback", "event": {"type": "mess',  # truncated
    b"[1, 2, 3]",
    b"42",
    b"\xff\xfe\xfa not utf-8",
    b"[" * 50_000 + b"]" * 50_000,
    json.dumps({"type": "event_callback", "enterprise": 5, "authorizations": "x", "team_id": ["T"],
                "event": {"type": "message"}}).encode(),
]


async def test_unsigned_or_stale_requests_get_401_before_anything_is_parsed(slack, caplog):
    _, _, received, url = await slack()
    for body in UNSIGNED_JUNK:
        assert (await post(url, body, {"Content-Type": "application/json"}))[0] == 401
    body = UNSIGNED_JUNK[-1]
    for timestamp in ("not-a-number", "12e3", "-5", "9" * 40, ""):
        headers = {**signed(body), "X-Slack-Request-Timestamp": timestamp}
        assert (await post(url, body, headers))[0] == 401
    assert (await post(url, body, signed(body, timestamp=int(time.time()) - 400)))[0] == 401  # stale
    assert (await post(url, body, {**signed(body), "X-Slack-Signature": "v0=" + "0" * 64}))[0] == 401
    assert (await post(url, body + b" ", signed(body)))[0] == 401  # signed, then altered
    not_text = b"\xff\xfe\xfa not utf-8"
    assert (await post(url, not_text, signed(not_text)))[0] == 401  # Slack signs text: not one it sent
    assert received == []
    assert tracebacks(caplog) == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_signed_bodies_it_cannot_use_get_400(slack, caplog):
    _, _, received, url = await slack()
    text_junk = [body for body in UNSIGNED_JUNK[:5] if body.isascii()]
    for body in text_junk + [b"{}", b'{"no": "type"}', b"null", b'{"type": 5}']:
        assert (await post(url, body, signed(body)))[0] == 400, body[:40]
    form = b"payload=%7B%22no%22%3A+%22type%22%7D"
    assert (await post(url, form, signed(form, content_type="application/x-www-form-urlencoded")))[0] == 400
    assert (await post(url, b"{}", signed(b"{}", content_type="text/plain")))[0] == 400
    assert received == []
    assert tracebacks(caplog) == []


async def test_wrong_typed_envelope_and_event_fields_are_absent(slack, caplog):
    """Signed, with `enterprise`, `authorizations` and `team_id` of the wrong type, `subtype` a
    list, `channel` a number, a timestamp of 10^400: answered 200, read as far as usable."""
    emu, adapter, received, url = await slack()
    event = emu.post_as_user("C0GENERAL", "U0ALICE", "still readable")
    envelope = dict(event_callback(event), enterprise=5, authorizations="x", team_id=["T"])
    broken = [
        dict(event, subtype=["bot_message"], ts=emu.next_ts()),
        dict(event, channel=12345, ts=emu.next_ts()),
        dict(event, ts="9" * 400),
        dict(event, ts=1.5e300),
        dict(event, files="not a list", ts=emu.next_ts()),
    ]
    for body in [envelope] + [event_callback(e) for e in broken]:
        raw = json.dumps(body).encode()
        assert (await post(url, raw, signed(raw)))[0] == 200
    await settled(adapter)
    texts = [i.text for i in received if isinstance(i, BotMessage)]
    assert texts == ["still readable", "still readable", "still readable"]  # envelope, subtype, files
    assert adapter.inbound_stats["unreadable"] == 0
    assert tracebacks(caplog) == []


async def test_an_interaction_nobody_listens_for_is_not_a_server_error(slack, caplog):
    _, _, _, url = await slack()
    payload = {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": [], "team": {"id": "T0EMU"}}
    form = "payload=" + json.dumps(payload)
    body = form.encode()
    status, _ = await post(url, body, signed(body, content_type="application/x-www-form-urlencoded"))
    assert status == 400
    assert tracebacks(caplog) == []
    assert not [r for r in caplog.records if "Unhandled request" in r.getMessage()]


async def test_socket_mode_payloads_are_sanitised_too(slack, caplog):
    emu, adapter, received, _ = await slack("socket")
    event = emu.post_as_user("C0GENERAL", "U0ALICE", "over the socket")
    acked = await emu.send_envelope(dict(event_callback(event), enterprise=[1], authorizations={"a": 1}))
    assert acked.acked.is_set()
    junk = await emu.send_envelope({"not": "an envelope"})
    assert junk.acked.is_set()
    await settled(adapter)
    assert [i.text for i in received if isinstance(i, BotMessage)] == ["over the socket"]
    assert tracebacks(caplog) == []


# --- Discord gateway ----------------------------------------------------------------------------


async def test_discord_fields_of_the_wrong_type_are_absent_and_the_connection_stays(caplog):
    emu, adapter, received = await discord_into_a_list()
    try:
        base = emu.message("fine", channel_id=DM_CHANNEL_ID, store=False)
        broken = [
            dict(base, id=emu.next_id(), content=12345),  # no text: skipped
            dict(base, id=emu.next_id(), content="attachments odd", attachments="nope", mentions=[5], mention_roles={}),
            dict(base, id=emu.next_id(), content="surrogate \ud83d here"),
            dict(base, id=emu.next_id(), author={"id": "7001", "username": ["x"]}),  # no usable author: skipped
            dict(base, id=emu.next_id(), content="reply", channel_id=CHANNEL_ID,
                 message_reference={"message_id": {"x": 1}}, referenced_message="gone"),
        ]
        for data in broken:
            await emu.dispatch("MESSAGE_CREATE", data)
        await emu.dispatch("MESSAGE_CREATE", emu.message("the last one", channel_id=DM_CHANNEL_ID, store=False))
        await wait_until(lambda: any(isinstance(i, BotMessage) and i.text == "the last one" for i in received))
        assert [i.text for i in received if isinstance(i, BotMessage)] == [
            "attachments odd", "surrogate \ufffd here", "reply", "the last one",
        ]
        assert emu.connected and len(emu.calls("GET", "/users/@me")) == 1
        assert tracebacks(caplog) == []
    finally:
        await adapter.stop()
        await emu.stop()


# --- client attribution and the limit on failed authentication -----------------------------------


async def test_behind_a_trusted_proxy_the_forwarded_client_is_logged_and_limited(telegram, telegram_emulator, caplog):
    adapter, received, url = await telegram(trusted_proxies=["127.0.0.1/32"])
    adapter.ingress.limit.max_failures = 3
    wrong = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": "guess"}
    spoofed = {"X-Forwarded-For": "203.0.113.99, 198.51.100.7"}  # the proxy appended the last hop
    for _ in range(2):
        assert (await post(url, b"{}", {**wrong, **spoofed}))[0] == 403
    assert "request from 198.51.100.7 rejected: missing or wrong secret token" in caplog.text
    assert "203.0.113.99" not in caplog.text  # what the client wrote itself is never believed
    assert (await post(url, b"{}", {**wrong, **spoofed}))[0] == 403  # the third failure starts a block
    status, headers = await post(url, b"{}", {**wrong, **spoofed})
    assert status == 429 and int(headers["Retry-After"]) > 0
    other = {"Forwarded": 'for="[2001:db8::7]:4711"'}
    assert (await post(url, b"{}", {**wrong, **other}))[0] == 403  # another client behind the same proxy
    assert "refusing its failing requests for" in caplog.text


async def test_from_an_untrusted_peer_forwarded_headers_are_ignored(telegram, caplog):
    adapter, _, url = await telegram()
    adapter.ingress.limit.max_failures = 2
    wrong = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": "guess"}
    assert (await post(url, b"{}", {**wrong, "X-Forwarded-For": "198.51.100.7"}))[0] == 403
    assert "request from 127.0.0.1 rejected" in caplog.text and "198.51.100.7" not in caplog.text
    assert (await post(url, b"{}", {**wrong, "X-Forwarded-For": "198.51.100.8"}))[0] == 403
    # one client, whatever it claims: its third failing request is refused
    assert (await post(url, b"{}", {**wrong, "X-Forwarded-For": "198.51.100.9"}))[0] == 429


async def test_forged_requests_never_lock_the_real_telegram_out(telegram, telegram_emulator, caplog):
    """Behind a proxy not listed in trusted_proxies every client is one address: a stranger's
    junk gets that address refused, and Telegram's own updates must still be taken."""
    emu = telegram_emulator
    _, received, url = await telegram()
    wrong = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": "guess"}
    statuses = [(await post(url, b"junk", wrong))[0] for _ in range(25)]
    assert statuses == [403] * 20 + [429] * 5
    for update_id in (1, 2):
        update = {"update_id": update_id, "message": emu.message(emu.private_chat(ANN), ANN, f"real {update_id}")}
        assert (await post(url, json.dumps(update).encode(), JSON))[0] == 200
        assert (await post(url, b"junk", wrong))[0] == 429  # the junk in between stays refused
    assert [i.text for i in received if isinstance(i, BotMessage)] == ["real 1", "real 2"]
    assert sum("rejected" in r.getMessage() or "refusing" in r.getMessage() for r in caplog.records) == 20


async def test_a_flood_of_unsigned_junk_is_cut_off_per_client_on_slack(slack, caplog):
    emu, adapter, received, url = await slack(trusted_proxies=["127.0.0.0/8"])
    adapter.ingress.limit.max_failures = 5
    flood = {"Content-Type": "application/json", "X-Forwarded-For": "192.0.2.66"}
    statuses = [(await post(url, b"junk", flood))[0] for _ in range(8)]
    assert statuses == [401] * 5 + [429] * 3
    rejected = [r for r in caplog.records if "rejected" in r.getMessage() or "refusing" in r.getMessage()]
    assert len(rejected) == 5  # logged until refused, then quiet
    body = json.dumps(event_callback(emu.post_as_user("C0GENERAL", "U0ALICE", "a real event"))).encode()
    assert (await post(url, body, {**signed(body), "X-Forwarded-For": "192.0.2.1"}))[0] == 200
    await settled(adapter)
    assert [i.text for i in received if isinstance(i, BotMessage)] == ["a real event"]


async def test_forged_requests_never_lock_slack_itself_out(slack, caplog):
    """All clients behind one untrusted proxy: while that address is refused, each signed
    request is still served, and forged ones (unsigned, or signed with the wrong secret) are
    refused without reaching bolt."""
    emu, adapter, received, url = await slack()
    flood = {"Content-Type": "application/json"}
    assert [(await post(url, b"junk", flood))[0] for _ in range(22)] == [401] * 20 + [429] * 2
    forged_body = json.dumps(event_callback(emu.post_as_user("C0GENERAL", "U0ALICE", "forged"))).encode()
    forged = {**signed(forged_body), "X-Slack-Signature": "v0=" + "0" * 64}
    assert (await post(url, forged_body, forged))[0] == 429
    for text in ("first real event", "second real event"):
        body = json.dumps(event_callback(emu.post_as_user("C0GENERAL", "U0ALICE", text))).encode()
        assert (await post(url, body, signed(body)))[0] == 200
    await settled(adapter)
    assert [i.text for i in received if isinstance(i, BotMessage)] == ["first real event", "second real event"]
    assert sum("rejected" in r.getMessage() or "refusing" in r.getMessage() for r in caplog.records) == 20


async def test_trusted_proxies_must_be_addresses_or_ranges():
    from botweave.config import ConfigError
    from botweave.runtime.config import load_config

    config = load_config({
        "agents": {"a": {"model": "offline/echo"}},
        "platforms": {"telegram": {"token": "1:x", "trusted_proxies": ["10.0.0.0/8", "192.0.2.7", "::1"]}},
    })
    assert [str(n) for n in config.platform("telegram").trusted_proxies] == ["10.0.0.0/8", "192.0.2.7/32", "::1/128"]
    with pytest.raises(ConfigError, match="platforms.slack.trusted_proxies: 'proxy.example' is not an IP address"):
        load_config({
            "agents": {"a": {"model": "offline/echo"}},
            "platforms": {"slack": {"bot_token": "x", "trusted_proxies": ["proxy.example"]}},
        })

