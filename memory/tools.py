"""The built-in tools an agent with memory gets: `remember(fact)`, `recall(query)` and
`forget(item_id)`. Each acts on the memory of the person whose message the turn answers (the
call's `origin`), so a model cannot reach anyone else's items, whatever it writes: an id from
another person's memory is simply not found."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botweave.memory.items import MAX_FACT_CHARS, FactRefused
from botweave.memory.keeper import MemoryKeeper
from botweave.tooling import Tool, ToolContext, ToolError

_TIMEOUT_S = 10.0


async def _person(keeper: MemoryKeeper, context: ToolContext) -> str:
    origin = context.origin
    if origin is None:
        raise ToolError("there is no person to remember for in this turn (nobody wrote the message it answers)")
    return await keeper.person_of_message(origin)


@dataclass(frozen=True)
class Remember:
    keeper: MemoryKeeper
    name: str = "remember"
    description: str = (
        "Keep one short fact about the person you are answering, for later conversations with them "
        f"(their preferences, names, plans; at most {MAX_FACT_CHARS} characters). Only what they would expect you to keep."
    )
    timeout_seconds: float | None = _TIMEOUT_S

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"fact": {"type": "string", "description": "the fact, as one plain sentence"}},
            "required": ["fact"],
        }

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        person = await _person(self.keeper, context)
        try:
            item = await self.keeper.remember(context.agent, person, arguments.get("fact"), context.conversation or "")
        except FactRefused as exc:
            raise ToolError(str(exc)) from None
        return {"id": item.id, "remembered": item.text}


@dataclass(frozen=True)
class Recall:
    keeper: MemoryKeeper
    name: str = "recall"
    description: str = (
        "Search what you remember about the person you are answering, beyond the items your instructions list. "
        "Returns the matching items with their ids."
    )
    timeout_seconds: float | None = _TIMEOUT_S

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "words to look for"}},
            "required": ["query"],
        }

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("give some words to search for")
        person = await _person(self.keeper, context)
        found = await self.keeper.recall(context.agent, person, query[:1000])
        return {"items": [{"id": item.id, "text": item.text} for item in found]}


@dataclass(frozen=True)
class Forget:
    keeper: MemoryKeeper
    name: str = "forget"
    description: str = "Delete one item of what you remember about the person you are answering, by its id."
    timeout_seconds: float | None = _TIMEOUT_S

    @property
    def parameters(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"item_id": {"type": "string", "description": "the item's id, as listed"}},
            "required": ["item_id"],
        }

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        item_id = arguments.get("item_id")
        if not isinstance(item_id, str) or not item_id.strip():
            raise ToolError("give the id of the item to forget")
        person = await _person(self.keeper, context)
        if not await self.keeper.forget(context.agent, person, [item_id.strip()]):
            raise ToolError(f"there is no item {item_id.strip()!r} in this person's memory")
        return {"forgotten": item_id.strip()}


def memory_tools(keeper: MemoryKeeper) -> dict[str, Tool]:
    return {tool.name: tool for tool in (Remember(keeper), Recall(keeper), Forget(keeper))}
