"""Slack under fuzz: the normaliser, and the HTTP endpoint (events, slash commands and
interaction payloads), fed mutated real payloads from the Slack emulator.

The endpoint listens on 0.0.0.0 by default: anything unsigned or stale must be refused with
401 before a byte of it is parsed, a signed body it cannot use with 400, and nothing may get
a 500 or leave a traceback. Valid events must still be handled afterwards.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from typing import Any
from urllib.parse import urlencode

from botweave.adapters.slack.adapter import SlackAdapter
from botweave.adapters.slack.config import SlackConfig
from botweave.ingress import FailedAuthLimit
from botweave.types import BotMessage, PlatformEvent
from hypothesis import given
from hypothesis import strategies as st

from tests.emulators.slack import (
    BOT_USER_ID,
    SIGNING_SECRET,
    SlackEmulator,
    app_mention_of,
    event_callback,
    slack_section,
    slash_command,
)
from tests.fuzz.strategies import encode, mutated, raw_bodies
from tests.fuzz.support import Tally, counting_tracebacks, describe, new_session, post

CHANNEL, ALICE = "C0GENERAL", "U0ALICE"


def real_bodies(emu: SlackEmulator) -> list[dict[str, Any]]:
    """Events API envelopes of every kind the adapter reads, as the emulator (and Slack) sends them."""
    root = emu.post_as_user(CHANNEL, ALICE, f"hello <@{BOT_USER_ID}> and <#C1|general> &amp; <https://x.io|x>")
    events = [
        root,
        app_mention_of(root),
        emu.post_as_user(CHANNEL, ALICE, "in the thread", thread_ts=root["ts"]),
        emu.post_as_user(CHANNEL, ALICE, "broadcast", thread_ts=root["ts"], subtype="thread_broadcast"),
        emu.post_as_user(CHANNEL, ALICE, "a file", files=[emu.add_file("a.png", b"\x89PNG", user=ALICE)],
                         subtype="file_share"),
        emu.post_as_user(CHANNEL, "", "from a bot", subtype="bot_message", bot_id="B0OTHER"),
    ]
    edited = emu.post_as_user(CHANNEL, ALICE, "to edit")
    events.append(emu.edit_as_user(CHANNEL, edited["ts"], "edited"))
    events.append(emu.delete_as_user(CHANNEL, edited["ts"]))
    events.append({"type": "reaction_added", "user": ALICE, "reaction": "thumbsup::skin-tone-3",
                   "item": {"type": "message", "channel": CHANNEL, "ts": root["ts"]}, "event_ts": emu.next_ts()})
    events.append({"type": "member_joined_channel", "user": ALICE, "channel": CHANNEL, "channel_type": "C",
                   "team": "T0EMU", "event_ts": emu.next_ts()})
    bodies = [event_callback(event) for event in events]
    bodies.append({"type": "url_verification", "challenge": "c" * 20, "token": "legacy"})
    return bodies


def interaction(emu: SlackEmulator) -> dict[str, Any]:
    """A `block_actions` payload (a button press), shaped as the emulator and Slack send it."""
    return {
        "type": "block_actions",
        "user": {"id": ALICE, "username": "alice", "name": "alice", "team_id": "T0EMU"},
        "api_app_id": "A0EMU",
        "token": "legacy",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": CHANNEL},
        "trigger_id": "1.2.abc",
        "team": {"id": "T0EMU", "domain": "emulator"},
        "enterprise": None,
        "channel": {"id": CHANNEL, "name": "general"},
        "response_url": f"{emu.base_url}/actions/T0EMU/1/key",
        "actions": [{"type": "button", "action_id": "approve", "block_id": "b1", "value": "yes",
                     "action_ts": "1700000000.1"}],
    }


async def _start() -> tuple[SlackEmulator, SlackAdapter, list[Any]]:
    emu = SlackEmulator()
    await emu.start()
    emu.add_user(ALICE, "Alice")
    emu.add_channel(CHANNEL, "channel")
    received: list[Any] = []

    async def sink(item: BotMessage | PlatformEvent) -> None:
        received.append(item)

    adapter = SlackAdapter(SlackConfig(**slack_section(emu, "http")))
    adapter.bind(sink)
    await adapter.start()
    adapter.ingress.limit = FailedAuthLimit(max_failures=10**9)  # this test is not about the limit
    return emu, adapter, received


def test_the_normaliser_turns_any_event_into_an_item_or_a_skip() -> None:
    tally = Tally("slack normaliser")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        emu, adapter, _ = runner.run(_start())
        inbound = adapter.inbound
        assert inbound is not None
        bodies = real_bodies(emu)
        try:

            @given(body=st.sampled_from(bodies).flatmap(mutated))
            def example(body: Any) -> None:
                tally.tried += 1
                body = json.loads(encode(body))
                event = body.get("event") if isinstance(body, dict) else body
                item = runner.run(inbound.normalise(event, body))
                tally.handed_on([] if item is None else [item], none="skipped")

            example()
            item = runner.run(inbound.normalise(bodies[0]["event"], bodies[0]))
            assert isinstance(item, BotMessage) and item.text.startswith("hello")
        finally:
            runner.run(adapter.stop())
            runner.run(emu.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()


SIGNED, UNSIGNED, BAD_SIGNATURE, STALE, ODD_TIMESTAMP = "signed", "unsigned", "bad signature", "stale", "odd timestamp"


def _headers(how: str, body: bytes, content_type: str) -> dict[str, str]:
    now = int(time.time())
    if how == UNSIGNED:
        return {"Content-Type": content_type}
    if how == BAD_SIGNATURE:
        return {"Content-Type": content_type, "X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": "v0=" + "0" * 64}
    if how == STALE:
        return {"Content-Type": content_type, "X-Slack-Request-Timestamp": str(now - 600),
                "X-Slack-Signature": _sign(body, now - 600)}
    if how == ODD_TIMESTAMP:
        return {"Content-Type": content_type, "X-Slack-Request-Timestamp": "12e3", "X-Slack-Signature": "v0=abc"}
    return {"Content-Type": content_type, "X-Slack-Request-Timestamp": str(now), "X-Slack-Signature": _sign(body, now)}


def _sign(body: bytes, timestamp: int) -> str:
    """Slack's v0 signature over the raw bytes (the emulator's `sign` takes text)."""
    digest = hmac.new(SIGNING_SECRET.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    return f"v0={digest}"


def _is_text(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _form(fields: dict[Any, Any]) -> bytes:
    """Form-encoded as a sender would (a lone surrogate goes out as its raw bytes)."""
    return urlencode({str(k): str(v) for k, v in fields.items()}, errors="surrogatepass").encode()



def test_the_endpoint_verifies_before_parsing_and_answers_every_request() -> None:
    tally = Tally("slack http endpoint")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        emu, adapter, received = runner.run(_start())
        url = f"http://127.0.0.1:{adapter.http_port}{adapter.config.http_path}"
        session = runner.run(new_session())
        envelopes = st.sampled_from(real_bodies(emu))
        command = slash_command("/new", "some args", user=ALICE, channel=CHANNEL, channel_name="general")
        press = interaction(emu)
        bodies = st.one_of(
            envelopes.flatmap(mutated).map(lambda b: (encode(b), "application/json")),
            envelopes.flatmap(mutated).map(lambda b: (encode(b), "application/json")),
            envelopes.map(encode).flatmap(raw_bodies).map(lambda b: (b, "application/json")),
            mutated(command).map(lambda c: (_form(c if isinstance(c, dict) else {"x": c}),
                                            "application/x-www-form-urlencoded")),
            mutated(press).map(lambda p: (urlencode({"payload": encode(p).decode()}).encode(),
                                          "application/x-www-form-urlencoded")),
            st.binary(max_size=100).map(lambda b: (b, "application/x-www-form-urlencoded")),
        )
        how = st.sampled_from([SIGNED] * 6 + [UNSIGNED, BAD_SIGNATURE, STALE, ODD_TIMESTAMP])
        try:

            @given(request=bodies, signed=how)
            def example(request: tuple[bytes, str], signed: str) -> None:
                body, content_type = request
                tally.tried += 1
                before = len(received)
                status = runner.run(post(session, url, body, _headers(signed, body, content_type)))
                tally.statuses[status] += 1
                if signed != SIGNED or not _is_text(body):  # Slack signs text only
                    assert status == 401, status
                else:
                    assert status in (200, 400), status
                runner.run(_settled(adapter))
                tally.handed_on(received[before:])

            example()
            before = len(received)
            valid = event_callback(emu.post_as_user(CHANNEL, ALICE, "still listening?"))
            body = json.dumps(valid).encode()
            assert runner.run(post(session, url, body, _headers(SIGNED, body, "application/json"))) == 200
            runner.run(_settled(adapter))
            assert [i.text for i in received[before:]] == ["still listening?"]
        finally:
            runner.run(session.close())
            runner.run(adapter.stop())
            runner.run(emu.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()



async def _settled(adapter: SlackAdapter) -> None:
    stats = adapter.inbound_stats
    for _ in range(500):
        if stats["settled"] >= stats["received"]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the adapter did not finish reading what it acknowledged")
