"""MCP servers as tool sources, through the official `mcp` SDK: a command run over stdio or a
URL over streamable HTTP, started with the bot and stopped with it.

Each server's tools are offered to the agents that list it as `<server>__<tool>` (the server's
key in bot.yaml), so two servers can both have a `search`. A server that cannot be reached at
start-up is logged and the bot runs without its tools, rather than not at all.

The SDK's client lives inside anyio task groups, which must be entered and left by the same
task; the runtime's start and stop may run in different tasks, so each connection is held open
by a task of its own that waits for the stop signal. Calls are made from the turns' tasks
over the connection's streams, which any task may use.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from typing import Any

from botweave.tasks import spawn
from botweave.tooling import ToolContext, ToolError
from botweave.tools.config import McpServerConfig

log = logging.getLogger(__name__)

SEPARATOR = "__"
STOP_TIMEOUT_SECONDS = 10.0
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>`, in the characters (and 64-character length) providers accept for
    function names; an MCP tool may be called `read.file`."""
    return _NOT_IN_NAMES.sub("_", f"{server}{SEPARATOR}{tool}")[:64]


class McpTool:
    """One tool of a connected MCP server."""

    def __init__(self, server: McpServer, tool: Any, timeout_seconds: float | None = None) -> None:
        self.server = server
        self.remote_name: str = tool.name
        self.name = tool_name(server.name, tool.name)
        self.description: str = tool.description or tool.title or tool.name
        schema = dict(tool.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.parameters: dict[str, Any] = schema
        self.timeout_seconds = timeout_seconds

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        return await self.server.call(self.remote_name, arguments)


def _result(result: Any) -> Any:
    """A `CallToolResult` as the model reads it: the structured result when the server gave
    one, else the text of its content blocks; an error result raises."""
    texts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            texts.append(f"[{kind} {getattr(block, 'mime_type', '')}]")
        elif kind == "resource_link":
            texts.append(f"[resource {getattr(block, 'uri', '')}]")
        else:
            texts.append(f"[{kind or 'content'}]")
    text = "\n".join(texts)
    if result.is_error:
        raise ToolError(text or "the MCP tool reported an error")
    if result.structured_content is not None:
        return result.structured_content
    return text


class McpServer:
    """One configured server and its connection."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        self.name = name
        self.config = config
        self.tools: list[Any] = []  # the SDK's Tool descriptions, once connected
        self.error: str | None = None
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def started(self) -> bool:
        """Started and not stopped, whether or not the connection is up right now."""
        return self._task is not None

    def _target(self) -> Any:
        from mcp import StdioServerParameters  # the SDK takes a moment to import; only when used

        if self.config.url is not None:
            if not self.config.headers:
                return self.config.url
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            client = httpx2.AsyncClient(headers=self.config.headers, timeout=httpx2.Timeout(30.0, read=300.0))
            return streamable_http_client(self.config.url, http_client=client)
        command = list(self.config.command or [])
        return StdioServerParameters(
            command=command[0], args=command[1:], env=dict(self.config.env) or None, cwd=self.config.cwd
        )

    async def start(self) -> None:
        """Connect and list the tools; on failure, log it and leave the server without tools."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # A failure may land after the wait below gave up (a timeout): read it here, or asyncio
        # would report the unread exception when the future is collected.
        ready.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        self._stop.clear()
        self._task = spawn(self._hold(ready), name=f"mcp {self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.startup_timeout_seconds)
        except asyncio.TimeoutError:
            self.error = f"no answer within {self.config.startup_timeout_seconds:g}s"
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        if self.error is not None:
            log.error("MCP server %s did not start (%s); its tools are unavailable", self.name, self.error)
            task, self._task = self._task, None
            if task is not None:  # still trying to connect, perhaps: it will not be waited for
                task.cancel()
                await asyncio.wait({task}, timeout=STOP_TIMEOUT_SECONDS)
            return
        log.info("MCP server %s: %d tools", self.name, len(self.tools))

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        from mcp import Client

        try:
            async with Client(self._target()) as client:
                tools: list[Any] = []
                cursor = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self.tools = tools
                self._client = client
                if not ready.done():
                    ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            elif not self._stop.is_set():
                log.error("MCP server %s: connection lost: %s", self.name, type(exc).__name__)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None

    async def stop(self) -> None:
        self._stop.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            await asyncio.wait_for(task, STOP_TIMEOUT_SECONDS)
        except (Exception, asyncio.CancelledError):  # noqa: BLE001 - already reported, or stopping anyway
            pass

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        client = self._client
        if client is None:
            raise ToolError(f"MCP server {self.name} is not connected")
        try:
            result = await client.call_tool(tool, arguments)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError(f"MCP server {self.name}: {type(exc).__name__}: {exc}") from None
        return _result(result)


class McpServers:
    """Every MCP server the agents name, each started once however many agents use it."""

    def __init__(self, servers: Mapping[str, McpServerConfig]) -> None:
        self.servers = {name: McpServer(name, config) for name, config in servers.items()}

    def take_over(self, previous: McpServers) -> list[str]:
        """Keep the servers `previous` runs with the same settings running for these agents
        (a reload that left them alone) rather than start them again; `previous` no longer
        stops them. The names taken over."""
        taken = []
        for name, server in list(previous.servers.items()):
            mine = self.servers.get(name)
            if mine is not None and not mine.started and server.started and mine.config == server.config:
                self.servers[name] = server
                del previous.servers[name]
                taken.append(name)
        return taken

    async def start(self) -> None:
        """Start every server not running yet (one that failed to start is tried again)."""
        waiting = [server for server in self.servers.values() if not server.started]
        if waiting:
            await asyncio.gather(*(server.start() for server in waiting))

    async def stop(self) -> None:
        if self.servers:
            await asyncio.gather(*(server.stop() for server in self.servers.values()))

    def tools(self, name: str, timeout_seconds: float | None = None) -> dict[str, McpTool]:
        server = self.servers.get(name)
        if server is None or not server.connected:
            return {}
        made = [McpTool(server, tool, timeout_seconds) for tool in server.tools]
        return {tool.name: tool for tool in made}

