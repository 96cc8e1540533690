"""MCP servers as tool sources, through the official `mcp` SDK: a command run over stdio or a
URL over streamable HTTP, started with the bot, kept running, and stopped with it.

Each server's tools are offered to the agents that list it as `<server>__<tool>` (the server's
key in bot.yaml), so two servers can both have a `search`.

A server is an untrusted peer, so every answer is bounded by its `max_response_bytes` as it
arrives, never read whole (`mcp_stdio` frames stdio lines itself, `mcp_http` counts the bytes
of HTTP answers); an answer over the limit, or one that is not JSON-RPC, fails its call at
once with an error naming the problem, and the connection goes on.

Each server has a supervisor that keeps it connected. A server that cannot be reached at
start-up is logged and the bot runs without its tools until it comes up. One that dies
(its process exits, its output ends, its HTTP connection fails) or wedges (after a call
timed out or failed in transit, it does not answer within `PING_TIMEOUT_SECONDS`) is
restarted with growing pauses: one log line when it goes, one when it is back, and its tools
answer `{"error": ...}` naming the server meanwhile. Whenever it (re)connects its tool list
is read again and its `on_tools` tells the owner, who offers the new list to the agents.

The SDK's client lives inside anyio task groups, which must be entered and left by the same
task; so each connection is held open by a task of its own (`_hold`) that the supervisor
starts, times and waits for. Calls are made from the turns' tasks over the connection's
streams, which any task may use.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from botweave.tasks import ONE_LINE_FAILURES, TaskOwner, redact, spawn
from botweave.tooling import ToolContext, ToolError
from botweave.tools.config import McpServerConfig

if TYPE_CHECKING:
    from botweave.tools.mcp_stdio import Link

log = logging.getLogger(__name__)

SEPARATOR = "__"
STOP_TIMEOUT_SECONDS = 10.0
#: How long a server suspected of being wedged has to answer a check (a request for its tools).
PING_TIMEOUT_SECONDS = 5.0
#: Pauses before each try to bring a server back; the last one repeats.
RESTART_PAUSES = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
#: A connection that lasted this long was healthy: the next restart starts from the first pause.
STABLE_SECONDS = 60.0
#: Tool calls are timed by the tool loop; the SDK's own clock only must not cut them short.
CALL_READ_TIMEOUT_SECONDS = 24 * 3600.0
MAX_TOOL_PAGES = 100
MAX_ERROR_CHARS = 500
_NOT_IN_NAMES = re.compile(r"[^A-Za-z0-9_-]")
#: The SDK's loggers that log what a server got wrong with a traceback (a notification that
#: does not validate, an HTTP answer that could not be read): one line each, as ours are.
SDK_LOGGERS = ("client", "mcp.client.streamable_http", "mcp.shared.jsonrpc_dispatcher")
#: JSON-RPC errors that are about the call itself, not the connection (no health check).
_CALL_ERRORS = frozenset({-32602, -32601})  # invalid params, method not found


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
        raise ToolError(text or "the tool reported an error")
    if result.structured_content is not None:
        return result.structured_content
    return text


class ServerGone(Exception):
    """A connection that failed because the server went, with the transport's word for why
    (`it exited with status 1: ImportError: ...`), which says more than the SDK's error."""


def _why(exc: BaseException) -> str:
    """A connection's failure in a few words: the innermost cause of an exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ServerGone):
        return str(exc)
    message = " ".join(str(exc).split())[:MAX_ERROR_CHARS]
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


class McpServer:
    """One configured server, its connection and the supervisor that keeps it up."""

    def __init__(self, name: str, config: McpServerConfig) -> None:
        for logger in SDK_LOGGERS:
            logging.getLogger(logger).addFilter(ONE_LINE_FAILURES)
        self.name = name
        self.config = config
        #: Called with the server's name whenever its tool list was read (again).
        self.on_tools: Callable[[str], None] | None = None
        self.tools: list[Any] = []  # the SDK's Tool descriptions, as last listed
        self.error: str | None = None  # why the server is down, while it is
        self.restarts = 0
        self._client: Any = None
        self._link: Link | None = None
        self._task: asyncio.Task[None] | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._wake: asyncio.Event | None = None  # ends the current connection when set
        self._checks = TaskOwner(f"mcp {name} health")

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def started(self) -> bool:
        """Started and not stopped, whether or not the connection is up right now."""
        return self._task is not None

    async def start(self) -> None:
        """Connect and list the tools, waiting for the first try only: on failure the bot goes
        on without the server's tools, and the supervisor keeps trying."""
        first: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop.clear()
        self._task = spawn(self._supervise(first), name=f"mcp {self.name}")
        await asyncio.wait({first, self._task}, return_when=asyncio.FIRST_COMPLETED)

    async def stop(self) -> None:
        self._stop.set()
        if self._wake is not None:
            self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(task, STOP_TIMEOUT_SECONDS)
            except (Exception, asyncio.CancelledError):  # boundary: the MCP server's supervisor task; its owner already reported it, or this is stopping anyway
                pass
        await self._checks.close(grace=PING_TIMEOUT_SECONDS)

    # --- keeping it up -----------------------------------------------------------------------

    async def _supervise(self, first: asyncio.Future[None]) -> None:
        pauses = 0
        while not self._stop.is_set():
            began = time.monotonic()
            problem = await self._connect()
            if problem is None:
                self._announce(first)
                problem = await self._serve()
                if time.monotonic() - began >= STABLE_SECONDS:
                    pauses = 0
            if self._stop.is_set():
                break
            pause = RESTART_PAUSES[min(pauses, len(RESTART_PAUSES) - 1)]
            pauses += 1
            self._went_down(problem, pause, first)
            await self._end_holder()
            try:
                await asyncio.wait_for(self._stop.wait(), pause)
            except TimeoutError:
                pass
        await self._end_holder()
        if not first.done():
            first.set_result(None)

    async def _connect(self) -> str | None:
        """One try at a connection, held by its own task; why it failed, or None once it is up."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # A failure may land after the wait below gave up (a timeout): read it here, or asyncio
        # would report the unread exception when the future is collected.
        ready.add_done_callback(lambda f: None if f.cancelled() else f.exception())
        wake = self._wake = asyncio.Event()
        self._holder = spawn(self._hold(ready, wake), name=f"mcp {self.name} connection")
        if self._stop.is_set():
            wake.set()
        timeout = self.config.startup_timeout_seconds
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            return f"no answer within {timeout:g}s"
        except Exception as exc:  # boundary: an MCP server connection's failure, relayed from its holder below
            return _why(exc)
        return None

    async def _serve(self) -> str:
        """Wait while the connection is up; why it ended."""
        assert self._holder is not None
        await asyncio.wait({self._holder})
        link = self._link
        return (link.why if link is not None else None) or "the connection ended"

    async def _end_holder(self) -> None:
        holder = self._holder
        if holder is not None and not holder.done():
            holder.cancel()
            await asyncio.wait({holder}, timeout=STOP_TIMEOUT_SECONDS)

    async def _hold(self, ready: asyncio.Future[None], wake: asyncio.Event) -> None:
        from botweave.tools.mcp_stdio import Link  # the SDK takes a moment to import; only when used
        from mcp import Client

        link = Link(self.name, self.config.max_response_bytes, on_lost=wake.set)
        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(
                    Client(await self._transport(stack, link), read_timeout_seconds=self.config.startup_timeout_seconds)
                )
                self.tools = await self._list_tools(client)
                self._client, self._link = client, link
                self.error = None
                ready.set_result(None)
                await wake.wait()
        except BaseException as exc:  # boundary: an MCP server connection: whatever the SDK, transport or server did ends it here
            if not ready.done() and link.why is not None:  # the server went (it exited, say): that is why
                ready.set_exception(ServerGone(link.why))
            elif not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            elif not self._stop.is_set():
                link.lose(_why(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None

    async def _transport(self, stack: AsyncExitStack, link: Link) -> Any:
        limit = self.config.max_response_bytes
        if self.config.url is not None:
            from botweave.tools.mcp_http import bounded_client
            from mcp.client.streamable_http import streamable_http_client

            http = await stack.enter_async_context(bounded_client(self.config.headers, limit))
            return streamable_http_client(self.config.url, http_client=http, max_sse_event_size=limit)
        from botweave.tools.mcp_stdio import Command, stdio

        return stdio(Command(self.config.command or [], self.config.env, self.config.cwd), link)

    async def _list_tools(self, client: Any) -> list[Any]:
        tools: list[Any] = []
        cursor = None
        for _ in range(MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def _announce(self, first: asyncio.Future[None]) -> None:
        if not first.done():
            log.info("MCP server %s: %d tools", self.name, len(self.tools))
            first.set_result(None)
        else:
            self.restarts += 1
            log.warning("MCP server %s is back (%d tools)", self.name, len(self.tools))
        if self.on_tools is not None:
            self.on_tools(self.name)

    def _went_down(self, problem: str, pause: float, first: asyncio.Future[None]) -> None:
        was_up = self.error is None
        self.error = problem
        if not first.done():
            log.error("MCP server %s did not start (%s); its tools are unavailable until it does (next try in %gs)",
                      self.name, problem, pause)
            first.set_result(None)
        elif was_up:
            log.error("MCP server %s stopped (%s); restarting it, its tools answer errors meanwhile", self.name, problem)
        else:
            log.debug("MCP server %s is still down (%s); next try in %gs", self.name, problem, pause)

    def _check_health(self, client: Any) -> None:
        """After a call that timed out or failed in transit: does the server still answer?"""
        if self._checks or client is not self._client:
            return
        self._checks.spawn(self._ping(client), name=f"mcp {self.name} ping")

    async def _ping(self, client: Any) -> None:
        """Ask for the tool list (ping is gone from the newest protocol; this works in every era)."""
        try:
            async with asyncio.timeout(PING_TIMEOUT_SECONDS):
                await client.list_tools(cache_mode="refresh")
        except Exception as exc:  # boundary: an MCP server connection's health check: no answer or a broken link, it is down
            link = self._link
            if link is None or client is not self._client:
                return
            if isinstance(exc, TimeoutError):
                link.lose(f"it did not answer within {PING_TIMEOUT_SECONDS:g}s after a call failed")
            else:
                link.lose(f"after a call failed, so did a check: {_why(exc)}")

    # --- calls -------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        client, link = self._client, self._link
        if client is None or link is None:
            raise ToolError(f"MCP server {self.name} is not available ({self.error or 'not connected'}); "
                            "it is being restarted")
        try:
            result = await client.call_tool(tool, arguments, read_timeout_seconds=CALL_READ_TIMEOUT_SECONDS)
        except asyncio.CancelledError:  # the call's time ran out, or the turn was stopped
            self._check_health(client)
            raise
        except MCPError as exc:
            if exc.error.code == CONNECTION_CLOSED:
                link.lose("its connection closed")
            if link.lost.is_set():
                raise ToolError(f"MCP server {self.name} stopped ({link.why}); it is being restarted") from None
            if exc.error.code not in _CALL_ERRORS:
                self._check_health(client)
            raise ToolError(f"MCP server {self.name}: {exc.error.message[:MAX_ERROR_CHARS]}") from None
        except Exception as exc:  # boundary: an MCP server connection's call: the SDK fails in many ways (exception groups too)
            raise ToolError(f"MCP server {self.name}: {_why(exc)}") from None
        try:
            return _result(result)
        except ToolError as exc:
            raise ToolError(self._failed(tool, str(exc))) from None

    def _failed(self, tool: str, text: str) -> str:
        """A tool's error answer, as the model reads it and as one log line: the server, the
        tool and the cause (a crash the server keeps to itself is said to be one)."""
        cause = " ".join(text.split())[:MAX_ERROR_CHARS]
        if cause == f"Error executing tool {tool}":  # how the SDK's servers answer for a crash
            cause += " (the server keeps the cause to itself; its own log, shown with -vv, has it)"
        line = f"MCP server {self.name}: {tool} failed: {cause}"
        log.warning("%s", redact(line))
        return line


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
        """The tools the server offered when it last listed them (they answer errors while it
        is down)."""
        server = self.servers.get(name)
        if server is None:
            return {}
        made = [McpTool(server, tool, timeout_seconds) for tool in server.tools]
        return {tool.name: tool for tool in made}

