"""Web sessions: each principal's chats with agents, kept in the store.

A session is one conversation (`web:<session id>`) of one principal, answered by the agent
chosen when it was made. Its messages and events are the conversation's (botweave.events);
this module keeps only what a session is: whose, what it is called, which agent answers.
Each principal also has an inbox session, made when first needed, where direct messages to
them land (an owner's approval requests, say).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass

from botweave.store import Store

_SESSION = "gwsess:"
_OWNED = "gwsess-of:"
_INBOX = "gwinbox:"
INBOX_TITLE = "Notifications"


def conversation_of(session_id: str) -> str:
    return f"web:{session_id}"


def session_of(conversation: str) -> str | None:
    """The session id of a web conversation key; None for any other conversation."""
    platform, _, rest = conversation.partition(":")
    return rest if platform == "web" and rest else None


@dataclass
class Session:
    id: str
    owner: str
    title: str
    agent: str | None
    created: float
    updated: float

    @property
    def conversation(self) -> str:
        return conversation_of(self.id)

    def to_dict(self) -> dict[str, object]:
        return asdict(self) | {"conversation": self.conversation}


class SessionBook:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def create(self, owner: str, title: str = "", agent: str | None = None, *, session_id: str | None = None) -> Session:
        now = time.time()
        session = Session(session_id or f"s-{uuid.uuid4().hex[:20]}", owner, title.strip() or "New chat", agent, now, now)
        await self._save(session)
        await self.store.set(f"{_OWNED}{owner}:{session.id}", "1")
        return session

    async def _save(self, session: Session) -> None:
        await self.store.set(_SESSION + session.id, json.dumps(asdict(session), ensure_ascii=False))

    async def get(self, session_id: str) -> Session | None:
        raw = await self.store.get(_SESSION + session_id)
        if raw is None:
            return None
        try:
            return Session(**json.loads(raw))
        except (TypeError, ValueError):
            return None

    async def owned_by(self, owner: str) -> list[Session]:
        found = []
        for key in await self.store.keys(f"{_OWNED}{owner}:"):
            session = await self.get(key.rpartition(":")[2])
            if session is not None and session.owner == owner:
                found.append(session)
        return found

    async def rename(self, session: Session, title: str) -> Session:
        session.title = title.strip() or session.title
        session.updated = time.time()
        await self._save(session)
        return session

    async def delete(self, session: Session) -> None:
        await self.store.delete(_SESSION + session.id, f"{_OWNED}{session.owner}:{session.id}")
        if await self.store.get(_INBOX + session.owner) == session.id:
            await self.store.delete(_INBOX + session.owner)

    async def inbox(self, owner: str) -> Session:
        """The owner's inbox session (made on first use)."""
        candidate = f"s-{uuid.uuid4().hex[:20]}"
        if await self.store.set_if_absent(_INBOX + owner, candidate):
            return await self.create(owner, INBOX_TITLE, session_id=candidate)
        existing = await self.store.get(_INBOX + owner) or candidate
        return await self.get(existing) or await self.create(owner, INBOX_TITLE, session_id=existing)
