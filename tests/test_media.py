"""Media end to end: a platform emulator ⇄ its real SDK ⇄ App ⇄ litellm ⇄ the loopback OpenAI
emulator, which records what the model was given.

A photo reaches a model with vision as an image content part (the bytes as sent), a PDF as
its text, a voice note as a transcript made by a real transcription request; a file over a
limit gets its sender one notice while the rest of the message is answered; a reply to a
photo shows the model that photo; history keeps markers, never the bytes; images the model
returns are posted as files; and with no key at all the offline echo says what it was shown.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from botweave import App

from tests.emulators import discord as discord_emulator
from tests.emulators.openai import DEFAULT_TRANSCRIPT, OpenAIEmulator, Reply, text_of
from tests.emulators.slack import EventDelivery, SlackEmulator, event_callback, slack_section
from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    png_bytes,
    wait_until,
)
from tests.support import StartApp

ROOT = Path(__file__).resolve().parents[1]
ANN = TelegramEmulator.user(1, "Ann", "ann")
PNG = png_bytes(8, 6)
OGG = b"OggS\x00\x02" + bytes(200)


def pdf_bytes(*pages: str) -> bytes:
    """A small real PDF with one line of Helvetica text per page."""
    objects: list[str] = ["<< /Type /Catalog /Pages 2 0 R >>", "", "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {len(objects)} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n{body}\nendobj\n".encode())
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    out.write(b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets))
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def agent_on(llm: OpenAIEmulator, **options: Any) -> dict[str, Any]:
    return {"model": "openai/gpt-4o", "api_base": llm.base_url, "api_key": "sk-loopback", **options}


def transcription_on(llm: OpenAIEmulator) -> dict[str, Any]:
    return {"model": "openai/whisper-1", "api_base": llm.base_url, "api_key": "sk-loopback"}


class TelegramBot:
    """An App answering Telegram from the emulator, and what a person in Ann's DM sees."""

    def __init__(self, app: App, emu: TelegramEmulator) -> None:
        self.app = app
        self.emu = emu
        self.dm = emu.private_chat(ANN)

    def texts(self) -> list[str]:
        return self.emu.sent_texts(ANN["id"])

    async def answered(self, count: int = 1, timeout: float = 15) -> list[str]:
        await wait_until(lambda: len(self.texts()) >= count, timeout=timeout, what=f"{count} messages to Ann")
        await self.app.drain()
        return self.texts()


@pytest_asyncio.fixture
async def telegram_bot(telegram_emulator: TelegramEmulator, start_app: StartApp) -> AsyncIterator[Any]:
    """`await telegram_bot(agent=..., media=...)` starts an App on the Telegram emulator."""

    async def start(
        agent: dict[str, Any] | None = None, media: dict[str, Any] | None = None, **telegram: Any
    ) -> TelegramBot:
        section = {"unknown_user_policy": "allow", **adapter_config(telegram_emulator), **telegram}
        config: dict[str, Any] = {
            "agents": {"assistant": agent or {"model": "offline/echo"}},
            "platforms": {"telegram": section},
        }
        if media is not None:
            config["media"] = media
        return TelegramBot(await start_app(config), telegram_emulator)

    yield start


# --- what the model is given -----------------------------------------------------------------


async def test_a_photo_without_a_caption_reaches_the_model_as_an_image_part(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    bot.emu.push_photo(bot.dm, ANN, PNG)
    await bot.answered()
    (part,) = llm.image_parts(0)
    assert part.data == PNG and part.mime == "image/png"  # the bytes as sent, typed by what they are
    assert not part.url.startswith("http")  # never a platform URL (Telegram's carries the token)
    assert llm.violations == []
    bot.emu.push_message(bot.dm, ANN, "and now?")
    await bot.answered(2)
    earlier = llm.messages(1)[1]  # history keeps a compact reference, not the bytes
    assert earlier == {"role": "user", "content": f"[image image/png {len(PNG)} B]"}
    assert "base64" not in json.dumps(llm.messages(1))


async def test_a_pdf_becomes_its_text_up_to_document_chars(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"document_chars": 40})
    report = pdf_bytes("Revenue grew 42 percent this quarter", "Costs fell on page two")
    bot.emu.push_document(bot.dm, ANN, report, "summarise this", file_name="report.pdf", mime_type="application/pdf")
    await bot.answered()
    text = llm.last_user_text(0)
    assert text.startswith("summarise this\n[document report.pdf application/pdf")
    assert "Revenue grew 42 percent this quarter" in text
    assert "Costs fell" not in text and "[… cut at 40 characters]" in text
    assert llm.image_parts(0) == []


async def test_a_voice_note_is_transcribed_and_the_transcript_is_the_turn(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"transcription": transcription_on(llm)})
    bot.emu.push_voice(bot.dm, ANN, OGG)
    await bot.answered()
    (sent,) = llm.transcriptions
    assert sent.model == "whisper-1" and sent.data == OGG and sent.filename and sent.filename.endswith(".ogg")
    assert llm.last_user_text(0) == f"[voice] {DEFAULT_TRANSCRIPT}"


async def test_a_reply_to_a_photo_shows_the_model_that_photo(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    photo = bot.emu.media_message(bot.dm, ANN, "photo", PNG)  # sent earlier, before the bot was around
    bot.emu.push_message(bot.dm, ANN, "what colour is this?", reply_to=photo)
    await bot.answered()
    assert llm.images(0) == [PNG]
    assert llm.last_user_text(0) == "what colour is this?"


def test_the_first_photo_does_not_import_litellm_on_the_event_loop():
    """Whether an `openai/` model sees images, and how large they may be, is litellm's model
    map: the first photo of a fresh process imports litellm for it (seconds), in a thread, so
    no other conversation freezes meanwhile (tests/first_photo.py)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.first_photo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["answered"] == ["A small picture."] and outcome["image parts"] == 1
    assert outcome["litellm imported on"] == "worker"


# --- limits ----------------------------------------------------------------------------------


async def test_files_over_a_limit_get_one_notice_and_the_rest_is_answered(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"max_bytes": 1000})
    bot.emu.push_document(bot.dm, ANN, b"x" * 5000, "can you read it?", file_name="big.txt")
    notice, answer = await bot.answered(2)
    assert notice == "I couldn't read everything you sent: big.txt is 5 KB; the limit is 1000 B."
    assert answer == "Hello from the emulator. It streams, too."
    assert llm.last_user_text(0) == "can you read it?\n[document big.txt text/plain 5 KB: not read: over the 1000 B limit]"
    assert bot.emu.downloads == []  # refused on the declared size: not a byte fetched


async def test_a_file_larger_than_it_declared_is_cut_off_while_downloading(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"max_bytes": 100_000})
    # Telegram says 10 bytes, then serves 300 KB without a Content-Length: only counting tells.
    bot.emu.push_document(bot.dm, ANN, b"y" * 300_000, file_name="liar.txt", file_size=10, chunked=True)
    notice, _ = await bot.answered(2)
    assert notice == "I couldn't read everything you sent: liar.txt is over the 98 KB limit."
    assert len(bot.emu.downloads) == 1
    assert "not read: over the 98 KB limit" in llm.last_user_text(0)


async def test_a_type_outside_allow_mime_is_named_not_read(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), media={"allow_mime": ["image/*"]})
    bot.emu.push_document(bot.dm, ANN, b"%PDF-1.4 ...", "here", file_name="notes.pdf", mime_type="application/pdf")
    notice, _ = await bot.answered(2)
    assert notice == "I couldn't read everything you sent: notes.pdf was not read (application/pdf files are not accepted)."
    assert llm.last_user_text(0) == "here\n[document notes.pdf application/pdf 12 B: not read]"
    assert bot.emu.downloads == []


async def test_an_agent_without_vision_reads_a_marker_and_nothing_is_fetched(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm, vision=False))
    bot.emu.push_photo(bot.dm, ANN, PNG, "look")
    await bot.answered()
    assert llm.image_parts(0) == [] and bot.emu.downloads == []
    assert llm.last_user_text(0) == f"look\n[image image/jpeg {len(PNG)} B]"


# --- out ---------------------------------------------------------------------------------------


async def test_images_the_model_returns_are_sent_as_photos(telegram_bot, openai_emulator):
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm))
    llm.queue(Reply(text="Here is your chart.", images=[("image/png", PNG)]))
    bot.emu.push_message(bot.dm, ANN, "draw me a chart")
    await bot.answered()
    (photo,) = bot.emu.sent_media(ANN["id"])
    assert photo.kind == "photo" and photo.data == PNG
    assert bot.texts() == ["Here is your chart."]
    bot.emu.push_message(bot.dm, ANN, "thanks")
    await bot.answered(2)
    assert llm.messages(1)[2] == {"role": "assistant", "content": f"Here is your chart.\n[image image/png {len(PNG)} B]"}


# --- no key at all -----------------------------------------------------------------------------


async def test_the_offline_echo_says_what_it_was_shown(telegram_bot):
    bot = await telegram_bot()
    bot.emu.push_photo(bot.dm, ANN, PNG, "my cat")
    bot.emu.push_voice(bot.dm, ANN, OGG)
    photo, voice = await bot.answered(2)
    assert photo == f"assistant (offline echo) heard: my cat [image image/png {len(PNG)} B]"
    assert voice == (
        f"assistant (offline echo) heard: [voice audio/ogg {len(OGG)} B: not transcribed: no transcription model is set]"
    )


# --- the other platforms -----------------------------------------------------------------------


async def test_discord_attachments_reach_the_model_from_the_cdn(start_app: StartApp, openai_emulator):
    llm = openai_emulator
    emu = await discord_emulator.DiscordEmulator().start()
    app: App | None = None
    try:
        section = {"token": discord_emulator.TOKEN, "api_base_url": emu.api_base, "gateway_url": emu.gateway_url}
        app = await start_app({
            "bot": {"unknown_user_policy": "allow", "group_policy": "respond_all"},
            "agents": {"assistant": agent_on(llm)},
            "platforms": {"discord": section},
        })
        await emu.wait_ready()
        picture = emu.attachment("cat.png", "image/png", data=PNG)
        await emu.dispatch("MESSAGE_CREATE", emu.message("is this a cat?", attachments=[picture]))
        await wait_until(lambda: emu.bot_messages(discord_emulator.CHANNEL_ID), timeout=15, what="an answer")
        await app.drain()
        assert llm.images(0) == [PNG] and llm.last_user_text(0) == "[Alice] is this a cat?"
        assert len(emu.cdn_fetches) == 1
    finally:
        if app is not None:
            await asyncio.wait_for(app.stop(), 15)
        await emu.stop()


async def test_slack_files_are_read_with_the_bot_token(start_app: StartApp, openai_emulator):
    llm = openai_emulator
    emu = SlackEmulator()
    await emu.start()
    app: App | None = None
    try:
        emu.add_user("U0ALICE", "Alice")
        emu.add_channel("D0ALICE", "im")
        app = await start_app({
            "bot": {"unknown_user_policy": "allow"},
            "agents": {"assistant": agent_on(llm)},
            "platforms": {"slack": slack_section(emu, "socket")},
        })
        delivery = EventDelivery(emu, app.adapters["slack"], "socket")
        shared = emu.add_file("notes.txt", b"meeting moved to 3pm", user="U0ALICE")
        event = emu.post_as_user("D0ALICE", "U0ALICE", "", subtype="file_share", files=[shared])
        await delivery.deliver_all(event_callback(event))
        await wait_until(lambda: emu.posted, timeout=15, what="an answer")
        await app.drain()
        assert "meeting moved to 3pm" in llm.last_user_text(0)
        assert [(authorised, status) for _, authorised, status in emu.file_fetches] == [(True, 200)]
    finally:
        if app is not None:
            await asyncio.wait_for(app.stop(), 15)
        await emu.stop()


async def test_a_streamed_turn_is_given_the_image_and_posts_the_models_images(telegram_bot, openai_emulator):
    """Streaming changes how words arrive, not what the model is given or what it returns."""
    llm = openai_emulator
    bot = await telegram_bot(agent_on(llm), streaming=True, stream_edit_interval_ms=0)
    llm.queue(Reply(text="A red square, and here it is again.", images=[("image/png", PNG)]))
    bot.emu.push_photo(bot.dm, ANN, PNG, "caption")
    await wait_until(lambda: bot.emu.sent_media(ANN["id"]), timeout=15, what="the model's image")
    await bot.app.drain()
    assert llm.images(0) == [PNG] and text_of(llm.messages(0)[-1]) == "caption"
    assert bot.emu.sent_media(ANN["id"])[0].data == PNG
