"""The runtime's built-in commands: `/new`, `/help` (and `/start`, its alias for people
arriving from a platform's Start button) and `/status`."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from botweave.agents import Agent, History
from botweave.commands import CommandRegistry
from botweave.pipeline import Inbound
from botweave.rooms.hub import RoomHub


def format_uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


class BuiltinCommands:
    def __init__(
        self,
        registry: CommandRegistry,
        agents: Mapping[str, Agent],
        history: History,
        rooms: RoomHub | None,
        uptime: Callable[[], float],
    ) -> None:
        self._registry = registry
        self._agents = agents
        self._history = history
        self._rooms = rooms
        self._uptime = uptime

    def register(self) -> None:
        self._registry.register("new", self.new, help="start a new conversation (forget the earlier messages)")
        self._registry.register("help", self.help, help="show this help")
        self._registry.register("start", self.help, help="the same as /help (what a platform's Start button sends)")
        self._registry.register("status", self.status, help="show the agent, model, platform and uptime")

    async def new(self, inbound: Inbound) -> str:
        target = inbound.target
        if target is not None and target.kind == "room" and self._rooms is not None:
            await self._rooms.reset(target.name, inbound.message)
            return f"Room {target.name} starts afresh."
        await self._history.reset(inbound.conversation)
        return "Started a new conversation; earlier messages are forgotten."

    async def help(self, inbound: Inbound) -> str:
        return self._registry.help_text()

    async def status(self, inbound: Inbound) -> str:
        target = inbound.target
        agent = self._agents.get(target.name) if target is not None and target.kind == "agent" else None
        lines = [f"agent: {agent.name}", f"model: {agent.model}"] if agent else [f"room: {target.name}"] if target else []
        lines += [f"platform: {inbound.message.platform}", f"uptime: {format_uptime(self._uptime())}"]
        return "\n".join(lines)
