"""Tools under fuzz: what an MCP server answers, and what the model passes as arguments.

MCP frames: a server in this process, on the far side of the bounded stdio framing
(`tools/mcp_stdio.py`: the same reader and request tracking the child-process transport uses,
over an in-memory pipe instead of a process's pipes), answers each call with a mutated real
answer, cut into random pieces, followed by a well-formed "sentinel" answer. Every call, made
as the tool loop makes it, must end soon in a result or an `{"error": ...}` (never an escaped
exception, never a wait for its timeout); an answer that is one malformed or oversize line
must fail its call at once (not leave it to the sentinel); and the connection must still
serve the next call, or be back after a restart.

Tool arguments: mutated arguments from the model (mutated real ones, and text that is not a
JSON object) to every built-in tool and to Python tools, through the tool loop's call runner
with a running bot behind them: every call ends in a result or a tool error, and no tool
raises on them (a bad argument is the tool's error to explain, not its crash).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types
import pytest
from botweave.tooling import ToolCall, ToolContext, run_call
from botweave.tools import mcp as mcp_tools
from botweave.tools.config import McpServerConfig
from botweave.tools.mcp import McpServer, McpTool
from botweave.tools.mcp_stdio import Link, framed
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.strategies import encode, mutated, raw_bodies
from tests.fuzz.support import Tally, counting_tracebacks, describe
from tests.support import RecordingAdapter, message

ID = "__ID__"  # where the call's id goes in an answer (a mutation may replace it)
LIMIT = 4096  # max_response_bytes here, so oversize answers are common
CALL_TIMEOUT = 5.0

ANSWERS: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "id": ID, "result": {"content": [{"type": "text", "text": "fine"}], "isError": False}},
    {"jsonrpc": "2.0", "id": ID, "result": {"content": [{"type": "text", "text": "it failed"}], "isError": True}},
    {"jsonrpc": "2.0", "id": ID, "result": {"content": [], "structuredContent": {"rows": [1, 2], "more": None}}},
    {"jsonrpc": "2.0", "id": ID, "result": {"content": [
        {"type": "image", "data": "aGk=", "mimeType": "image/png"},
        {"type": "resource_link", "uri": "file:///a", "name": "a"},
    ]}},
    {"jsonrpc": "2.0", "id": ID, "error": {"code": -32602, "message": "bad params", "data": {"field": "x"}}},
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": ID, "progress": 0.5}},
    {"jsonrpc": "2.0", "id": "server-1", "method": "ping"},
]
ANSWER = st.sampled_from(ANSWERS)
FRAMES = st.one_of(
    ANSWER.flatmap(mutated).map(encode),
    ANSWER.flatmap(mutated).map(encode),
    ANSWER.map(encode).flatmap(raw_bodies),
    st.sampled_from([b"x" * (LIMIT + 1), b"x" * (20 * LIMIT), b"{" * (40 * LIMIT), b"\n\n", b" ", b"\r"]),
)


def sentinel(request_id: Any) -> bytes:
    answer = {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": "sentinel"}]}}
    return json.dumps(answer).encode() + b"\n"


class Pipe:
    """The far side of one connection: a server that answers the handshake and the tool list
    properly, and each call with the frame under test."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.frame = json.dumps(ANSWERS[0]).encode()
        self.cuts: list[int] = []

    async def source(self) -> bytes:
        chunk = await self.incoming.get()
        if chunk is None:
            raise anyio.EndOfStream
        return chunk

    async def sink(self, data: bytes) -> None:
        for line in data.splitlines():
            request = json.loads(line)
            method, request_id = request.get("method"), request.get("id")
            if method is None or request_id is None:
                continue  # a notification, or the client's answer to a request of ours
            if method == "tools/call":
                self._answer_call(request_id)
                continue
            if method == "initialize":
                result = {"protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
                          "serverInfo": {"name": "fuzz", "version": "1"}}
            elif method == "tools/list":
                result = {"tools": [{"name": "answer", "inputSchema": {"type": "object"}}]}
            elif method == "ping":
                result = {}
            else:
                error = {"code": -32601, "message": f"no method {method}"}
                self.incoming.put_nowait(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n")
                continue
            self.incoming.put_nowait(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n")

    def _answer_call(self, request_id: Any) -> None:
        frame = self.frame.replace(json.dumps(ID).encode(), json.dumps(request_id).encode()) + b"\n"
        start = 0
        for cut in sorted(c for c in self.cuts if 0 < c < len(frame)):
            self.incoming.put_nowait(frame[start:cut])
            start = cut
        self.incoming.put_nowait(frame[start:])
        self.incoming.put_nowait(sentinel(request_id))


class PipedServer(McpServer):
    """An `McpServer` whose connection is the framing over a `Pipe` instead of a process."""

    pipe: Pipe

    async def _transport(self, stack: AsyncExitStack, link: Link) -> Any:
        self.pipe = Pipe()
        stack.callback(self.pipe.incoming.put_nowait, None)
        return framed(self.pipe.source, self.pipe.sink, link)


def one_malformed_line(frame: bytes) -> bool:
    """Whether the frame is a single line the framing must reject: too long, or not JSON-RPC."""
    if b"\n" in frame or not frame.strip():
        return False
    if len(frame) > LIMIT:
        return True
    try:
        mcp_types.jsonrpc_message_adapter.validate_json(frame, by_name=False)
    except ValueError:
        return True
    return False


async def call_once(tool: McpTool) -> tuple[Any, float]:
    began = time.monotonic()
    text = await run_call(ToolCall("c1", tool.name, "{}"), {tool.name: tool}, ToolContext("fuzz"))
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    return value, time.monotonic() - began


def test_mcp_frames_end_every_call_in_a_result_or_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mcp_tools, "RESTART_PAUSES", (0.01,))  # a lost connection comes back at once
    tally = Tally("mcp frames")
    config = McpServerConfig(command=["unused"], max_response_bytes=LIMIT, startup_timeout_seconds=5)
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        server = PipedServer("fuzz", config)
        runner.run(server.start())
        assert server.connected
        (tool,) = (McpTool(server, description, CALL_TIMEOUT) for description in server.tools)
        try:

            @given(frame=FRAMES, cuts=st.lists(st.integers(min_value=1, max_value=50_000), max_size=6))
            def example(frame: bytes, cuts: list[int]) -> None:
                tally.tried += 1
                runner.run(until_connected(server))
                server.pipe.frame, server.pipe.cuts = frame, cuts
                value, took = runner.run(call_once(tool))
                assert took < CALL_TIMEOUT - 1, f"the call waited {took:.1f}s"
                kind = "error" if isinstance(value, dict) and set(value) == {"error"} else "result"
                tally.outcomes["sentinel" if value == "sentinel" else kind] += 1
                if one_malformed_line(frame):
                    assert kind == "error", f"a malformed answer was not failed at once: {value!r}"
                runner.run(until_connected(server))
                server.pipe.frame, server.pipe.cuts = json.dumps(ANSWERS[0]).encode(), []
                assert runner.run(call_once(tool))[0] == "fine", "the connection serves the next call"

            example()
        finally:
            runner.run(server.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.outcomes["restarts"] = server.restarts
    tally.report()


async def until_connected(server: McpServer, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not server.connected:
        assert time.monotonic() < deadline, f"not back: {server.error}"
        await asyncio.sleep(0.005)


# --- tool arguments ---------------------------------------------------------------------------

VALID_ARGUMENTS: dict[str, list[dict[str, Any]]] = {
    "send_message": [{"target": "origin", "text": "hi **there**"}, {"target": "test:c2:t1", "text": "x"}],
    "react": [{"emoji": "👍"}, {"emoji": "🎉", "message_id": "1", "target": "origin"}],
    "edit_message": [{"message_id": "1", "text": "new", "target": "origin"}],
    "delete_message": [{"message_id": "1"}],
    "create_thread": [{"name": "Plans"}, {"name": "Later", "target": "test:c1"}],
    "send_file": [{"data_base64": "aGVsbG8=", "filename": "a.txt", "caption": "a file"},
                  {"url": "http://127.0.0.1:9/a.png"}, {"path": "a.txt", "target": "origin"}],
    "fetch_url": [{"url": "http://127.0.0.1:9/"}, {"url": "https://example.com/page"}],
    "weather": [{"city": "Lisbon", "unit": "F"}],
    "whoami": [{}],
    "book": [{"day": "2030-01-31", "seats": 2, "names": ["Ann", "Bo"], "note": "window"}],
}
NOT_OBJECTS = st.sampled_from(["", "   ", "[]", "[1, 2]", "42", '"text"', "null", "{", '{"a": }', "{'a': 1}",
                               "\ud800", "NaN", '{"city": "x"} trailing', "[" * 5000 + "]" * 5000])


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, str]:
    name = draw(st.sampled_from(sorted(VALID_ARGUMENTS)))
    choice = draw(st.integers(min_value=0, max_value=9))
    if choice == 0:
        return name, draw(NOT_OBJECTS)
    if choice == 1:
        return name, draw(st.text(max_size=60))
    base = draw(st.sampled_from(VALID_ARGUMENTS[name]))
    arguments = draw(mutated(base)) if base else draw(st.dictionaries(st.text(max_size=8), st.integers(), max_size=3))
    try:
        return name, json.dumps(arguments)
    except (RecursionError, ValueError):
        return name, "{}"


def test_tool_arguments_end_in_a_result_or_a_tool_error() -> None:
    from botweave import App

    tally = Tally("tool arguments")
    config = {
        "bot": {"unknown_user_policy": "allow"},
        "network": {"allow_hosts": ["127.0.0.1"]},  # nothing here may reach the internet
        "agents": {"remote": {"model": "offline/echo", "tools": [
            "send_message", "react", "edit_message", "delete_message", "create_thread", "send_file",
            {"name": "fetch_url", "timeout_seconds": 5}, {"python": "tests.tooldemo:weather"},
            {"python": "tests.tooldemo:whoami"}, {"python": "tests.tooldemo:book"},
        ]}},
    }
    raised: list[str] = []

    class Raised(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if " raised " in record.getMessage():
                raised.append(record.getMessage())

    handler = Raised(logging.WARNING)
    logging.getLogger("botweave.tooling").addHandler(handler)
    try:
        with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
            app = App.from_config(config)
            adapter = RecordingAdapter()
            app.add_adapter(adapter)
            runner.run(app.start(platforms=[]))
            tools = app.agents["remote"].tools
            origin = message("go", chat_id="c1")
            context = ToolContext("remote", origin, "test:c1")
            try:

                @given(call=calls())
                def example(call: tuple[str, str]) -> None:
                    name, arguments = call
                    tally.tried += 1
                    text = runner.run(run_call(ToolCall("c1", name, arguments), tools, context))
                    assert isinstance(text, str)
                    try:
                        value = json.loads(text)
                    except ValueError:
                        value = text
                    tally.outcomes["error" if isinstance(value, dict) and "error" in value else "result"] += 1

                example()
            finally:
                runner.run(app.stop())
    finally:
        logging.getLogger("botweave.tooling").removeHandler(handler)
    assert raised == [], raised[:5]
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()
