"""The inbound journal: the carrier of a store that one process keeps for itself (a SQLite
file; memory in tests). What it received and has not finished is written to the store, in
arrival order, so a restart answers what a crash cut off."""

from __future__ import annotations

import logging

from botweave.store.base import Put, Remove, Store
from botweave.store.carrier import InboundCarrier, Received, decode, dedup_key, encode
from botweave.store.numbers import Numbers

log = logging.getLogger(__name__)

ITEMS = "inbox:item:"


class InboundJournal(InboundCarrier):
    """Entries under `inbox:item:`, numbered from the `inbox:seq` counter (a block at a time); an entry is removed
    when its turn is done. The recording process answers its items itself, in the order they
    arrived (it holds each conversation's place), so the journal keeps no conversation order
    of its own."""

    def __init__(self, store: Store, dedup_ttl: float) -> None:
        self.store = store
        self.dedup_ttl = dedup_ttl
        self._numbers = Numbers(store, "inbox:seq")  # a store call per thousand items, not per item

    async def record(self, item: Received, *, ordered: bool = True) -> str | None:
        """The dedup key and the entry land together, in one `commit`."""
        number = await self._numbers.take()
        entry = f"{ITEMS}{number:012d}"
        key = dedup_key(item)
        if key is None:
            await self.store.set(entry, encode(item))
            return entry
        if await self.store.commit(key, [Put(entry, encode(item))], ttl=self.dedup_ttl):
            return entry
        return None

    async def pending(self) -> list[tuple[str, Received]]:
        found: list[tuple[str, Received]] = []
        for entry in sorted(await self.store.keys(ITEMS)):
            raw = await self.store.get(entry)
            if raw is None:
                continue
            try:
                found.append((entry, decode(raw)))
            except (KeyError, ValueError, TypeError):
                log.error("inbound journal entry %s is malformed; dropped", entry)
                await self.store.delete(entry)
        return found

    async def done(self, entry: str) -> None:
        # Not waited for: a crash that loses the removal answers the item again at the next
        # start, where its turn's marker and the outbox keep it from being sent twice.
        self.store.later(Remove(entry))

    async def backlog(self) -> int:
        return len(await self.store.keys(ITEMS))
