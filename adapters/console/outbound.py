"""Console output: replies printed to stdout.

A streamed reply is printed as it grows (an edit that extends the text prints only the new
part), so a pipe receives tokens as they arrive, in clean lines. Beside the prompt of a terminal
only whole lines are written: the prompt redraws the line it stands on, so a part of a line
printed there would be wiped by the next redraw (or log line). Markdown code fences, which a
terminal does not draw, become an indented block. A terminal cannot
show a file, so a file the bot sends is saved and its path printed, with its caption. Without a
stream of its own it writes to whatever `sys.stdout` is at the time: on a terminal the prompt
replaces it with a proxy that prints above the prompt line.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from botweave.adapter import ActionError, Outbound, Outcome
from botweave.types import Button, OutboundFile

FENCE = re.compile(r"^\s*```[\w+-]*\s*$")
CODE_INDENT = "    "


def plain(text: str) -> str:
    """`text` as a terminal shows it: the lines between Markdown code fences indented, the
    fence lines themselves left out."""
    if "```" not in text:
        return text
    lines, code = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            code = not code
            continue
        lines.append(CODE_INDENT + line if code else line)
    return "\n".join(lines)


class ConsoleOutbound(Outbound):
    def __init__(
        self,
        stdout: TextIO | None = None,
        *,
        typed: Callable[[str], int | None] = lambda message_id: None,
        save_dir: str | None = None,
        shown: Callable[[], None] | None = None,
        whole_lines: bool = False,
    ) -> None:
        self._stdout = stdout
        self._whole_lines = whole_lines
        self._partial = ""  # with whole_lines: the end of a line not written yet
        self._typed = typed  # which line the person typed an id is, if any (reactions may go there)
        self._save_dir = save_dir
        self._shown = shown  # told whenever something is printed
        self._ids = itertools.count(1)
        #: Message id -> its text as printed so far (what the terminal shows for it).
        self.messages: dict[str, str] = {}
        self._open_line = False  # a streamed message may still grow on the current line
        #: The buttons a terminal can press: the latest message's, by the number shown.
        self.choices: dict[str, tuple[str, str]] = {}  # number -> (message id, action id)
        self._choices_of: str | None = None

    @property
    def _out(self) -> TextIO:
        return self._stdout if self._stdout is not None else sys.stdout

    def _write(self, text: str) -> None:
        if self._whole_lines:
            lines, newline, self._partial = (self._partial + text).rpartition("\n")
            if not newline:
                return
            text = lines + newline
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
        text = plain(text)
        if thread_id:
            text = f"[{thread_id}] {text}"
        self._write(text)
        self._open_line = True
        self.messages[message_id] = text
        return message_id

    async def send_buttons(
        self, chat_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None, reply_to: str | None
    ) -> str:
        """The text, then its buttons as numbered choices; typing a number presses one. Only
        the latest message's choices are open (a terminal has no older message to click)."""
        message_id = await self.send(chat_id, text, thread_id=thread_id, reply_to=reply_to)
        self._offer(message_id, buttons)
        return message_id

    async def edit_buttons(
        self, chat_id: str, message_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None
    ) -> None:
        await self.edit(chat_id, message_id, text, thread_id=thread_id)
        if buttons:
            self._offer(message_id, buttons)
        elif self._choices_of == message_id:
            self.end_line()
            self.choices, self._choices_of = {}, None

    def _offer(self, message_id: str, buttons: Sequence[Button]) -> None:
        self.end_line()
        self.choices = {str(n): (message_id, b.action_id) for n, b in enumerate(buttons, start=1)}
        self._choices_of = message_id
        shown = "  ".join(f"[{n}] {b.label}" for n, b in enumerate(buttons, start=1))
        self._write(f"{shown}  (type a number)\n")

    def note(self, text: str) -> None:
        """A line for the person alone (the answer to a press)."""
        self.end_line()
        self._write(f"({text})\n")

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str:
        path = self._save(file)
        line = f"[file saved: {path}]" + (f" {caption}" if caption.strip() else "")
        return await self.send(chat_id, line, thread_id=thread_id, reply_to=reply_to)

    def _save(self, file: OutboundFile) -> Path:
        """Under a fresh name, so nothing saved earlier is overwritten."""
        if self._save_dir is None:
            self._save_dir = tempfile.mkdtemp(prefix="botweave-files-")
        folder = Path(self._save_dir).expanduser()
        folder.mkdir(parents=True, exist_ok=True)
        name = Path(file.filename).name or "file"
        stem, suffix = os.path.splitext(name)
        path = folder / name
        for number in itertools.count(2):
            try:
                with path.open("xb") as handle:
                    handle.write(file.data)
                return path.resolve()
            except FileExistsError:
                path = folder / f"{stem}-{number}{suffix}"
        raise AssertionError("unreachable")

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        shown = self.messages.get(message_id)
        if shown is None:
            raise ActionError("failed", "message to edit not found")
        text = plain(text)
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
        self.end_line()
        self._write(f"(deleted {message_id})\n")

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        """A terminal cannot decorate an earlier line, so a reaction is a line of its own."""
        line = self._typed(message_id)
        if message_id not in self.messages and line is None:
            raise ActionError("failed", "message to react to not found")
        self.end_line()
        self._write(f"(reacted {emoji} to {message_id if line is None else line})\n")

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None) -> str:
        """A labelled line; later posts into the thread carry its id in front."""
        thread_id = f"thread-{next(self._ids)}"
        self.end_line()
        self._write(f"── {thread_id}: {name} ──\n")
        return thread_id

    async def end_reply(self, chat_id: str, message_ids: list[str]) -> None:
        self.end_line()

    def classify(self, exc: Exception, action: str) -> Outcome:
        return "failed", f"{action}: {type(exc).__name__}: {exc}"  # a closed or broken stdout
