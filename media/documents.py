"""Documents as text: text files decoded, PDFs through pypdf, each cut at `document_chars`.

Extraction is CPU work (a long PDF takes a while), so callers run it off the event loop.
A PDF without a text layer (a scan) yields nothing, which the agent is told rather than
given an empty document.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

from pypdf import PdfReader
from pypdf.errors import PdfReadError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Extracted:
    text: str
    cut: bool = False  # longer than the limit; `text` is its beginning
    problem: str = ""  # why nothing could be read


def extract(data: bytes, mime: str, max_chars: int) -> Extracted:
    if mime == "application/pdf":
        return _pdf(data, max_chars)
    return _text(data, mime, max_chars)


def _charset(mime: str) -> str:
    for parameter in mime.split(";")[1:]:
        key, _, value = parameter.strip().partition("=")
        if key.lower() == "charset" and value:
            return value.strip('"')
    return "utf-8"


def _text(data: bytes, mime: str, max_chars: int) -> Extracted:
    charset = _charset(mime)
    try:
        text = data.decode(charset)
    except (LookupError, UnicodeDecodeError):
        text = data.decode("utf-8", errors="replace")
    text = text.lstrip("\ufeff")
    return Extracted(text[:max_chars], cut=len(text) > max_chars)


def _pdf(data: bytes, max_chars: int) -> Extracted:
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            return Extracted("", problem="the PDF is encrypted")
        pieces: list[str] = []
        length = 0
        for page in reader.pages:
            text = (page.extract_text() or "").strip()
            if text:
                pieces.append(text)
                length += len(text) + 2
            if length > max_chars:
                break
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        log.info("a PDF could not be read: %s", type(exc).__name__)
        return Extracted("", problem="the PDF could not be read")
    text = "\n\n".join(pieces)
    if not text:
        return Extracted("", problem="the PDF has no text layer (a scan?)")
    return Extracted(text[:max_chars], cut=len(text) > max_chars)
