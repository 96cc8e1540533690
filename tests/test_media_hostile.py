"""Files built to hurt the bot, sent the way a stranger would: through the Telegram emulator
and python-telegram-bot, read by the App, answered through the OpenAI emulator (which records
what the model and the transcription service were sent).

Whatever arrives, the message is answered (how fast, and at what cost in memory, is
bench/hostile.py's to measure): an image too large to decode is refused before it
is decoded, one larger than any model reads reaches the model downscaled, a PDF is read within
its page and time budgets in a process of its own, and a declared MIME type is a MIME type or
unknown, never a header line or a 5,000-character quote.
"""

from __future__ import annotations

import io
import re

from PIL import Image

from tests.emulators.openai import DEFAULT_TRANSCRIPT
from tests.emulators.telegram import png_bytes
from tests.hostile_files import declared_png, endless_page_pdf, inflating_pdf, many_pages_pdf, one_bit_png, text_pdf
from tests.test_media import ANN, OGG, agent_on, telegram_bot, transcription_on  # noqa: F401

ANSWER = "Hello from the emulator. It streams, too."


# --- images ------------------------------------------------------------------------------------


async def test_a_png_declaring_20000_pixels_a_side_is_refused_with_a_notice(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    bomb = declared_png(20000, 20000)
    bot.emu.push_document(bot.dm, ANN, bomb, "what is this?", file_name="huge.png", mime_type="image/png")
    notice, answer = await bot.answered(2)
    assert notice == "I couldn't read everything you sent: huge.png is too large to look at."
    assert answer == ANSWER
    assert llm.image_parts(0) == []  # never handed on: no model reads that many pixels
    assert llm.last_user_text(0) == f"what is this?\n[image image/png {len(bomb)} B: not read: too large to look at]"


async def test_a_png_too_large_to_decode_within_the_budget_is_refused_before_it_is_decoded(
    telegram_bot, openai_emulator
):
    """Within Pillow's own bomb limit, over the longest side any model takes (so it would have
    to be scaled), and 324 MB once decoded: over the budget, so not a pixel is decoded."""
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    bot.emu.push_document(bot.dm, ANN, declared_png(9000, 9000), file_name="wide.png", mime_type="image/png")
    notice, answer = await bot.answered(2)
    assert notice == "I couldn't read everything you sent: wide.png is too large to look at (9000×9000 pixels)."
    assert answer == ANSWER and llm.image_parts(0) == []


async def test_a_one_bit_9000_pixel_png_reaches_the_model_downscaled(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    scan = one_bit_png(9000, 9000)
    bot.emu.push_document(bot.dm, ANN, scan, "read this scan", file_name="scan.png", mime_type="image/png")
    (answer,) = await bot.answered(1)
    assert answer == ANSWER  # no notice: the picture was read, only smaller
    (part,) = llm.image_parts(0)
    assert part.data is not None and part.mime == "image/jpeg"
    with Image.open(io.BytesIO(part.data)) as shown:
        assert shown.size == (2048, 2048)
        grey = shown.convert("L")
        assert grey.getpixel((1024, 1024)) < 60  # the black band across the middle
        assert grey.getpixel((1024, 300)) > 200  # white above it


async def test_an_ordinary_png_still_reaches_the_model_as_sent(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    picture = png_bytes(640, 480)
    bot.emu.push_document(bot.dm, ANN, picture, file_name="chart.png", mime_type="image/png")
    await bot.answered(1)
    assert llm.images(0) == [picture]


# --- documents -----------------------------------------------------------------------------------


async def test_a_pdf_that_inflates_past_pypdfs_limit_gets_a_notice_and_the_rest_is_answered(
    telegram_bot, openai_emulator
):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    bot.emu.push_document(bot.dm, ANN, inflating_pdf(), "summarise", file_name="bomb.pdf", mime_type="application/pdf")
    notice, answer = await bot.answered(2)
    assert notice == "I couldn't read everything you sent: bomb.pdf could not be read."
    assert answer == ANSWER
    assert llm.last_user_text(0).startswith("summarise\n[document bomb.pdf application/pdf 77 KB: ")


async def test_a_3000_page_pdf_is_read_up_to_document_pages_and_answered_with_a_notice(
    telegram_bot, openai_emulator
):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))  # document_pages: 100
    document = many_pages_pdf(3000)  # 30 s of reading, whole
    bot.emu.push_document(bot.dm, ANN, document, "what is in it?", file_name="long.pdf", mime_type="application/pdf")
    notice, answer = await bot.answered(2, timeout=25)
    assert notice == "I couldn't read everything you sent: long.pdf: only the first 100 of 3000 pages were read."
    assert answer == ANSWER
    assert "[… read the first 100 of 3000 pages]" in llm.last_user_text(0)


async def test_a_pdf_slower_than_document_seconds_is_answered_with_what_was_read(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"document_pages": 5000, "document_seconds": 3})
    bot.emu.push_document(bot.dm, ANN, many_pages_pdf(3000), file_name="slow.pdf", mime_type="application/pdf")
    notice, answer = await bot.answered(2, timeout=25)
    read = re.fullmatch(
        r"I couldn't read everything you sent: slow\.pdf: only the first (\d+) of 3000 pages were read in the 3 s allowed\.",
        notice,
    )
    assert read is not None, notice
    assert 0 < int(read[1]) < 3000
    assert f"[… read the first {read[1]} of 3000 pages]" in llm.last_user_text(0)
    assert answer == ANSWER


async def test_a_pdf_page_that_never_ends_is_given_up_at_document_seconds(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"document_seconds": 1})
    bot.emu.push_document(bot.dm, ANN, endless_page_pdf(), "and this?", file_name="page.pdf", mime_type="application/pdf")
    notice, answer = await bot.answered(2, timeout=25)  # minutes of reading, whole
    assert notice == "I couldn't read everything you sent: page.pdf: not read in the 1 s allowed."
    assert answer == ANSWER
    assert llm.last_user_text(0).startswith("and this?\n[document page.pdf application/pdf")


async def test_an_ordinary_pdf_is_read_whole_without_a_notice(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    report = text_pdf("Revenue grew 42 percent", "Costs fell", "Outlook: steady")
    bot.emu.push_document(bot.dm, ANN, report, file_name="report.pdf", mime_type="application/pdf")
    (answer,) = await bot.answered(1)
    assert answer == ANSWER
    text = llm.last_user_text(0)
    assert "Revenue grew 42 percent\n\nCosts fell\n\nOutlook: steady\n[end of report.pdf]" in text


# --- declared MIME types ---------------------------------------------------------------------------


async def test_a_voice_notes_mime_type_cannot_add_a_header_to_the_transcription_upload(
    telegram_bot, openai_emulator
):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"transcription": transcription_on(llm)})
    bot.emu.push_voice(bot.dm, ANN, OGG, mime_type="audio/ogg\r\nX-Injected: yes")
    (answer,) = await bot.answered(1)
    (upload,) = llm.transcriptions
    assert upload.content_type == "audio/ogg" and upload.data == OGG
    assert not any(name.lower() == "x-injected" for name in upload.headers)
    assert all("\r" not in value and "\n" not in value for value in upload.headers.values())
    assert llm.last_user_text(0) == f"[voice] {DEFAULT_TRANSCRIPT}" and answer == ANSWER


async def test_a_5000_character_mime_type_is_not_quoted_back_whole(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"allow_mime": ["image/*"]})
    bot.emu.push_document(bot.dm, ANN, b"data", "here", file_name="a.bin", mime_type="application/" + "x" * 5000)
    notice, answer = await bot.answered(2)
    assert notice == (
        "I couldn't read everything you sent: a.bin was not read (application/octet-stream files are not accepted)."
    )
    assert answer == ANSWER
    assert bot.emu.downloads == []


async def test_long_names_and_types_are_shortened_in_the_notice(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"allow_mime": ["image/*"]})
    long_type = "application/vnd." + "a" * 100  # a valid type, only long
    bot.emu.push_document(bot.dm, ANN, b"data", file_name="n" * 5000 + ".bin", mime_type=long_type)
    notice, _ = await bot.answered(2)
    assert len(notice) < 220
    assert f"{'n' * 59}… was not read ({long_type[:59]}… files are not accepted)" in notice
