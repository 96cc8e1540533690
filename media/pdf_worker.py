"""A PDF's pages as text, read in a process of its own for `documents.read_pdf`.

Run as a plain script (`python -I pdf_worker.py CHARS PAGES MEMORY`), so it imports pypdf and
nothing of the bot. The PDF arrives on stdin; each finding leaves on stdout as one JSON line,
as soon as it is known, so whoever stops this process keeps what was already read:

    {"pages": 3000}                       how many pages the document has
    {"text": "..."}  or  {"failed": "LimitReachedError"}   one line per page, in order
    {"problem": "encrypted" | "unreadable"}   instead of all of that
    {"done": true}                        it read what it was asked for

Reading stops after PAGES pages or once CHARS characters were read. MEMORY caps the process's
address space, so a page that inflates past it fails (MemoryError) like any other.
"""

from __future__ import annotations

import io
import json
import resource
import sys
from typing import Any


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")  # ASCII only: a lone surrogate survives the pipe
    sys.stdout.flush()


def main(arguments: list[str]) -> int:
    max_chars, max_pages, memory = (int(value) for value in arguments)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    except (ValueError, OSError):  # a system that does not let a process cap its own address space
        pass
    data = sys.stdin.buffer.read()
    try:
        from pypdf import PdfReader

        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            emit({"problem": "encrypted"})
            return 0
        total = len(reader.pages)
    except Exception:  # boundary: the PDF worker process; pypdf on a hostile document, whatever it raises: unreadable
        emit({"problem": "unreadable"})
        return 0
    emit({"pages": total})
    length = 0
    for index in range(min(total, max_pages)):
        try:
            text = (reader.pages[index].extract_text() or "").strip()
        except Exception as exc:  # boundary: the PDF worker process, per page: pypdf's limits, a broken page, MemoryError past MEMORY
            emit({"failed": type(exc).__name__})
            continue
        text = text[: max_chars - length + 1]  # one more than fits says the text was cut
        emit({"text": text})
        length += len(text) + 2 if text else 0
        if length > max_chars:
            break
    emit({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
