"""The console platform: talk to an agent in a terminal or through a pipe.

Lines from stdin are messages from one local user in a DM; replies go to stdout. Reading
happens in a thread so the event loop never blocks on the terminal. A streamed reply is
printed as it grows (an edit that extends the text prints only the new part), so a terminal
shows tokens arriving and a pipe receives clean lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys
import threading
from typing import ClassVar, TextIO

from botweave.adapter import Adapter
from botweave.adapters.console.config import ConsoleConfig
from botweave.types import AgentIdentity, BotChannel, BotMessage, BotUser, MessageActionResult, PlatformCapabilities

CHAT_ID = "console"


class ConsoleAdapter(Adapter):
    platform = "console"
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        max_message_length=None, can_react=True, threads=True, markdown="none"
    )

    def __init__(
        self, config: ConsoleConfig | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None
    ) -> None:
        super().__init__(config or ConsoleConfig())
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._ids = itertools.count(1)
        self._shown: dict[str, str] = {}  # message id -> text printed so far
        self._open_line = False  # a streamed message may still grow on the current line
        self._reader: asyncio.Task[None] | None = None
        self.finished = asyncio.Event()  # set at end of input
        self._user = BotUser("local", "local", self.config.user_name)
        self._channel = BotChannel(CHAT_ID, "dm", "console")

    async def start(self, *, inbound: bool = True) -> None:
        self.self_user = BotUser("botweave", "botweave", "botweave", is_bot=True)
        if not inbound:
            return
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        # A daemon thread, not asyncio.to_thread: a read blocked on the terminal must not keep
        # the process alive after Ctrl-C.
        threading.Thread(target=self._read_blocking, args=(loop, lines), daemon=True).start()
        self._reader = asyncio.create_task(self._dispatch_lines(lines))

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        self._end_line()
        self._out.flush()

    def _read_blocking(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]) -> None:
        try:
            for line in iter(self._in.readline, ""):
                loop.call_soon_threadsafe(lines.put_nowait, line)
        finally:
            with contextlib.suppress(RuntimeError):  # the loop may already be closed
                loop.call_soon_threadsafe(lines.put_nowait, None)

    async def _dispatch_lines(self, lines: asyncio.Queue[str | None]) -> None:
        try:
            while (line := await lines.get()) is not None:
                text = line.rstrip("\r\n")
                if text.strip():
                    await self.dispatch(self._message(text))
        finally:
            self.finished.set()

    def _message(self, text: str) -> BotMessage:
        return BotMessage(
            message_id=str(next(self._ids)),
            content=text,
            sender=self._user,
            channel=self._channel,
            platform=self.platform,
        )

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def _end_line(self) -> None:
        if self._open_line:
            self._write("\n")
            self._open_line = False

    async def send(
        self, chat_id: str, text: str, *, thread_id: str | None = None, reply_to: str | None = None
    ) -> MessageActionResult:
        self._end_line()
        message_id = f"out-{next(self._ids)}"
        if thread_id:
            text = f"[{thread_id}] {text}"
        self._write(text)
        self._open_line = True
        self._shown[message_id] = text
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def edit(
        self, chat_id: str, message_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        shown = self._shown.get(message_id)
        if shown is None:
            return MessageActionResult("failed", chat_id, "message to edit not found")
        if text.startswith(shown) and self._open_line:
            self._write(text[len(shown) :])
        else:
            self._end_line()
            self._write(text)
            self._open_line = True
        self._shown[message_id] = text
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def send_as(
        self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        return await self.send(chat_id, f"[{identity.name}] {text}", thread_id=thread_id)

    async def end_reply(self, chat_id: str, message_ids: list[str]) -> None:
        self._end_line()

    async def delete(self, chat_id: str, message_id: str) -> MessageActionResult:
        if self._shown.pop(message_id, None) is None:
            return MessageActionResult("failed", chat_id, "message to delete not found")
        self._end_line()
        self._write(f"(deleted {message_id})\n")
        return MessageActionResult("ok", chat_id)

    async def react(self, chat_id: str, message_id: str, emoji: str) -> MessageActionResult:
        """A terminal cannot decorate an earlier line, so a reaction is a line of its own."""
        self._end_line()
        self._write(f"(reacted {emoji} to {message_id})\n")
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None = None) -> MessageActionResult:
        """A labelled line; later posts into the thread carry its id in front."""
        thread_id = f"thread-{next(self._ids)}"
        self._end_line()
        self._write(f"── {thread_id}: {name} ──\n")
        return MessageActionResult("ok", chat_id, "thread created", thread_id=thread_id)
