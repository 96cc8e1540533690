"""The embedded durable store: one SQLite file (WAL), no server to run.

It is what `botweave run` and `botweave chat` use unless told otherwise, so history, pairing,
dedup keys and the inbound journal survive a restart on a single host. Other processes on the
same host (`botweave pair approve` in a second shell) open the same file and see the same
state: WAL lets them read while the bot writes, and a writer that finds the file busy waits
for it (`busy_timeout`) instead of failing.

Every operation is one function run on this process's single connection, in a thread of its
own, so a file that is slow or busy never holds up the event loop. Operations run in the
order they were asked for. A write takes the write lock up front (`BEGIN IMMEDIATE`), so a
read-then-write operation (set-if-absent, counters, commits, slots) is atomic across
processes too.

Operations that queue up while the thread is busy run together, in one transaction with a
savepoint each: one that fails is rolled back alone, and none is answered before the
transaction that holds it has committed. A bot answering a few hundred conversations asks for
thousands of small writes a second (an intent and a confirmation per chunk sent); a
transaction and a wake-up of the event loop each would cost more than the writes themselves.
`synchronous=NORMAL` in WAL mode keeps every committed transaction across a crash of the
process; only a power loss can take back the last few.

Expiry uses the wall clock, since several processes read the same rows.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from botweave.store.base import (
    Append,
    CappedSet,
    LogSlice,
    Operation,
    Put,
    Remove,
    Store,
)
from botweave.store.carrier import InboundCarrier
from botweave.store.errors import StoreOutage, StoreUnavailable
from botweave.store.journal import InboundJournal
from botweave.store.patience import Patience
from botweave.tasks import spawn

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a write waits for another process's transaction before it counts as an outage.
BUSY_TIMEOUT_MS = 5000
#: How often expired keys are swept out of the file (they are ignored until then).
PURGE_EVERY_S = 600.0
#: The most operations one transaction carries (a bound on how long the write lock is held).
MAX_BATCH = 256

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires REAL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS list_items (
    key TEXT NOT NULL, pos INTEGER NOT NULL, value TEXT NOT NULL, PRIMARY KEY (key, pos)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS zset (
    key TEXT NOT NULL, member TEXT NOT NULL, score REAL NOT NULL, PRIMARY KEY (key, member)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS expiry (key TEXT PRIMARY KEY, expires REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_heads (key TEXT PRIMARY KEY, head INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log_items (
    key TEXT NOT NULL, seq INTEGER NOT NULL, value TEXT NOT NULL, PRIMARY KEY (key, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_expires ON kv (expires) WHERE expires IS NOT NULL;
"""

Clock = Callable[[], float]
Db = sqlite3.Connection


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


@dataclass(slots=True)
class _Job:
    run: Callable[[Db], Any]
    write: bool
    #: Who waits for the outcome; None for a deferred write (`later`), which nobody awaits:
    #: the thread then neither wakes the event loop for it nor reports anything but a failure.
    future: asyncio.Future[Any] | None
    keys: tuple[str, ...] = ()  # a deferred write's keys, for its failure's log line
    outcome: tuple[bool, Any] = field(default=(False, None))  # (failed, result or exception)


def _outage(exc: BaseException) -> BaseException:
    """What a caller sees: a file that cannot be used right now is an outage (the patient
    store waits it out); anything else is the error it is."""
    if isinstance(exc, sqlite3.OperationalError):
        failure = StoreOutage(f"sqlite: {exc}")
        failure.__cause__ = exc
        return failure
    return exc


def _settle(jobs: list[_Job]) -> None:
    """On the event loop: hand each finished job's outcome to whoever still waits for it."""
    for job in jobs:
        if job.future is None or job.future.done():
            continue  # its caller gave up (cancelled); the operation still happened or not as reported
        failed, value = job.outcome
        if failed:
            job.future.set_exception(value)
        else:
            job.future.set_result(value)


class _Worker:
    """The thread that owns the connection and runs queued operations, batch by batch."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self.clock = clock
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._main, name=f"botweave-sqlite:{path.name}", daemon=True)
        self.opened: asyncio.Future[None] | None = None
        self.closed: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.purged_at = 0.0

    @property
    def open(self) -> bool:
        """Whether the thread has the file open and takes jobs."""
        opened = self.opened
        return opened is not None and opened.done() and not opened.cancelled() and opened.exception() is None

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.opened = self.loop.create_future()
        self.closed = self.loop.create_future()
        self.thread.start()
        await self.opened

    async def stop(self) -> None:
        self.jobs.put(None)
        if self.closed is not None:
            await asyncio.shield(self.closed)

    def submit(self, run: Callable[[Db], T], write: bool) -> asyncio.Future[T]:
        """Queue `run` (before the thread starts, too: it runs once the file is open)."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = self.loop.create_future()
        self.jobs.put(_Job(run, write, future))
        return future

    def defer(self, run: Callable[[Db], None], keys: tuple[str, ...]) -> None:
        """Queue a write nobody waits for: it runs in order with everything else."""
        self.jobs.put(_Job(run, True, None, keys))

    # --- in the thread ------------------------------------------------------------------

    def _tell(self, future: asyncio.Future[None] | None, error: BaseException | None = None) -> None:
        assert self.loop is not None and future is not None

        def settle() -> None:
            if future.done():
                return
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

        try:
            self.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    def _open(self) -> Db:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except (OSError, sqlite3.Error) as exc:
            raise StoreUnavailable(f"cannot open the SQLite store at {self.path}: {exc}") from None
        try:
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.executescript(_SCHEMA)
            self._purge(db)
        except sqlite3.Error as exc:
            db.close()
            raise StoreUnavailable(f"cannot use the SQLite store at {self.path}: {exc}") from None
        return db

    def _main(self) -> None:
        try:
            db = self._open()
        except BaseException as exc:  # boundary: the store's thread, its failure to open handed to every waiter
            self._tell(self.closed)
            self._tell(self.opened, exc)
            self._fail_queued(exc)
            return
        self._tell(self.opened)
        try:
            self._serve(db)
        finally:
            db.close()
            self._tell(self.closed)

    def _fail_queued(self, exc: BaseException) -> None:
        """The file could not be opened: whatever was queued (writes handed to `later` before
        the store connected) fails with that."""
        failed = []
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.outcome = (True, exc)
                failed.append(job)
        _report_deferred(failed)
        failed = [job for job in failed if job.future is not None]
        if failed and self.loop is not None:
            try:
                self.loop.call_soon_threadsafe(_settle, failed)
            except RuntimeError:  # the loop is gone: nobody is waiting any more
                pass

    def _serve(self, db: Db) -> None:
        stopping = False
        while not stopping:
            first = self.jobs.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    more = self.jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batch.append(more)
            self._run(db, batch)
            _report_deferred(batch)
            waited = [job for job in batch if job.future is not None]
            if not waited:
                continue  # only deferred writes, all done: nothing for the loop to do
            assert self.loop is not None
            try:
                self.loop.call_soon_threadsafe(_settle, waited)
            except RuntimeError:  # the loop is gone: nobody is waiting any more
                return

    def _run(self, db: Db, batch: list[_Job]) -> None:
        """Run the batch in one transaction; each job's outcome lands in `job.outcome`."""
        write = any(job.write for job in batch) or self._purge_due()
        alone = len(batch) == 1
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            if write and self._purge_due():
                self._purge(db)
            for job in batch:
                if alone:
                    job.outcome = (False, job.run(db))
                    continue
                db.execute("SAVEPOINT op")
                try:
                    job.outcome = (False, job.run(db))
                except Exception as exc:  # boundary: the store's thread hands each job its own error
                    db.execute("ROLLBACK TO op")
                    job.outcome = (True, _outage(exc))
                db.execute("RELEASE op")
            db.execute("COMMIT")
        except Exception as exc:  # boundary: the store's thread, the batch's failure handed to its jobs
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    log.debug("rollback failed", exc_info=True)
            failure = _outage(exc)
            for job in batch:  # nothing of this transaction holds, whatever a job returned
                job.outcome = (True, failure)

    def _purge_due(self) -> bool:
        return self.clock() - self.purged_at > PURGE_EVERY_S

    def _purge(self, db: Db) -> None:
        now = self.clock()
        self.purged_at = now
        db.execute("DELETE FROM kv WHERE expires IS NOT NULL AND expires <= ?", (now,))
        for (key,) in db.execute("SELECT key FROM expiry WHERE expires <= ?", (now,)).fetchall():
            _drop(db, key)


def _report_deferred(jobs: list[_Job]) -> None:
    """In the thread: nobody awaits a deferred write, so its failure is logged here (by key
    only: values may hold what people wrote)."""
    for job in jobs:
        failed, exc = job.outcome
        if job.future is None and failed:
            log.warning("a deferred write to the SQLite store failed and was dropped (%s): %s", ", ".join(job.keys), exc)


def _drop(db: Db, key: str) -> None:
    db.execute("DELETE FROM kv WHERE key = ?", (key,))
    db.execute("DELETE FROM list_items WHERE key = ?", (key,))
    db.execute("DELETE FROM zset WHERE key = ?", (key,))
    db.execute("DELETE FROM expiry WHERE key = ?", (key,))


def _rows(db: Db, sql: str, params: Iterable[Any] = ()) -> list[Any]:
    return db.execute(sql, tuple(params)).fetchall()


class SQLiteStore(Store):
    def __init__(self, path: str | Path, *, clock: Clock = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        self._worker: _Worker | None = None
        self._starting: asyncio.Lock | None = None
        self._connecting = False

    def describe(self) -> str:
        return f"sqlite:///{self.path}"

    def inbound_carrier(
        self, *, dedup_ttl: float, lease: float, lock_ttl: float, patience: Patience | None = None, via: Store | None = None
    ) -> InboundCarrier:
        """The journal, kept in this store: one process answers what it receives."""
        return InboundJournal(via or self, dedup_ttl)

    async def connect(self) -> None:
        if self._worker is not None and self._worker.open:
            return
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            worker = self._queue()
            if worker.open:
                return
            try:
                await worker.start()
            except BaseException:
                if self._worker is worker:
                    self._worker = None  # the next call tries again with a fresh thread
                raise

    async def close(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None and worker.open:
            await worker.stop()  # after what is queued: deferred writes land first

    def later(self, *operations: Operation) -> None:
        if not operations:
            return
        worker = self._queue()
        worker.defer(lambda db: self._apply_all(db, operations), tuple(op.key for op in operations))
        if worker.opened is None and not self._connecting:
            self._connecting = True  # someone must open the file for them
            spawn(self.connect(), name="connect the SQLite store for deferred writes")

    async def settled(self) -> None:
        worker = self._worker
        if worker is not None:
            # answered only once every job queued before it has committed
            await self._do(lambda db: None, write=False)

    def value_in(self, db: Db, key: str) -> str | None:
        """A key's live value, read inside an operation given to `run` (same transaction)."""
        return self._live_value(db, key)

    async def run(self, operation: Callable[[Db], T], *, write: bool) -> T:
        """Run `operation` on the store's connection, in its thread and transaction order, for
        a feature that keeps tables of its own in the file (the memory feature's full-text
        index). It runs inside a transaction (a savepoint of one); it must not commit."""
        return await self._do(operation, write=write)

    # --- plumbing ----------------------------------------------------------------------------

    def _queue(self) -> _Worker:
        """The worker whose queue operations go to, started or not."""
        if self._worker is None:
            self._worker = _Worker(self.path, self.clock)
            self._connecting = False
        return self._worker

    async def _do(self, run: Callable[[Db], T], *, write: bool) -> T:
        worker = self._worker
        if worker is None or not worker.open:
            await self.connect()
            worker = self._queue()
        return await worker.submit(run, write)

    def _apply_all(self, db: Db, operations: Sequence[Operation]) -> None:
        for op in operations:
            self._apply(db, op)

    def _apply(self, db: Db, op: Operation) -> None:
        if isinstance(op, Append):
            self._append(db, op.key, op.values, op.max_len)
        elif isinstance(op, Put):
            self._put(db, op.key, op.value, op.ttl)
        elif isinstance(op, Remove):
            _drop(db, op.key)

    def _live_value(self, db: Db, key: str) -> str | None:
        rows = _rows(db, "SELECT value, expires FROM kv WHERE key = ?", (key,))
        if not rows:
            return None
        value, expires = rows[0]
        if expires is not None and expires <= self.clock():
            return None
        return str(value)

    def _put(self, db: Db, key: str, value: str, ttl: float | None) -> None:
        expires = None if ttl is None else self.clock() + ttl
        db.execute(
            "INSERT INTO kv (key, value, expires) VALUES (?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires = excluded.expires",
            (key, value, expires),
        )

    @staticmethod
    def _append(db: Db, key: str, values: Sequence[str], max_len: int | None) -> None:
        rows = _rows(db, "SELECT MAX(pos) FROM list_items WHERE key = ?", (key,))
        last = rows[0][0] if rows and rows[0][0] is not None else 0
        db.executemany(
            "INSERT INTO list_items (key, pos, value) VALUES (?, ?, ?)",
            [(key, last + i, value) for i, value in enumerate(values, start=1)],
        )
        if max_len is not None:
            top = last + len(values)
            db.execute("DELETE FROM list_items WHERE key = ? AND pos <= ?", (key, top - max_len))

    def _live_holders(self, db: Db, key: str) -> set[str]:
        db.execute("DELETE FROM zset WHERE key = ? AND score <= ?", (key, self.clock()))
        return {r[0] for r in _rows(db, "SELECT member FROM zset WHERE key = ?", (key,))}

    # --- the interface -----------------------------------------------------------------------

    async def get(self, key: str) -> str | None:
        return await self._do(lambda db: self._live_value(db, key), write=False)

    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None:
        await self._do(lambda db: self._put(db, key, value, ttl), write=True)

    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        def run(db: Db) -> bool:
            if self._live_value(db, key) is not None:
                return False
            self._put(db, key, value, ttl)
            return True

        return await self._do(run, write=True)

    async def set_if_absent_capped(
        self, key: str, value: str, *, prefix: str, cap: int, ttl: float | None = None
    ) -> CappedSet:
        # One write transaction (BEGIN IMMEDIATE holds the file's write lock from the count to
        # the insert), so racing processes take their places one after another.
        def run(db: Db) -> CappedSet:
            if self._live_value(db, key) is not None:
                return "exists"
            rows = _rows(
                db,
                # substr compares exactly (LIKE would ignore case and read % and _ as wildcards)
                "SELECT COUNT(*) FROM kv WHERE substr(key, 1, ?) = ? AND (expires IS NULL OR expires > ?)",
                (len(prefix), prefix, self.clock()),
            )
            if int(rows[0][0]) >= cap:
                return "full"
            self._put(db, key, value, ttl)
            return "set"

        return await self._do(run, write=True)

    async def delete(self, *keys: str) -> None:
        if not keys:
            return

        def run(db: Db) -> None:
            for key in keys:
                _drop(db, key)

        await self._do(run, write=True)

    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        return await self._do(lambda db: self._incr(db, key, amount, ttl), write=True)

    def _incr(self, db: Db, key: str, amount: int, ttl: float | None) -> int:
        rows = _rows(db, "SELECT value, expires FROM kv WHERE key = ?", (key,))
        if rows and (rows[0][1] is None or rows[0][1] > self.clock()):
            value = int(rows[0][0]) + amount
            db.execute("UPDATE kv SET value = ? WHERE key = ?", (str(value), key))
        else:
            value = amount
            self._put(db, key, str(value), ttl)
        return value

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        return await self._do(lambda db: [self._live_value(db, key) for key in keys], write=False)

    async def incr_many(self, amounts: Mapping[str, tuple[int, float | None]]) -> None:
        def run(db: Db) -> None:
            for key, (amount, ttl) in amounts.items():
                self._incr(db, key, amount, ttl)

        await self._do(run, write=True)

    async def list_append(self, key: str, *values: str, max_len: int | None = None) -> None:
        await self._do(lambda db: self._append(db, key, values, max_len), write=True)

    async def list_range(self, key: str, start: int = 0, end: int = -1) -> list[str]:
        def run(db: Db) -> list[str]:
            return [str(r[0]) for r in _rows(db, "SELECT value FROM list_items WHERE key = ? ORDER BY pos", (key,))]

        items = await self._do(run, write=False)
        count = len(items)
        first = max(count + start, 0) if start < 0 else start
        last = count + end if end < 0 else min(end, count - 1)
        return items[first : last + 1] if first <= last else []

    async def window_add(self, key: str, now: float, window: float) -> int:
        member = f"{now!r}:{uuid.uuid4().hex[:8]}"  # equal timestamps are still separate events

        def run(db: Db) -> int:
            db.execute("DELETE FROM zset WHERE key = ? AND score < ?", (key, now - window))
            db.execute("INSERT OR REPLACE INTO zset (key, member, score) VALUES (?, ?, ?)", (key, member, now))
            db.execute(
                "INSERT INTO expiry (key, expires) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET expires = excluded.expires",
                (key, self.clock() + window),
            )
            return int(_rows(db, "SELECT COUNT(*) FROM zset WHERE key = ?", (key,))[0][0])

        return await self._do(run, write=True)

    async def keys(self, prefix: str) -> list[str]:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        now = self.clock()
        rows = await self._do(
            lambda db: _rows(
                db,
                "SELECT key FROM kv WHERE key LIKE ? ESCAPE '\\' AND (expires IS NULL OR expires > ?) "
                "UNION SELECT DISTINCT key FROM list_items WHERE key LIKE ? ESCAPE '\\' "
                "UNION SELECT DISTINCT z.key FROM zset z LEFT JOIN expiry e ON e.key = z.key "
                "WHERE z.key LIKE ? ESCAPE '\\' AND (e.expires IS NULL OR e.expires > ?)",
                (pattern, now, pattern, pattern, now),
            ),
            write=False,
        )
        # LIKE ignores ASCII case; the prefix must match exactly.
        return [str(r[0]) for r in rows if str(r[0]).startswith(prefix)]

    async def commit(
        self, marker: str, operations: Sequence[Operation], *, value: str = "1", ttl: float | None = None
    ) -> bool:
        def run(db: Db) -> bool:
            if self._live_value(db, marker) is not None:
                return False
            self._apply_all(db, operations)
            self._put(db, marker, value, ttl)
            return True

        return await self._do(run, write=True)

    async def slots_acquire(self, claims: Sequence[tuple[str, int]], holder: str, ttl: float) -> bool:
        def run(db: Db) -> bool:
            for key, limit in claims:
                holders = self._live_holders(db, key)
                if limit > 0 and holder not in holders and len(holders) >= limit:
                    return False
            until = self.clock() + ttl
            for key, _ in claims:
                db.execute(
                    "INSERT INTO zset (key, member, score) VALUES (?, ?, ?) "
                    "ON CONFLICT (key, member) DO UPDATE SET score = excluded.score",
                    (key, holder, until),
                )
            return True

        return await self._do(run, write=True)

    async def slots_release(self, keys: Sequence[str], holder: str) -> None:
        def run(db: Db) -> None:
            for key in keys:
                db.execute("DELETE FROM zset WHERE key = ? AND member = ?", (key, holder))

        await self._do(run, write=True)

    async def slots_held(self, key: str) -> int:
        return await self._do(lambda db: len(self._live_holders(db, key)), write=True)

    async def log_append(
        self, key: str, value: str, *, max_len: int, unique: str | None = None, unique_ttl: float | None = None
    ) -> int:
        # The number and the entry in one write transaction: racing processes number in turn.
        def run(db: Db) -> int:
            if unique is not None:
                if self._live_value(db, unique) is not None:
                    return 0
                self._put(db, unique, "1", unique_ttl)
            rows = _rows(
                db,
                "INSERT INTO log_heads (key, head) VALUES (?, 1) "
                "ON CONFLICT (key) DO UPDATE SET head = head + 1 RETURNING head",
                (key,),
            )
            seq = int(rows[0][0])
            db.execute("INSERT INTO log_items (key, seq, value) VALUES (?, ?, ?)", (key, seq, value))
            db.execute("DELETE FROM log_items WHERE key = ? AND seq <= ?", (key, seq - max(max_len, 1)))
            return seq

        return await self._do(run, write=True)

    async def log_read(self, key: str, *, after: int = 0, limit: int = 100) -> LogSlice:
        def run(db: Db) -> LogSlice:
            heads = _rows(db, "SELECT head FROM log_heads WHERE key = ?", (key,))
            head = int(heads[0][0]) if heads else 0
            oldest = _rows(db, "SELECT MIN(seq) FROM log_items WHERE key = ?", (key,))
            first = int(oldest[0][0]) if oldest and oldest[0][0] is not None else head + 1
            rows = _rows(
                db,
                "SELECT seq, value FROM log_items WHERE key = ? AND seq > ? ORDER BY seq LIMIT ?",
                (key, after, max(limit, 0)),
            )
            return LogSlice(tuple((int(seq), str(value)) for seq, value in rows), first, head)

        return await self._do(run, write=False)
