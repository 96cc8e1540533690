"""What every fuzz test shares: the checks on what a normaliser hands on, the tally of what was
tried and answered, and a count of the tracebacks that reached the logs.

Each fuzz test runs its platform's emulator and adapter on one event loop (`asyncio.Runner`)
and drives Hypothesis synchronously, one `runner.run(...)` per example, so the adapter, its
SDK client and the emulator live across all examples exactly as they do in production.

With `BOTWEAVE_FUZZ_REPORT=<file>` set, each test appends its tally to that file as a JSON line
(payloads tried per surface, status codes, outcomes, tracebacks logged).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
from botweave.types import BotChannel, BotMessage, BotUser, PlatformEvent, QuotedRef

#: Everything a normaliser hands on must survive the trip to the model: JSON with every
#: string encodable as UTF-8 (no lone surrogates), no NUL.
_FORBIDDEN = {chr(c) for c in range(0xD800, 0xE000)} | {"\x00"}


def _clean(text: str, where: str) -> None:
    assert isinstance(text, str), f"{where} is {type(text).__name__}, not str"
    assert not (set(text) & _FORBIDDEN), f"{where} carries a lone surrogate or NUL: {text!r}"


def assert_well_formed(item: Any) -> None:
    """A BotMessage or PlatformEvent whose every field has its declared type and whose text
    would survive the model call."""
    if isinstance(item, BotMessage):
        _clean(item.message_id, "message_id")
        _clean(item.text, "text")
        _clean(item.prompt_text, "prompt_text")
        assert isinstance(item.sender, BotUser) and isinstance(item.channel, BotChannel)
        for name in ("user_id", "username", "display_name"):
            _clean(getattr(item.sender, name), f"sender.{name}")
        assert isinstance(item.sender.is_bot, bool)
        _clean(item.channel.channel_id, "channel_id")
        _clean(item.channel.title, "channel.title")
        assert isinstance(item.timestamp, datetime)
        for name in ("reply_to", "thread_id"):
            value = getattr(item, name)
            assert value is None or isinstance(value, str), f"{name} is {value!r}"
        assert isinstance(item.attachments, list) and all(isinstance(a, dict) for a in item.attachments)
        if item.quoted is not None:
            assert isinstance(item.quoted, QuotedRef)
            _clean(item.quoted.text, "quoted.text")
        assert isinstance(item.metadata, dict)
        _ = item.is_command, item.command, item.command_args
        encoded = json.dumps(item.to_dict(), ensure_ascii=False, default=str)
    else:
        assert isinstance(item, PlatformEvent), type(item)
        _clean(item.chat_id, "chat_id")
        _clean(item.user_id, "user_id")
        for name in ("message_id", "emoji", "new_text", "thread_id"):
            value = getattr(item, name)
            if value is not None:
                _clean(value, name)
        encoded = json.dumps(item.to_dict(), ensure_ascii=False, default=str)
    encoded.encode("utf-8")  # what an HTTP client does with the model request


@dataclass
class Tally:
    """What one fuzz test tried and got, for the report."""

    surface: str
    tried: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    tracebacks: int = 0

    def handed_on(self, items: Iterable[Any], *, none: str | None = None) -> None:
        """Check and count what a normaliser handed on; `none` names the outcome of handing on
        nothing."""
        counted = 0
        for item in items:
            assert_well_formed(item)
            self.outcomes["message" if isinstance(item, BotMessage) else "event"] += 1
            counted += 1
        if not counted and none is not None:
            self.outcomes[none] += 1

    def report(self) -> None:
        path = os.environ.get("BOTWEAVE_FUZZ_REPORT")
        if not path:
            return
        line = {
            "surface": self.surface,
            "tried": self.tried,
            "statuses": dict(sorted(self.statuses.items())),
            "outcomes": dict(sorted(self.outcomes.items())),
            "tracebacks": self.tracebacks,
        }
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")


class _TracebackCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback (most recent call last)" in record.getMessage():
            self.records.append(record)


@contextmanager
def counting_tracebacks(tally: Tally) -> Iterator[_TracebackCounter]:
    """Count every log record that carries a traceback while the block runs (none may)."""
    counter = _TracebackCounter()
    root = logging.getLogger()
    root.addHandler(counter)
    try:
        yield counter
    finally:
        root.removeHandler(counter)
        tally.tracebacks += len(counter.records)


def describe(records: list[logging.LogRecord]) -> str:
    return "\n".join(f"{r.name}: {r.getMessage()}" for r in records[:5])


async def new_session() -> aiohttp.ClientSession:
    """A client session made inside the runner's loop (aiohttp binds it to the running loop)."""
    return aiohttp.ClientSession()


async def post(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST `body` to an endpoint under test; its status."""
    async with session.post(url, data=body, headers=headers) as response:
        await response.read()
        return response.status

