"""The delivery protocol against the real SDKs and the platform emulators, in one process.

A worker that dies between a send and its confirmation is stood for by `Crash`, raised the
moment the outbox would record the confirmation: the platform has the message, the store has
only the intent. A second App on the same SQLite file then starts, finds the journaled item
and finishes the turn the way each platform allows. Subprocess kills and Redis pauses are in
test_delivery_processes.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from botweave import App
from botweave.delivery import Outbox
from botweave.store import Store

from tests.emulators.discord import DM_CHANNEL_ID, TOKEN, DiscordEmulator
from tests.emulators.slack import SlackEmulator, event_callback, slack_section
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until

DM, ALICE = "D0ALICE", "U0ALICE"
HEARD = "assistant (offline echo) heard: "


class Crash(BaseException):
    """The process dies here (a BaseException: nothing in the product catches it)."""


@pytest.fixture
def crash_after_send(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """`arm(n)`: the n-th confirmation from now kills the turn just after its send landed."""
    confirm = Outbox.confirm
    left: list[int] = [0]

    def confirming(self: Outbox, chunk_key: str, message_id: str | None) -> None:
        if left[0] > 0:
            left[0] -= 1
            if left[0] == 0:
                raise Crash(chunk_key)
        confirm(self, chunk_key, message_id)

    monkeypatch.setattr(Outbox, "confirm", confirming)

    def arm(n: int = 1) -> None:
        left[0] = n

    return arm


async def history(store: Store) -> list[dict[str, str]]:
    """Every stored history message, turns unpacked (these tests have one conversation)."""
    keys = await store.keys("history:")
    assert len(keys) <= 1, keys
    messages: list[dict[str, str]] = []
    for key in keys:
        for raw in await store.list_range(key):
            item = json.loads(raw)
            messages.extend(item if isinstance(item, list) else [item])
    return messages


async def crashed(app: App) -> None:
    """Wait until the turn died, then stop the App the way a dead process would leave things."""
    await asyncio.wait_for(app.drain(), timeout=10)  # the turn died
    await app.stop()


# --- Discord: a nonce with enforce_nonce ----------------------------------------------------------


@pytest.fixture
async def discord_emu() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


def discord_config(emu: DiscordEmulator, tmp_path: Path) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"discord": {"token": TOKEN, "api_base_url": emu.api_base, "gateway_url": emu.gateway_url}},
        "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
    }


async def test_discord_a_send_whose_answer_was_lost_is_repeated_with_its_nonce_and_shown_once(
    discord_emu: DiscordEmulator, start_app: Any, tmp_path: Path
) -> None:
    emu = discord_emu
    await start_app(discord_config(emu, tmp_path))
    await emu.wait_ready()
    emu.drop_next("POST", rf"/channels/{DM_CHANNEL_ID}/messages")  # it lands; the answer never arrives
    await emu.dispatch("MESSAGE_CREATE", emu.message("hello", channel_id=DM_CHANNEL_ID))
    await wait_until(lambda: len(emu.sends) >= 2, timeout=15, what="the repeat")
    assert [m["content"] for m in emu.bot_messages(DM_CHANNEL_ID)] == [HEARD + "hello"]
    first, repeat = emu.sends
    assert first.nonce == repeat.nonce and first.enforce_nonce and repeat.duplicate


async def test_discord_a_turn_cut_off_after_its_send_is_finished_by_the_next_run_without_a_second_message(
    discord_emu: DiscordEmulator, tmp_path: Path, crash_after_send: Callable[[int], None]
) -> None:
    emu = discord_emu
    config = discord_config(emu, tmp_path)
    first = App.from_config(config)
    await first.start()
    await emu.wait_ready()
    crash_after_send(1)
    await emu.dispatch("MESSAGE_CREATE", emu.message("hello", channel_id=DM_CHANNEL_ID))
    await wait_until(lambda: len(emu.sends) == 1, timeout=10, what="the first send")
    await crashed(first)

    second = App.from_config(config)
    await second.start()
    try:
        await wait_until(lambda: len(emu.sends) == 2, timeout=15, what="the next run to settle the chunk")
        await second.drain()
        assert [m["content"] for m in emu.bot_messages(DM_CHANNEL_ID)] == [HEARD + "hello"]
        assert emu.sends[1].duplicate, "Discord dropped the repeat: the nonce was the same"
        entries = await history(second.store)
        assert [e["role"] for e in entries] == ["user", "assistant"], entries
        assert await second.journal.pending() == []  # type: ignore[union-attr]
    finally:
        await second.stop()


# --- Slack: message metadata, looked up before a resend --------------------------------------------


@pytest.fixture
async def slack_emu() -> AsyncIterator[SlackEmulator]:
    emu = SlackEmulator()
    await emu.start()
    emu.add_user(ALICE, "Alice")
    emu.add_channel(DM, "im")
    yield emu
    await emu.stop()


def slack_config(emu: SlackEmulator, tmp_path: Path) -> dict[str, Any]:
    return {
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"slack": slack_section(emu, "socket")},
        "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
    }


async def test_slack_a_post_whose_answer_was_lost_is_found_by_its_metadata_and_not_posted_again(
    slack_emu: SlackEmulator, start_app: Any, tmp_path: Path
) -> None:
    emu = slack_emu
    app = await start_app(slack_config(emu, tmp_path))
    emu.drop_after["chat.postMessage"] = 1
    await emu.send_envelope(event_callback(emu.post_as_user(DM, ALICE, "hello")))
    await wait_until(lambda: emu.calls_to("conversations.history"), timeout=15, what="the lookup")
    await app.drain()
    posts = [m for m in emu.messages[DM] if m.get("bot_id")]
    assert [m["text"] for m in posts] == [HEARD + "hello"]
    assert posts[0]["metadata"]["event_type"] == "botweave_chunk"
    assert len([c for c in emu.calls if c.method == "chat.postMessage"]) == 1


async def test_slack_a_turn_cut_off_after_its_post_is_finished_by_the_next_run_without_a_second_post(
    slack_emu: SlackEmulator, tmp_path: Path, crash_after_send: Callable[[int], None]
) -> None:
    emu = slack_emu
    config = slack_config(emu, tmp_path)
    first = App.from_config(config)
    await first.start()
    crash_after_send(1)
    await emu.send_envelope(event_callback(emu.post_as_user(DM, ALICE, "hello")))
    await wait_until(lambda: emu.calls_to("chat.postMessage"), timeout=10, what="the first post")
    await crashed(first)

    second = App.from_config(config)
    await second.start()
    try:
        await wait_until(lambda: emu.calls_to("conversations.history"), timeout=15, what="the lookup")
        await second.drain()
        posts = [m for m in emu.messages[DM] if m.get("bot_id")]
        assert [m["text"] for m in posts] == [HEARD + "hello"]
        assert len(emu.calls_to("chat.postMessage")) == 1
        assert emu.calls_to("conversations.history")[0].params.get("include_all_metadata") in (True, "true", "1")
        entries = await history(second.store)
        assert [e["role"] for e in entries] == ["user", "assistant"], entries
    finally:
        await second.stop()


# --- Telegram: no idempotency key, so sent again ------------------------------------------------------


def telegram_config(emu: TelegramEmulator, tmp_path: Path) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": adapter_config(emu, poll_timeout=1)},
        "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
    }


async def test_telegram_a_turn_cut_off_after_its_send_is_sent_again_at_least_once(
    telegram_emulator: TelegramEmulator, tmp_path: Path, crash_after_send: Callable[[int], None]
) -> None:
    emu = telegram_emulator
    config = telegram_config(emu, tmp_path)
    ann = emu.user(501, "Ann")
    first = App.from_config(config)
    await first.start()
    crash_after_send(1)
    emu.push_message(emu.private_chat(ann), ann, "hello")
    await wait_until(lambda: emu.sent(501), timeout=10, what="the first send")
    await crashed(first)

    second = App.from_config(config)
    await second.start()
    try:
        await wait_until(lambda: len(emu.sent(501)) == 2, timeout=15, what="the resend")
        await second.drain()
        # Telegram cannot tell a repeat: the one send in flight at the crash shows twice
        assert emu.sent_texts(501) == [HEARD + "hello"] * 2
        entries = await history(second.store)
        assert [e["role"] for e in entries] == ["user", "assistant"], "the turn is in history once"
    finally:
        await second.stop()


async def test_a_turn_cut_off_before_its_commit_runs_again_and_answers_once(
    telegram_emulator: TelegramEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emu = telegram_emulator
    config = telegram_config(emu, tmp_path)
    ann = emu.user(502, "Bea")
    first = App.from_config(config)
    await first.start()
    commit = type(first.store).commit
    died: list[str] = []

    async def dying(self: Any, marker: str, *args: Any, **kwargs: Any) -> bool:
        if marker.startswith("turn:"):
            died.append(marker)
            raise Crash(marker)
        return await commit(self, marker, *args, **kwargs)

    monkeypatch.setattr(type(first.store), "commit", dying)
    emu.push_message(emu.private_chat(ann), ann, "hello")
    await wait_until(lambda: died, timeout=10, what="the turn to reach its commit")
    await asyncio.wait_for(first.drain(), timeout=10)  # and die there
    await first.stop()
    assert emu.sent(502) == []
    monkeypatch.setattr(type(first.store), "commit", commit)

    second = App.from_config(config)
    await second.start()
    try:
        await wait_until(lambda: emu.sent(502), timeout=15, what="the answer")
        await second.drain()
        await asyncio.sleep(0.2)
        assert emu.sent_texts(502) == [HEARD + "hello"]
        entries = await history(second.store)
        assert [e["role"] for e in entries] == ["user", "assistant"]
    finally:
        await second.stop()


async def test_telegram_a_send_whose_answer_was_lost_is_sent_again_at_least_once(
    telegram_emulator: TelegramEmulator, start_app: Any, tmp_path: Path
) -> None:
    emu = telegram_emulator
    await start_app(telegram_config(emu, tmp_path))
    emu.drop_after_delivery("sendMessage")  # it lands; the answer never arrives
    ann = emu.user(503, "Cy")
    emu.push_message(emu.private_chat(ann), ann, "hello")
    await wait_until(lambda: len(emu.calls_to("sendMessage")) == 2, timeout=15, what="the resend")
    shown = [m["text"] for (chat, _), m in sorted(emu.messages.items()) if chat == 503 and m["from"]["is_bot"]]
    assert shown == [HEARD + "hello"] * 2  # never lost; Telegram cannot tell a repeat


async def test_the_journal_records_a_platform_retry_once_and_answers_it_once(tmp_path: Path) -> None:
    from tests.support import RecordingAdapter, message

    app = App.from_config(
        {
            "bot": {"unknown_user_policy": "allow"},
            "agents": {"assistant": {"model": "offline/echo"}},
            "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        }
    )
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    await app.start(platforms=[])
    try:
        await app.submit(message("hi", message_id="m1"))
        await app.submit(message("hi", message_id="m1"))  # the platform delivered it again
        await app.drain()
        assert adapter.texts() == [HEARD + "hi"]
        assert await app.journal.pending() == []  # type: ignore[union-attr]
    finally:
        await app.stop()
