"""Routing: which agent (or room) answers a conversation.

Specificity is compared field by field in the order thread > chat > user > chat_type >
platform, so a binding for one forum topic beats one for its whole chat whatever order the
YAML lists them in; among equally specific bindings the first listed wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from botweave.config import RouteConfig
from botweave.types import META_AGENT, BotMessage

_PRECEDENCE = ("thread_id", "chat_id", "user_id", "chat_type", "platform")


@dataclass(frozen=True, slots=True)
class Target:
    kind: Literal["agent", "room"]
    name: str

    @property
    def hears_everyone(self) -> bool:
        """A channel bound to a room hears every person's message, mentioned or not."""
        return self.kind == "room"


def _facts(msg: BotMessage) -> dict[str, str | None]:
    return {
        "platform": msg.platform,
        "chat_id": msg.channel.channel_id,
        "thread_id": msg.thread_id,
        "user_id": msg.sender.user_id,
        "chat_type": msg.channel.channel_type,
    }


class Router:
    def __init__(self, routes: list[RouteConfig], default_agent: str | None) -> None:
        # Each binding's wanted facts, its rank and its target, computed once: resolve runs
        # for every message.
        self._bindings: list[tuple[dict[str, str], tuple[bool, ...], Target]] = []
        for route in routes:
            wanted = route.match.model_dump(exclude_none=True)
            target = Target("room", route.room) if route.room else Target("agent", route.agent or "")
            self._bindings.append((wanted, tuple(k in wanted for k in _PRECEDENCE), target))
        self._default = Target("agent", default_agent) if default_agent and not routes else None

    def resolve(self, msg: BotMessage) -> Target | None:
        chosen = msg.metadata.get(META_AGENT)
        if chosen:  # the person picked the agent (a web session's): nothing else decides
            return Target("agent", str(chosen))
        facts = _facts(msg)
        best: tuple[tuple[bool, ...], Target] | None = None
        for wanted, rank, target in self._bindings:
            if any(facts[k] != v for k, v in wanted.items()):
                continue
            if best is None or rank > best[0]:
                best = (rank, target)
        return best[1] if best is not None else self._default
