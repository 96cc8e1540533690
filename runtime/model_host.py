"""A helper process that makes model calls for the bot that started it (see model_processes).

It reads calls from the socket it was given, answers each on its own task with litellm, and
leaves when the socket closes: the bot stopped or died. Calls still running then are
cancelled, since nobody is left to read their answers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, cast

from botweave.model_calls import ModelCalls, ModelOutput, failure_fields
from botweave.model_clients import ClientChoice, ModelClients
from botweave.runtime.logs import setup_logging
from botweave.runtime.model_processes import frame, read_frame
from botweave.runtime.own_process import tune_own_process
from botweave.tasks import TaskOwner, register_secret

if TYPE_CHECKING:  # OpenTelemetry is imported only when the bot sends tracing settings
    from botweave.runtime.tracing import OtelTracer

#: Characters of a failure's message sent back (the bot keeps fewer still).
MAX_DETAIL = 2000
#: How often streamed text is sent on, after its first words (which go at once). A provider
#: streams a token or a few per chunk, and each piece costs the bot's loop a frame to read
#: and a step of the turn; a person sees a streamed reply change at most once a second (the
#: platforms' edit floors), so a tenth of a second more for the next words changes nothing
#: they can see.
STREAM_EVERY_S = 0.1


class Coalesced:
    """Streamed pieces on their way to the bot: text is gathered and sent at most every
    `every` seconds (the first at once, the rest by a timer, so words never wait for the next
    chunk); a piece with tool calls, images or token counts goes as it is, after the text
    gathered before it."""

    def __init__(self, send: Callable[[ModelOutput], None], every: float = STREAM_EVERY_S) -> None:
        self._send = send
        self._every = every
        self._text = ""
        self._sent_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def add(self, piece: ModelOutput) -> None:
        if piece.calls or piece.image_urls or piece.usage is not None:
            self.flush()
            self._send(piece)
            return
        if not piece.text:
            return
        self._text += piece.text
        loop = asyncio.get_running_loop()
        if self._sent_at is None or loop.time() - self._sent_at >= self._every:
            self.flush()
        elif self._timer is None:
            self._timer = loop.call_at(self._sent_at + self._every, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._text:
            self._send(ModelOutput(self._text))
            self._text = ""
            self._sent_at = asyncio.get_running_loop().time()

    def drop(self) -> None:
        """Nobody reads on (the call was cancelled)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Host:
    """The calls in flight, each on a task of its own that writes its answer back; a cancel
    frame cancels the call's task (its HTTP request with it)."""

    def __init__(self, writer: asyncio.StreamWriter, client: ClientChoice) -> None:
        self.writer = writer
        self.clients = ModelClients(client)
        self.calls: ModelCalls = self.clients
        self.tracer: OtelTracer | None = None
        self.running: dict[int, asyncio.Task[None]] = {}
        self.tasks = TaskOwner("model host")

    def take(self, call: int, op: str, payload: Any, carried: dict[str, str] | None = None) -> None:
        if op == "cancel":
            task = self.running.pop(call, None)
            if task is not None:
                task.cancel()
            return
        if op == "tracing":
            self._trace(payload)
            return
        request = payload
        if isinstance(request.get("api_key"), str):
            register_secret(request["api_key"])  # masked in any failure line this process logs
        work = self._answer(call, request, carried) if op == "answer" else self._stream(call, request, carried)
        self.running[call] = self.tasks.spawn(work, name=f"model call {call}")

    def _trace(self, settings: dict[str, Any]) -> None:
        """Export this process's model-call spans, as the bot's tracing settings say."""
        from botweave.runtime.config import TracingConfig
        from botweave.runtime.tracing import OtelTracer, TracedCalls

        for value in settings.get("headers", {}).values():
            register_secret(value)
        self.tracer = OtelTracer(TracingConfig.model_validate(settings), role="model")
        self.calls = TracedCalls(self.clients, self.tracer)

    def _joined(self, carried: dict[str, str] | None) -> AbstractContextManager[None]:
        return nullcontext() if self.tracer is None else self.tracer.joined(carried)

    def close_tracer(self) -> None:
        if self.tracer is not None:
            self.tracer.close()

    async def _answer(self, call: int, request: dict[str, Any], carried: dict[str, str] | None = None) -> None:
        try:
            with self._joined(carried):
                output = await self.calls.answer(request)
        except Exception as exc:  # boundary: a model call, its failure sent back to the calling process
            self._failed(call, exc)
        else:
            self.writer.write(frame((call, "output", output)))
        finally:
            self.running.pop(call, None)

    async def _stream(self, call: int, request: dict[str, Any], carried: dict[str, str] | None = None) -> None:
        pieces = Coalesced(lambda piece: self.writer.write(frame((call, "output", piece))))
        try:
            with self._joined(carried):
                async for piece in self.calls.stream(request):
                    pieces.add(piece)
                    await self.writer.drain()
        except asyncio.CancelledError:
            pieces.drop()
            raise
        except Exception as exc:  # boundary: a streamed model call, its failure sent back to the calling process
            pieces.flush()
            self._failed(call, exc)
        else:
            pieces.flush()
            self.writer.write(frame((call, "end", None)))
        finally:
            self.running.pop(call, None)

    def _failed(self, call: int, exc: Exception) -> None:
        self.writer.write(frame((call, "failed", failure_fields(exc, MAX_DETAIL))))


async def serve(fd: int, client: ClientChoice) -> None:
    """Answer calls until the socket closes. litellm is imported at the first call that needs
    it (in a thread, as in the bot), so a process whose calls all go to OpenAI-compatible
    servers never loads it."""
    reader, writer = await asyncio.open_unix_connection(sock=socket.socket(fileno=fd))
    host = Host(writer, client)
    host.clients.open()
    tune_own_process()
    while (message := await read_frame(reader)) is not None:
        host.take(*message)
    await host.tasks.close()
    await host.clients.close()
    await asyncio.to_thread(host.close_tracer)
    writer.close()


def main() -> None:
    # A terminal's Ctrl-C and a service manager's SIGTERM reach the whole process group; the
    # bot decides when its calls end, and closing the socket is how it says so.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    setup_logging(logging.WARNING)
    asyncio.run(serve(int(sys.argv[1]), cast(ClientChoice, sys.argv[2] if len(sys.argv) > 2 else "auto")))


if __name__ == "__main__":
    main()
