"""Built-in chat commands, answered before any agent runs (and only for `allow_control`)."""

from __future__ import annotations

from dataclasses import dataclass

from botweave.agents import Agent, History
from botweave.types import BotMessage

HELP = {
    "new": "start a new conversation (forget the earlier messages)",
    "help": "show this help",
    "status": "show the agent, model, platform and uptime",
    "notify": "your notification settings (in a direct message; /notify help)",
}
BUILTIN_COMMANDS = frozenset(HELP) - {"notify"}  # /notify is answered by the push settings


@dataclass(frozen=True)
class CommandContext:
    message: BotMessage
    agent: Agent
    conversation: str
    history: History
    uptime_seconds: float


def format_uptime(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h {minutes}m"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


async def run_command(ctx: CommandContext) -> str:
    command = ctx.message.command
    if command == "new":
        await ctx.history.reset(ctx.conversation)
        return "Started a new conversation; earlier messages are forgotten."
    if command == "status":
        return (
            f"agent: {ctx.agent.name}\n"
            f"model: {ctx.agent.model}\n"
            f"platform: {ctx.message.platform}\n"
            f"uptime: {format_uptime(ctx.uptime_seconds)}"
        )
    return "Commands:\n" + "\n".join(f"/{name} — {text}" for name, text in HELP.items())
