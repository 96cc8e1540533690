"""MCP servers the tests start themselves (tests/mcp_server.py, on the official SDK): one as a
child process over stdio, one over streamable HTTP on 127.0.0.1. The bot connects to them at
start, offers their tools as SERVER__TOOL, calls them in the tool loop, and stops them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from botweave import App, ConfigError

from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.mcp_server import free_port, serve_http
from tests.support import RecordingAdapter, StartApp, alive, message

SERVER = str(Path(__file__).with_name("mcp_server.py"))


def config(llm: OpenAIEmulator, servers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {
            "remote": {
                "model": "openai/gpt-emulated",
                "api_base": llm.base_url,
                "api_key": "sk-loopback",
                "tools": [{"mcp": {name: server}} for name, server in servers.items()],
            }
        },
        "platforms": {"console": {"enabled": False}},
        **extra,
    }


async def test_stdio_and_http_servers_run_with_the_bot_and_their_tools_are_called(llm, start_app: StartApp, tmp_path):
    pid_file = tmp_path / "pid"
    async with serve_http("notes") as url:
        app: App = await start_app(
            config(
                llm,
                {
                    "files": {"command": [sys.executable, SERVER, "files"], "env": {"MCP_PID_FILE": str(pid_file)}},
                    "notes": {"url": url},
                },
                network={"allow_hosts": ["127.0.0.1"]},
            )
        )
        adapter = RecordingAdapter()
        app.add_adapter(adapter)
        agent = app.agents["remote"]
        assert sorted(agent.tools) == [
            "files__add", "files__broken", "files__flood", "files__remember",
            "notes__add", "notes__broken", "notes__flood", "notes__remember",
        ]
        pid = int(pid_file.read_text())
        assert alive(pid)

        llm.queue_tool_calls(
            tool_call("files__add", {"a": 2, "b": 3}),
            tool_call("notes__remember", {"text": "buy milk"}),
            tool_call("notes__broken"),
        )
        llm.queue_text("Done.")
        outcome = await app.handle(message("use the servers"))
        assert outcome.status == "replied" and adapter.texts() == ["Done."]
        assert set(llm.tools_offered(0)) == set(agent.tools)
        declared = {t["function"]["name"]: t["function"] for t in llm.requests[0]["tools"]}
        assert declared["files__add"]["description"] == "Add two whole numbers."
        assert declared["files__add"]["parameters"]["required"] == ["a", "b"]
        added, remembered, broken = (llm.tool_output(c.id) for c in llm.issued_calls)
        assert added == {"result": 5}
        assert remembered == {"result": "noted (1 notes)"}
        assert broken == {"error": "MCP server notes: broken failed: Error executing tool broken (the server keeps "
                                   "the cause to itself; its own log, shown with -vv, has it)"}
        llm.assert_tool_protocol()

        await app.stop()
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), "the stdio server stops with the bot"


async def test_an_mcp_url_outside_the_network_policy_is_refused_by_name(llm):
    with pytest.raises(ConfigError) as caught:
        App.from_config(config(llm, {"notes": {"url": "http://127.0.0.1:9/mcp"}}))
    assert "agents.remote.tools.0.mcp.notes.url: host 127.0.0.1 is a local or private address" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        App.from_config(config(llm, {"notes": {"url": "https://mcp.example.com/mcp"}}, network={"deny_hosts": ["*.example.com"]}))
    assert "host mcp.example.com is denied by the network policy (*.example.com)" in str(caught.value)


async def test_a_server_that_cannot_be_reached_leaves_the_bot_running_without_its_tools(llm, start_app, caplog):
    caplog.set_level(logging.ERROR)
    url = f"http://127.0.0.1:{free_port()}/mcp"
    app = await start_app(config(llm, {"gone": {"url": url, "startup_timeout_seconds": 5}}, network={"allow_hosts": ["127.0.0.1"]}))
    assert app.agents["remote"].tools == {}
    assert "MCP server gone did not start" in caplog.text


async def test_a_server_that_does_not_answer_in_time_is_given_up_without_a_stray_error(llm, start_app, caplog):
    """A stdio server that never speaks: the start gives up after its timeout, and whatever the
    connection raises afterwards is read, not left for asyncio to report (the suite fails any
    test where something reaches asyncio's default handler)."""
    caplog.set_level(logging.ERROR)
    silent = {"command": [sys.executable, "-c", "import time; time.sleep(30)"], "startup_timeout_seconds": 0.5}
    app = await start_app(config(llm, {"silent": silent}))
    assert app.agents["remote"].tools == {}
    assert "MCP server silent did not start (no answer within 0.5s)" in caplog.text


def test_tool_names_are_made_acceptable_to_providers():
    from botweave.tools.mcp import tool_name

    assert tool_name("files", "read.file") == "files__read_file"
    assert len(tool_name("files", "x" * 100)) == 64


CRASHING_SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("crashing", log_level="WARNING")


@server.tool()
def boom(x: str) -> str:
    """Crashes."""
    raise ValueError("the cause stays in this server")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print("ImportError: no module named searxng_client", file=sys.stderr)
        sys.exit(3)
    server.run()
'''


def test_a_crashing_mcp_tool_is_one_line_and_a_server_that_exits_says_its_last_words(tmp_path):
    """A tool that crashes in an SDK server: its traceback (the server's stderr) stays out of the
    chat and the default log, one warning names the server and that the cause is in its own
    log; a server that exits at start is reported with the last line it wrote."""
    (tmp_path / "crashing.py").write_text(CRASHING_SERVER)
    (tmp_path / "bot.yaml").write_text(
        "agents:\n  a:\n    model: offline/echo\n    tools:\n"
        f"      - mcp: {{crashing: {{command: ['{sys.executable}', crashing.py]}}}}\n"
        f"      - mcp: {{gone: {{command: ['{sys.executable}', crashing.py, exit]}}}}\n"
        "platforms:\n  console: {}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "botweave", "chat", "--ephemeral"], input='call crashing__boom {"x": "y"}\n',
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    failed = ("MCP server crashing: boom failed: Error executing tool boom (the server keeps the cause to itself; "
              "its own log, shown with -vv, has it)")
    assert failed in done.stdout
    lines = done.stderr.splitlines()
    assert any(line.endswith(f"WARNING botweave.tools.mcp: {failed}") for line in lines), lines
    assert any("MCP server gone did not start (it exited with status 3: ImportError: no module named "
               "searxng_client)" in line for line in lines), lines
    assert "Traceback" not in done.stderr and "the cause stays in this server" not in done.stderr
    assert len(lines) == 2, lines
