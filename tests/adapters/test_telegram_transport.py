"""The aiohttp transport under python-telegram-bot, against the Bot API emulator: every kind
of call PTB makes (JSON answers, uploads, downloads, errors), calls in flight capped at the
pool size, and failures read as "never sent" only when they were."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave.adapters.telegram.pacing import retry_after_seconds, surely_unsent
from botweave.adapters.telegram.transport import AiohttpRequest, PoolTimeout
from telegram import Bot, MessageEntity
from telegram.error import BadRequest, NetworkError, RetryAfter, TimedOut

from tests.emulators.telegram import TelegramEmulator, png_bytes

ANN = TelegramEmulator.user(1, "Ann", "ann")


class SlowTelegram(TelegramEmulator):
    """sendMessage takes `delay` seconds; records the most calls it had in hand at once."""

    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.0
        self.busy = 0
        self.most_busy = 0

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        self.busy += 1
        self.most_busy = max(self.most_busy, self.busy)
        try:
            await asyncio.sleep(self.delay)
            return await super()._api_sendMessage(params)
        finally:
            self.busy -= 1


@pytest.fixture
async def emu() -> AsyncIterator[SlowTelegram]:
    emulator = SlowTelegram()
    await emulator.start()
    emulator.private_chat(ANN)
    yield emulator
    await emulator.stop()


async def make_bot(emu: TelegramEmulator, request: AiohttpRequest) -> Bot:
    bot = Bot(emu.token, base_url=emu.api_base_url, base_file_url=emu.file_base_url, request=request)
    await bot.initialize()
    return bot


async def test_ptb_calls_answers_and_errors_go_through(emu: SlowTelegram) -> None:
    bot = await make_bot(emu, AiohttpRequest(4))
    try:
        assert bot.username == emu.bot["username"]
        bold = [MessageEntity(MessageEntity.BOLD, 6, 5)]
        sent = await bot.send_message(1, "hello there", entities=bold)
        assert sent.text == "hello there" and sent.chat.id == 1 and sent.entities == tuple(bold)
        assert emu.sent_texts(1) == ["hello there"]
        awkward = "naïve ☕ a&b=c+d 100% \"quoted\"\nnext line"
        assert (await bot.send_message(1, awkward)).text == awkward  # form-encoded like PTB's own transport
        with pytest.raises(BadRequest, match="(?i)message to edit not found"):
            await bot.edit_message_text("x", chat_id=1, message_id=999)
        emu.rate_limit("sendMessage", retry_after=3)
        with pytest.raises(RetryAfter) as limited:
            await bot.send_message(1, "too fast")
        assert retry_after_seconds(limited.value) == 3
    finally:
        await bot.shutdown()


async def test_uploads_go_as_multipart_and_downloads_come_back(emu: SlowTelegram) -> None:
    bot = await make_bot(emu, AiohttpRequest(2))
    try:
        photo = png_bytes()
        message = await bot.send_photo(1, photo, caption="a picture", filename="pic.png")
        (upload,) = emu.sent_media(1, "photo")
        assert upload.data == photo and upload.caption == "a picture" and upload.source == "upload"
        assert message.caption == "a picture"
        emu.add_file("doc-1", "documents/report.txt", b"the report")
        file = await bot.get_file("doc-1")
        assert bytes(await file.download_as_bytearray()) == b"the report"
    finally:
        await bot.shutdown()


async def test_calls_in_flight_never_exceed_the_pool(emu: SlowTelegram) -> None:
    emu.delay = 0.05
    request = AiohttpRequest(3, pool_timeout=10.0)
    bot = await make_bot(emu, request)
    try:
        await asyncio.gather(*(bot.send_message(1, f"message {i}") for i in range(20)))
        assert emu.most_busy == 3
        assert sorted(emu.sent_texts(1)) == sorted(f"message {i}" for i in range(20))
        assert request.waited >= 17 - 3  # the rest queued for a connection instead of piling up
    finally:
        await bot.shutdown()


async def test_a_call_that_waited_too_long_for_a_connection_was_never_sent(emu: SlowTelegram) -> None:
    emu.delay = 0.5
    bot = await make_bot(emu, AiohttpRequest(1, pool_timeout=0.05))
    try:
        first = asyncio.ensure_future(bot.send_message(1, "takes a while"))
        await asyncio.sleep(0.1)
        with pytest.raises(TimedOut) as waited:
            await bot.send_message(1, "no room")
        assert isinstance(waited.value.__cause__, PoolTimeout)
        assert surely_unsent(waited.value)  # safe to send again: Telegram never saw it
        await first
        assert emu.sent_texts(1) == ["takes a while"]
    finally:
        await bot.shutdown()


async def test_a_refused_connection_was_never_sent_and_a_slow_answer_may_have_been(emu: SlowTelegram) -> None:
    closed = Bot(emu.token, base_url="http://127.0.0.1:9/bot", request=AiohttpRequest(1))
    await closed.request.initialize()  # type: ignore[attr-defined]
    try:
        with pytest.raises(NetworkError) as refused:
            await closed.send_message(1, "nobody there")
        assert surely_unsent(refused.value)
    finally:
        await closed.request.shutdown()  # type: ignore[attr-defined]
    emu.delay = 1.0
    bot = await make_bot(emu, AiohttpRequest(1, read_timeout=0.2))
    try:
        with pytest.raises(TimedOut) as slow:
            await bot.send_message(1, "slow")
        assert not surely_unsent(slow.value)  # it reached Telegram: sending again could duplicate
    finally:
        await bot.shutdown()


async def test_a_cancelled_call_gives_its_place_back(emu: SlowTelegram) -> None:
    emu.delay = 0.3
    bot = await make_bot(emu, AiohttpRequest(1, pool_timeout=2.0))
    try:
        for _ in range(3):
            call = asyncio.ensure_future(bot.send_message(1, "abandoned"))
            await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
        emu.delay = 0.0
        sent = await asyncio.wait_for(bot.send_message(1, "still works"), 5)
        assert sent.text == "still works"
    finally:
        await bot.shutdown()
