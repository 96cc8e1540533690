"""An MCP server the tests start themselves, on the official SDK: over stdio as a child
process (`python tests/mcp_server.py`), or over streamable HTTP on 127.0.0.1 in the test's own
event loop (`serve_http`). It is standalone: nothing of botweave is imported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator

from mcp.server.mcpserver import MCPServer


def build(name: str = "notes") -> MCPServer:
    server = MCPServer(name, log_level="WARNING")
    notes: list[str] = []

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        return a + b

    @server.tool()
    def remember(text: str) -> str:
        """Keep a note for later."""
        notes.append(text)
        return f"noted ({len(notes)} notes)"

    @server.tool()
    def broken() -> str:
        """Always fails."""
        raise ValueError("the notebook is on fire")

    @server.tool()
    def flood(size: int) -> str:
        """Answer with `size` bytes of text."""
        return "x" * size

    return server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_http(name: str = "notes", *, json_response: bool = False, port: int | None = None) -> AsyncIterator[str]:
    """Serve `build(name)` over streamable HTTP on 127.0.0.1 (answers as event streams, or as
    JSON bodies; on a free port unless given one); yields the endpoint URL."""
    import uvicorn

    port = port or free_port()
    app = build(name).streamable_http_app(host="127.0.0.1", json_response=json_response)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


if __name__ == "__main__":
    pid_file = os.environ.get("MCP_PID_FILE")
    if pid_file:  # lets a test see the process the bot started, and that it ended
        with open(pid_file, "w") as handle:
            handle.write(str(os.getpid()))
    build(sys.argv[1] if len(sys.argv) > 1 else "notes").run()
