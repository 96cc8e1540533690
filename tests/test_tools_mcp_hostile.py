"""MCP servers that flood, hang, crash or answer garbage (tests/hostile_mcp_server.py, started
by the bot as a child process over stdio; and the SDK server of tests/mcp_server.py over
streamable HTTP), driven by the model emulator through the tool loop. Every call ends in a
result or an error the model can read, soon; a server that died or wedged comes back."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from botweave import App

from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.mcp_server import free_port, serve_http
from tests.support import RecordingAdapter, StartApp, message
from tests.test_tools_mcp import config as base_config

HOSTILE = str(Path(__file__).with_name("hostile_mcp_server.py"))


def config(llm: OpenAIEmulator, server: dict[str, Any], *, timeout: float = 20, name: str = "hostile",
           **extra: Any) -> dict[str, Any]:
    made = base_config(llm, {name: server}, **extra)
    made["agents"]["remote"]["tools"][0]["timeout_seconds"] = timeout
    # a model with a large window: what is measured here is the server's cap, not the window's
    made["agents"]["remote"]["context"] = {"max_tokens": 1_000_000}
    return made


def hostile(tmp_path: Path, **env: str) -> dict[str, Any]:
    return {"command": [sys.executable, HOSTILE], "env": {"HOSTILE_STARTS": str(tmp_path / "starts"), **env}}


def starts(tmp_path: Path) -> int:
    path = tmp_path / "starts"
    return len(path.read_text().splitlines()) if path.exists() else 0


async def call(app: App, llm: OpenAIEmulator, name: str, arguments: dict[str, Any] | None = None) -> tuple[Any, float]:
    """One turn in which the model calls one tool; the tool's output and how long the turn took."""
    llm.queue_tool_calls(tool_call(name, arguments or {}))
    llm.queue_text("ok")
    began = time.monotonic()
    outcome = await app.handle(message(f"please call {name}"))
    took = time.monotonic() - began
    assert outcome.status == "replied"
    return llm.tool_output(llm.issued_calls[-1].id), took


async def until(condition: Any, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.05)


async def started(start_app: StartApp, llm: OpenAIEmulator, server: dict[str, Any], **options: Any) -> App:
    app = await start_app(config(llm, server, **options))
    app.add_adapter(RecordingAdapter())
    llm.queue_text("ready")  # the first turn of a process pays for loading the model client
    assert (await app.handle(message("hello"))).status == "replied"
    return app


async def test_a_flood_is_cut_at_the_limit_as_it_arrives_and_the_server_goes_on(llm, start_app, tmp_path):
    app = await started(start_app, llm, hostile(tmp_path))
    flooded, took = await call(app, llm, "hostile__flood", {"size": 30_000_000})
    assert flooded == {"error": "MCP server hostile: the answer is larger than max_response_bytes (4194304 bytes)"}
    assert took < 10
    assert await call(app, llm, "hostile__echo", {"text": "still here"}) == ("still here", pytest.approx(0, abs=5))
    small, _ = await call(app, llm, "hostile__flood", {"size": 1000})
    assert small == "x" * 1000
    assert starts(tmp_path) == 1, "a flood that ended in a line break leaves the stream in step: no restart"


async def test_the_limit_is_the_servers_own_setting(llm, start_app, tmp_path):
    app = await started(start_app, llm, {**hostile(tmp_path), "max_response_bytes": 10_000})
    assert (await call(app, llm, "hostile__flood", {"size": 9_000}))[0] == "x" * 9_000
    flooded, _ = await call(app, llm, "hostile__flood", {"size": 10_000})
    assert flooded == {"error": "MCP server hostile: the answer is larger than max_response_bytes (10000 bytes)"}


@pytest.mark.parametrize("kind", ["truncated", "garbage", "bad_result", "no_id"])
async def test_a_malformed_answer_fails_its_call_at_once(llm, start_app, tmp_path, kind, caplog):
    app = await started(start_app, llm, hostile(tmp_path), timeout=20)
    answer, took = await call(app, llm, "hostile__malformed", {"kind": kind})
    assert set(answer) == {"error"} and answer["error"].startswith("MCP server hostile: ")
    assert took < 5, "not a wait for the 20 s tool timeout"
    assert (await call(app, llm, "hostile__echo", {"text": "next"}))[0] == "next"
    assert "Traceback" not in caplog.text


async def test_a_crashed_server_is_restarted_and_its_tools_listed_again(llm, start_app, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    app = await started(start_app, llm, hostile(tmp_path))
    agent = app.agents["remote"]
    assert "hostile__added_after_restart" not in agent.tools
    crashed, took = await call(app, llm, "hostile__crash")
    assert crashed["error"].startswith("MCP server hostile stopped (")
    assert took < 5
    server = app.tools.mcp.servers["hostile"]
    if not server.connected:  # the pause before the restart: its tools answer, naming the server
        meanwhile, _ = await call(app, llm, "hostile__echo", {"text": "x"})
        assert meanwhile["error"].startswith("MCP server hostile is not available (")
    await until(lambda: server.connected and starts(tmp_path) == 2)
    assert "hostile__added_after_restart" in agent.tools, "the tool list is read again after a restart"
    assert (await call(app, llm, "hostile__added_after_restart"))[0] == "new here"
    assert set(llm.tools_offered()) >= {"hostile__echo", "hostile__added_after_restart"}
    lines = [r.getMessage() for r in caplog.records if r.name == "botweave.tools.mcp"]
    assert lines == [
        "MCP server hostile stopped (it exited with status 3); restarting it, its tools answer errors meanwhile",
        "MCP server hostile is back (7 tools)",
    ]


async def test_a_server_that_exits_after_some_calls_comes_back_each_time(llm, start_app, tmp_path):
    app = await started(start_app, llm, hostile(tmp_path, HOSTILE_CRASH_AFTER="2"))
    server = app.tools.mcp.servers["hostile"]
    for round_ in (1, 2):
        assert (await call(app, llm, "hostile__echo", {"text": "one"}))[0] == "one"
        assert (await call(app, llm, "hostile__echo", {"text": "two"}))[0] == "two"
        await until(lambda: starts(tmp_path) == round_ + 1 and server.connected)
    assert server.restarts == 2


async def test_a_wedged_server_is_restarted_after_a_call_times_out(llm, start_app, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    app = await started(start_app, llm, hostile(tmp_path), timeout=1)
    hung, took = await call(app, llm, "hostile__hang")
    assert hung == {"error": "hostile__hang timed out after 1s"}
    assert took < 3
    server = app.tools.mcp.servers["hostile"]
    await until(lambda: server.connected and starts(tmp_path) == 2, within=20)
    assert "MCP server hostile stopped (it did not answer within 5s after a call failed)" in caplog.text
    assert (await call(app, llm, "hostile__echo", {"text": "awake"}))[0] == "awake"


async def test_stopping_the_bot_ends_a_wedged_server_too(llm, start_app, tmp_path):
    app = await started(start_app, llm, hostile(tmp_path), timeout=1)
    await call(app, llm, "hostile__hang")
    began = time.monotonic()
    await app.stop()
    assert time.monotonic() - began < 10


@pytest.mark.parametrize("json_response", [False, True], ids=["event-stream", "json"])
async def test_an_http_answer_is_counted_as_it_streams(llm, start_app, json_response):
    async with serve_http("notes", json_response=json_response) as url:
        server = {"url": url, "max_response_bytes": 100_000}
        app = await started(start_app, llm, server, name="notes", network={"allow_hosts": ["127.0.0.1"]})
        flooded, took = await call(app, llm, "notes__flood", {"size": 5_000_000})
        assert set(flooded) == {"error"}
        assert "the answer is larger than max_response_bytes (100000 bytes)" in flooded["error"]
        assert took < 10
        # the SDK's server answers in text and structured content: the text twice, under the limit
        assert (await call(app, llm, "notes__flood", {"size": 30_000}))[0] == {"result": "x" * 30_000}
        assert (await call(app, llm, "notes__add", {"a": 2, "b": 3}))[0] == {"result": 5}


async def test_an_http_server_that_went_away_is_connected_again_when_it_is_back(llm, start_app, caplog):
    caplog.set_level(logging.WARNING)
    port = free_port()
    options = {"name": "notes", "network": {"allow_hosts": ["127.0.0.1"]}}
    async with serve_http("notes", port=port) as url:
        app = await started(start_app, llm, {"url": url}, **options)
        assert (await call(app, llm, "notes__add", {"a": 1, "b": 2}))[0] == {"result": 3}
    gone, _ = await call(app, llm, "notes__add", {"a": 1, "b": 2})
    assert gone["error"].startswith("MCP server notes ")
    server = app.tools.mcp.servers["notes"]
    async with serve_http("notes", port=port):
        await until(lambda: server.connected)
        assert (await call(app, llm, "notes__add", {"a": 2, "b": 2}))[0] == {"result": 4}
    assert "MCP server notes stopped (its connection closed)" in caplog.text
    assert "MCP server notes is back (4 tools)" in caplog.text


@pytest.mark.parametrize("piece", [1, 7, 64, 10_000])
def test_lines_are_framed_within_the_limit_however_the_bytes_arrive(piece):
    from botweave.tools.mcp_stdio import Line, LineFramer, Oversize

    stream = b'{"id": 1}\n' + b"y" * 50 + b"\n" + b'{"id": 2, "big": "' + b"z" * 5000 + b'"}\n\n' + b"tail"
    framer = LineFramer(limit=100)
    frames = []
    for start in range(0, len(stream), piece):
        frames += framer.feed(stream[start:start + piece])
    assert frames[:2] == [Line(b'{"id": 1}'), Line(b"y" * 50)]
    assert isinstance(frames[2], Oversize) and frames[2].head.startswith(b'{"id": 2, "big": "zzz')
    assert frames[3:] == [Line(b"")]
    assert framer.skipped == 0, "the long line ended: back in step"
