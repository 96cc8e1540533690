"""Reply shaping as pure functions: silence, footer, chunking.

Chunking counts in the platform's own unit (Telegram limits are UTF-16 code units, so an
emoji counts twice) and keeps Markdown code fences valid in every chunk, because a fence left
open turns the rest of a chat's rendering into code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from botweave.types import LengthUnit

DEFAULT_SILENCE_TOKEN = "NO_REPLY"
_FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")
_SENTENCE_END = re.compile(r"[.!?…](?=\s)")


def is_silent(text: str, allow_silence: bool, token: str | None = None) -> bool:
    """The agent declined to answer: the whole reply is the token (surrounding blanks aside)."""
    return allow_silence and text.strip() == (token or DEFAULT_SILENCE_TOKEN)


def format_footer(model: str | None, seconds: float | None, tools: Sequence[str] = ()) -> str:
    """`— gpt-4o · 4.2s · tools: fetch_url`; unknown parts are left out, and with nothing
    known there is none. Tools are named, never their arguments (those may be private)."""
    parts = []
    if model:
        parts.append(model)
    if seconds is not None and seconds >= 0:
        parts.append(f"{seconds:.1f}s")
    if tools:
        parts.append("tools: " + ", ".join(dict.fromkeys(tools)))
    return f"— {' · '.join(parts)}" if parts else ""


def with_footer(text: str, footer: str) -> str:
    return f"{text}\n\n{footer}" if footer else text


def measure(text: str, unit: LengthUnit = "chars") -> int:
    if unit == "utf16":
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def _prefix_fitting(text: str, budget: int, unit: LengthUnit) -> int:
    """How many characters of `text` fit in `budget` units (never splitting a surrogate pair)."""
    if unit == "chars":
        return min(len(text), budget)
    used = 0
    for i, ch in enumerate(text):
        used += 2 if ord(ch) > 0xFFFF else 1
        if used > budget:
            return i
    return len(text)


def _split_point(text: str, max_chars: int) -> int:
    """The best place to cut within `max_chars`: paragraph, line, sentence, word, then hard."""
    window = text[:max_chars]
    minimum = max_chars // 4  # a cut too early wastes a message; prefer a coarser break
    for separator in ("\n\n", "\n"):
        at = window.rfind(separator)
        if at >= minimum:
            return at + len(separator)
    ends = [m.end() for m in _SENTENCE_END.finditer(window)]
    if ends and ends[-1] >= minimum:
        return ends[-1] + 1 if ends[-1] < len(window) and window[ends[-1]] == " " else ends[-1]
    at = window.rfind(" ")
    if at >= minimum:
        return at + 1
    return max_chars


def _open_fence(text: str, fence: str | None) -> str | None:
    """The fence line still open at the end of `text`, given the one open at its start."""
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if not match:
            continue
        if fence is None:
            fence = line.strip()
        elif match.group(1).startswith(_fence_marker(fence)) and not match.group(2).strip():
            fence = None
    return fence


def _fence_marker(fence_line: str) -> str:
    match = _FENCE.match(fence_line)
    return match.group(1) if match else "```"


def _take(text: str, budget: int, fence: str | None, unit: LengthUnit) -> tuple[str, str | None]:
    piece = text[: max(1, _split_point(text, _prefix_fitting(text, budget, unit)))]
    return piece, _open_fence(piece, fence)


def chunk_text(text: str, limit: int | None, unit: LengthUnit = "chars") -> list[str]:
    """Split `text` into pieces of at most `limit` units; an open code fence is closed at the
    end of a piece and reopened (with its language) at the start of the next."""
    if limit is None or measure(text, unit) <= limit:
        return [text]
    chunks: list[str] = []
    fence: str | None = None
    rest = text
    while rest:
        reopen = f"{fence}\n" if fence else ""
        if measure(reopen + rest, unit) <= limit:
            chunks.append(reopen + rest)
            break
        budget = limit - measure(reopen, unit)
        piece, still_open = _take(rest, budget, fence, unit)
        if still_open:  # leave room to close the fence inside this chunk
            closing = len(_fence_marker(still_open)) + 1
            if budget - closing < 1:
                raise ValueError(f"limit {limit} is too small to carry a code fence")
            piece, still_open = _take(rest, budget - closing, fence, unit)
        rest = rest[len(piece) :]
        body = reopen + piece
        if still_open:
            body = body.rstrip("\n") + "\n" + _fence_marker(still_open)
        chunks.append(body)
        fence = still_open
        if fence and rest.startswith("\n"):
            rest = rest[1:]
    return [c for c in chunks if c.strip()] or [text[:limit]]
