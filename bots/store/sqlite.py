"""The embedded durable store: one SQLite file (aiosqlite, WAL), no server to run.

It is what `botweave run` and `botweave chat` use unless told otherwise, so history, pairing,
dedup keys and the inbound journal survive a restart on a single host. Other processes on the
same host (`botweave pair approve` in a second shell) open the same file and see the same
state: WAL lets them read while the bot writes, and a writer that finds the file busy waits
for it (`busy_timeout`) instead of failing.

Every operation runs as one transaction on this process's single connection; a lock keeps
two coroutines from interleaving statements of different transactions on it. Writes take the
write lock up front (`BEGIN IMMEDIATE`), so a read-then-write operation (set-if-absent,
counters, commits, slots) is atomic across processes too. `synchronous=NORMAL` in WAL mode
keeps every committed transaction across a crash of the process; only a power loss can take
back the last few.

Expiry uses the wall clock, since several processes read the same rows.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
from botweave.store.base import Append, Operation, Put, Remove, Store, StoreOutage, StoreUnavailable

log = logging.getLogger(__name__)

#: How long a write waits for another process's transaction before it counts as an outage.
BUSY_TIMEOUT_MS = 5000
#: How often expired keys are swept out of the file (they are ignored until then).
PURGE_EVERY_S = 600.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS list_items (
    key TEXT NOT NULL, pos INTEGER NOT NULL, value TEXT NOT NULL, PRIMARY KEY (key, pos)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS zset (
    key TEXT NOT NULL, member TEXT NOT NULL, score REAL NOT NULL, PRIMARY KEY (key, member)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS expiry (key TEXT PRIMARY KEY, expires REAL NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires) WHERE expires IS NOT NULL;
"""

Clock = Callable[[], float]


def sqlite_path(url: str, base: Path | None = None) -> Path:
    """The file a `sqlite://` URL names: `sqlite:///relative/path.db` is relative to `base`
    (the configuration file's folder), `sqlite:////absolute/path.db` is absolute."""
    rest = url.removeprefix("sqlite://")
    if not rest.startswith("/") or rest == "/":
        raise ValueError(f"not a sqlite URL with a path: {url!r} (use sqlite:///relative.db or sqlite:////abs.db)")
    raw = rest[1:]
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    return path


class SQLiteStore(Store):
    def __init__(self, path: str | Path, *, clock: Clock = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._purged_at = 0.0

    def describe(self) -> str:
        return f"sqlite:///{self.path}"

    async def connect(self) -> None:
        if self._db is not None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = await aiosqlite.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"cannot open the SQLite store at {self.path}: {exc}") from None
        try:
            await db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await db.execute("PRAGMA journal_mode = WAL")
            await db.execute("PRAGMA synchronous = NORMAL")
            await db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            await db.close()
            raise StoreUnavailable(f"cannot use the SQLite store at {self.path}: {exc}") from None
        self._db = db
        await self._purge()

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    # --- plumbing ----------------------------------------------------------------------------

    @asynccontextmanager
    async def _tx(self, write: bool) -> AsyncIterator[aiosqlite.Connection]:
        """One transaction on the connection, held against every other coroutine's. A read
        is a single statement, atomic by itself, so it skips BEGIN/COMMIT."""
        if self._db is None:
            await self.connect()
        db = self._db
        assert db is not None
        async with self._lock:
            try:
                if write:
                    await db.execute("BEGIN IMMEDIATE")
                yield db
                if write:
                    await db.execute("COMMIT")
            except BaseException as exc:
                if db.in_transaction:
                    try:
                        await db.execute("ROLLBACK")
                    except sqlite3.Error:
                        log.debug("rollback failed", exc_info=True)
                if isinstance(exc, sqlite3.OperationalError):
                    raise StoreOutage(f"sqlite: {exc}") from exc
                raise

    async def _rows(self, db: aiosqlite.Connection, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        return list(await db.execute_fetchall(sql, tuple(params)))

    async def _purge(self) -> None:
        now = self.clock()
        self._purged_at = now
        async with self._tx(write=True) as db:
            await db.execute("DELETE FROM kv WHERE expires IS NOT NULL AND expires <= ?", (now,))
            stale = [r[0] for r in await self._rows(db, "SELECT key FROM expiry WHERE expires <= ?", (now,))]
            for key in stale:
                await self._drop(db, key)

    async def _maybe_purge(self) -> None:
        if self.clock() - self._purged_at > PURGE_EVERY_S:
            await self._purge()

    @staticmethod
    async def _drop(db: aiosqlite.Connection, key: str) -> None:
        await db.execute("DELETE FROM kv WHERE key = ?", (key,))
        await db.execute("DELETE FROM list_items WHERE key = ?", (key,))
        await db.execute("DELETE FROM zset WHERE key = ?", (key,))
        await db.execute("DELETE FROM expiry WHERE key = ?", (key,))

    async def _live_value(self, db: aiosqlite.Connection, key: str) -> str | None:
        rows = await self._rows(db, "SELECT value, expires FROM kv WHERE key = ?", (key,))
        if not rows:
            return None
        value, expires = rows[0]
        if expires is not None and expires <= self.clock():
            return None
        return str(value)

    async def _put(self, db: aiosqlite.Connection, key: str, value: str, ttl: float | None) -> None:
        expires = None if ttl is None else self.clock() + ttl
        await db.execute(
            "INSERT INTO kv (key, value, expires) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires",
            (key, value, expires),
        )

    async def _append(self, db: aiosqlite.Connection, key: str, values: Sequence[str], max_len: int | None) -> None:
        rows = await self._rows(db, "SELECT MAX(pos) FROM list_items WHERE key = ?", (key,))
        last = rows[0][0] if rows and rows[0][0] is not None else 0
        await db.executemany(
            "INSERT INTO list_items (key, pos, value) VALUES (?, ?, ?)",
            [(key, last + i, value) for i, value in enumerate(values, start=1)],
        )
        if max_len is not None:
            top = last + len(values)
            await db.execute("DELETE FROM list_items WHERE key = ? AND pos <= ?", (key, top - max_len))

    async def _live_holders(self, db: aiosqlite.Connection, key: str) -> set[str]:
        await db.execute("DELETE FROM zset WHERE key = ? AND score <= ?", (key, self.clock()))
        return {r[0] for r in await self._rows(db, "SELECT member FROM zset WHERE key = ?", (key,))}

    # --- the interface -----------------------------------------------------------------------

    async def get(self, key: str) -> str | None:
        async with self._tx(write=False) as db:
            return await self._live_value(db, key)

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        await self._maybe_purge()
        async with self._tx(write=True) as db:
            await self._put(db, key, value, ttl)

    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        await self._maybe_purge()
        async with self._tx(write=True) as db:
            if await self._live_value(db, key) is not None:
                return False
            await self._put(db, key, value, ttl)
            return True

    async def delete(self, *keys: str) -> None:
        if not keys:
            return
        async with self._tx(write=True) as db:
            for key in keys:
                await self._drop(db, key)

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        async with self._tx(write=True) as db:
            rows = await self._rows(db, "SELECT value, expires FROM kv WHERE key = ?", (key,))
            if rows and (rows[0][1] is None or rows[0][1] > self.clock()):
                value = int(rows[0][0]) + amount
                await db.execute("UPDATE kv SET value = ? WHERE key = ?", (str(value), key))
            else:
                value = amount
                await self._put(db, key, str(value), ttl)
            return value

    async def list_append(self, key: str, *values: str, max_len: int | None = None) -> None:
        async with self._tx(write=True) as db:
            await self._append(db, key, values, max_len)

    async def list_range(self, key: str, start: int = 0, end: int = -1) -> list[str]:
        async with self._tx(write=False) as db:
            items = [str(r[0]) for r in await self._rows(db, "SELECT value FROM list_items WHERE key = ? ORDER BY pos", (key,))]
        count = len(items)
        first = max(count + start, 0) if start < 0 else start
        last = count + end if end < 0 else min(end, count - 1)
        return items[first : last + 1] if first <= last else []

    async def window_add(self, key: str, now: float, window: float) -> int:
        async with self._tx(write=True) as db:
            await db.execute("DELETE FROM zset WHERE key = ? AND score < ?", (key, now - window))
            member = f"{now!r}:{uuid.uuid4().hex[:8]}"  # equal timestamps are still separate events
            await db.execute("INSERT OR REPLACE INTO zset (key, member, score) VALUES (?, ?, ?)", (key, member, now))
            await db.execute(
                "INSERT INTO expiry (key, expires) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET expires = excluded.expires",
                (key, self.clock() + window),
            )
            return int((await self._rows(db, "SELECT COUNT(*) FROM zset WHERE key = ?", (key,)))[0][0])

    async def keys(self, prefix: str) -> list[str]:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        now = self.clock()
        async with self._tx(write=False) as db:
            rows = await self._rows(
                db,
                "SELECT key FROM kv WHERE key LIKE ? ESCAPE '\\' AND (expires IS NULL OR expires > ?) "
                "UNION SELECT DISTINCT key FROM list_items WHERE key LIKE ? ESCAPE '\\' "
                "UNION SELECT DISTINCT z.key FROM zset z LEFT JOIN expiry e ON e.key = z.key "
                "WHERE z.key LIKE ? ESCAPE '\\' AND (e.expires IS NULL OR e.expires > ?)",
                (pattern, now, pattern, pattern, now),
            )
        # LIKE ignores ASCII case; the prefix must match exactly.
        return [str(r[0]) for r in rows if str(r[0]).startswith(prefix)]

    async def commit(
        self, marker: str, operations: Sequence[Operation], *, value: str = "1", ttl: float | None = None
    ) -> bool:
        async with self._tx(write=True) as db:
            if await self._live_value(db, marker) is not None:
                return False
            for op in operations:
                if isinstance(op, Append):
                    await self._append(db, op.key, op.values, op.max_len)
                elif isinstance(op, Put):
                    await self._put(db, op.key, op.value, op.ttl)
                elif isinstance(op, Remove):
                    await self._drop(db, op.key)
            await self._put(db, marker, value, ttl)
            return True

    async def slots_acquire(self, claims: Sequence[tuple[str, int]], holder: str, ttl: float) -> bool:
        async with self._tx(write=True) as db:
            for key, limit in claims:
                holders = await self._live_holders(db, key)
                if limit > 0 and holder not in holders and len(holders) >= limit:
                    return False
            until = self.clock() + ttl
            for key, _ in claims:
                await db.execute(
                    "INSERT INTO zset (key, member, score) VALUES (?, ?, ?) "
                    "ON CONFLICT (key, member) DO UPDATE SET score = excluded.score",
                    (key, holder, until),
                )
            return True

    async def slots_release(self, keys: Sequence[str], holder: str) -> None:
        async with self._tx(write=True) as db:
            for key in keys:
                await db.execute("DELETE FROM zset WHERE key = ? AND member = ?", (key, holder))

    async def slots_held(self, key: str) -> int:
        async with self._tx(write=True) as db:
            return len(await self._live_holders(db, key))
