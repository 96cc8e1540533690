"""Files built to hurt whoever reads them, and ordinary ones of the same kinds to compare with.

Each is made here from first principles (PNG chunks, PDF objects), so the tests, the fuzz
suite and bench/hostile.py send real bytes that Pillow and pypdf parse as they would parse a
stranger's upload:

- `declared_png`: a PNG whose header claims a size its few bytes of pixel data never fill;
- `one_bit_png`: a real, complete 1-bit PNG, tiny on the wire, one byte a pixel once decoded;
- `inflating_pdf`: one page whose FlateDecode content stream inflates past pypdf's limit;
- `many_pages_pdf`: thousands of pages sharing one content stream that is slow to read and
  holds almost no text, so nothing but a page or time budget stops the reading;
- `endless_page_pdf`: one page whose single content stream takes pypdf minutes, with no page
  boundary to stop at;
- `text_pdf`, `photo_jpeg`: ordinary files (a report, a camera picture).
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Sequence

from PIL import Image, ImageDraw

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_header(width: int, height: int, bit_depth: int = 8, colour_type: int = 2) -> bytes:
    return png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0))


def declared_png(width: int = 20000, height: int = 20000) -> bytes:
    """A colour PNG declaring `width`×`height` whose pixel data covers only its first rows."""
    data = zlib.compress((b"\x00" + b"\x7f" * (3 * width)) * 8, 9)
    return PNG_SIGNATURE + png_header(width, height) + png_chunk(b"IDAT", data) + png_chunk(b"IEND", b"")


def one_bit_png(width: int = 9000, height: int = 9000) -> bytes:
    """A complete black-and-white PNG: white, with a black frame and a black band across the
    middle, so a downscaled copy still shows what it is."""
    stride = (width + 7) // 8
    black = b"\x00" + b"\x00" * stride  # the filter byte, then 8 pixels a byte
    framed = bytearray(b"\xff" * stride)
    framed[0] &= 0x7F  # the left edge
    framed[(width - 1) // 8] &= ~(0x80 >> ((width - 1) % 8)) & 0xFF  # the right edge
    edge = b"\x00" + bytes(framed)
    band = range(height * 2 // 5, height * 3 // 5)
    raw = b"".join(black if y in (0, height - 1) or y in band else edge for y in range(height))
    compressor = zlib.compressobj(9)
    data = compressor.compress(raw) + compressor.flush()
    return PNG_SIGNATURE + png_header(width, height, 1, 0) + png_chunk(b"IDAT", data) + png_chunk(b"IEND", b"")


def photo_jpeg(width: int = 1600, height: int = 1200) -> bytes:
    """An ordinary camera-sized picture (noise, so it does not compress to nothing)."""
    buffer = io.BytesIO()
    Image.effect_noise((width, height), 60).convert("RGB").save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


def drawing_png(width: int = 800, height: int = 600) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGB", (width, height), (255, 255, 255))
    ImageDraw.Draw(image).rectangle((50, 50, width - 50, height - 50), outline=(200, 30, 30), width=8)
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def build_pdf(contents: Sequence[bytes], pages: Sequence[int]) -> bytes:
    """A PDF with the content streams `contents` (each a complete stream object body) and one
    page per entry of `pages`, naming the content stream it shows (pages may share one)."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    first_content = len(objects) + 1
    objects.extend(contents)
    kids = []
    for content in pages:
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % (first_content + content)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [" + b" ".join(kids) + b"] /Count %d >>" % len(kids)
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def stream(data: bytes, *, deflate: bool = False) -> bytes:
    if deflate:
        data = zlib.compress(data, 9)
        return b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
    return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def text_stream(text: str) -> bytes:
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return stream(f"BT /F1 12 Tf 72 720 Td ({escaped}) Tj ET".encode("latin-1"))


def text_pdf(*pages: str) -> bytes:
    """An ordinary PDF: one line of text per page."""
    return build_pdf([text_stream(text) for text in pages], range(len(pages)))


def inflating_pdf(inflated_bytes: int = 80_000_000) -> bytes:
    """One page whose content stream is ~78 KB of FlateDecode that inflates to `inflated_bytes`
    of blanks (past pypdf's 75 MB limit by default)."""
    compressor = zlib.compressobj(9)
    block = b" " * 1_000_000
    data = b"".join(compressor.compress(block) for _ in range(inflated_bytes // len(block))) + compressor.flush()
    body = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
    return build_pdf([body], [0])


def many_pages_pdf(pages: int = 3000, *, operators: int = 500) -> bytes:
    """`pages` pages all showing one content stream: the word "Page" and then `operators`
    empty text runs. Too little text to fill `document_chars`, and each page takes pypdf about
    10 ms to read (30 s for 3,000)."""
    content = stream(b"BT /F1 12 Tf 72 720 Td (Page) Tj " + b"() Tj " * operators + b"ET")
    return build_pdf([content], [0] * pages)


def endless_page_pdf(operators: int = 10_000_000) -> bytes:
    """One page, one FlateDecode content stream of `operators` empty text runs (60 MB once
    inflated for the default, under pypdf's limit): minutes of reading inside one page."""
    return build_pdf([stream(b"BT /F1 12 Tf " + b"() Tj " * operators + b"ET", deflate=True)], [0])
