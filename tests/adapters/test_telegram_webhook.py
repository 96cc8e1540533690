"""Webhook mode: our aiohttp server answers Telegram only once the runtime has the update.

The emulator delivers pushed updates to the registered webhook (recording each HTTP status in
`webhook_deliveries`); tests also POST forged or malformed requests themselves.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from botweave.adapters.telegram import adapter as adapter_module
from botweave.adapters.telegram.adapter import TelegramAdapter
from botweave.types import BotMessage, PlatformEvent

from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)

ANN = TelegramEmulator.user(1, "Ann", "ann")
BOB = TelegramEmulator.user(2, "Bob", "bob")
SECRET = "s3cret-token"
RIGHT = {"Content-Type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET}

Sink = Callable[[BotMessage | PlatformEvent], Awaitable[None]]
Starter = Callable[..., Awaitable[TelegramAdapter]]


def text_of(item: BotMessage | PlatformEvent) -> str:
    return item.text if isinstance(item, BotMessage) else f"<{type(item).__name__}>"


@pytest_asyncio.fixture
async def webhook_adapter(telegram_emulator: TelegramEmulator, unused_tcp_port: int) -> AsyncIterator[Starter]:
    """Start a TelegramAdapter in webhook mode bound to the given sink."""
    adapters: list[TelegramAdapter] = []

    async def start(sink: Sink, **overrides: Any) -> TelegramAdapter:
        settings = {
            "mode": "webhook",
            "webhook_url": f"http://127.0.0.1:{unused_tcp_port}/tg-hook",
            "webhook_port": unused_tcp_port,
            "webhook_path": "/tg-hook",
            "webhook_secret": SECRET,
            **overrides,
        }
        adapter = TelegramAdapter(adapter_config(telegram_emulator, **settings))
        adapter.bind(sink)
        adapters.append(adapter)
        await adapter.start()
        return adapter

    yield start
    for adapter in adapters:
        await adapter.stop()


async def post_body(emu: TelegramEmulator, body: bytes, headers: dict[str, str] | None = None) -> int:
    """POST arbitrary bytes to the registered webhook."""
    assert emu.webhook is not None
    async with aiohttp.ClientSession() as session:
        async with session.post(emu.webhook["url"], data=body, headers=headers or RIGHT) as response:
            return response.status


def update_for(emu: TelegramEmulator, chat: dict[str, Any], sender: dict[str, Any], text: str, update_id: int) -> dict[str, Any]:
    return {"update_id": update_id, "message": emu.message(chat, sender, text)}


async def test_webhook_is_registered_with_secret_and_update_types(webhook_adapter, telegram_emulator):
    emu = telegram_emulator
    received: list[str] = []

    async def sink(item: BotMessage | PlatformEvent) -> None:
        received.append(text_of(item))

    adapter = await webhook_adapter(sink)
    (call,) = emu.calls_to("setWebhook")
    assert call.params["url"] == f"{emu.webhook['url']}"
    assert call.params["secret_token"] == SECRET
    assert set(adapter_module.ALLOWED_UPDATES) <= set(call.params["allowed_updates"])
    assert adapter.application.updater is not None and not adapter.application.updater.running  # ours serves
    assert not emu.calls_to("getUpdates")


async def test_right_secret_is_processed_and_answered_200(webhook_adapter, telegram_emulator):
    emu = telegram_emulator
    received: list[str] = []

    async def sink(item: BotMessage | PlatformEvent) -> None:
        received.append(text_of(item))

    await webhook_adapter(sink)
    emu.push_message(emu.private_chat(ANN), ANN, "via webhook")
    await wait_until(lambda: emu.webhook_deliveries, what="the delivery")
    assert received == ["via webhook"]  # already handed over when the 200 came back
    assert [status for _, status in emu.webhook_deliveries] == [200]


@pytest.mark.parametrize("secret", [None, "guess", SECRET + "x", "", SECRET[:-1]])
async def test_missing_or_wrong_secret_gets_403_and_no_turn(webhook_adapter, telegram_emulator, caplog, secret):
    emu = telegram_emulator
    received: list[str] = []

    async def sink(item: BotMessage | PlatformEvent) -> None:
        received.append(text_of(item))

    await webhook_adapter(sink)
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    forged = update_for(emu, emu.private_chat(ANN), ANN, "forged", 5000)
    assert await emu.post_to_webhook(forged, headers=headers) == 403
    await asyncio.sleep(0.2)
    assert received == []
    assert SECRET not in caplog.text


async def test_the_200_comes_only_after_the_runtime_has_the_update(webhook_adapter, telegram_emulator):
    """Telegram never resends an update it got a 200 for, so the 200 must wait for the
    hand-over (with Redis, the append to the inbound stream)."""
    emu = telegram_emulator
    release = asyncio.Event()
    entered: list[str] = []
    handed: list[str] = []

    async def slow_sink(item: BotMessage | PlatformEvent) -> None:
        entered.append(text_of(item))
        await release.wait()
        handed.append(text_of(item))

    await webhook_adapter(slow_sink)
    update = update_for(emu, emu.private_chat(ANN), ANN, "keep me", 4000)
    post = asyncio.create_task(emu.post_to_webhook(update, headers=RIGHT))
    await wait_until(lambda: entered == ["keep me"], what="the update to reach the sink")
    await asyncio.sleep(0.5)
    assert not post.done(), "the webhook answered before the runtime had the update"
    release.set()
    assert await asyncio.wait_for(post, 5) == 200
    assert handed == ["keep me"]


async def test_a_failed_hand_over_is_answered_500_and_the_redelivery_handled(webhook_adapter, telegram_emulator, caplog):
    emu = telegram_emulator
    failures = [ConnectionError("redis is down")]
    handed: list[str] = []

    async def flaky_sink(item: BotMessage | PlatformEvent) -> None:
        if failures:
            raise failures.pop()
        handed.append(text_of(item))

    adapter = await webhook_adapter(flaky_sink)
    update = update_for(emu, emu.private_chat(ANN), ANN, "try again", 4100)
    assert await emu.post_to_webhook(update, headers=RIGHT) == 500
    assert handed == []
    assert "redelivers" in caplog.text
    assert await emu.post_to_webhook(update, headers=RIGHT) == 200  # Telegram's redelivery
    assert handed == ["try again"]
    assert adapter.inbound._handovers == {}


async def test_a_hand_over_that_never_ends_is_answered_500(webhook_adapter, telegram_emulator, monkeypatch):
    monkeypatch.setattr(adapter_module, "HANDOVER_TIMEOUT_S", 0.3)
    emu = telegram_emulator
    forever = asyncio.Event()

    async def stuck_sink(item: BotMessage | PlatformEvent) -> None:
        await forever.wait()

    await webhook_adapter(stuck_sink)
    update = update_for(emu, emu.private_chat(ANN), ANN, "stuck", 4200)
    assert await asyncio.wait_for(emu.post_to_webhook(update, headers=RIGHT), 5) == 500


async def test_a_malformed_body_is_answered_200_logged_and_the_next_update_handled(
    webhook_adapter, telegram_emulator, caplog
):
    emu = telegram_emulator
    received: list[str] = []

    async def sink(item: BotMessage | PlatformEvent) -> None:
        received.append(text_of(item))

    caplog.set_level(logging.INFO)
    await webhook_adapter(sink)
    bodies = [
        b"this is not json",
        b'["a", "list"]',
        json.dumps({"message": {"text": "no update id"}}).encode(),
        json.dumps({"update_id": 4300, "message": ["not", "a", "message"]}).encode(),
        json.dumps({"update_id": 4301, "edited_message": {"message_id": "x"}}).encode(),
    ]
    for body in bodies:
        assert await post_body(emu, body) == 200
    # one line each: a body that is no update is skipped; an unusable field is ignored
    skipped = [r for r in caplog.records if "malformed webhook update" in r.getMessage()]
    ignored = [r for r in caplog.records if "ignored malformed field" in r.getMessage()]
    assert len(skipped) == 3 and len(ignored) == 2
    assert "update 4300: ignored malformed field(s) message" in ignored[0].getMessage()
    assert received == []
    emu.push_message(emu.private_chat(ANN), ANN, "are you alive?")
    await wait_until(lambda: received == ["are you alive?"], what="the next update")
    assert emu.webhook_deliveries[-1][1] == 200


async def test_same_chat_in_order_other_chats_concurrent(webhook_adapter, telegram_emulator):
    emu = telegram_emulator
    release = asyncio.Event()
    entered: list[str] = []
    handed: list[str] = []

    async def sink(item: BotMessage | PlatformEvent) -> None:
        entered.append(text_of(item))
        if text_of(item) == "a1":
            await release.wait()
        handed.append(text_of(item))

    await webhook_adapter(sink)
    ann, bob = emu.private_chat(ANN), emu.private_chat(BOB)
    first = asyncio.create_task(emu.post_to_webhook(update_for(emu, ann, ANN, "a1", 4400), headers=RIGHT))
    await wait_until(lambda: entered == ["a1"], what="a1 to reach the sink")  # and block there
    second = asyncio.create_task(emu.post_to_webhook(update_for(emu, ann, ANN, "a2", 4401), headers=RIGHT))
    other = asyncio.create_task(emu.post_to_webhook(update_for(emu, bob, BOB, "b1", 4402), headers=RIGHT))
    assert await asyncio.wait_for(other, 5) == 200  # Bob is not queued behind Ann
    await asyncio.sleep(0.2)
    assert handed == ["b1"] and entered == ["a1", "b1"]  # a2 waits for a1's hand-over
    assert not first.done() and not second.done()
    release.set()
    assert await asyncio.wait_for(asyncio.gather(first, second), 5) == [200, 200]
    assert handed == ["b1", "a1", "a2"]


async def test_without_a_secret_updates_are_accepted_with_a_warning(webhook_adapter, telegram_emulator, caplog):
    emu = telegram_emulator
    received: list[str] = []

    async def sink(item: BotMessage | PlatformEvent) -> None:
        received.append(text_of(item))

    await webhook_adapter(sink, webhook_secret=None)
    assert "accepts updates from anyone" in caplog.text
    assert emu.calls_to("setWebhook")[0].params.get("secret_token") in (None, "")
    emu.push_message(emu.private_chat(ANN), ANN, "open door")
    await wait_until(lambda: received == ["open door"], what="the update")


async def test_stop_closes_the_webhook_server(webhook_adapter, telegram_emulator):
    emu = telegram_emulator

    async def sink(item: BotMessage | PlatformEvent) -> None:
        pass

    adapter = await webhook_adapter(sink)
    url = emu.webhook["url"]
    await adapter.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=b"{}", headers=RIGHT):
                pass


async def test_a_rejected_set_webhook_fails_start_and_frees_the_port(telegram_emulator, unused_tcp_port):
    emu = telegram_emulator
    emu.fail("setWebhook", description="Bad Request: bad webhook: Failed to resolve host")
    settings = {
        "mode": "webhook",
        "webhook_url": f"http://127.0.0.1:{unused_tcp_port}/tg-hook",
        "webhook_port": unused_tcp_port,
        "webhook_secret": SECRET,
    }
    adapter = TelegramAdapter(adapter_config(emu, **settings))
    with pytest.raises(Exception, match="(?i)bad webhook"):
        await adapter.start()
    assert not adapter.running
    retry = TelegramAdapter(adapter_config(emu, **settings))  # the port is free again
    await retry.start()
    await retry.stop()
