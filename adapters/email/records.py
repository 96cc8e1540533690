"""What the bot keeps beside the mailbox, in the runtime's store (shared by every process):
each thread's subject and References chain, so a reply from any worker threads correctly; each
message's files, so a reply to it can show them; and how far the folder was read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from botweave.store.base import Store

from .mail import MAX_REFERENCES

#: How long a thread's record (its subject and chain) is kept after its last mail.
THREAD_TTL_S = 90 * 86400.0
#: How long a message is remembered for quoting.
MESSAGE_TTL_S = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class Thread:
    subject: str
    references: tuple[str, ...]

    @property
    def last(self) -> str | None:
        return self.references[-1] if self.references else None


class Records:
    def __init__(self, store: Store | None, address: str) -> None:
        self.store = store
        self.scope = f"email:{address.lower()}"

    async def thread(self, root: str) -> Thread | None:
        raw = await self.store.get(f"{self.scope}:thread:{root}") if self.store else None
        if raw is None:
            return None
        data = json.loads(raw)
        return Thread(str(data.get("subject", "")), tuple(str(r) for r in data.get("references", [])))

    async def extend_thread(self, root: str, subject: str, *message_ids: str) -> None:
        """Add messages to a thread's chain (the thread starts with the first one)."""
        if self.store is None:
            return
        known = await self.thread(root)
        chain = list(known.references) if known else []
        chain += [m for m in message_ids if m not in chain]
        value = {"subject": (known.subject if known and known.subject else subject), "references": chain[-MAX_REFERENCES:]}
        await self.store.set(f"{self.scope}:thread:{root}", json.dumps(value), ttl=THREAD_TTL_S)

    async def remember(self, message_id: str, *, author: str, attachments: list[dict[str, Any]]) -> None:
        if self.store is None:
            return
        value = {"author": author, "attachments": attachments}
        await self.store.set(f"{self.scope}:message:{message_id}", json.dumps(value), ttl=MESSAGE_TTL_S)

    async def message(self, message_id: str) -> dict[str, Any] | None:
        raw = await self.store.get(f"{self.scope}:message:{message_id}") if self.store else None
        return json.loads(raw) if raw else None

    async def floor(self, folder: str) -> tuple[int, int] | None:
        """The (UIDVALIDITY, UID) reading started from, when one was recorded."""
        raw = await self.store.get(f"{self.scope}:floor:{folder}") if self.store else None
        if raw is None:
            return None
        validity, uid = json.loads(raw)
        return int(validity), int(uid)

    async def set_floor(self, folder: str, validity: int, uid: int) -> None:
        if self.store is not None:
            await self.store.set(f"{self.scope}:floor:{folder}", json.dumps([validity, uid]))
