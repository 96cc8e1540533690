"""Where remembered items live: one backend per kind of state store, each keyed by the agent
and the person, so an item is only ever read through the scope it was written in.

- `memory://`: the items in this process (gone with it, as all of that store's state is);
- SQLite: tables of their own in the store's file, with an FTS5 index `recall` searches;
- Redis: a hash of items and a sorted set of when each was last used, per agent and person,
  shared by every worker; `recall` is a bounded scan (a person has at most `max_items`).

Every backend answers "most recently used first", the order the agent is given items in.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botweave.identity import account_id, link_key, person_of
from botweave.memory.items import RECALL_LIMIT, MemoryItem, for_prompt, matches, prompt_limit, render, terms
from botweave.store import SQLiteStore, Store
from botweave.store.patient import backend
from botweave.store.redis import RedisStore


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose items: one agent's memory of one person."""

    agent: str
    person: str

    def key(self) -> str:
        return f"memory:{self.agent}:{self.person}"


class MemoryBackend(ABC):
    #: The state store the bot runs on, where account links live.
    store: Store
    @abstractmethod
    async def add(self, scope: Scope, item: MemoryItem, max_items: int) -> bool:
        """Keep `item`; False (nothing written) when the scope holds `max_items` already."""

    @abstractmethod
    async def recent(self, scope: Scope, limit: int | None = None) -> list[MemoryItem]:
        """The scope's items, most recently used first, at most `limit` (None: all)."""

    @abstractmethod
    async def search(self, scope: Scope, query: str, limit: int = RECALL_LIMIT) -> list[MemoryItem]:
        """The scope's items that match `query`, best first."""

    @abstractmethod
    async def touch(self, scope: Scope, ids: Sequence[str], now: float) -> None:
        """Mark items used at `now`; an id the scope does not hold is ignored."""

    @abstractmethod
    async def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        """Delete items for good; how many the scope held."""

    @abstractmethod
    async def clear(self, scope: Scope) -> int:
        """Delete every item of the scope for good; how many there were."""

    async def block(self, scope: Scope, inject_tokens: int, max_items: int) -> str:
        """What a request's instructions carry of the scope: its newest items that fit."""
        return render(for_prompt(await self.recent(scope, prompt_limit(inject_tokens, max_items)), inject_tokens))

    async def account_block(self, agent: str, platform: str, user_id: str, inject_tokens: int, max_items: int) -> str:
        """The block of the person the account belongs to (resolved through its link)."""
        return await self.block(Scope(agent, await person_of(self.store, platform, user_id)), inject_tokens, max_items)


class LocalMemory(MemoryBackend):
    """Items in this process, for the in-memory store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._items: dict[Scope, dict[str, MemoryItem]] = {}
        self._ordered: dict[Scope, list[MemoryItem]] = {}  # sorted once per change, read every turn
        self._blocks: dict[Scope, dict[tuple[int, int], str]] = {}  # rendered once per change

    def _changed(self, scope: Scope) -> None:
        self._ordered.pop(scope, None)
        self._blocks.pop(scope, None)

    async def block(self, scope: Scope, inject_tokens: int, max_items: int) -> str:
        rendered = self._blocks.setdefault(scope, {})
        found = rendered.get((inject_tokens, max_items))
        if found is None:
            found = rendered[(inject_tokens, max_items)] = await super().block(scope, inject_tokens, max_items)
        return found

    async def add(self, scope: Scope, item: MemoryItem, max_items: int) -> bool:
        held = self._items.setdefault(scope, {})
        if len(held) >= max_items:
            return False
        held[item.id] = item
        self._changed(scope)
        return True

    async def recent(self, scope: Scope, limit: int | None = None) -> list[MemoryItem]:
        ordered = self._ordered.get(scope)
        if ordered is None:
            ordered = sorted(self._items.get(scope, {}).values(), key=lambda item: -item.last_used)
            self._ordered[scope] = ordered
        return list(ordered) if limit is None else ordered[:limit]

    async def search(self, scope: Scope, query: str, limit: int = RECALL_LIMIT) -> list[MemoryItem]:
        return matches(self._items.get(scope, {}).values(), query, limit)

    async def touch(self, scope: Scope, ids: Sequence[str], now: float) -> None:
        held = self._items.get(scope, {})
        for item_id in ids:
            if item_id in held:
                held[item_id] = dataclasses.replace(held[item_id], last_used=now)
        self._changed(scope)

    async def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        held = self._items.get(scope, {})
        self._changed(scope)
        return sum(1 for item_id in set(ids) if held.pop(item_id, None) is not None)

    async def clear(self, scope: Scope) -> int:
        self._changed(scope)
        return len(self._items.pop(scope, {}))


_SQL_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_items (
    agent TEXT NOT NULL, person TEXT NOT NULL, id TEXT NOT NULL, text TEXT NOT NULL,
    created REAL NOT NULL, last_used REAL NOT NULL, source TEXT NOT NULL,
    PRIMARY KEY (agent, person, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_items_used ON memory_items (agent, person, last_used);
CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5(text, agent UNINDEXED, person UNINDEXED, id UNINDEXED);
CREATE TABLE IF NOT EXISTS memory_blocks (
    agent TEXT NOT NULL, person TEXT NOT NULL, inject INTEGER NOT NULL, max_items INTEGER NOT NULL, block TEXT NOT NULL,
    PRIMARY KEY (agent, person, inject, max_items)
) WITHOUT ROWID;
"""
_COLUMNS = "id, text, created, last_used, source"


def _create_tables(db: sqlite3.Connection) -> None:
    # one statement at a time: executescript would commit the store's open transaction
    for statement in _SQL_SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def _stale(db: sqlite3.Connection, scope: Scope) -> None:
    """The scope changed: its rendered blocks go (in the transaction that changed it)."""
    db.execute("DELETE FROM memory_blocks WHERE agent = ? AND person = ?", (scope.agent, scope.person))


def _item(row: Sequence[Any]) -> MemoryItem:
    return MemoryItem(str(row[0]), str(row[1]), float(row[2]), float(row[3]), str(row[4]))


class SQLiteMemory(MemoryBackend):
    """Items in tables of the SQLite store's own file; `recall` asks an FTS5 index."""

    def __init__(self, store: Store, sqlite: SQLiteStore) -> None:
        self.store = store
        self._store = sqlite
        self._ready = False

    async def _run(self, operation: Any, *, write: bool) -> Any:
        if not self._ready:
            await self._store.run(_create_tables, write=True)
            self._ready = True
        return await self._store.run(operation, write=write)

    async def add(self, scope: Scope, item: MemoryItem, max_items: int) -> bool:
        def add(db: sqlite3.Connection) -> bool:
            (held,) = db.execute(
                "SELECT COUNT(*) FROM memory_items WHERE agent = ? AND person = ?", (scope.agent, scope.person)
            ).fetchone()
            if held >= max_items:
                return False
            db.execute(
                f"INSERT INTO memory_items (agent, person, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (scope.agent, scope.person, item.id, item.text, item.created, item.last_used, item.source),
            )
            db.execute(
                "INSERT INTO memory_fts (text, agent, person, id) VALUES (?, ?, ?, ?)",
                (item.text, scope.agent, scope.person, item.id),
            )
            _stale(db, scope)
            return True

        return bool(await self._run(add, write=True))

    async def recent(self, scope: Scope, limit: int | None = None) -> list[MemoryItem]:
        def recent(db: sqlite3.Connection) -> list[MemoryItem]:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM memory_items WHERE agent = ? AND person = ? ORDER BY last_used DESC LIMIT ?",
                (scope.agent, scope.person, -1 if limit is None else limit),
            ).fetchall()
            return [_item(row) for row in rows]

        result: list[MemoryItem] = await self._run(recent, write=False)
        return result

    async def block(self, scope: Scope, inject_tokens: int, max_items: int) -> str:
        """The rendered block as kept since the scope last changed (every change deletes it in
        its own transaction, so no process reads a stale one); made again after a change from
        the newest items that fit, chosen in SQL (a running sum of each line's tokens as
        `item_tokens` counts them)."""
        if inject_tokens <= 0:
            return ""
        key = (scope.agent, scope.person, inject_tokens, max_items)

        def kept(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT block FROM memory_blocks WHERE agent = ? AND person = ? AND inject = ? AND max_items = ?", key
            ).fetchone()
            return None if row is None else str(row[0])

        def made(db: sqlite3.Connection) -> str:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM (SELECT {_COLUMNS}, SUM((length(text) + length(id) + 9) / 4) "
                "OVER (ORDER BY last_used DESC ROWS UNBOUNDED PRECEDING) AS used FROM memory_items "
                "WHERE agent = ? AND person = ?) WHERE used <= ? ORDER BY last_used DESC LIMIT ?",
                (scope.agent, scope.person, inject_tokens, max_items),
            ).fetchall()
            text = render(for_prompt([_item(row) for row in rows], inject_tokens))
            db.execute("INSERT OR REPLACE INTO memory_blocks (agent, person, inject, max_items, block) VALUES (?, ?, ?, ?, ?)",
                       (*key, text))
            return text

        found: str | None = await self._run(kept, write=False)
        if found is None:
            found = await self._run(made, write=True)
        return found

    async def account_block(self, agent: str, platform: str, user_id: str, inject_tokens: int, max_items: int) -> str:
        """The link and the kept block read in one operation: a turn costs one trip to the
        store's thread, as a kept block is what most turns find."""
        if inject_tokens <= 0:
            return ""

        def kept(db: sqlite3.Connection) -> tuple[str, str | None]:
            person = self._store.value_in(db, link_key(platform, user_id)) or account_id(platform, user_id)
            row = db.execute(
                "SELECT block FROM memory_blocks WHERE agent = ? AND person = ? AND inject = ? AND max_items = ?",
                (agent, person, inject_tokens, max_items),
            ).fetchone()
            return person, None if row is None else str(row[0])

        person, found = await self._run(kept, write=False)
        return found if found is not None else await self.block(Scope(agent, person), inject_tokens, max_items)

    async def search(self, scope: Scope, query: str, limit: int = RECALL_LIMIT) -> list[MemoryItem]:
        words = terms(query)
        if not words:
            return []
        expression = " OR ".join('"' + word.replace('"', '""') + '"' for word in words)

        def search(db: sqlite3.Connection) -> list[MemoryItem]:
            rows = db.execute(
                f"SELECT {', '.join('i.' + c.strip() for c in _COLUMNS.split(','))} FROM memory_fts f "
                "JOIN memory_items i ON i.agent = f.agent AND i.person = f.person AND i.id = f.id "
                "WHERE memory_fts MATCH ? AND f.agent = ? AND f.person = ? ORDER BY f.rank LIMIT ?",
                (expression, scope.agent, scope.person, limit),
            ).fetchall()
            return [_item(row) for row in rows]

        result: list[MemoryItem] = await self._run(search, write=False)
        return result

    async def touch(self, scope: Scope, ids: Sequence[str], now: float) -> None:
        def touch(db: sqlite3.Connection) -> None:
            db.executemany(
                "UPDATE memory_items SET last_used = ? WHERE agent = ? AND person = ? AND id = ?",
                [(now, scope.agent, scope.person, item_id) for item_id in ids],
            )
            _stale(db, scope)

        await self._run(touch, write=True)

    async def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        def delete(db: sqlite3.Connection) -> int:
            gone = 0
            for item_id in set(ids):
                where = (scope.agent, scope.person, item_id)
                gone += db.execute("DELETE FROM memory_items WHERE agent = ? AND person = ? AND id = ?", where).rowcount
                db.execute("DELETE FROM memory_fts WHERE agent = ? AND person = ? AND id = ?", where)
            _stale(db, scope)
            return gone

        return int(await self._run(delete, write=True))

    async def clear(self, scope: Scope) -> int:
        def clear(db: sqlite3.Connection) -> int:
            where = (scope.agent, scope.person)
            gone = db.execute("DELETE FROM memory_items WHERE agent = ? AND person = ?", where).rowcount
            db.execute("DELETE FROM memory_fts WHERE agent = ? AND person = ?", where)
            _stale(db, scope)
            return int(gone)

        return int(await self._run(clear, write=True))


# Every change deletes the scope's rendered blocks (KEYS[3]) and moves its version (KEYS[4]) on.
_ADD = """
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('DEL', KEYS[3])
redis.call('INCR', KEYS[4])
return 1
"""
_TOUCH = """
local changed = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[2], ARGV[i]) then
    redis.call('ZADD', KEYS[2], ARGV[1], ARGV[i]); changed = 1
  end
end
if changed == 1 then redis.call('DEL', KEYS[3]); redis.call('INCR', KEYS[4]) end
return changed
"""
_KEEP_BLOCK = """
if (redis.call('GET', KEYS[2]) or '0') == ARGV[1] then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) end
return 0
"""
_RECENT = """
local ids = redis.call('ZREVRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
if #ids == 0 then return {} end
local names = {}
for i = 1, #ids, 2 do names[#names + 1] = ids[i] end
local values = redis.call('HMGET', KEYS[1], unpack(names))
local out = {}
for i = 1, #names do
  if values[i] then out[#out + 1] = values[i]; out[#out + 1] = ids[2 * i] end
end
return out
"""
_DELETE = """
local gone = redis.call('HDEL', KEYS[1], unpack(ARGV))
redis.call('ZREM', KEYS[2], unpack(ARGV))
redis.call('DEL', KEYS[3])
redis.call('INCR', KEYS[4])
return gone
"""


class RedisMemory(MemoryBackend):
    """Items in Redis, shared by every worker: a hash (id → item) and a sorted set (id → when
    last used) per agent and person; adding checks the cap in the same step. The rendered
    block a turn reads is kept in a hash that every change deletes; a block made from what was
    read is kept only if the scope's version did not move meanwhile, so none is ever stale."""

    def __init__(self, store: Store, redis: RedisStore) -> None:
        self.store = store
        self._redis = redis.client
        self._key = redis.key
        self._add = self._redis.register_script(_ADD)
        self._recent = self._redis.register_script(_RECENT)
        self._delete = self._redis.register_script(_DELETE)
        self._touch = self._redis.register_script(_TOUCH)
        self._keep_block = self._redis.register_script(_KEEP_BLOCK)

    def _keys(self, scope: Scope) -> list[str]:
        base = self._key(scope.key())
        return [f"{base}:items", f"{base}:used", f"{base}:block", f"{base}:version"]

    async def block(self, scope: Scope, inject_tokens: int, max_items: int) -> str:
        if inject_tokens <= 0:
            return ""
        keys = self._keys(scope)
        field = f"{inject_tokens}:{max_items}"
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys[2], field)
            pipe.get(keys[3])
            found, version = await pipe.execute()
        if found is not None:
            return str(found)
        text = await super().block(scope, inject_tokens, max_items)
        await self._keep_block(keys=[keys[2], keys[3]], args=[version or "0", field, text])
        return text

    async def add(self, scope: Scope, item: MemoryItem, max_items: int) -> bool:
        return bool(await self._add(keys=self._keys(scope), args=[item.id, item.to_json(), item.last_used, max_items]))

    async def recent(self, scope: Scope, limit: int | None = None) -> list[MemoryItem]:
        if limit == 0:
            return []
        flat = await self._recent(keys=self._keys(scope), args=[limit if limit is not None else 0])
        return [
            dataclasses.replace(MemoryItem.from_json(flat[i]), last_used=float(flat[i + 1])) for i in range(0, len(flat), 2)
        ]

    async def search(self, scope: Scope, query: str, limit: int = RECALL_LIMIT) -> list[MemoryItem]:
        return matches(await self.recent(scope), query, limit)

    async def touch(self, scope: Scope, ids: Sequence[str], now: float) -> None:
        if ids:
            await self._touch(keys=self._keys(scope), args=[now, *ids])

    async def delete(self, scope: Scope, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        return int(await self._delete(keys=self._keys(scope), args=sorted(set(ids))))

    async def clear(self, scope: Scope) -> int:
        keys = self._keys(scope)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hlen(keys[0])
            pipe.delete(keys[0], keys[1], keys[2])
            pipe.incr(keys[3])  # never back to an earlier version: a block made before stays unkept
            held, _, _ = await pipe.execute()
        return int(held)


def memory_backend(store: Store) -> MemoryBackend:
    """The backend for the state store the bot runs on."""
    found = backend(store)
    if isinstance(found, SQLiteStore):
        return SQLiteMemory(store, found)
    if isinstance(found, RedisStore):
        return RedisMemory(store, found)
    return LocalMemory(store)
