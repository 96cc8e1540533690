"""The runtime's built-in commands: `/new`, `/help` (and `/start`, its alias for people
arriving from a platform's Start button) and `/status`. They are registered once and read
the live generation's agents and rooms when they run, so a reload neither re-registers them
nor undoes a plugin's replacement of one."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from botweave.agents import Agent, History
from botweave.commands import CommandRegistry
from botweave.context import is_summary, request_window
from botweave.pipeline import Inbound
from botweave.runtime.generation import Live


def format_uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


#: A stand-in value per JSON Schema type, for an example call's arguments.
_PLACEHOLDERS: dict[str, object] = {"string": "...", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}


def example_arguments(schema: dict[str, Any]) -> str:
    """A tool's required arguments as JSON, each with a stand-in value of its type."""
    properties = schema.get("properties") or {}
    required = [name for name in schema.get("required") or [] if name in properties]
    return json.dumps({name: _PLACEHOLDERS.get(str(properties[name].get("type")), "...") for name in required},
                      ensure_ascii=False)


class BuiltinCommands:
    def __init__(
        self,
        registry: CommandRegistry,
        live: Live,
        history: History,
        uptime: Callable[[], float],
    ) -> None:
        self._registry = registry
        self._live = live
        self._history = history
        self._uptime = uptime

    def register(self) -> None:
        self._registry.register("new", self.new, help="start a new conversation (forget the earlier messages)")
        self._registry.register("help", self.help, help="show this help")
        self._registry.register("start", self.help, help="the same as /help (what a platform's Start button sends)")
        self._registry.register("status", self.status, help="show the agent, model, context used, platform, uptime and config revision")

    async def new(self, inbound: Inbound) -> str:
        target = inbound.target
        rooms = self._live.generation.rooms
        if target is not None and target.kind == "room" and rooms is not None and target.name in rooms.rooms:
            await rooms.reset(target.name, inbound.message)
            return f"Room {target.name} starts afresh."
        await self._history.reset(inbound.conversation)
        return "Started a new conversation; earlier messages are forgotten."

    async def _context_line(self, agent: Agent, conversation: str) -> str:
        """How much of the model's window the conversation takes, and whether its oldest part
        is a summary now."""
        items = await self._history.load_items(conversation, agent.config.max_history)
        counter = self._live.generation.turn.context(agent).counter
        tokens = counter.messages([{"role": "system", "content": agent.config.instructions}])
        tokens += sum(counter.item(raw, messages) for raw, messages in items)
        window = await request_window(agent.config)
        summarised = "summarised" if items and is_summary(items[0][1]) else "not summarised"
        return f"context: {tokens} of {window} tokens ({summarised})"

    async def help(self, inbound: Inbound) -> str:
        """The commands; for an agent on the offline stand-in model, also how to make it call
        a tool (it answers nothing else, so without this its tools cannot be tried)."""
        text = self._registry.help_text()
        target = inbound.target
        agent = self._live.generation.agents.get(target.name) if target is not None and target.kind == "agent" else None
        if agent is None or not agent.model.startswith("offline/"):
            return text
        text += (
            f"\n\n{agent.name} runs on {agent.model}, a stand-in model that repeats what it hears (no key, no "
            "network). To make it call a tool, write: call TOOL {json arguments}"
        )
        if agent.tools:
            name, tool = next(iter(agent.tools.items()))
            text += f", e.g. call {name} {example_arguments(tool.parameters)}\nIts tools: {', '.join(agent.tools)}"
        return text

    async def status(self, inbound: Inbound) -> str:
        target = inbound.target
        generation = self._live.generation
        agent = generation.agents.get(target.name) if target is not None and target.kind == "agent" else None
        lines = [f"agent: {agent.name}", f"model: {agent.model}"] if agent else [f"room: {target.name}"] if target else []
        lines += [
            f"platform: {inbound.message.platform}",
            f"uptime: {format_uptime(self._uptime())}",
            f"config: revision {generation.revision}",
        ]
        if agent is not None:
            lines.append(await self._context_line(agent, inbound.conversation))
        return "\n".join(lines)
