"""Conversation references: what it takes to post into a Teams conversation later.

The Bot Connector is reached at the `serviceUrl` of each conversation (it differs by region
and may change), and a new personal chat needs the tenant. Teams hands these over only in
the activities it posts to the bot, so every activity's reference is kept — in the runtime's
store, so a schedule, a room turn or a push notification can reach the conversation after a
restart, and from any worker that shares the store. A small cache in front saves a store
round trip per post.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Any

from botweave.store import MemoryStore, Store

from ..cache import BoundedCache

log = logging.getLogger(__name__)

CONVERSATION_KEY = "teams:ref:"
PERSON_KEY = "teams:person:"
#: References live long (a conversation can go quiet for months), yet not forever.
TTL_S = 400 * 24 * 3600.0


@dataclass(frozen=True)
class Reference:
    conversation_id: str  # the base id: a channel's, without `;messageid=`
    service_url: str
    kind: str  # personal, groupChat, channel (Teams' conversationType)
    tenant_id: str = ""
    person: str = ""  # the person of a personal chat

    @classmethod
    def loads(cls, text: str) -> Reference | None:
        try:
            data = json.loads(text)
            return cls(**{k: str(v) for k, v in data.items() if k in cls.__dataclass_fields__})
        except (ValueError, TypeError):
            return None


@dataclass(frozen=True)
class Person:
    """Where a person can be reached privately: the service URL and tenant they were seen
    with, and their personal chat with the bot once there is one."""

    service_url: str
    tenant_id: str
    personal_chat: str = ""


class References:
    def __init__(self, store: Store | None) -> None:
        # Without a runtime (an adapter on its own) the references live as long as the process.
        self._store = store if store is not None else MemoryStore()
        self._conversations: BoundedCache[str, Reference] = BoundedCache(4096)
        self._people: BoundedCache[str, Person] = BoundedCache(4096)

    async def remember(self, ref: Reference, person_id: str = "") -> None:
        """Keep `ref`, and where `person_id` was seen; a store write only when something changed."""
        if self._conversations.get(ref.conversation_id) != ref:
            self._conversations.put(ref.conversation_id, ref)
            await self._store.set(CONVERSATION_KEY + ref.conversation_id, json.dumps(asdict(ref)), ttl=TTL_S)
        if person_id:
            known = await self.person(person_id)
            personal = ref.conversation_id if ref.kind == "personal" else (known.personal_chat if known else "")
            seen = Person(ref.service_url, ref.tenant_id or (known.tenant_id if known else ""), personal)
            if seen != known:
                self._people.put(person_id, seen)
                await self._store.set(PERSON_KEY + person_id, json.dumps(asdict(seen)), ttl=TTL_S)

    async def get(self, conversation_id: str) -> Reference | None:
        cached = self._conversations.get(conversation_id)
        if cached is not None:
            return cached
        text = await self._store.get(CONVERSATION_KEY + conversation_id)
        ref = Reference.loads(text) if text else None
        if ref is not None:
            self._conversations.put(conversation_id, ref)
        return ref

    async def person(self, person_id: str) -> Person | None:
        cached = self._people.get(person_id)
        if cached is not None:
            return cached
        text = await self._store.get(PERSON_KEY + person_id)
        if not text:
            return None
        try:
            data: dict[str, Any] = json.loads(text)
            found = Person(str(data["service_url"]), str(data.get("tenant_id") or ""), str(data.get("personal_chat") or ""))
        except (ValueError, KeyError, TypeError):
            return None
        self._people.put(person_id, found)
        return found
