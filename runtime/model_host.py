"""A helper process that makes model calls for the bot that started it (see model_processes).

It reads calls from the socket it was given, answers each on its own task with litellm, and
leaves when the socket closes: the bot stopped or died. Calls still running then are
cancelled, since nobody is left to read their answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from typing import Any

from botweave.model_calls import InProcess, load_litellm
from botweave.runtime import event_loop
from botweave.runtime.event_loop import serving
from botweave.runtime.heap import settle_heap
from botweave.runtime.logs import setup_logging
from botweave.runtime.model_processes import frame, read_frame
from botweave.tasks import TaskOwner

#: Characters of a failure's message sent back (the bot keeps fewer still).
MAX_DETAIL = 2000


class Host:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.calls = InProcess()
        self.running: dict[int, asyncio.Task[None]] = {}
        self.tasks = TaskOwner("model host")

    def take(self, call: int, op: str, payload: Any) -> None:
        if op == "cancel":
            task = self.running.pop(call, None)
            if task is not None:
                task.cancel()
            return
        order, request = payload
        work = self._answer(call, request) if op == "answer" else self._stream(call, request)
        with serving(order) if order is not None else contextlib.nullcontext():
            self.running[call] = self.tasks.spawn(work, name=f"model call {call}")

    async def _answer(self, call: int, request: dict[str, Any]) -> None:
        try:
            output = await self.calls.answer(request)
        except Exception as exc:
            self._failed(call, exc)
        else:
            self.writer.write(frame((call, "output", output)))
        finally:
            self.running.pop(call, None)

    async def _stream(self, call: int, request: dict[str, Any]) -> None:
        try:
            async for piece in self.calls.stream(request):
                self.writer.write(frame((call, "output", piece)))
                await self.writer.drain()
        except Exception as exc:
            self._failed(call, exc)
        else:
            self.writer.write(frame((call, "end", None)))
        finally:
            self.running.pop(call, None)

    def _failed(self, call: int, exc: Exception) -> None:
        self.writer.write(frame((call, "failed", (type(exc).__name__, str(exc)[:MAX_DETAIL]))))


async def serve(fd: int) -> None:
    await load_litellm()
    settle_heap()
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=fd))
    host = Host(writer)
    while (message := await read_frame(reader)) is not None:
        host.take(*message)
    await host.tasks.close()
    writer.close()


def main() -> None:
    # A terminal's Ctrl-C and a service manager's SIGTERM reach the whole process group; the
    # bot decides when its calls end, and closing the socket is how it says so.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    setup_logging(logging.WARNING)
    event_loop.run(serve(int(sys.argv[1])))


if __name__ == "__main__":
    main()
