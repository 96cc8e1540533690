"""MCP over stdio with a bound on every message: our own transport for the SDK's session.

The SDK's stdio transport joins each chunk it reads onto the line so far and splits the
whole again, so one huge answer costs time quadratic in its size and memory for all of it,
and a line that is not JSON-RPC is logged and dropped while the request it answered waits
out its timeout. This transport is the same shape (a process, and two memory-object streams
the SDK's `Client` reads and writes `SessionMessage`s on) with its own reader:

- lines are framed as the bytes arrive, each at most `max_line_bytes`; the rest of a longer
  line is counted and dropped up to its newline, so memory stays bounded and the stream stays
  in step with the server, and the request it answered fails at once with an error that names
  the limit;
- a line that is not a JSON-RPC message fails the request it answers at once (found by its
  `id`), or, when no id can be read from it, every request in flight: the protocol allows
  nothing else on the server's stdout, so such a line can be anyone's answer;
- a server that writes more than `FLOOD_LINES` limits' worth without a line break, or closes
  its output, has lost its link: `Link.lost` is set with why, for the owner to restart it;
- the server's stderr goes to the bot's log at DEBUG, a line each under the server's name
  (`-vv`): a tool that crashes writes its whole traceback there, which is for whoever debugs
  the server, not for the chat beside it. Its last line names why a server that exits did.

The transport keeps the requests in flight (it sees them go out), which is what lets it
fail them by id. Everything it writes back to the session is an ordinary JSON-RPC error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import anyio
import mcp_types as types
from anyio.abc import ByteReceiveStream, Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from botweave.tasks import redact
from mcp.client.stdio import get_default_environment
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

#: A line this many times the limit long without a line break is no longer a framing slip.
FLOOD_LINES = 16
READ_CHUNK = 64 * 1024
#: How much of an oversize line is kept to find the id of the request it answers.
HEAD_BYTES = 256
#: Seconds a stopping server gets after its stdin closed, and again after SIGTERM.
EXIT_GRACE_SECONDS = 2.0
#: How much of a line of the server's stderr is kept and logged.
MAX_STDERR_CHARS = 500
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


@dataclass(frozen=True, slots=True)
class Line:
    """One whole line as the server wrote it (without its newline)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Oversize:
    """A line longer than the limit: only its first bytes are kept."""

    head: bytes


class LineFramer:
    """Newline-delimited frames out of chunks as they arrive, each frame at most `limit`
    bytes; linear in what is fed, whatever the chunks' sizes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Bytes dropped so far of the oversize line being skipped (0 when none is).
        self.skipped = 0
        self._line = bytearray()
        self._skipping = False

    def feed(self, chunk: bytes) -> list[Line | Oversize]:
        frames: list[Line | Oversize] = []
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end == -1 else end
            if self._skipping:
                self.skipped += stop - start
            elif stop - start > self.limit - len(self._line):
                head = bytes(self._line[:HEAD_BYTES]) + chunk[start : start + max(0, HEAD_BYTES - len(self._line))]
                self.skipped = len(self._line) + stop - start
                self._line.clear()
                self._skipping = True
                frames.append(Oversize(head))
            else:
                self._line += chunk[start:stop]
            if end == -1:
                break
            if self._skipping:
                self._skipping, self.skipped = False, 0
            else:
                frames.append(Line(bytes(self._line)))
                self._line.clear()
            start = end + 1
        return frames


def request_id_in(data: bytes) -> types.RequestId | None:
    """The `id` a frame names, read from whole JSON if it is that, else from its text."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        found = value.get("id")
        return found if isinstance(found, (int, str)) and not isinstance(found, bool) else None
    match = _ID.search(data)
    if match is None:
        return None
    try:
        found = json.loads(match.group(1))
    except ValueError:
        return None
    return found if isinstance(found, (int, str)) else None


class Link:
    """One connection's state: the requests in flight, and whether (and why) it was lost."""

    def __init__(self, server: str, max_line_bytes: int, *, on_lost: Callable[[], None] | None = None) -> None:
        self.server = server
        self.max_line_bytes = max_line_bytes
        self.pending: dict[types.RequestId, types.RequestId] = {}
        self.lost = asyncio.Event()
        self.why: str | None = None
        self.malformed = 0
        #: The last line the server wrote to its stderr (what a crash usually ends with).
        self.last_words: str | None = None
        self._on_lost = on_lost

    def said(self, raw: bytes) -> None:
        """One line of the server's stderr."""
        text = raw.decode("utf-8", "replace").strip()[:MAX_STDERR_CHARS]
        if text:
            self.last_words = text
            log.debug("MCP server %s: %s", self.server, redact(text))

    def lose(self, why: str) -> None:
        """The connection is no good any more, for `why` (the first reason given is kept)."""
        if self.why is None:
            self.why = why
        self.lost.set()
        if self._on_lost is not None:
            self._on_lost()

    def sent(self, message: types.JSONRPCMessage) -> None:
        """Keep track of what the session asked, and of what it gave up on."""
        if isinstance(message, types.JSONRPCRequest):
            self.pending[coerce_request_id(message.id)] = message.id
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            given = (message.params or {}).get("requestId")
            if isinstance(given, (int, str)):
                self.pending.pop(coerce_request_id(given), None)

    def received(self, frame: Line | Oversize) -> list[SessionMessage]:
        """What the session gets for one frame: the message, or errors for whom it failed."""
        if isinstance(frame, Oversize):
            problem = f"the answer is larger than max_response_bytes ({self.max_line_bytes} bytes)"
            return self._fail(request_id_in(frame.head), problem)
        if not frame.data.strip():
            return []
        try:
            message = types.jsonrpc_message_adapter.validate_json(frame.data, by_name=False)
        except ValueError:
            self.malformed += 1
            if self.malformed == 1:
                log.warning("MCP server %s wrote a line that is not JSON-RPC (%d bytes); the answers it may "
                            "be are failed, and further such lines are not logged", self.server, len(frame.data))
            return self._fail(request_id_in(frame.data), "the server sent a malformed answer (not JSON-RPC)")
        if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
            if message.id is None:  # an error the server could not tie to a request: any of them
                assert isinstance(message, types.JSONRPCError)
                return self._fail(None, f"the server answered with an error: {message.error.message[:200]}")
            self.pending.pop(coerce_request_id(message.id), None)
        return [SessionMessage(message)]

    def _fail(self, request_id: types.RequestId | None, problem: str) -> list[SessionMessage]:
        key = coerce_request_id(request_id) if request_id is not None else None
        if key is not None and key in self.pending:
            failed = [self.pending.pop(key)]
        else:
            failed = list(self.pending.values())
            self.pending.clear()
        error = types.ErrorData(code=types.INTERNAL_ERROR, message=problem)
        return [SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=each, error=error)) for each in failed]


ByteSource = Callable[[], Awaitable[bytes]]
ByteSink = Callable[[bytes], Awaitable[None]]


@asynccontextmanager
async def framed(source: ByteSource, sink: ByteSink, link: Link) -> AsyncIterator[Streams]:
    """The session's two streams over a byte source and sink (a process's pipes, or, in the
    tests, anything else): JSON-RPC lines out, bounded frames in."""
    to_session, from_transport = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_transport, from_session = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        framer = LineFramer(link.max_line_bytes)
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with to_session:
                while True:
                    try:
                        chunk = await source()
                    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                        link.lose("it closed its output")
                        return
                    for frame in framer.feed(chunk):
                        for message in link.received(frame):
                            await to_session.send(message)
                    if framer.skipped > FLOOD_LINES * link.max_line_bytes:
                        link.lose(f"it wrote more than {FLOOD_LINES * link.max_line_bytes} bytes without a line break")
                        return

    async def write() -> None:
        async with from_session:
            async for item in from_session:
                link.sent(item.message)
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                try:
                    await sink(data)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    link.lose("it stopped reading its input")
                    to_session.close()  # the session learns the connection is gone
                    return

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        try:
            yield from_transport, to_transport
        finally:
            tasks.cancel_scope.cancel()
            for stream in (to_session, from_transport, to_transport, from_session):
                stream.close()


@dataclass(frozen=True, slots=True)
class Command:
    """How to start a server: its argv, extra environment (over a minimal inherited one, as
    the SDK does) and working directory."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None = None


@asynccontextmanager
async def stdio(command: Command, link: Link) -> AsyncIterator[Streams]:
    """Start the server, connect its pipes through `framed`, and stop it on the way out:
    stdin closed, then SIGTERM to its process group, then SIGKILL, each after a grace.
    Its stderr goes to the log (`Link.said`)."""
    process = await anyio.open_process(
        list(command.argv),
        env=get_default_environment() | dict(command.env),
        cwd=command.cwd,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stdin is not None and process.stderr is not None
    stdout, stdin, stderr = process.stdout, process.stdin, process.stderr
    relayed = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_relay, stderr, link, relayed)
        try:
            async with framed(lambda: stdout.receive(READ_CHUNK), stdin.send, link) as streams:
                yield streams
        finally:
            with anyio.CancelScope(shield=True):
                if link.why == "it closed its output":  # it ended by itself: its last words are on their way
                    with anyio.move_on_after(EXIT_GRACE_SECONDS):  # (a child of the server may hold stderr open)
                        await relayed.wait()
                await stop(process)
                if process.returncode is not None and link.why == "it closed its output":
                    words = f": {link.last_words}" if link.last_words else ""
                    link.why = f"it exited with status {process.returncode}{words}"
            tasks.cancel_scope.cancel()


async def _relay(stderr: ByteReceiveStream, link: Link, done: anyio.Event) -> None:
    """The server's stderr, line by line, to `link.said` (a line longer than a chunk is cut)."""
    partial = b""
    try:
        with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            while True:
                *lines, partial = (partial + await stderr.receive(READ_CHUNK)).split(b"\n")
                partial = partial[-READ_CHUNK:]
                for line in lines:
                    link.said(line)
        link.said(partial)
    finally:
        done.set()


async def stop(process: Process) -> None:
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        if process.stdin is not None:
            await process.stdin.aclose()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if await _exited(process, EXIT_GRACE_SECONDS):
            break
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
    await _exited(process, EXIT_GRACE_SECONDS)
    for stream in (process.stdout, process.stdin):
        if stream is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()
    with anyio.move_on_after(EXIT_GRACE_SECONDS), suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.aclose()


async def _exited(process: Process, within: float) -> bool:
    """Whether the process is gone within `within` seconds (polled: waiting on the process
    would also wait for pipes that a child of the server may hold open)."""
    with anyio.move_on_after(within):
        while process.returncode is None:
            await anyio.sleep(0.02)
    return process.returncode is not None

