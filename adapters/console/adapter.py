"""The console platform: talk to an agent in a terminal or through a pipe.

Lines from stdin are messages from one local user in a DM (inbound.py); replies go to stdout
and files the bot sends are saved, with their path printed (outbound.py).
"""

from __future__ import annotations

import sys
from typing import ClassVar, TextIO

from botweave.adapter import Adapter, Check
from botweave.types import AgentIdentity, BotUser, PlatformCapabilities

from .config import ConsoleConfig
from .inbound import ConsoleInbound
from .outbound import ConsoleOutbound


class ConsoleAdapter(Adapter):
    platform = "console"
    local = True
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        max_message_length=None, can_react=True, threads=True, markdown="none", buttons=True
    )
    emits = frozenset({"button_pressed"})

    def __init__(
        self, config: ConsoleConfig | None = None, *, stdin: TextIO | None = None, stdout: TextIO | None = None
    ) -> None:
        config = config or ConsoleConfig()
        super().__init__(config)
        self._stdout = stdout
        self.inbound = ConsoleInbound(self, stdin or sys.stdin, config.user_name)
        self.finished = self.inbound.finished  # set at the end of input

    async def start(self, *, inbound: bool = True) -> None:
        self.self_user = BotUser("botweave", "botweave", "botweave", is_bot=True)
        self.outbound = ConsoleOutbound(
            self._stdout, typed=self.inbound.line_of, save_dir=self.config.save_dir, shown=self.inbound.replied,
            whole_lines=self.inbound.interactive,
        )
        if inbound:
            self.inbound.start()

    async def stop(self) -> None:
        self.inbound.stop()
        if isinstance(self.outbound, ConsoleOutbound):
            self.outbound.end_line()
        self.outbound = None
        (self._stdout or sys.stdout).flush()

    @property
    def mode(self) -> str:
        return "terminal" if self.inbound.interactive else "pipe"

    async def diagnose(self) -> list[Check]:
        return [Check("console", True, "the terminal needs no credentials")]

    def name_prefix(self, identity: AgentIdentity) -> str:
        """A terminal shows no bold: the agent's name in brackets."""
        return f"[{identity.name}] "
