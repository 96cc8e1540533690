"""The typing indicator: shown only for turns that take a while (`auto`), at once (`instant`)
or never, renewed while a turn runs, and never cut off in the middle of its call.

End to end through python-telegram-bot against the Bot API emulator, with a loopback model
whose latency each test sets; the in-process recording adapter checks what the platform
cannot show (whether a call was cancelled half-way).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave.config import BotConfig, ConfigError
from botweave.runtime.config import load_config

from tests.emulators.openai import OpenAIEmulator
from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)
from tests.support import RecordingAdapter, StartApp, _Recorder, config, message

ANN = TelegramEmulator.user(1, "Ann", "ann")


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIEmulator]:
    emu = OpenAIEmulator("Here you go.")
    await emu.start()
    yield emu
    await emu.stop()


async def telegram_app(
    start_app: StartApp, emu: TelegramEmulator, llm: OpenAIEmulator, typing: dict[str, Any] | None = None,
    **settings: Any,
) -> Any:
    section = {"unknown_user_policy": "allow", **adapter_config(emu), **settings}
    if typing is not None:
        section["typing"] = typing
    return await start_app(
        {
            "agents": {"assistant": {"model": "openai/test", "api_base": llm.base_url, "api_key": "sk-test"}},
            "platforms": {"telegram": section},
        }
    )


async def answered(emu: TelegramEmulator, count: int = 1) -> None:
    await wait_until(lambda: len(emu.sent(1)) >= count, timeout=20, what=f"{count} answers")


# --- configuration ---------------------------------------------------------------------------


def test_defaults_to_auto_after_one_second_and_platforms_override_it():
    assert BotConfig().typing.mode == "auto" and BotConfig().typing.delay_ms == 1000
    loaded = load_config(
        {
            "bot": {"typing": {"mode": "instant"}},
            "agents": {"a": {"model": "offline/echo"}},
            "platforms": {"telegram": {"token": "t", "typing": {"mode": "auto", "delay_ms": 250}}},
        }
    )
    assert loaded.bot_config_for("telegram").typing.delay_ms == 250
    assert loaded.bot_config_for("console").typing.mode == "instant"


def test_an_unknown_mode_is_a_config_error_that_names_the_choices():
    with pytest.raises(ConfigError) as caught:
        load_config({"bot": {"typing": {"mode": "sometimes"}}, "agents": {"a": {"model": "offline/echo"}}})
    assert "bot.typing.mode" in str(caught.value) and "auto, instant, never" in str(caught.value)


# --- end to end on Telegram ------------------------------------------------------------------


async def test_a_quick_answer_shows_no_typing(start_app, telegram_emulator, llm):
    emu = telegram_emulator
    await telegram_app(start_app, emu, llm)  # auto, 1000 ms
    emu.push_message(emu.private_chat(ANN), ANN, "warm up")  # the first turn loads the model client
    await answered(emu)
    before = len(emu.calls_to("sendChatAction"))
    emu.push_message(emu.private_chat(ANN), ANN, "hello")
    await answered(emu, 2)
    await asyncio.sleep(0.2)
    assert len(emu.calls_to("sendChatAction")) == before


async def test_a_slow_answer_shows_typing_before_it(start_app, telegram_emulator, llm):
    emu = telegram_emulator
    llm.delay = 0.8
    await telegram_app(start_app, emu, llm, {"mode": "auto", "delay_ms": 200})
    emu.push_message(emu.private_chat(ANN), ANN, "think hard")
    await answered(emu)
    typing = emu.calls_to("sendChatAction")[0]
    (sent,) = emu.calls_to("sendMessage")
    assert typing.params == {"chat_id": 1, "action": "typing"}
    assert typing.at < sent.at


async def test_instant_shows_typing_even_for_a_quick_answer(start_app, telegram_emulator, llm):
    emu = telegram_emulator
    await telegram_app(start_app, emu, llm, {"mode": "instant"})
    emu.push_message(emu.private_chat(ANN), ANN, "hello")
    await answered(emu)
    assert emu.calls_to("sendChatAction")


async def test_never_shows_no_typing_however_slow_the_answer(start_app, telegram_emulator, llm):
    emu = telegram_emulator
    llm.delay = 0.5
    await telegram_app(start_app, emu, llm, {"mode": "never"})
    emu.push_message(emu.private_chat(ANN), ANN, "think hard")
    await answered(emu)
    assert emu.calls_to("sendChatAction") == []


# --- renewal and the call in flight ----------------------------------------------------------


class SlowTyping(_Recorder):
    """Each typing call takes `seconds`; records how each one ended."""

    def __init__(self, adapter: RecordingAdapter, seconds: float) -> None:
        super().__init__(adapter)
        self.seconds = seconds
        self.ended: list[str] = []

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        self.adapter.typings += 1
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        self.ended.append("finished")


async def started_app(adapter: RecordingAdapter, **typing: Any) -> Any:
    from botweave import App

    app = App.from_config(config(typing=typing))
    app.add_adapter(adapter)
    await app.start(platforms=[])
    return app


async def test_a_typing_call_in_flight_when_the_turn_ends_is_finished_not_cancelled():
    adapter = RecordingAdapter(send_delay=0.1)
    slow = adapter.outbound = SlowTyping(adapter, seconds=0.3)
    app = await started_app(adapter, mode="instant")
    try:
        outcome = await app.handle(message("hi"))  # the answer is out while typing is still on its way
        assert outcome.status == "replied"
        await wait_until(lambda: slow.ended, timeout=5, what="the typing call to end")
        assert slow.ended == ["finished"]
        assert adapter.typings == 1  # stopping the indicator started no further call
    finally:
        await app.stop()


async def test_typing_is_renewed_while_a_slow_turn_runs():
    adapter = RecordingAdapter(send_delay=0.3)  # the turn lasts ~0.3 s; renewals every 0.05 s
    app = await started_app(adapter, mode="auto", delay_ms=100)
    try:
        await app.handle(message("hi"))
        renewed = adapter.typings
        assert renewed >= 2
        await asyncio.sleep(0.2)
        assert adapter.typings == renewed  # nothing after the turn ended
    finally:
        await app.stop()


async def test_a_turn_that_ends_before_the_delay_leaves_no_timer_behind():
    adapter = RecordingAdapter()
    app = await started_app(adapter, mode="auto", delay_ms=100)
    try:
        await app.handle(message("hi"))
        await asyncio.sleep(0.25)
        assert adapter.typings == 0
    finally:
        await app.stop()


async def test_a_streamed_reply_being_written_needs_no_typing(start_app, telegram_emulator, llm):
    emu = telegram_emulator
    await telegram_app(start_app, emu, llm, {"mode": "auto", "delay_ms": 200}, streaming=True)
    emu.push_message(emu.private_chat(ANN), ANN, "warm up")  # the first turn loads the model client
    await answered(emu)
    await asyncio.sleep(1.2)  # the warm-up's stream has ended
    before = len(emu.calls_to("sendChatAction"))
    # Silent for 0.6 s, then 6 s of words: longer than Telegram's 4 s between renewals.
    llm.queue_text("slow to start, then streamed word by word for a while", delay=0.6, chunks=12, chunk_delay=0.5)
    emu.push_message(emu.private_chat(ANN), ANN, "stream it")
    await answered(emu, 2)
    await wait_until(lambda: emu.current(1, emu.sent(1)[-1]["message_id"])["text"].endswith("a while"), timeout=30,
                     what="the stream to end")
    assert len(emu.calls_to("sendChatAction")) == before + 1  # only for the silence before the first words
