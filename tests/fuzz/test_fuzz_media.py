"""Media under fuzz: image headers through `media/images.py`, PDF bytes through
`media/documents.py` (and its reader process), and declared MIME types through the kernel's
MIME function and every platform's normaliser.

- An image of any header is sent as it is, scaled to fit, refused as too large or named
  unreadable; nothing else escapes, and no header makes the process hold more than the
  decoding budget.
- PDF bytes of any shape become text or a stated problem within the time budget (plus the
  reader process's start), never an exception, and never more text than `document_chars`.
- A declared type, whatever a platform sends in `mime_type`, `content_type` or `mimetype`,
  reaches the attachment as a clean MIME type or as nothing at all.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import re
import resource
import struct
import time
import zlib
from typing import Any

from botweave.adapters.telegram.schema import read_update
from botweave.files import mime_of
from botweave.media.documents import Budget, extract
from botweave.media.images import DECODE_BYTES, ImageLimit, ImageTooLarge, ImageUnreadable, fit
from botweave.mime import MAX_LENGTH, base_mime, clean_mime, mime_allowed
from botweave.types import PHOTO_MIMES, BotMessage
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.adapters.platforms import discord_into_a_list
from tests.emulators.discord import DM_CHANNEL_ID, DiscordEmulator
from tests.emulators.telegram import TelegramEmulator
from tests.fuzz.strategies import ODD_TEXT, encode, mutated
from tests.fuzz.support import Tally, counting_tracebacks, describe
from tests.fuzz.test_fuzz_discord import _deliver
from tests.fuzz.test_fuzz_slack import ALICE, CHANNEL
from tests.fuzz.test_fuzz_slack import _start as start_slack
from tests.fuzz.test_fuzz_telegram import _start as start_telegram
from tests.hostile_files import build_pdf, inflating_pdf, many_pages_pdf, png_chunk, stream, text_pdf

# --- declared MIME types ---------------------------------------------------------------------------

TOKEN_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$&^_.+-%'*`|~"
NEAR_MISSES = st.sampled_from([
    "audio/ogg\r\nX-Injected: yes", "image/png\n", "image/png\r", "\r\nimage/png", "application/" + "x" * 5000,
    'text/plain; charset="a\r\nb"', "Image/PNG; Charset=UTF-8", " image/png ", "image/png;;", "*/*", "image/*",
    'a/b; c="d\\"e"', "image/png; a=b; " + "c=d; " * 300, "text/plain; charset=utf-8\x00", "imáge/png",
    "image/pñg", "image/png\u2028X: y", "image/png\x85", "audio/ogg;codecs=opus", "", ";", "/", "a/",
])
MIME_TEXT = st.one_of(
    NEAR_MISSES,
    ODD_TEXT,
    st.text(st.characters(codec="ascii"), max_size=300),
    st.builds(
        lambda kind, subtype, tail: f"{kind}/{subtype}{tail}",
        st.text(TOKEN_CHARS + " /;\r\n", min_size=1, max_size=20),
        st.text(TOKEN_CHARS + " /;=\"\r\n\t", min_size=1, max_size=200),
        st.one_of(st.just(""), st.text(st.characters(codec="utf-8"), max_size=60).map(lambda t: ";" + t)),
    ),
)


def assert_clean_attachments(item: Any) -> None:
    """Every attachment's declared type is a clean MIME type or nothing."""
    if not isinstance(item, BotMessage):
        return
    quoted = item.quoted.attachments if item.quoted is not None else []
    for ref in [*item.attachments, *quoted]:
        mime = ref.get("mime")
        assert mime in (None, "") or clean_mime(mime) == mime, repr(mime)
        assert base_mime(mime_of(ref)) == mime_of(ref), repr(ref)


@given(value=st.one_of(MIME_TEXT, st.none(), st.integers(), st.lists(st.text(max_size=5), max_size=2)))
def test_the_mime_function_gives_a_clean_type_or_none(value: Any) -> None:
    clean = clean_mime(value)
    if clean is not None:
        assert clean_mime(clean) == clean  # normalised: a fixed point
        assert len(clean) <= MAX_LENGTH and all(" " <= c <= "~" for c in clean), repr(clean)
        assert base_mime(value) == clean.split(";", 1)[0]
    else:
        assert base_mime(value) == "" and not mime_allowed(value, ["*/*"])
    mime_allowed(value, ["image/*", "audio/*", "application/pdf"])


def telegram_file_updates() -> list[tuple[dict[str, Any], tuple[str, ...]]]:
    """Updates carrying each kind of Telegram file, with the path to its `mime_type`."""
    emu = TelegramEmulator()
    ann = TelegramEmulator.user(1, "Ann", "ann")
    dm = emu.private_chat(ann)
    emu.push_document(dm, ann, b"%PDF-1.4", file_name="a.pdf", mime_type="application/pdf")
    emu.push_voice(dm, ann, b"OggS")
    emu.push_audio(dm, ann, b"ID3", file_name="a.mp3")
    emu.push_video(dm, ann, b"\x00\x00", file_name="a.mp4")
    kinds = ("document", "voice", "audio", "video")
    return [(update, ("message", kind, "mime_type")) for update, kind in zip(emu.pending, kinds, strict=True)]


def _set(payload: Any, path: tuple[Any, ...], value: Any) -> Any:
    payload = copy.deepcopy(payload)
    target = payload
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return payload


def _declared(base: tuple[Any, tuple[Any, ...]]) -> Any:
    """A payload whose declared type is fuzzed, and now and then mutated elsewhere too."""
    payload, path = base
    return st.tuples(MIME_TEXT, st.booleans()).flatmap(
        lambda chosen: mutated(_set(payload, path, chosen[0])) if chosen[1] else st.just(_set(payload, path, chosen[0]))
    )


def test_telegram_mime_types_reach_attachments_clean_or_not_at_all(unused_tcp_port: int) -> None:
    tally = Tally("telegram mime_type")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        emu, adapter, _ = runner.run(start_telegram(unused_tcp_port))
        bot = adapter.application.bot
        try:

            @given(update=st.sampled_from(telegram_file_updates()).flatmap(_declared))
            def example(update: Any) -> None:
                tally.tried += 1
                try:
                    parsed = read_update(json.loads(encode(update)), bot)
                except Exception:  # noqa: BLE001 - not an update at all: the caller logs and skips it
                    tally.outcomes["skipped"] += 1
                    return
                items = adapter.inbound.normalise(parsed)
                for item in items:
                    assert_clean_attachments(item)
                tally.handed_on(items, none="nothing")

            example()
        finally:
            runner.run(adapter.stop())
            runner.run(emu.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()


def discord_file_dispatch(emu: DiscordEmulator) -> tuple[dict[str, Any], tuple[Any, ...]]:
    message = emu.message("", channel_id=DM_CHANNEL_ID, attachments=[{
        "id": "5000", "filename": "a.png", "size": 4, "url": f"{emu.cdn_base}/attachments/a.png",
        "proxy_url": f"{emu.cdn_base}/attachments/a.png", "content_type": "image/png"}])
    return message, ("attachments", 0, "content_type")


def test_discord_content_types_reach_attachments_clean_or_not_at_all() -> None:
    tally = Tally("discord content_type")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        emu, adapter, received = runner.run(discord_into_a_list())
        counter = iter(range(10**9))
        try:

            @given(data=_declared(discord_file_dispatch(emu)))
            def example(data: Any) -> None:
                tally.tried += 1
                items = runner.run(_deliver(emu, received, "MESSAGE_CREATE", data, next(counter)))
                for item in items:
                    assert_clean_attachments(item)
                tally.handed_on(items, none="skipped")

            example()
        finally:
            runner.run(adapter.stop())
            runner.run(emu.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()


def test_slack_mimetypes_reach_attachments_clean_or_not_at_all() -> None:
    tally = Tally("slack mimetype")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        emu, adapter, _ = runner.run(start_slack())
        inbound = adapter.inbound
        assert inbound is not None
        shared = emu.add_file("a.png", b"\x89PNG", user=ALICE)
        event = emu.post_as_user(CHANNEL, ALICE, "a file", files=[shared], subtype="file_share")
        try:

            @given(event=_declared((event, ("files", 0, "mimetype"))))
            def example(event: Any) -> None:
                tally.tried += 1
                event = json.loads(encode(event))
                item = runner.run(inbound.normalise(event, {"event": event}))
                assert_clean_attachments(item)
                tally.handed_on([] if item is None else [item], none="skipped")

            example()
        finally:
            runner.run(adapter.stop())
            runner.run(emu.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()


# --- image headers -----------------------------------------------------------------------------------


def _saved(image: Image.Image, kind: str, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=kind, **options)
    return buffer.getvalue()


def _base_images() -> list[tuple[str, bytes]]:
    colour = Image.linear_gradient("L").resize((64, 48)).convert("RGB")
    return [
        ("image/png", _saved(colour, "PNG")),
        ("image/png", _saved(colour.convert("1"), "PNG")),
        ("image/png", _saved(colour.convert("P"), "PNG")),
        ("image/png", _saved(colour.convert("RGBA"), "PNG")),
        ("image/png", _saved(colour.convert("I;16"), "PNG")),
        ("image/jpeg", _saved(colour, "JPEG")),
        ("image/jpeg", _saved(colour.convert("CMYK"), "JPEG")),
        ("image/gif", _saved(colour.convert("P"), "GIF")),
        ("image/webp", _saved(colour, "WEBP")),
        ("image/webp", _saved(colour.convert("RGBA"), "WEBP", lossless=True)),
        ("image/bmp", _saved(colour, "BMP")),
        ("image/tiff", _saved(colour, "TIFF")),
    ]


BASE_IMAGES = _base_images()
SIDES = st.one_of(st.integers(1, 70_000), st.sampled_from([0, 1, 2048, 8000, 8001, 9000, 20000, 65535, 2**31 - 1, 2**32 - 1]))


def _with_size(data: bytes, width: int, height: int, fix_crc: bool) -> bytes:
    """`data` declaring `width`×`height` where its format keeps the size."""
    out = bytearray(data)
    if data.startswith(b"\x89PNG"):
        out[16:24] = struct.pack(">II", width & 0xFFFFFFFF, height & 0xFFFFFFFF)
        if fix_crc:
            out[29:33] = struct.pack(">I", zlib.crc32(bytes(out[12:29])))
    elif data[:3] == b"GIF":
        out[6:10] = struct.pack("<HH", width & 0xFFFF, height & 0xFFFF)
    elif data[:2] == b"BM":
        out[18:26] = struct.pack("<ii", (width & 0x7FFFFFFF), (height & 0x7FFFFFFF))
    elif data[:2] == b"\xff\xd8":
        found = re.search(rb"\xff[\xc0-\xc2]", data)
        if found is not None:
            out[found.start() + 5 : found.start() + 9] = struct.pack(">HH", height & 0xFFFF, width & 0xFFFF)
    elif data[:4] == b"RIFF" and data[12:16] == b"VP8X":
        out[24:30] = ((width - 1) & 0xFFFFFF).to_bytes(3, "little") + ((height - 1) & 0xFFFFFF).to_bytes(3, "little")
    return bytes(out)


@st.composite
def image_headers(draw: st.DrawFn) -> tuple[str, bytes]:
    mime, data = draw(st.sampled_from(BASE_IMAGES))
    action = draw(st.sampled_from(["size", "size", "size", "header", "truncate", "flip", "png-ihdr"]))
    if action == "size":
        data = _with_size(data, draw(SIDES), draw(SIDES), draw(st.booleans()))
    elif action == "header":
        start = draw(st.integers(0, min(len(data), 64)))
        data = data[:start] + draw(st.binary(min_size=1, max_size=16)) + data[start + draw(st.integers(0, 16)) :]
    elif action == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif action == "flip":
        out = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        data = bytes(out)
    elif data.startswith(b"\x89PNG"):  # another bit depth / colour type / interlace, CRC kept right
        fields = struct.pack(">IIBBBBB", draw(SIDES), draw(SIDES), draw(st.sampled_from([1, 2, 4, 8, 16, 3, 0])),
                             draw(st.sampled_from([0, 2, 3, 4, 6, 1, 7])), 0, 0, draw(st.integers(0, 1)))
        data = data[:8] + png_chunk(b"IHDR", fields) + data[33:]
    return draw(st.sampled_from([mime, "image/png", "image/bmp"])), data


LIMITS = st.sampled_from([ImageLimit(20 * 1024 * 1024), ImageLimit(5 * 1024 * 1024, 8000), ImageLimit(20_000, 300)])


def test_any_image_header_is_sent_scaled_refused_or_unreadable() -> None:
    tally = Tally("image headers")
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with counting_tracebacks(tally) as tracebacks:

        @given(image=image_headers(), limit=LIMITS)
        def example(image: tuple[str, bytes], limit: ImageLimit) -> None:
            tally.tried += 1
            mime, data = image
            try:
                sent, sent_mime = fit(data, mime, limit)
            except ImageTooLarge:
                tally.outcomes["too large"] += 1
                return
            except ImageUnreadable:
                tally.outcomes["unreadable"] += 1
                return
            assert sent_mime in PHOTO_MIMES and len(sent) <= limit.max_bytes
            tally.outcomes["as sent" if sent is data else "scaled"] += 1

        example()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert peak - peak_before < DECODE_BYTES + 64 * 1024 * 1024, f"peak RSS grew by {(peak - peak_before) >> 20} MB"
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()


# --- PDF bytes -----------------------------------------------------------------------------------------

BASE_PDFS = [
    text_pdf("Revenue grew 42 percent", "Costs fell", "Outlook: steady"),
    build_pdf([stream(b"BT /F1 12 Tf 72 720 Td (Compressed text) Tj ET", deflate=True)], [0, 0]),
    inflating_pdf(2_000_000),
    many_pages_pdf(40, operators=50),
]
NUMBER = re.compile(rb"\d+")
ODD_NUMBERS = st.sampled_from([b"0", b"-1", b"999999999999", b"2147483648", b"1e400", b"3.5", b"00", b"-0"])


@st.composite
def pdf_bytes(draw: st.DrawFn) -> bytes:
    data = draw(st.sampled_from(BASE_PDFS))
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["number", "number", "splice", "truncate", "drop", "flip"]))
        if action == "number":
            numbers = list(NUMBER.finditer(data))
            if numbers:
                found = draw(st.sampled_from(numbers))
                data = data[: found.start()] + draw(ODD_NUMBERS) + data[found.end() :]
        elif action == "splice":
            at = draw(st.integers(0, len(data)))
            token = draw(st.sampled_from([b"<<", b">>", b"[", b"]", b"endobj", b"stream", b"R ", b"(", b"\\"]))
            data = data[:at] + token + data[at:]
        elif action == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        elif action == "drop":
            word = draw(st.sampled_from([b"endobj", b"endstream", b"xref", b"trailer", b"/Root", b"/Pages", b"/Kids"]))
            data = data.replace(word, b"", 1)
        elif data:  # flip a byte, where a truncation left any
            out = bytearray(data)
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
            data = bytes(out)
    return data


PDF_BUDGET = Budget(chars=2000, pages=20, seconds=3.0)


def test_any_pdf_bytes_become_text_or_a_problem_within_the_time_budget() -> None:
    tally = Tally("pdf bytes")
    examples = max(10, settings.default.max_examples // 10)  # each example starts a reader process
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:

        @settings(max_examples=examples)
        @given(data=pdf_bytes())
        def example(data: bytes) -> None:
            tally.tried += 1
            started = time.monotonic()
            extracted = runner.run(extract(data, "application/pdf", PDF_BUDGET))
            assert time.monotonic() - started < PDF_BUDGET.seconds + 2
            assert isinstance(extracted.text, str) and len(extracted.text) <= PDF_BUDGET.chars
            assert extracted.text or extracted.problem
            assert "\x00" not in extracted.text
            extracted.text.encode("utf-8")  # what the model call does with it
            tally.outcomes[extracted.problem or extracted.stopped or "read"] += 1

        example()
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()
