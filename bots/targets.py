"""Targets: the names of places to post. `origin` is the conversation of the current turn,
`<platform>` that platform's home chat, `<platform>:<chat>` a chat and
`<platform>:<chat>:<thread>` a thread in it. Rooms, notifications, scheduled kickoffs and
agent tools all speak this grammar; this module resolves it, and names the rule (`TargetRule`)
by which an agent's message tools may act in a resolved place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from botweave.adapter import Adapter
from botweave.conversations import conversation_key
from botweave.delivery import Destination
from botweave.types import BotMessage


class Targets:
    def __init__(self, adapters: Mapping[str, Adapter]) -> None:
        self._adapters = adapters  # the runtime's live map: platforms may start later

    def resolve(self, target: str, origin: BotMessage | None = None) -> Destination | None:
        if target == "origin":
            if origin is None or origin.platform not in self._adapters:
                return None
            here = self._adapters[origin.platform]
            return Destination(here, origin.channel.channel_id, origin.thread_id, conversation=conversation_key(origin))
        platform, _, rest = target.partition(":")
        adapter = self._adapters.get(platform)
        if adapter is None:
            return None
        if not rest:
            home = adapter.home_chat()
            return Destination(adapter, home) if home else None
        chat, thread = adapter.split_target(rest)
        return Destination(adapter, chat, thread) if chat else None

    def adapter(self, platform: str) -> Adapter | None:
        return self._adapters.get(platform)

    def canonical(self, target: str) -> str | None:
        """The target as `platform:chat[:thread]` (how a room names its conversation)."""
        resolved = self.resolve(target)
        return resolved.target if resolved is not None else None


class TargetRule(Protocol):
    """Where an agent's message tools may post, react, edit, delete and open threads: the
    places the bot talks in by its access rules, and those the agent is allowed beyond them.
    The conversation being answered (`origin`) is always allowed. The runtime hands the tools
    one; the rule itself is a policy."""

    async def refusal(self, agent: str, to: Destination, origin: BotMessage | None) -> str | None:
        """Why `agent` may not act in `to`, or None when it may."""
        ...
