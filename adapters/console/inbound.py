"""Console input: lines from stdin as messages from the one local user, in one DM; while a
message with buttons is open, typing the number of one of its choices presses that button.

A pipe is read line by line in a daemon thread, so the event loop never blocks on it and a
read blocked there never keeps the process alive after Ctrl-C. A terminal gets a prompt with
line editing and history (prompt_toolkit, on the event loop): replies print above the prompt,
and a "thinking…" cue shows beside it from the moment a line is sent until the first reply
to it appears (the first one may wait seconds for the model library to load).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, TextIO

from botweave.adapter import Adapter
from botweave.payload import clean_text
from botweave.tasks import TaskOwner
from botweave.types import BotChannel, BotMessage, BotUser, PlatformEvent, PressAnswer

from .outbound import ConsoleOutbound

CHAT_ID = "console"
PROMPT = "› "
THINKING = "thinking…"


def is_terminal(stdin: TextIO) -> bool:
    """Whether `stdin` is this process's own terminal (and so is stdout, where replies go)."""
    try:
        return stdin is sys.stdin and stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def history_path() -> Path:
    """Where the prompt keeps its history between sessions (the XDG state directory)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "botweave" / "console_history"


class ConsoleInbound:
    def __init__(self, adapter: Adapter, stdin: TextIO, user_name: str) -> None:
        self._adapter = adapter
        self._in = stdin
        self._ids = itertools.count(1)
        self._user = BotUser("local", "local", user_name)
        self._channel = BotChannel(CHAT_ID, "dm", "console")
        self._tasks = TaskOwner("console")
        self._session: Any = None  # the prompt_toolkit session, on a terminal
        #: True from a line sent at the prompt until the first reply appears.
        self.waiting = False
        self.finished = asyncio.Event()  # set at end of input
        self._last_id = 0
        # The store outlives a run (a SQLite file, Redis), and it keys dedup marks, committed
        # turns and confirmed sends by message id: a line numbered 1 again next run must not
        # be taken for this run's line 1 (dropped as a repeat, or "answered" already).
        self._run = secrets.token_hex(3)

    def id_of(self, line: int) -> str:
        """The message id of the `line`-th line typed in this run."""
        return f"{self._run}-{line}"

    def line_of(self, message_id: str) -> int | None:
        """Which line of this run `message_id` is (counting from 1), or None if it is not one."""
        run, _, line = message_id.rpartition("-")
        if run == self._run and line.isdigit() and 1 <= int(line) <= self._last_id:
            return int(line)
        return None

    def has_read(self, message_id: str) -> bool:
        """Whether `message_id` is a line the person typed."""
        return self.line_of(message_id) is not None

    def _next_id(self) -> str:
        self._last_id = next(self._ids)
        return self.id_of(self._last_id)

    @property
    def interactive(self) -> bool:
        return is_terminal(self._in)

    def start(self) -> None:
        if self.interactive:
            self._tasks.spawn(self._prompt_lines(), name="prompt")
            return
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        threading.Thread(target=self._read_blocking, args=(loop, lines), daemon=True).start()
        self._tasks.spawn(self._dispatch_lines(lines), name="read lines")

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    def replied(self) -> None:
        """Something was printed for the person: the cue goes."""
        if self.waiting:
            self.waiting = False
            if self._session is not None:
                self._session.app.invalidate()

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
                    await self.typed(text)
        finally:
            self.finished.set()

    async def _prompt_lines(self) -> None:
        """The terminal's prompt. Ctrl-D or Ctrl-C at the prompt ends the chat the way end of
        input ends a pipe: what was asked is answered, then the bot stops (whatever other
        platforms run beside it: the person at the terminal started it)."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, History, InMemoryHistory
        from prompt_toolkit.patch_stdout import patch_stdout

        history: History
        try:
            path = history_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            history = FileHistory(str(path))
        except OSError:
            history = InMemoryHistory()
        session: PromptSession[str] = PromptSession(history=history)
        self._session = session
        try:
            with patch_stdout(raw=True):
                while True:
                    try:
                        # The bot's own SIGINT handler stays in place (prompt_toolkit would
                        # take it over and, leaving, take it away for good); Ctrl-C typed here
                        # is a key, which ends the prompt below. Failures elsewhere are the
                        # bot's to log, not a reason to hold the terminal until Enter.
                        line = await session.prompt_async(
                            PROMPT,
                            rprompt=lambda: THINKING if self.waiting else "",
                            handle_sigint=False,
                            set_exception_handler=False,
                        )
                    except (EOFError, KeyboardInterrupt):
                        break
                    if line.strip():
                        self.waiting = True
                        await self.typed(line)
        finally:
            self._session = None
            self.finished.set()

    async def typed(self, text: str) -> None:
        """A line: the number of an open choice presses that button; anything else is a message."""
        out = self._adapter.outbound
        choice = out.choices.get(text.strip()) if isinstance(out, ConsoleOutbound) else None
        if choice is None or not isinstance(out, ConsoleOutbound):
            await self._adapter.dispatch(self.message(text))
            return
        message_id, action_id = choice
        console = out
        event = PlatformEvent(
            kind="button_pressed",
            platform=self._adapter.platform,
            chat_id=CHAT_ID,
            user_id=self._user.user_id,
            message_id=message_id,
            event_id=f"press-{uuid.uuid4().hex}",  # unique across runs: dedup keys outlive a restart
            action_id=action_id,
        )

        async def acknowledge(answer: PressAnswer) -> None:
            self.waiting = False
            if answer.text:
                console.note(answer.text)

        await self._adapter.pressed(event, acknowledge)

    def message(self, text: str) -> BotMessage:
        return BotMessage(
            message_id=self._next_id(),
            content=clean_text(text),  # bytes a terminal could not decode arrive as lone surrogates
            sender=self._user,
            channel=self._channel,
            platform=self._adapter.platform,
        )
