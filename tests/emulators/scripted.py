"""What the non-OpenAI model emulators share: a script of replies, a record of what they were
sent, and a loopback web server.

Each provider emulator (Anthropic, Gemini, Ollama) speaks its own wire format but is scripted
the same way as the OpenAI emulator, with its `Reply` and `ToolCall` (text, tool calls, usage,
HTTP errors), so a test reads the same whichever provider it drives. Usage is scripted in
OpenAI's names (`prompt_tokens`, `completion_tokens`); each emulator reports it under its
provider's own fields and at the place in the stream that provider puts it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.emulators.openai import DEFAULT_REPLY, Reply, ReplyScript, ToolCall
from tests.emulators.serving import client_gone


@dataclass
class Received:
    """One request as the emulator saw it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]
    #: Whether it asked for a streamed answer (each provider says so its own way).
    streamed: bool = False
    status: int = 200
    #: The tool calls this request was answered with.
    tool_calls: list[ToolCall] = field(default_factory=list)


class ScriptedModel(ReplyScript, ABC):
    """A loopback model server; subclasses add their provider's routes, checks and format."""

    #: Where the provider's API lives under the server's root (what `api_base` points at).
    base_path = ""
    #: How the provider's tool-call ids begin.
    id_prefix = "call_"
    #: Serve from a thread with its own event loop, as a model in another process would: for a
    #: provider whose client makes blocking calls on the caller's loop.
    threaded = False

    def __init__(self, reply: str = DEFAULT_REPLY) -> None:
        super().__init__()
        #: The text answered when nothing is scripted.
        self.reply = reply
        #: Every request, in arrival order.
        self.received: list[Received] = []
        #: Tool calls issued, in order.
        self.issued_calls: list[ToolCall] = []
        #: Everything found wrong in what clients sent; the provider would refuse most of it.
        self.violations: list[str] = []
        #: Pieces a streamed text is cut into.
        self.stream_chunks = 3
        #: Pieces each streamed tool call's arguments are cut into, where the provider streams them.
        self.argument_chunks = 3
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.root = ""
        self.base_url = ""

    # --- what each provider defines ------------------------------------------------------

    @abstractmethod
    def routes(self, app: web.Application) -> None:
        """The provider's endpoints on `app`."""

    @abstractmethod
    def refusal(self, request: web.Request, body: dict[str, Any]) -> web.Response | None:
        """The provider's answer to a request it would refuse (after noting the fault)."""

    @abstractmethod
    def scripted_error(self, reply: Reply) -> web.Response:
        """A scripted HTTP error in the provider's error format."""

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> str:
        if self.threaded:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever, name=type(self).__name__, daemon=True)
            self._thread.start()
            port = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._serve(), self._loop))
        else:
            port = await self._serve()
        self.root = f"http://127.0.0.1:{port}"
        self.base_url = self.root + self.base_path
        return self.base_url

    async def _serve(self) -> int:
        app = web.Application(middlewares=[client_gone])
        self.routes(app)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is None:
            return
        if self._loop is None or self._thread is None:
            await self._runner.cleanup()
            return
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop))
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.to_thread(self._thread.join, 10)
        self._loop.close()

    # --- queries for assertions ----------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body, in arrival order."""
        return [r.body for r in self.received]

    def assert_tool_protocol(self) -> None:
        """Nothing was sent that the provider would object to (tool pairing, headers, fields)."""
        assert not self.violations, "protocol violations:\n" + "\n".join(self.violations)

    # --- for the subclasses --------------------------------------------------------------

    def _take(self, request: web.Request, body: dict[str, Any], streamed: bool) -> tuple[Received, Reply] | web.Response:
        """Record a request; the provider's refusal or a scripted error, else the reply to give."""
        received = Received(request.method, request.path, dict(request.query), dict(request.headers), body, streamed)
        self.received.append(received)
        answer = self.refusal(request, body)
        if answer is None:
            reply = self._next_reply(received)
            if reply.status is None:
                return received, reply
            answer = self.scripted_error(reply)
        received.status = answer.status
        return answer

    def _next_reply(self, received: Received) -> Reply:
        reply = self._script.popleft() if self._script else Reply(text=self.reply)
        for call in reply.tool_calls:
            call.id = call.id or f"{self.id_prefix}{next(self._ids):04d}"
            call.request_index = len(self.received) - 1
            self.issued_calls.append(call)
        received.tool_calls = list(reply.tool_calls)
        return reply

    @staticmethod
    def _tokens(body: dict[str, Any], reply: Reply) -> tuple[int, int]:
        """(prompt, completion) tokens: the scripted ones, else an estimate from the sizes."""
        if reply.usage is not None:
            return reply.usage.get("prompt_tokens", 0), reply.usage.get("completion_tokens", 0)
        prompt = max(1, len(json.dumps(body)) // 4)
        completion = max(1, math.ceil(len(reply.text or "") / 4) + sum(len(c.arguments_json) // 4 + 3 for c in reply.tool_calls))
        return prompt, completion

    def _violation(self, text: str) -> None:
        self.violations.append(f"request {len(self.received) - 1}: {text}")


def arguments_of(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the object providers with structured arguments send."""
    if isinstance(call.arguments, str):
        loaded = json.loads(call.arguments)
        return loaded if isinstance(loaded, dict) else {}
    return dict(call.arguments)
