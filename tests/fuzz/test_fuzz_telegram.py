"""Telegram under fuzz: the normaliser and the webhook endpoint, fed mutated real updates.

Real update shapes come from the Bot API emulator (text with entities, a reply with a quote,
a forum topic, photos and documents, an edit, a reaction, a member change, a button press,
a forward). Every mutation must become a message, an event or a logged skip; the webhook must
answer 200 (or 403/415 for what fails its checks), never 500 and never a traceback; and a
valid update must still be handled afterwards.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from botweave.adapters.telegram.adapter import TelegramAdapter
from botweave.adapters.telegram.schema import read_update
from botweave.ingress import FailedAuthLimit
from botweave.types import BotMessage, PlatformEvent
from hypothesis import given
from hypothesis import strategies as st

from tests.emulators.telegram import TelegramEmulator, adapter_config, png_bytes
from tests.fuzz.strategies import encode, mutated, raw_bodies
from tests.fuzz.support import Tally, counting_tracebacks, describe, new_session, post

ANN = TelegramEmulator.user(1, "Ann", "ann")
SECRET = "fuzz-secret-token"
JSON = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET}


def real_updates() -> list[dict[str, Any]]:
    """One update of every shape the adapter reads, as the emulator (and Telegram) sends them."""
    emu = TelegramEmulator()
    dm, group = emu.private_chat(ANN), emu.group(-1001, forum=True)
    first = emu.push_message(dm, ANN, "hello @ThisBot /start and https://example.com")
    emu.push_message(dm, ANN, "/new@ThisBot args")
    emu.push_message(dm, ANN, "as a reply", reply_to=first, quote={"text": "hello", "position": 0})
    topic = emu.topic(group, ANN, "Plans")
    emu.push("message", topic)
    emu.push_message(group, ANN, "in the topic", thread_id=topic["message_id"])
    emu.push_photo(dm, ANN, png_bytes(), caption="a *picture*")
    emu.push_document(dm, ANN, b"%PDF-1.4", file_name="a.pdf", mime_type="application/pdf")
    emu.push_edit(first, "hello again")
    emu.push_reaction(first, ANN, [], ["👍", "custom:123"])
    emu.push_chat_member(group, ANN, "left", "member")
    emu.push_message(dm, ANN, "forwarded", forward_origin={"type": "hidden_user", "sender_user_name": "X", "date": 1})
    emu.push("message", dict(emu.message(dm, ANN), location={"latitude": 1.5, "longitude": 2.5}))
    emu.push("message", dict(emu.message(dm, ANN), contact={"phone_number": "+1", "first_name": "Bo"}))
    emu.push("message", dict(emu.message(group, ANN), new_chat_members=[ANN]))
    bot_post = emu.message(dm, emu.bot, "pick one")
    emu.push_callback_query(bot_post, ANN, "choice:1")
    return emu.pending


UPDATES = real_updates()
UPDATE = st.sampled_from(UPDATES)
MUTATED = UPDATE.flatmap(mutated)


async def _start(port: int) -> tuple[TelegramEmulator, TelegramAdapter, list[Any]]:
    emu = await TelegramEmulator().start()
    received: list[Any] = []

    async def sink(item: BotMessage | PlatformEvent) -> None:
        received.append(item)

    settings = {
        "mode": "webhook", "webhook_url": f"http://127.0.0.1:{port}/tg", "webhook_port": port,
        "webhook_path": "/tg", "webhook_secret": SECRET,
    }
    adapter = TelegramAdapter(adapter_config(emu, **settings))
    adapter.bind(sink)
    await adapter.start()
    adapter.ingress.limit = FailedAuthLimit(max_failures=10**9)  # this test is not about the limit
    return emu, adapter, received


def test_the_normaliser_turns_any_update_into_items_or_a_skip(unused_tcp_port: int) -> None:
    tally = Tally("telegram normaliser")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        emu, adapter, _ = runner.run(_start(unused_tcp_port))
        bot = adapter.application.bot
        try:

            @given(data=MUTATED)
            def example(data: Any) -> None:
                tally.tried += 1
                try:
                    update = read_update(json.loads(encode(data)), bot)
                except Exception:  # noqa: BLE001 - no update to be had: the caller logs and skips it
                    tally.outcomes["skipped"] += 1
                    return
                items = adapter.inbound.normalise(update)
                tally.handed_on(items, none="nothing")

            example()
            valid = read_update(UPDATES[0], bot)
            (item,) = adapter.inbound.normalise(valid)
            assert isinstance(item, BotMessage) and item.text.startswith("hello")
        finally:
            runner.run(adapter.stop())
            runner.run(emu.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()



HEADERS = st.sampled_from([JSON] * 6 + [
    {"Content-Type": "application/json"},
    {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET + "x"},
    {"Content-Type": "text/plain", "X-Telegram-Bot-Api-Secret-Token": SECRET},
    {"Content-Type": "application/x-www-form-urlencoded", "X-Telegram-Bot-Api-Secret-Token": SECRET},
    {"X-Telegram-Bot-Api-Secret-Token": SECRET},
]).map(dict)
BODIES = st.one_of(MUTATED.map(encode), MUTATED.map(encode), UPDATE.map(encode).flatmap(raw_bodies))


def test_the_webhook_answers_every_request_and_still_takes_updates(unused_tcp_port: int) -> None:
    tally = Tally("telegram webhook")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        emu, adapter, received = runner.run(_start(unused_tcp_port))
        url = f"http://127.0.0.1:{unused_tcp_port}/tg"
        session = runner.run(new_session())
        try:

            @given(body=BODIES, headers=HEADERS)
            def example(body: bytes, headers: dict[str, str]) -> None:
                tally.tried += 1
                before = len(received)
                status = runner.run(post(session, url, body, headers))
                tally.statuses[status] += 1
                if headers.get("X-Telegram-Bot-Api-Secret-Token") != SECRET:
                    assert status == 403
                elif not headers.get("Content-Type", "").startswith("application/json"):
                    assert status == 415
                else:
                    assert status == 200, status  # never 500: the runtime took everything it was given
                tally.handed_on(received[before:])

            example()
            before = len(received)
            valid = dict(UPDATES[0], update_id=10**6)
            assert runner.run(post(session, url, json.dumps(valid).encode(), JSON)) == 200
            assert [i.text for i in received[before:] if isinstance(i, BotMessage)] == [UPDATES[0]["message"]["text"]]
        finally:
            runner.run(session.close())
            runner.run(adapter.stop())
            runner.run(emu.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()


