"""Agents' model calls made in helper processes (`models.processes` in bot.yaml).

Preparing a model request and reading its answer is a large part of a turn's CPU (through
litellm, 1.5-2 ms a call), and one Python process runs one thing at a time, so with a few
hundred conversations answering at once the bot's event loop, not the model, can set the
pace. Here each call is handed to one of N child processes (`model_host`) that make it on
their own loop, on another core, with the same clients the bot would use
(`model_clients`, `models.client` passed on); the bot's loop only pickles the request and
reads back the `ModelOutput` (about 50 µs).

The wire is a socket pair private to parent and child: frames of a 4-byte length and a
pickle. To a child: `(id, "answer" | "stream", request, trace)` and `(id, "cancel", None)`,
where `trace` is the turn's trace context (W3C headers) or None; when tracing is configured,
the first frame is `(0, "tracing", settings)`, so the child's model-call spans are exported
by the child and join the turn's trace. Back:
`(id, "output", ModelOutput)` (the answer, or one streamed piece), `(id, "end", None)` after
a stream's last piece, `(id, "failed", (type name, message))`.

A child that exits fails the calls it held (the turn apologises, as for any model error) and
the next call starts a new one. A child leaves when its socket closes, so it never outlives
the bot; it ignores SIGINT and SIGTERM, which a terminal or a service manager sends to the
whole process group, so that the bot's own shutdown decides when its calls end.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import struct
import sys
from collections.abc import AsyncIterator
from typing import Any

from botweave import tracing
from botweave.model_calls import ModelCallFailed, ModelOutput
from botweave.model_clients import ClientChoice
from botweave.tasks import TaskOwner

log = logging.getLogger(__name__)

FRAME = struct.Struct("!I")
#: How long a closing child may take to finish before it is killed.
CLOSE_SECONDS = 5.0


def frame(message: tuple[Any, ...]) -> bytes:
    body = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    return FRAME.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    """The next message, or None when the other side closed the socket."""
    try:
        (size,) = FRAME.unpack(await reader.readexactly(FRAME.size))
        message: tuple[Any, ...] = pickle.loads(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    return message


class ModelProcessGone(ModelCallFailed):
    """The helper process making the call exited before it answered."""

    def __init__(self, detail: str) -> None:
        super().__init__("ModelProcessExited", detail)


class _Child:
    """One helper process and the calls waiting on it: an answer waits on a future, a stream
    on a queue of (kind, payload)."""

    def __init__(self, number: int, process: asyncio.subprocess.Process, writer: asyncio.StreamWriter) -> None:
        self.number = number
        self.process = process
        self.writer = writer
        self.waiting: dict[int, asyncio.Future[ModelOutput] | asyncio.Queue[tuple[str, Any]]] = {}
        self.alive = True

    def send(self, message: tuple[Any, ...]) -> None:
        self.writer.write(frame(message))

    def forget(self, call: int) -> None:
        """The caller stopped waiting: the child stops working on it too."""
        if self.waiting.pop(call, None) is not None and self.alive:
            self.send((call, "cancel", None))

    def deliver(self, call: int, kind: str, payload: Any) -> None:
        waiter = self.waiting.get(call)
        if isinstance(waiter, asyncio.Queue):
            waiter.put_nowait((kind, payload))
            if kind != "output":
                del self.waiting[call]
            return
        if waiter is None:
            return  # cancelled meanwhile
        del self.waiting[call]
        if waiter.done():
            return
        if kind == "output":
            waiter.set_result(payload)
        else:
            waiter.set_exception(ModelCallFailed(*payload))

    def gone(self, detail: str) -> None:
        """Fail everything this child held."""
        self.alive = False
        for waiter in self.waiting.values():
            if isinstance(waiter, asyncio.Queue):
                waiter.put_nowait(("gone", detail))
            elif not waiter.done():
                waiter.set_exception(ModelProcessGone(detail))
        self.waiting.clear()


class ModelProcesses:
    """`ModelCalls` answered by `count` helper processes, each call by the one with the fewest
    calls in flight. With `tracing` (the `ops.tracing` settings, secrets revealed: they go
    over the private socket, never a command line), each child exports its calls' spans."""

    def __init__(self, count: int, client: ClientChoice = "auto", tracing: dict[str, Any] | None = None) -> None:
        if count < 1:
            raise ValueError("model processes need a count of at least 1")
        self.count = count
        self.client = client
        self.tracing = tracing
        self._children: list[_Child | None] = [None] * count
        self._spawning = asyncio.Lock()
        self._readers = TaskOwner("model processes")
        self._next_call = 0

    async def start(self) -> None:
        """Start every child now (each takes a second or more to start), rather than at the
        first turn."""
        await asyncio.gather(*(self._child_at(i) for i in range(self.count)))

    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        child = await self._least_busy()
        call = self._call_id()
        answered: asyncio.Future[ModelOutput] = asyncio.get_running_loop().create_future()
        child.waiting[call] = answered
        child.send((call, "answer", request, tracing.carrier()))
        try:
            return await answered
        finally:
            child.forget(call)

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        child = await self._least_busy()
        call = self._call_id()
        pieces: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        child.waiting[call] = pieces
        child.send((call, "stream", request, tracing.carrier()))
        try:
            while True:
                kind, payload = await pieces.get()
                if kind == "output":
                    yield payload
                elif kind == "end":
                    return
                elif kind == "gone":
                    raise ModelProcessGone(payload)
                else:
                    raise ModelCallFailed(*payload)
        finally:
            child.forget(call)

    async def close(self) -> None:
        """Close every child's socket (it finishes and leaves), then wait for them; one that
        does not leave in time is killed."""
        children = [child for child in self._children if child is not None and child.alive]
        for child in children:
            child.writer.close()
        for child in children:
            try:
                await asyncio.wait_for(child.process.wait(), CLOSE_SECONDS)
            except asyncio.TimeoutError:
                log.warning("model process %d did not stop in %.0fs; killed", child.number, CLOSE_SECONDS)
                child.process.kill()
                await child.process.wait()
        await self._readers.close(1.0)

    def _call_id(self) -> int:
        self._next_call += 1
        return self._next_call

    async def _least_busy(self) -> _Child:
        live = [child for child in self._children if child is not None and child.alive]
        if len(live) == self.count:
            return min(live, key=lambda child: len(child.waiting))
        index = next(i for i, child in enumerate(self._children) if child is None or not child.alive)
        return await self._child_at(index)

    async def _child_at(self, index: int) -> _Child:
        async with self._spawning:
            child = self._children[index]
            if child is None or not child.alive:
                child = await self._spawn(index)
            return child

    async def _spawn(self, index: int) -> _Child:
        ours, theirs = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "botweave.runtime.model_host", str(theirs.fileno()), self.client,
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        child = _Child(index + 1, process, writer)
        if self.tracing is not None:
            child.send((0, "tracing", self.tracing))
        self._children[index] = child
        self._readers.spawn(self._read(child, reader), name=f"model process {child.number}")
        log.info("model process %d started (pid %d)", child.number, process.pid)
        return child

    async def _read(self, child: _Child, reader: asyncio.StreamReader) -> None:
        while (message := await read_frame(reader)) is not None:
            child.deliver(*message)
        held = len(child.waiting)
        child.gone("the model process exited before answering")
        try:
            code = await asyncio.wait_for(child.process.wait(), CLOSE_SECONDS)
        except asyncio.TimeoutError:  # its socket is closed, so it can do nothing more
            child.process.kill()
            code = await child.process.wait()
        if held or code != 0:
            log.warning(
                "model process %d exited with code %s; %d call(s) it held failed; the next call starts a new one",
                child.number, code, held,
            )
