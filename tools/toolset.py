"""Each agent's tools, built from its `tools:` entries: built-ins by name, Python functions and
MCP servers. The runtime hands in what the built-ins act through (delivery, targets) and each
agent's egress policy; this package never learns where those come from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from botweave.agents import Agent
from botweave.delivery import Delivery
from botweave.files import FileLimits
from botweave.targets import TargetRule, Targets
from botweave.tooling import DEFAULT_APPROVAL_TIMEOUT_S, ApprovalRule, Egress, NeedsApproval, Tool
from botweave.tools.asks import AskUser
from botweave.tools.config import AgentTools, McpServerConfig, ToolEntry
from botweave.tools.fetch import FetchUrl
from botweave.tools.mcp import McpServers
from botweave.tools.messages import MESSAGE_TOOLS, MessageTools
from botweave.tools.python import function_tool, load_python_tools

BUILTINS = (*MESSAGE_TOOLS, "fetch_url", "ask_user")
#: Built-ins that act on messages already posted, which needs the ledger of the bot's own.
NEEDS_LEDGER = frozenset({"edit_message", "delete_message"})

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolServices:
    """What the built-ins act through: delivery and targets, the rule of where an agent's
    message tools may act, and each agent's media settings (what `send_file` may post)."""

    delivery: Delivery
    targets: Targets
    target_rule: TargetRule
    media_for: Callable[[str], FileLimits]


def mcp_servers(agents: Mapping[str, AgentTools]) -> dict[str, McpServerConfig]:
    """Every MCP server the agents name, once each (the configuration checked that a name
    means the same server wherever it appears)."""
    found: dict[str, McpServerConfig] = {}
    for config in agents.values():
        for entry in config.tools:
            if entry.kind == "mcp":
                name, server = entry.server
                found.setdefault(name, server)
    return found


def approval_rule(entry: ToolEntry) -> ApprovalRule | None:
    """The approval the entry's tools need before they run, or None when they need none."""
    if entry.approval != "required":
        return None
    return ApprovalRule(
        approver=entry.approver or "requester",
        timeout_seconds=entry.approval_timeout_seconds or DEFAULT_APPROVAL_TIMEOUT_S,
    )


def guarded(tool: Tool, entry: ToolEntry) -> Tool:
    """The tool as the agent gets it: behind its approval when the entry asks for one."""
    rule = approval_rule(entry)
    return tool if rule is None else NeedsApproval(tool, rule)


class Toolsets:
    """Builds and holds the tools of every agent, and the MCP connections they share."""

    def __init__(
        self, agents: Mapping[str, AgentTools], services: ToolServices, egress_for: Callable[[str], Egress]
    ) -> None:
        self._agents = agents
        self._egress_for = egress_for
        self.messages = MessageTools(
            services.delivery,
            services.targets,
            rule=services.target_rule,
            media_for=services.media_for,
            egress_for=egress_for,
        )
        self.mcp = McpServers(mcp_servers(agents))
        self._mcp_offered: dict[str, set[str]] = {}  # per agent, the MCP tools it was given

    @property
    def needs_ledger(self) -> bool:
        return any(
            entry.kind == "builtin" and entry.name in NEEDS_LEDGER
            for config in self._agents.values()
            for entry in config.tools
        )

    def _builtin(self, agent: str, entry: ToolEntry) -> Tool:
        name = entry.name or ""
        if name == "ask_user":
            return AskUser(entry.timeout_seconds)
        if name == "fetch_url":
            return FetchUrl(self._egress_for(agent), timeout_seconds=entry.timeout_seconds)
        if name in MESSAGE_TOOLS:
            return function_tool(getattr(self.messages, name), timeout_seconds=entry.timeout_seconds)
        raise ValueError(f"unknown built-in tool {name!r}; built-ins: {', '.join(BUILTINS)}")

    def local_tools(self, agent: str) -> dict[str, Tool]:
        """The built-ins and Python tools of `agent` (MCP tools come once servers are up).
        ValueError names the entry (`agents.NAME.tools.N`) and what is wrong with it."""
        tools: dict[str, Tool] = {}
        for index, entry in enumerate(self._agents[agent].tools):
            where = f"agents.{agent}.tools.{index}"
            try:
                if entry.kind == "builtin":
                    made = [self._builtin(agent, entry)]
                elif entry.kind == "python":
                    made = list(load_python_tools(entry.python or "", timeout_seconds=entry.timeout_seconds))
                else:
                    continue
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            for tool in made:
                if tool.name in tools:
                    raise ValueError(f"{where}: a second tool named {tool.name!r}")
                tools[tool.name] = guarded(tool, entry)
        return tools

    def server_tools(self, agent: str) -> dict[str, Tool]:
        """The tools of the MCP servers `agent` lists, as far as they are connected."""
        tools: dict[str, Tool] = {}
        for entry in self._agents[agent].tools:
            if entry.kind == "mcp":
                name, _ = entry.server
                for tool in self.mcp.tools(name, entry.timeout_seconds).values():
                    tools[tool.name] = guarded(tool, entry)
        return tools

    def equip(self, agents: Mapping[str, Agent]) -> None:
        """Give each agent its built-ins and Python tools (ValueError names a bad entry)."""
        for name, agent in agents.items():
            agent.tools.update(self.local_tools(name))

    async def start(self, agents: Mapping[str, Agent]) -> None:
        """Connect the MCP servers, then offer their tools to the agents that list them, and
        again whenever a server lists its tools anew (after a restart)."""
        for server in self.mcp.servers.values():
            server.on_tools = lambda _server: self._offer_server_tools(agents)
        await self.mcp.start()
        self._offer_server_tools(agents)

    def _offer_server_tools(self, agents: Mapping[str, Agent]) -> None:
        """Each agent's MCP tools as their servers last listed them, in place of the old ones."""
        for name, agent in agents.items():
            offered = self._mcp_offered.setdefault(name, set())
            for tool_name in offered:
                agent.tools.pop(tool_name, None)
            offered.clear()
            for tool_name, tool in self.server_tools(name).items():
                if tool_name in agent.tools:
                    log.warning("agent %s: MCP tool %s has the name of another tool; not offered", name, tool_name)
                    continue
                agent.tools[tool_name] = tool
                offered.add(tool_name)

    async def stop(self) -> None:
        await self.mcp.stop()
