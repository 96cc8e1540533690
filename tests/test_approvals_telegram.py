"""Approvals end to end on Telegram: Bot API emulator ⇄ python-telegram-bot ⇄ App ⇄ offline agent.

The offline model calls a tool when the user writes `call <tool> <json>`; `transfer` (tests/
approvaldemo.py) is listed with `approval: required`, so every call waits for a press of the
inline keyboard the bot posts.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from botweave import App, Button

from tests import approvaldemo
from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)

ANN = TelegramEmulator.user(1, "Ann", "ann")
BOB = TelegramEmulator.user(2, "Bob", "bob")
SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"
CALL = "call transfer " + json.dumps({"amount": 5, "to": "Bob", "api_key": SECRET})


def config(emu: TelegramEmulator, *, store: str = "memory://", telegram: dict | None = None, **tool: Any) -> dict:
    entry = {"python": "tests.approvaldemo:transfer", "approval": "required", **tool}
    return {
        "agents": {"assistant": {"model": "offline/echo", "tools": [entry]}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu), **(telegram or {})}},
        "store": {"url": store},
    }


@pytest.fixture(autouse=True)
def no_transfers():
    approvaldemo.TRANSFERS.clear()
    yield
    approvaldemo.TRANSFERS.clear()


def requests(emu: TelegramEmulator, chat_id: int) -> list[dict[str, Any]]:
    """The bot's messages in a chat that were posted with buttons (approval requests)."""
    return [m for m in emu.sent(chat_id) if m.get("reply_markup")]


async def a_request(emu: TelegramEmulator, chat_id: int, count: int = 1) -> dict[str, Any]:
    await wait_until(lambda: len(requests(emu, chat_id)) >= count, timeout=20, what="an approval request")
    return requests(emu, chat_id)[count - 1]


async def ann_asks_for_the_transfer(emu: TelegramEmulator) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ann asks for what needs approval in her private chat: the chat, and the request shown."""
    chat = emu.private_chat(ANN)
    emu.push_message(chat, ANN, CALL)
    return chat, await a_request(emu, chat["id"])


def texts(emu: TelegramEmulator, chat_id: int) -> list[str]:
    return emu.sent_texts(chat_id)


async def answered(emu: TelegramEmulator, query_id: str):
    await wait_until(lambda: emu.callback_answer(query_id) is not None, what="answerCallbackQuery")
    return emu.callback_answer(query_id)


async def test_approve_runs_the_tool_and_the_request_shows_who_approved(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu))
    chat, request = await ann_asks_for_the_transfer(emu)

    labels = [b["text"] for b in emu.buttons(chat["id"], request["message_id"])]
    assert labels == ["Approve", "Deny"]
    assert all(len(b["callback_data"].encode()) <= 64 for b in emu.buttons(chat["id"], request["message_id"]))
    assert "transfer" in request["text"] and '"amount": 5' in request["text"]
    assert SECRET not in json.dumps(emu.calls_to("sendMessage")[-1].params) and "***" in request["text"]
    assert approvaldemo.TRANSFERS == []  # nothing runs before the press

    query = emu.press((chat["id"], request["message_id"]), ANN, "Approve")
    answer = await answered(emu, query)
    assert answer.text == "Approved." and not answer.show_alert
    assert answer.at - answer.delivered < 3.0
    await wait_until(lambda: any("returned" in t for t in texts(emu, chat["id"])), what="the agent's answer")
    assert approvaldemo.TRANSFERS == [{"amount": 5, "to": "Bob"}]
    assert any("transfer returned" in t and "sent 5 to Bob" in t for t in texts(emu, chat["id"]))
    shown = emu.current(chat["id"], request["message_id"])
    assert "Approved by Ann" in shown["text"] and not shown.get("reply_markup")

    # a second press (the old keyboard, pressed again) changes nothing
    again = emu.push_callback_query(request, ANN, request["reply_markup"]["inline_keyboard"][0][1]["callback_data"])
    assert (await answered(emu, again)).text == "Already approved."
    assert approvaldemo.TRANSFERS == [{"amount": 5, "to": "Bob"}]


async def test_someone_else_is_told_it_is_not_theirs_and_the_requester_denies(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu))
    group = emu.private_chat(ANN)  # Bob's press reaches the bot as it would from a forwarded keyboard
    emu.push_message(group, ANN, CALL)
    request = await a_request(emu, group["id"])

    bob = emu.press((group["id"], request["message_id"]), BOB, "Approve")
    told = await answered(emu, bob)
    assert told.show_alert and "not yours" in told.text
    assert emu.buttons(group["id"], request["message_id"]), "Bob's press decided nothing"

    ann = emu.press((group["id"], request["message_id"]), ANN, "Deny")
    assert (await answered(emu, ann)).text == "Denied."
    await wait_until(lambda: any("denied by Ann" in t for t in texts(emu, group["id"])), what="the model told")
    assert approvaldemo.TRANSFERS == []
    assert any('{"error": "denied by Ann"}' in t for t in texts(emu, group["id"]))
    shown = emu.current(group["id"], request["message_id"])
    assert "Denied by Ann" in shown["text"] and not shown.get("reply_markup")


async def test_no_answer_in_time_is_a_denial(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu, approval_timeout_seconds=0.5))
    chat, request = await ann_asks_for_the_transfer(emu)
    await wait_until(lambda: any("approval timed out" in t for t in texts(emu, chat["id"])), what="the timeout")
    assert approvaldemo.TRANSFERS == []
    shown = emu.current(chat["id"], request["message_id"])
    assert "No answer in time" in shown["text"] and not shown.get("reply_markup")
    late = emu.push_callback_query(request, ANN, request["reply_markup"]["inline_keyboard"][0][0]["callback_data"])
    assert "timed out" in (await answered(emu, late)).text
    assert approvaldemo.TRANSFERS == []


async def test_stop_while_waiting_withdraws_the_request(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu))
    chat, request = await ann_asks_for_the_transfer(emu)
    emu.push_message(chat, ANN, "/stop")
    await wait_until(
        lambda: "Withdrawn" in (emu.current(chat["id"], request["message_id"]).get("text") or ""),
        what="the request to show it was withdrawn",
    )
    assert not emu.current(chat["id"], request["message_id"]).get("reply_markup")
    late = emu.push_callback_query(request, ANN, request["reply_markup"]["inline_keyboard"][0][0]["callback_data"])
    assert "withdrawn" in (await answered(emu, late)).text
    assert approvaldemo.TRANSFERS == []


async def test_the_owner_approves_in_a_direct_message_and_is_notified(telegram_emulator, start_app):
    emu = telegram_emulator
    await start_app(config(emu, approver="owner", telegram={"owner_user_id": str(BOB["id"])}))
    chat = emu.private_chat(ANN)
    emu.private_chat(BOB)
    emu.push_message(chat, ANN, CALL)
    request = await a_request(emu, BOB["id"])  # Bob's DM: the chat id of a private chat is the user's id
    assert requests(emu, chat["id"]) == []
    assert "Only the owner can answer" in request["text"]
    await wait_until(lambda: any("Activity in assistant" in t for t in texts(emu, BOB["id"])), what="the push")

    mine = emu.press((BOB["id"], request["message_id"]), ANN, "Approve")  # Ann cannot approve her own call
    assert "not yours" in (await answered(emu, mine)).text
    owner = emu.press((BOB["id"], request["message_id"]), BOB, "Approve")
    assert (await answered(emu, owner)).text == "Approved."
    await wait_until(lambda: approvaldemo.TRANSFERS, what="the tool to run")
    await wait_until(lambda: "Approved by the owner" in emu.current(BOB["id"], request["message_id"])["text"],
                     what="the request edited")


async def test_a_request_pending_at_shutdown_is_reported_expired_after_a_restart(telegram_emulator, tmp_path):
    emu = telegram_emulator
    url = f"sqlite:///{tmp_path / 'state.db'}"
    first = App.from_config(config(emu, store=url))
    await first.start()
    chat, request = await ann_asks_for_the_transfer(emu)
    await first.stop(timeout=0.2)  # the turn waiting for an answer is cut off

    second = App.from_config(config(emu, store=url))
    await second.start()
    try:
        await wait_until(lambda: "Expired" in (emu.current(chat["id"], request["message_id"]) or {}).get("text", ""),
                         what="the old request reported expired")
        assert not emu.current(chat["id"], request["message_id"]).get("reply_markup")
        # the message whose turn was cut off runs again, and asks again
        fresh = await a_request(emu, chat["id"], 2)
        assert fresh["message_id"] != request["message_id"]
        old = request["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        query = emu.push_callback_query(request, ANN, old)
        assert "expired" in (await answered(emu, query)).text.lower()
        assert approvaldemo.TRANSFERS == []
        approve = emu.press((chat["id"], fresh["message_id"]), ANN, "Approve")
        assert (await answered(emu, approve)).text == "Approved."
        await wait_until(lambda: approvaldemo.TRANSFERS, what="the re-asked tool to run")
        assert len(approvaldemo.TRANSFERS) == 1
    finally:
        await second.stop()


async def test_a_press_reaching_the_ingress_process_resolves_the_turn_waiting_in_a_worker(telegram_emulator, redis_url):
    """Redis deployment: one process holds the Telegram connection (ingress), another runs
    the turn (worker). The press reaches the ingress; the worker's turn learns of it from the
    store alone."""
    emu = telegram_emulator
    cfg = config(emu, store=redis_url)
    cfg["store"]["prefix"] = f"approvals-{uuid.uuid4().hex[:8]}:"
    worker = App.from_config(cfg, role="worker")
    ingress = App.from_config(cfg, role="ingress")
    await worker.start()
    await ingress.start()
    try:
        chat, request = await ann_asks_for_the_transfer(emu)
        assert worker.approvals._wakeups and not ingress.approvals._wakeups, "the worker's turn is the one waiting"

        bob = emu.press((chat["id"], request["message_id"]), BOB, "Approve")
        assert "not yours" in (await answered(emu, bob)).text
        query = emu.press((chat["id"], request["message_id"]), ANN, "Approve")
        answer = await answered(emu, query)
        assert answer.text == "Approved." and answer.at - answer.delivered < 3.0
        await wait_until(lambda: approvaldemo.TRANSFERS, timeout=10, what="the worker to run the tool")
        await wait_until(lambda: any("transfer returned" in t for t in texts(emu, chat["id"])), timeout=10,
                         what="the worker's answer")
        await wait_until(lambda: "Approved by Ann" in emu.current(chat["id"], request["message_id"])["text"],
                         what="the request edited by the worker")
        assert approvaldemo.TRANSFERS == [{"amount": 5, "to": "Bob"}]
    finally:
        await ingress.stop()
        await worker.stop()


async def test_a_button_the_app_posts_comes_back_to_hooks_with_its_own_action_and_value(telegram_emulator, start_app):
    emu = telegram_emulator
    app = await start_app(config(emu))
    presses: list = []
    app.hooks.register("button_pressed", lambda event: presses.append(event.payload))
    chat = emu.private_chat(ANN)
    long_value = "order-" + "x" * 200  # far beyond what callback_data may carry
    sent = await app.send_to(f"telegram:{chat['id']}", "Ship it?", buttons=[Button("Ship", "ship", value=long_value)])
    assert sent.ok
    query = emu.press((chat["id"], int(sent.message_id)), ANN, "Ship")
    assert (await answered(emu, query)).text is None  # acknowledged, nothing to tell
    await wait_until(lambda: presses, what="the button_pressed hook")
    assert presses[0]["action_id"] == "ship" and presses[0]["value"] == long_value
    assert presses[0]["user_id"] == str(ANN["id"]) and presses[0]["message_id"] == sent.message_id
