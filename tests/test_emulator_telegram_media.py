"""The Telegram emulator's files, uploads and buttons, driven through python-telegram-bot itself,
so media and button tests elsewhere can trust what it accepts, refuses and records."""

from __future__ import annotations

import io
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity, ReplyParameters
from telegram.error import BadRequest, RetryAfter

from tests.emulators.telegram import (
    MAX_DOWNLOAD,
    TelegramEmulator,
    png_bytes,
    wait_until,
)

ANN = TelegramEmulator.user(1, "Ann", "ann")
BOB = TelegramEmulator.user(2, "Bob", "bob")
OGG = b"OggS\x00\x02" + b"\x00" * 40


@pytest.fixture
async def bot(telegram_emulator: TelegramEmulator) -> AsyncIterator[Bot]:
    emu = telegram_emulator
    async with Bot(emu.token, base_url=emu.api_base_url, base_file_url=emu.file_base_url) as client:
        yield client


def seconds(value: object) -> float:
    """PTB gives durations as ints or timedeltas depending on its settings."""
    return value.total_seconds() if hasattr(value, "total_seconds") else float(value)  # type: ignore[arg-type]


def approve_deny(prefix: str = "ap:1") -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton("Approve", callback_data=f"{prefix}:yes"), InlineKeyboardButton("Deny", callback_data=f"{prefix}:no")]]
    )


# --- uploads ------------------------------------------------------------------------------


async def test_send_photo_upload_is_recorded_and_becomes_a_chat_message(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    image = png_bytes(320, 200)
    entities = [MessageEntity(MessageEntity.BOLD, 0, 4)]
    sent = await bot.send_photo(chat["id"], io.BytesIO(image), caption="Look here", caption_entities=entities,
                                filename="chart.png", reply_markup=approve_deny())

    upload = emu.sent_media(chat["id"], "photo")[-1]
    assert (upload.data, upload.filename, upload.mime_type, upload.source) == (image, "chart.png", "image/png", "upload")
    assert upload.caption == "Look here" and upload.caption_entities == [{"type": "bold", "offset": 0, "length": 4}]
    assert sent.photo[-1].width == 320 and sent.photo[-1].height == 200 and sent.caption == "Look here"
    assert sent.reply_markup.inline_keyboard[0][0].callback_data == "ap:1:yes"
    assert [b["text"] for b in emu.buttons(chat["id"], sent.message_id)] == ["Approve", "Deny"]
    assert emu.outgoing(chat["id"])[-1]["message_id"] == sent.message_id
    assert emu.sent(chat["id"]) == []  # `sent` stays text-only

    file = await bot.get_file(sent.photo[-1].file_id)
    assert bytes(await file.download_as_bytearray()) == image


async def test_document_voice_and_audio_uploads_round_trip_through_get_file(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    document = await bot.send_document(chat["id"], b"%PDF-1.4 tiny", filename="report.pdf", caption="the report")
    voice = await bot.send_voice(chat["id"], OGG, filename="voice.ogg", duration=3)
    audio = await bot.send_audio(chat["id"], b"ID3fake-mp3", filename="song.mp3", title="Song", performer="Band")

    assert document.document.file_name == "report.pdf" and document.document.mime_type == "application/pdf"
    assert voice.voice is not None and voice.voice.mime_type == "audio/ogg" and seconds(voice.voice.duration) == 3
    assert audio.audio.title == "Song" and audio.audio.file_name == "song.mp3"
    assert [u.kind for u in emu.uploads] == ["document", "voice", "audio"]
    assert [u.method for u in emu.uploads] == ["sendDocument", "sendVoice", "sendAudio"]

    buffer = io.BytesIO()
    await (await bot.get_file(voice.voice.file_id)).download_to_memory(buffer)
    assert buffer.getvalue() == OGG
    assert bytes(await (await bot.get_file(document.document.file_id)).download_as_bytearray()) == b"%PDF-1.4 tiny"


async def test_voice_in_another_format_arrives_as_a_document(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    chat = telegram_emulator.private_chat(ANN)
    sent = await bot.send_voice(chat["id"], b"RIFF....WAVE", filename="note.wav")
    assert sent.voice is None and sent.document is not None
    assert telegram_emulator.uploads[-1].kind == "document"


async def test_upload_by_file_id_and_by_url(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    first = await bot.send_document(chat["id"], b"shared bytes", filename="notes.txt")
    again = await bot.send_document(chat["id"], first.document.file_id)
    assert again.document.file_id == first.document.file_id and emu.uploads[-1].source == "file_id"
    assert emu.uploads[-1].data == b"shared bytes"

    emu.web_files["https://example.org/cat.png"] = (png_bytes(8, 8), "image/png")
    by_url = await bot.send_photo(chat["id"], "https://example.org/cat.png")
    assert by_url.photo[-1].width == 8 and emu.uploads[-1].source == "url"

    with pytest.raises(BadRequest, match="(?i)failed to get http url content"):
        await bot.send_photo(chat["id"], "https://example.org/missing.png")
    with pytest.raises(BadRequest, match="(?i)wrong file identifier"):
        await bot.send_document(chat["id"], "no-such-file-id")
    with pytest.raises(BadRequest, match="(?i)type of file mismatch"):
        await bot.send_photo(chat["id"], first.document.file_id)


async def test_caption_limit_is_1024_utf16_units(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    chat = telegram_emulator.private_chat(ANN)
    await bot.send_document(chat["id"], b"x", filename="a.txt", caption="😀" * 512)  # 1024 units exactly
    with pytest.raises(BadRequest, match="(?i)message caption is too long"):
        await bot.send_document(chat["id"], b"x", filename="a.txt", caption="😀" * 512 + "!")
    assert len(telegram_emulator.uploads) == 1


async def test_photos_must_be_images_within_telegrams_dimensions(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    chat = telegram_emulator.private_chat(ANN)
    with pytest.raises(BadRequest, match="(?i)image_process_failed"):
        await bot.send_photo(chat["id"], b"not an image", filename="x.png")
    with pytest.raises(BadRequest, match="(?i)photo_invalid_dimensions"):
        await bot.send_photo(chat["id"], png_bytes(2100, 100), filename="strip.png")


async def test_photo_in_a_topic_replying_to_a_message(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    forum = emu.group(-100500, forum=True)
    topic = emu.topic(forum, ANN, "Pics")
    question = emu.push_message(forum, ANN, "show me", thread_id=topic["message_id"])
    sent = await bot.send_photo(forum["id"], png_bytes(), message_thread_id=topic["message_id"],
                                reply_parameters=ReplyParameters(question["message_id"]))
    assert sent.message_thread_id == topic["message_id"] and sent.reply_to_message.message_id == question["message_id"]


async def test_faults_apply_to_upload_methods(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    chat = telegram_emulator.private_chat(ANN)
    telegram_emulator.rate_limit("sendPhoto", retry_after=3)
    with pytest.raises(RetryAfter) as limited:
        await bot.send_photo(chat["id"], png_bytes())
    assert seconds(limited.value.retry_after) == 3
    assert telegram_emulator.uploads == []
    await bot.send_photo(chat["id"], png_bytes())
    assert len(telegram_emulator.uploads) == 1


# --- inbound files ------------------------------------------------------------------------


async def test_inbound_media_messages_carry_downloadable_files(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    image = png_bytes(640, 480)
    emu.push_photo(chat, ANN, image, "what is this @ThisBot?")
    emu.push_voice(chat, ANN, OGG, duration=4)
    emu.push_document(chat, ANN, b"a,b\n1,2\n", file_name="data.csv")
    emu.push_audio(chat, ANN, b"ID3", title="Tune")
    emu.push_video(chat, ANN, b"\x00\x00\x00\x18ftypmp42")

    updates = await bot.get_updates(timeout=0)
    photo, voice, document, audio, video = (u.message for u in updates)
    assert photo.caption == "what is this @ThisBot?" and photo.caption_entities[0].type == "mention"
    assert photo.photo[-1].width == 640 and photo.photo[0].width == 90  # thumbnail first, original last
    assert seconds(voice.voice.duration) == 4 and voice.voice.mime_type == "audio/ogg"
    assert document.document.file_name == "data.csv" and document.document.mime_type == "text/csv"
    assert audio.audio.title == "Tune" and video.video.mime_type == "video/mp4"

    assert bytes(await (await bot.get_file(photo.photo[-1].file_id)).download_as_bytearray()) == image
    voice_file = await bot.get_file(voice.voice.file_id)
    assert voice_file.file_size == len(OGG) and voice_file.file_path.endswith(".oga")  # Telegram's own suffix
    assert bytes(await voice_file.download_as_bytearray()) == OGG
    assert emu.downloads[-1] == emu.file(voice.voice.file_id).file_path


async def test_declared_and_served_sizes_can_differ(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    huge = emu.push_document(chat, ANN, b"tiny", file_name="big.zip", file_size=MAX_DOWNLOAD + 1)
    liar = emu.push_document(chat, ANN, b"", file_name="small.bin", file_size=10, served=b"x" * 100_000, chunked=True)

    assert huge["document"]["file_size"] == MAX_DOWNLOAD + 1
    with pytest.raises(BadRequest, match="(?i)file is too big"):
        await bot.get_file(huge["document"]["file_id"])
    assert emu.downloads == []

    file = await bot.get_file(liar["document"]["file_id"])
    assert file.file_size == 10
    assert len(await file.download_as_bytearray()) == 100_000

    emu.download_limit = None  # a self-hosted server in --local mode hands out anything
    assert (await bot.get_file(huge["document"]["file_id"])).file_size == MAX_DOWNLOAD + 1


async def test_unknown_files_are_refused(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    with pytest.raises(BadRequest, match="(?i)invalid file_id"):
        await bot.get_file("nope")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{emu.file_base_url}{emu.token}/documents/none.bin") as response:
            assert response.status == 404


# --- buttons ------------------------------------------------------------------------------


async def test_callback_data_over_64_bytes_is_refused(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    chat = telegram_emulator.private_chat(ANN)
    fits = InlineKeyboardMarkup([[InlineKeyboardButton("ok", callback_data="é" * 32)]])  # 64 bytes
    await bot.send_message(chat["id"], "fits", reply_markup=fits)
    too_long = InlineKeyboardMarkup([[InlineKeyboardButton("no", callback_data="😀" * 17)]])  # 17 chars, 68 bytes
    with pytest.raises(BadRequest, match="(?i)button_data_invalid"):
        await bot.send_message(chat["id"], "too long", reply_markup=too_long)
    with pytest.raises(BadRequest, match="(?i)button_data_invalid"):
        await bot.send_document(chat["id"], b"x", filename="a.txt", reply_markup=too_long)
    assert len(telegram_emulator.sent(chat["id"])) == 1 and telegram_emulator.uploads == []


async def test_a_pressed_button_is_delivered_and_its_answer_timed(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    sent = await bot.send_message(chat["id"], "Run `rm -rf build`?", reply_markup=approve_deny())
    query_id = emu.press(emu.current(chat["id"], sent.message_id), ANN, "Approve")

    (update,) = await bot.get_updates(timeout=0)
    query = update.callback_query
    assert (query.id, query.data, query.from_user.id) == (query_id, "ap:1:yes", ANN["id"])
    assert query.message.message_id == sent.message_id and query.message.reply_markup is not None

    await bot.answer_callback_query(query.id, text="Approved", show_alert=True)
    answer = emu.callback_answer(query_id)
    assert answer is not None and (answer.text, answer.show_alert) == ("Approved", True)
    assert answer.latency is not None and 0 <= answer.latency < 5
    with pytest.raises(BadRequest, match="(?i)query is too old"):
        await bot.answer_callback_query(query.id)  # one answer per press
    with pytest.raises(BadRequest, match="(?i)query id is invalid"):
        await bot.answer_callback_query("12345")


async def test_late_answers_fail_when_queries_expire(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    sent = await bot.send_message(chat["id"], "ok?", reply_markup=approve_deny())
    emu.callback_query_ttl = 0.0
    emu.press(emu.current(chat["id"], sent.message_id), BOB, "ap:1:no")  # by callback_data
    (update,) = await bot.get_updates(timeout=0)
    with pytest.raises(BadRequest, match="(?i)query is too old"):
        await bot.answer_callback_query(update.callback_query.id)
    assert emu.callback_answers == []


async def test_keyboards_change_with_edits(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    sent = await bot.send_message(chat["id"], "Approve?", reply_markup=approve_deny())
    await bot.edit_message_reply_markup(chat["id"], sent.message_id, reply_markup=approve_deny("ap:2"))
    assert emu.buttons(chat["id"], sent.message_id)[0]["callback_data"] == "ap:2:yes"
    with pytest.raises(BadRequest, match="(?i)message is not modified"):
        await bot.edit_message_reply_markup(chat["id"], sent.message_id, reply_markup=approve_deny("ap:2"))

    await bot.edit_message_text("Approved by Ann", chat["id"], sent.message_id)  # no markup: keyboard gone
    assert emu.keyboard(chat["id"], sent.message_id) == []
    with pytest.raises(LookupError):
        emu.press(emu.current(chat["id"], sent.message_id), ANN, "Approve")

    photo = await bot.send_photo(chat["id"], png_bytes(), caption="v1", reply_markup=approve_deny())
    with pytest.raises(BadRequest, match="(?i)no text in the message"):
        await bot.edit_message_text("v2", chat["id"], photo.message_id)
    edited = await bot.edit_message_caption(chat["id"], photo.message_id, caption="v2", reply_markup=approve_deny())
    assert edited.caption == "v2" and emu.buttons(chat["id"], photo.message_id)[1]["text"] == "Deny"


async def test_a_press_on_a_deleted_message_carries_an_inaccessible_message(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    sent = await bot.send_message(chat["id"], "gone soon", reply_markup=approve_deny())
    stored = emu.current(chat["id"], sent.message_id)
    await bot.delete_message(chat["id"], sent.message_id)
    emu.push_callback_query(stored, ANN, "ap:1:yes")
    (update,) = await bot.get_updates(timeout=0)
    assert not update.callback_query.message.is_accessible


async def test_presses_delivered_by_webhook_are_timed_from_the_post(
    telegram_emulator: TelegramEmulator, bot: Bot, unused_tcp_port: int
) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    sent = await bot.send_message(chat["id"], "ok?", reply_markup=approve_deny())
    received: list[dict[str, Any]] = []

    async def receive(request: web.Request) -> web.Response:
        update = await request.json()
        received.append(update)
        await bot.answer_callback_query(update["callback_query"]["id"], text="noted")
        return web.Response()

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        await bot.set_webhook(f"http://127.0.0.1:{unused_tcp_port}/hook", allowed_updates=["message", "callback_query"])
        query_id = emu.press((chat["id"], sent.message_id), ANN, "Approve")
        await wait_until(lambda: emu.callback_answers, what="the answer")
    finally:
        await runner.cleanup()
    assert received[0]["callback_query"]["data"] == "ap:1:yes"
    answer = emu.callback_answer(query_id)
    assert answer is not None and answer.text == "noted" and 0 <= (answer.latency or -1) < 5


async def test_updates_a_bot_did_not_ask_for_are_not_delivered(telegram_emulator: TelegramEmulator, bot: Bot) -> None:
    emu = telegram_emulator
    chat = emu.private_chat(ANN)
    sent = await bot.send_message(chat["id"], "pick", reply_markup=approve_deny())
    emu.press(emu.current(chat["id"], sent.message_id), ANN, "Deny")
    emu.push_message(chat, ANN, "hello")
    updates = await bot.get_updates(timeout=0, allowed_updates=["message"])
    assert [u.message.text for u in updates] == ["hello"]
    assert [next(k for k in u if k != "update_id") for u in emu.filtered_updates] == ["callback_query"]


def test_png_helper_makes_images_the_emulator_measures() -> None:
    from tests.emulators.telegram import image_info

    assert image_info(png_bytes(33, 7)) == ("image/png", 33, 7)
    assert image_info(b"plain text") is None
    assert re.match(rb"^\x89PNG", png_bytes())
