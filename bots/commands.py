"""Chat commands: one registry for every `/command`, whoever provides it.

The runtime registers its own (`/new`, `/help`, `/status`), features register theirs
(`/pair` from access control, `/notify` from push) and plugins add more; `/help` lists them
all. Commands run only for a person's direct instruction (`allow_control`), never from
quoted, forwarded or bot-authored text.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from botweave.pipeline import Inbound

#: Answers a command: the text to reply with, or None when the handler replied itself.
CommandHandler = Callable[[Inbound], Awaitable[str | None]]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    handler: CommandHandler
    help: str
    args: str = ""  # shown in /help, e.g. "approve|deny CODE"

    def usage(self) -> str:
        return f"/{self.name} {self.args}".rstrip()


class CommandRegistry:
    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def register(self, name: str, handler: CommandHandler, *, help: str, args: str = "") -> None:
        """Add a command; a second registration of one name replaces the first (a plugin
        may override a built-in on purpose)."""
        key = name.lower().lstrip("/")
        if not key.replace("_", "").isalnum():
            raise ValueError(f"command names are letters, digits and _ (got {name!r})")
        self._commands[key] = Command(key, handler, help, args)

    def get(self, name: str | None) -> Command | None:
        return self._commands.get(name) if name else None

    def __contains__(self, name: object) -> bool:
        return name in self._commands

    def __iter__(self) -> Iterator[Command]:
        return iter(self._commands.values())

    def help_text(self) -> str:
        return "Commands:\n" + "\n".join(f"{c.usage()} — {c.help}" for c in self)
