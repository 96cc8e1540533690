"""Documents as text, each within a budget: text files decoded only as far as `document_chars`
reaches, PDFs read page by page in a process of their own for at most `document_pages` pages
and `document_seconds` seconds.

A text file is decoded no further than its first `chars` characters can take (four bytes a
character at most), so a 20 MB file costs what its beginning costs.

A PDF is closer to a program than to a text: a content stream a few KB long may inflate to
gigabytes (pypdf stops at its limits by raising its own errors), a few hundred KB may declare
thousands of pages that each take time to read, and pypdf offers no way to stop it midway.
So pypdf runs in a child process (`pdf_worker.py`, a plain script that imports nothing of the
bot) that reports each page's text as soon as it has it. The bot takes pages until it has
`chars` characters or `pages` pages, or until `seconds` have passed since it started the
child; then the child is killed wherever it is, inside one page if that is where the time
goes. What was read by then is the document, and the sender is told what was left out. The
child's address space is capped (`WORKER_MEMORY`), and whatever pypdf raises (its limit
errors, a broken page, running out of that memory) stays in the child as "this page could not
be read"; a PDF costs the bot at most its seconds and the text it keeps.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from botweave.mime import mime_parameter
from botweave.payload import clean_text

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("pdf_worker.py")
#: The PDF reader's address space: pypdf and a page being read, never the bot's memory.
WORKER_MEMORY = 1024 * 1024 * 1024

#: The budget that ended a PDF's reading before its last page (`failed`: the reader died).
Stop = Literal["", "pages", "time", "failed"]
UNREADABLE = "the PDF could not be read"
ENCRYPTED = "the PDF is encrypted"
NO_TEXT = "the PDF has no text layer (a scan?)"


@dataclass(frozen=True, slots=True)
class Budget:
    """What reading one document may take: characters kept, PDF pages read, seconds."""

    chars: int
    pages: int = 100
    seconds: float = 5.0


@dataclass(frozen=True, slots=True)
class Extracted:
    text: str
    cut: bool = False  # longer than `chars`; `text` is its beginning
    problem: str = ""  # why nothing could be read
    pages: int = 0  # a PDF's pages
    pages_read: int = 0  # pages read, failed ones included
    pages_failed: int = 0
    stopped: Stop = ""  # the budget that ended the reading before the document did


async def extract(data: bytes, mime: str, budget: Budget) -> Extracted:
    if mime.split(";", 1)[0] == "application/pdf":
        return await read_pdf(data, budget)
    return read_text(data, mime, budget.chars)


def read_text(data: bytes, mime: str, max_chars: int) -> Extracted:
    """A text file's first `max_chars` characters, in the charset it declares (else UTF-8)."""
    head = data[: 4 * (max_chars + 1) + 4]  # the tail cut mid-character lies past the limit
    charset = mime_parameter(mime, "charset") or "utf-8"
    try:
        text = head.decode(charset, errors="replace")
    except LookupError:  # no such charset, or a codec that is not a text encoding (zlib)
        text = head.decode("utf-8", errors="replace")
    text = clean_text(text.lstrip("\ufeff"))
    return Extracted(text[:max_chars], cut=len(text) > max_chars or len(head) < len(data))


@dataclass
class _Reading:
    """What the PDF reader has reported so far."""

    pages: int | None = None
    texts: list[str] | None = None
    failed: int = 0
    problem: str = ""
    done: bool = False

    def take(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        if "pages" in event and isinstance(event["pages"], int):
            self.pages, self.texts = event["pages"], []
        elif "text" in event and self.texts is not None:
            self.texts.append(clean_text(str(event["text"])))
        elif "failed" in event and self.texts is not None:
            self.texts.append("")
            self.failed += 1
        elif "problem" in event:
            self.problem = ENCRYPTED if event["problem"] == "encrypted" else UNREADABLE
        elif event.get("done") is True:
            self.done = True


async def read_pdf(data: bytes, budget: Budget) -> Extracted:
    """The PDF's text within `budget`, read by `pdf_worker.py` (see the module docstring)."""
    reading = _Reading()
    timed_out = False
    process: asyncio.subprocess.Process | None = None
    try:
        async with asyncio.timeout(budget.seconds):
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-I", str(WORKER), str(budget.chars), str(budget.pages), str(WORKER_MEMORY),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=12 * (budget.chars + 1) + 4096,  # one page's text, JSON-escaped
            )
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(data)
            await process.stdin.drain()
            process.stdin.close()
            async for line in process.stdout:
                reading.take(json.loads(line))
            # It closed its output, so it is ending: let it end rather than kill it, since
            # killing a child that just exited reaps it behind asyncio's back (a warning).
            await process.wait()
    except TimeoutError:
        timed_out = True
    except (OSError, ValueError) as exc:  # could not start, died mid-write, a line it should not send
        log.warning("the PDF reader failed: %s", type(exc).__name__)
        reading.problem = reading.problem or UNREADABLE
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
    return _extracted(reading, budget, timed_out)


def _extracted(reading: _Reading, budget: Budget, timed_out: bool) -> Extracted:
    if reading.problem or reading.texts is None or reading.pages is None:
        if timed_out:
            return Extracted("", problem=f"not read in the {budget.seconds:g} s allowed", stopped="time")
        return Extracted("", problem=reading.problem or UNREADABLE)
    texts, total = reading.texts, reading.pages
    read = len(texts)
    text = "\n\n".join(piece for piece in texts if piece)
    cut = len(text) > budget.chars
    stopped: Stop = ""
    if not cut and read < total:
        stopped = "pages" if reading.done else "time" if timed_out else "failed"
        log.info("a PDF was read in part: %d of %d pages (%s)", read, total, stopped)
    base = Extracted("", pages=total, pages_read=read, pages_failed=reading.failed, stopped=stopped)
    if text:
        return replace(base, text=text[: budget.chars], cut=cut)
    if read and reading.failed == read:
        return replace(base, problem=UNREADABLE)
    if not read and stopped == "time":
        return replace(base, problem=f"not read in the {budget.seconds:g} s allowed")
    return replace(base, problem=f"no text in the first {read} of {total} pages" if stopped else NO_TEXT)
