"""Posting files through the App (`App.send_file`, what the `send_file` tool calls) and the rules
around it: a path only inside `media.files_dir`, a URL only where the egress check allows at
every hop, everything within `media.max_bytes`, through Delivery (hooks, outbox). Also the
media settings in bot.yaml, and the pieces that name and shrink files.
"""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from botweave import App
from botweave.config import ConfigError
from botweave.files import human_size, marker
from botweave.hooks import HookEvent
from botweave.media.documents import Budget, extract
from botweave.media.images import ImageLimit, ImageUnreadable, fit
from botweave.mime import mime_allowed
from botweave.runtime.config import load_config
from PIL import Image

from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    png_bytes,
    wait_until,
)
from tests.support import StartApp

PNG = png_bytes(6, 4)
CHAT = "telegram:1"


@pytest_asyncio.fixture
async def app(telegram_emulator: TelegramEmulator, start_app: StartApp, tmp_path: Path) -> App:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chart.png").write_bytes(PNG)
    (tmp_path / "secret.txt").write_text("do not send")
    return await start_app({
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(telegram_emulator)}},
        "media": {"files_dir": str(tmp_path / "out"), "max_bytes": 50_000},
    })


@pytest_asyncio.fixture
async def web_files() -> AsyncIterator[str]:
    """A loopback web server: /report.pdf, and /hop redirecting to it under another host name."""

    async def report(request: web.Request) -> web.Response:
        return web.Response(body=b"%PDF-1.4 quarterly", content_type="application/pdf")

    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://localhost:{request.url.port}/report.pdf")

    server = web.Application()
    server.router.add_get("/report.pdf", report)
    server.router.add_get("/hop", hop)
    runner = web.AppRunner(server)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_a_file_from_files_dir_goes_out_through_delivery(app: App, telegram_emulator: TelegramEmulator):
    seen: list[dict[str, Any]] = []

    def sending(event: HookEvent) -> None:
        seen.append(event.payload["file"])
        event.text = event.text.upper()

    app.hooks.register("message_sending", sending)
    result = await app.send_file(CHAT, path="chart.png", caption="q3 chart")
    assert result.ok and result.message_id
    (upload,) = telegram_emulator.sent_media(1)
    assert (upload.kind, upload.filename, upload.data, upload.caption) == ("photo", "chart.png", PNG, "Q3 CHART")
    assert seen == [{"filename": "chart.png", "mime": "image/png", "size": len(PNG)}]


@pytest.mark.parametrize("path", ["../secret.txt", "/etc/passwd", "escape/secret.txt", "missing.png"])
async def test_a_path_outside_files_dir_is_refused(app: App, telegram_emulator: TelegramEmulator, path: str):
    files_dir = Path(app.config.media.files_dir or "")
    os.symlink(files_dir.parent, files_dir / "escape")  # a link inside that leads out
    result = await app.send_file(CHAT, path=path)
    assert result.status == "failed" and ("outside media.files_dir" in result.detail or "no file" in result.detail)
    assert telegram_emulator.sent_media() == []


async def test_without_files_dir_no_path_is_allowed(telegram_emulator: TelegramEmulator, start_app: StartApp):
    app = await start_app({
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": adapter_config(telegram_emulator)},
    })
    result = await app.send_file(CHAT, path="/etc/hostname")
    assert result.status == "failed" and "media.files_dir is not set" in result.detail


async def test_a_url_is_fetched_only_where_the_network_policy_allows_every_hop(
    telegram_emulator: TelegramEmulator, start_app: StartApp, web_files: str
):
    config = {
        "agents": {
            "assistant": {"model": "offline/echo"},
            "fetcher": {"model": "offline/echo", "network": {"allow_hosts": ["127.0.0.1"]}},
        },
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(telegram_emulator)}},
    }
    app = await start_app(config)
    refused = await app.send_file(CHAT, url=f"{web_files}/report.pdf")  # the global policy: no loopback
    assert refused.status == "failed" and "127.0.0.1 is a local or private address" in refused.detail

    sent = await app.send_file(CHAT, url=f"{web_files}/report.pdf", caption="the report", agent="fetcher")
    assert sent.ok
    (upload,) = telegram_emulator.sent_media(1)
    assert (upload.kind, upload.filename, upload.data) == ("document", "report.pdf", b"%PDF-1.4 quarterly")

    hopped = await app.send_file(CHAT, url=f"{web_files}/hop", agent="fetcher")  # redirected to a refused host
    assert hopped.status == "failed" and "localhost is not in the network policy's allow_hosts" in hopped.detail
    assert len(telegram_emulator.sent_media(1)) == 1


async def test_base64_data_within_max_bytes(app: App, telegram_emulator: TelegramEmulator):
    sent = await app.send_file(CHAT, data_base64=base64.b64encode(b"hello").decode(), filename="hello.txt")
    assert sent.ok and telegram_emulator.sent_media(1)[0].data == b"hello"
    too_big = await app.send_file(CHAT, data_base64=base64.b64encode(bytes(60_000)).decode(), filename="big.bin")
    assert too_big.status == "failed" and "the limit is 49 KB" in too_big.detail
    broken = await app.send_file(CHAT, data_base64="not base64!", filename="x.bin")
    assert broken.status == "failed" and "not valid base64" in broken.detail
    neither = await app.send_file(CHAT, filename="x.bin")
    assert neither.status == "failed" and "exactly one" in neither.detail
    assert len(telegram_emulator.sent_media(1)) == 1


async def test_a_keyed_file_post_goes_out_once(app: App, telegram_emulator: TelegramEmulator):
    first = await app.send_file(CHAT, path="chart.png", key="turn-7:chart")
    again = await app.send_file(CHAT, path="chart.png", key="turn-7:chart")  # a turn that runs again
    assert first.ok and again.ok and again.message_ids == first.message_ids
    assert len(telegram_emulator.sent_media(1)) == 1


async def test_an_unknown_target_is_no_route(app: App):
    assert (await app.send_file("nowhere:1", data=b"x", filename="x.txt")).status == "no_route"


# --- configuration -----------------------------------------------------------------------------


def test_media_settings_are_checked_with_precise_errors():
    with pytest.raises(ConfigError) as error:
        load_config({
            "agents": {"a": {"model": "m", "vision": "sometimes", "media": {"max_files": -1}}},
            "media": {
                "allow_mime": ["image/*", "pdf"], "max_bytes": 0, "transcripton": {}, "document_pages": 0,
                "document_seconds": 0,
            },
        })
    assert error.value.problems == [
        "agents.a.vision: must be auto, true or false (got 'sometimes')",
        "agents.a.media.max_files: must be at least 0 (got -1)",
        "media.max_bytes: must be at least 1 (got 0)",
        "media.allow_mime.1: 'pdf' is not a MIME type; write type/subtype, e.g. image/png, image/* or application/pdf",
        "media.document_pages: must be at least 1 (got 0)",
        "media.document_seconds: must be greater than 0.0 (got 0)",
        "media.transcripton: unknown key (did you mean 'transcription'?); allowed keys: max_bytes, max_files, "
        "allow_mime, document_chars, document_pages, document_seconds, files_dir, transcription",
    ]


def test_an_agent_overrides_the_media_settings_it_names(tmp_path: Path):
    path = tmp_path / "bot.yaml"
    path.write_text(
        "media: {max_bytes: 1000, files_dir: out, transcription: {model: openai/whisper-1, api_key: k}}\n"
        "agents:\n"
        "  small: {model: offline/echo, media: {max_bytes: 10, transcription: {api_base: 'http://stt'}}}\n"
        "  plain: {model: offline/echo, vision: false}\n"
    )
    config = load_config(path)
    small, plain = config.media_for("small"), config.media_for("plain")
    assert (small.max_bytes, plain.max_bytes) == (10, 1000)
    assert small.transcription.model == "openai/whisper-1" and small.transcription.api_base == "http://stt"
    assert small.transcription.api_key is not None and small.transcription.api_key.get_secret_value() == "k"
    assert config.media.files_dir == str(tmp_path / "out")  # relative to the configuration file
    assert config.agents["plain"].vision is False and config.agents["small"].vision == "auto"


def test_the_example_configuration_offers_media():
    config = load_config(Path(__file__).parent.parent / "bot.yaml.example", env={})
    assert "media" in config.model_fields_set  # spelled out, with every key explained
    assert config.media.max_bytes == 20_000_000 and config.media.files_dir is None
    assert config.media.allow_mime == ["image/*", "text/*", "application/pdf", "audio/*"]


# --- naming and shrinking files ------------------------------------------------------------------


def test_sizes_markers_and_mime_wildcards():
    assert [human_size(n) for n in (0, 1023, 12 * 1024, 3_500_000, 25 * 1024 * 1024)] == [
        "0 B", "1023 B", "12 KB", "3.3 MB", "25 MB"
    ]
    assert marker({"mime": "image/png", "size": 12 * 1024, "filename": "x.png"}) == "[image image/png 12 KB]"
    assert marker({"type": "voice", "mime": "audio/ogg", "size": 3000}) == "[voice audio/ogg 3 KB]"
    assert marker({"mime": "", "filename": "a.pdf", "size": 2048}, note="not read") == (
        "[document a.pdf application/pdf 2 KB: not read]"
    )
    assert mime_allowed("image/webp", ["image/*"]) and mime_allowed("Text/Plain; charset=utf-8", ["text/*"])
    assert not mime_allowed("application/zip", ["image/*", "text/*", "application/pdf"])


def _photo(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.effect_noise((width, height), 80).convert("RGB").save(buffer, format="PNG")
    return buffer.getvalue()


def test_images_are_shrunk_only_above_the_providers_limit():
    big = _photo(600, 400)
    assert fit(big, "image/png", ImageLimit(len(big))) == (big, "image/png")  # within: untouched
    shrunk, mime = fit(big, "image/png", ImageLimit(20_000, max_side=300))
    assert mime == "image/jpeg" and len(shrunk) <= 20_000
    assert max(Image.open(io.BytesIO(shrunk)).size) <= 300
    bmp = io.BytesIO()
    Image.new("RGB", (4, 4), (0, 0, 255)).save(bmp, format="BMP")
    assert fit(bmp.getvalue(), "image/bmp")[1] == "image/png"  # a type models do not read
    with pytest.raises(ImageUnreadable):
        fit(b"not an image", "image/bmp")


async def test_text_documents_are_decoded_and_cut():
    text = "naïve café " * 10
    assert (await extract(text.encode("latin-1"), "text/plain; charset=latin-1", Budget(11))).text == "naïve café "
    cut = await extract(text.encode(), "text/plain", Budget(20))
    assert cut.cut and len(cut.text) == 20
    assert (await extract(b"%PDF-1.4 broken", "application/pdf", Budget(100))).problem == "the PDF could not be read"


async def test_the_send_file_tool_posts_through_delivery_and_tells_the_model_the_ids(
    telegram_emulator: TelegramEmulator, start_app: StartApp, tmp_path: Path
):
    """The agent's `send_file` tool: a file from the configured folder reaches the chat as a
    photo, the model is told its message id, and a path outside the folder is refused to it."""
    from tests.emulators.openai import OpenAIEmulator, tool_call

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "chart.png").write_bytes(PNG)
    llm = OpenAIEmulator()
    await llm.start()
    try:
        llm.queue([
            tool_call("send_file", {"path": "chart.png", "caption": "the chart"}),
            tool_call("send_file", {"path": "../secret.txt"}),
        ])
        llm.queue_text("Sent.")
        app = await start_app({
            "agents": {"assistant": {
                "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback", "tools": ["send_file"],
            }},
            "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(telegram_emulator)}},
            "media": {"files_dir": str(tmp_path / "out")},
        })
        emu = telegram_emulator
        chat = emu.private_chat(emu.user(7, "Ann", "ann"))
        emu.push_message(chat, emu.user(7, "Ann", "ann"), "send me the chart")
        await wait_until(lambda: "Sent." in emu.sent_texts(chat["id"]), timeout=15, what="the answer")
        await app.drain()
        (photo,) = emu.sent_media(chat["id"])
        assert (photo.kind, photo.caption, photo.data) == ("photo", "the chart", PNG)
        posted, refused = (json.loads(m["content"]) for m in llm.tool_results(-1))
        assert posted["status"] == "ok" and posted["message_ids"] == [str(photo.message["message_id"])]
        assert refused["status"] == "failed" and "outside" in refused["detail"]
        llm.assert_tool_protocol()
    finally:
        await llm.stop()
