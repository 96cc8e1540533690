"""Console input: lines from stdin as messages from the one local user, in one DM.

Reading happens in a daemon thread, so the event loop never blocks on the terminal and a read
blocked there never keeps the process alive after Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from typing import TextIO

from botweave.adapter import Adapter
from botweave.types import BotChannel, BotMessage, BotUser

CHAT_ID = "console"


class ConsoleInbound:
    def __init__(self, adapter: Adapter, stdin: TextIO, user_name: str) -> None:
        self._adapter = adapter
        self._in = stdin
        self._ids = itertools.count(1)
        self._user = BotUser("local", "local", user_name)
        self._channel = BotChannel(CHAT_ID, "dm", "console")
        self._reader: asyncio.Task[None] | None = None
        self.finished = asyncio.Event()  # set at end of input
        self._last_id = 0

    def has_read(self, message_id: str) -> bool:
        """Whether `message_id` is a line the person typed (ids count up from 1)."""
        return message_id.isdigit() and 1 <= int(message_id) <= self._last_id

    def _next_id(self) -> int:
        self._last_id = next(self._ids)
        return self._last_id

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        threading.Thread(target=self._read_blocking, args=(loop, lines), daemon=True).start()
        self._reader = asyncio.create_task(self._dispatch_lines(lines))

    def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()

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
                    await self._adapter.dispatch(self.message(text))
        finally:
            self.finished.set()

    def message(self, text: str) -> BotMessage:
        return BotMessage(
            message_id=str(self._next_id()),
            content=text,
            sender=self._user,
            channel=self._channel,
            platform=self._adapter.platform,
        )
