"""What each agent keeps about each person, and the only way to it: every read and write names
the agent and the person, and the person is always the one whose message the turn answers
(resolved through account links), never the chat. A group's turn answering B reads B's items;
`remember` while answering A writes to A; nothing is ever read by item id alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from botweave.identity import person_of
from botweave.memory.config import MemoryConfig
from botweave.memory.items import (
    RECALL_LIMIT,
    FactRefused,
    MemoryItem,
    checked_fact,
    new_item_id,
)
from botweave.memory.stores import MemoryBackend, Scope, memory_backend
from botweave.store import Store
from botweave.types import BotMessage

log = logging.getLogger(__name__)


class MemoryFull(FactRefused):
    """The person's memory holds `max_items` already."""


@dataclass(frozen=True, slots=True)
class Numbered:
    """An item as `/memory` shows it: its number, and whose memory (which agent) holds it."""

    number: int
    agent: str
    item: MemoryItem


class MemoryKeeper:
    """The memory of every agent that has it on, of every person, over one backend."""

    def __init__(
        self, store: Store, agents: Mapping[str, MemoryConfig], *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.backend: MemoryBackend = memory_backend(store)
        self.agents = {name: config for name, config in agents.items() if config.enabled}
        self._clock = clock

    def configure(self, agents: Mapping[str, MemoryConfig]) -> None:
        """A reload's settings (the items stay where they are)."""
        self.agents = {name: config for name, config in agents.items() if config.enabled}

    async def person(self, platform: str, user_id: str) -> str:
        return await person_of(self.store, platform, user_id)

    async def person_of_message(self, msg: BotMessage) -> str:
        return await self.person(msg.platform, msg.sender.user_id)

    async def briefing(self, agent: str, msg: BotMessage) -> str:
        """The block the agent's instructions carry for this turn: the items of the person who
        wrote `msg`, most recently used first, up to `inject_tokens`."""
        config = self.agents.get(agent)
        if config is None or config.inject_tokens == 0:
            return ""
        return await self.backend.account_block(
            agent, msg.platform, msg.sender.user_id, config.inject_tokens, config.max_items
        )

    async def remember(self, agent: str, person: str, fact: object, source: str) -> MemoryItem:
        """Keep `fact` for `person`; FactRefused says why not."""
        config = self.agents.get(agent)
        if config is None:
            raise FactRefused(f"agent {agent} keeps no memory")
        text = checked_fact(fact)
        now = self._clock()
        item = MemoryItem(new_item_id(), text, now, now, source)
        if not await self.backend.add(Scope(agent, person), item, config.max_items):
            raise MemoryFull(
                f"this person's memory is full ({config.max_items} items); forget an item before remembering more"
            )
        return item

    async def recall(self, agent: str, person: str, query: str) -> list[MemoryItem]:
        scope = Scope(agent, person)
        found = await self.backend.search(scope, query, RECALL_LIMIT)
        if found:
            await self.backend.touch(scope, [item.id for item in found], self._clock())
        return found

    async def forget(self, agent: str, person: str, item_ids: list[str]) -> int:
        return await self.backend.delete(Scope(agent, person), item_ids)

    async def forget_all(self, person: str) -> int:
        gone = 0
        for agent in self.agents:
            gone += await self.backend.clear(Scope(agent, person))
        return gone

    async def listing(self, person: str) -> list[Numbered]:
        """Everything kept about `person`, numbered for `/forget N`: by agent, then oldest
        first (a number stays the item's while nothing older is forgotten; using an item
        does not move it)."""
        numbered: list[Numbered] = []
        for agent in self.agents:
            items = sorted(await self.backend.recent(Scope(agent, person)), key=lambda item: (item.created, item.id))
            numbered.extend(Numbered(len(numbered) + 1, agent, item) for item in items)
        return numbered

    async def merge(self, was: str, person: str) -> int:
        """Move what every agent keeps of `was` into `person` (two linked accounts share one
        memory); items that do not fit stay with `was`. How many did not fit."""
        left = 0
        for agent, config in self.agents.items():
            source, target = Scope(agent, was), Scope(agent, person)
            moved = []
            for item in await self.backend.recent(source):
                if await self.backend.add(target, item, config.max_items):
                    moved.append(item.id)
                else:
                    left += 1
            await self.backend.delete(source, moved)
        if left:
            log.info("linking: %d memory items did not fit the joined memory and stay with the old account", left)
        return left
