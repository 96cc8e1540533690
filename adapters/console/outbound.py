"""Console output: replies printed to stdout.

A streamed reply is printed as it grows (an edit that extends the text prints only the new
part), so a terminal shows tokens arriving and a pipe receives clean lines. Without a stream of
its own it writes to whatever `sys.stdout` is at the time: on a terminal the prompt replaces
it with a proxy that prints above the prompt line.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import TextIO

from botweave.adapter import ActionError, Outbound, Outcome


class ConsoleOutbound(Outbound):
    def __init__(self, stdout: TextIO | None = None, *, shown: Callable[[], None] | None = None) -> None:
        self._stdout = stdout
        self._shown = shown  # told whenever something is printed
        self._ids = itertools.count(1)
        #: Message id -> its text as printed so far (what the terminal shows for it).
        self.messages: dict[str, str] = {}
        self._open_line = False  # a streamed message may still grow on the current line

    @property
    def _out(self) -> TextIO:
        return self._stdout if self._stdout is not None else sys.stdout

    def _write(self, text: str) -> None:
        out = self._out
        out.write(text)
        out.flush()
        if self._shown is not None:
            self._shown()

    def end_line(self) -> None:
        if self._open_line:
            self._write("\n")
            self._open_line = False

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str:
        self.end_line()
        message_id = f"out-{next(self._ids)}"
        self._write(text)
        self._open_line = True
        self.messages[message_id] = text
        return message_id

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        shown = self.messages.get(message_id)
        if shown is None:
            raise ActionError("failed", "message to edit not found")
        if text.startswith(shown) and self._open_line:
            self._write(text[len(shown) :])
        else:
            self.end_line()
            self._write(text)
            self._open_line = True
        self.messages[message_id] = text

    async def delete(self, chat_id: str, message_id: str) -> None:
        if self.messages.pop(message_id, None) is None:
            raise ActionError("failed", "message to delete not found")

    async def end_reply(self, chat_id: str, message_ids: list[str]) -> None:
        self.end_line()

    def classify(self, exc: Exception, action: str) -> Outcome:
        return "failed", f"{action}: {type(exc).__name__}: {exc}"  # a closed or broken stdout
