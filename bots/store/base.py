"""The state store: one async interface that every backend implements.

The operations are the ones Redis does atomically (SET NX EX, RPUSH+LTRIM, INCR, sorted-set
windows), so every backend can be shared by workers: dedup keys, histories and loop-guard
windows mean the same thing whichever process reads them. Values are strings; callers encode
JSON themselves.

Two operations exist for the delivery protocol. `commit` applies a turn's writes (history
appends, the reply it will send) together with a marker, and only when the marker is absent,
so a turn that runs again after a crash can neither apply its effects twice nor half-apply
them. `slots_acquire` / `slots_release` hold counted slots with an expiry, so a limit on
concurrent turns holds across processes and a crashed holder's slot comes back by itself.

A bounded log per key (`log_append` / `log_read`) numbers what is appended to it: 1, 2, 3, ...,
one number after the other in every process sharing the store, never given twice and never
reset, while only the newest entries are kept. Conversation events live there, so a client
that was away can ask for everything after the last number it saw, and learn when the log no
longer reaches back that far. A backend shared by several processes also offers a feed of
what anyone appends (`log_feed`), so one process can serve the events every process makes.

Each store hands out the carrier of received items that suits it (`inbound_carrier`,
store/carrier.py) and says what it is (`shared`, `external`), so the runtime decides by what
a store states, never by its type.

Writes a caller has no use for the answer of (a turn's bookkeeping once it has replied: the
inbound journal's removal, the outbox's confirmation, turn control's marks) are handed to
`later`: queued behind the caller in order, applied soon, never awaited. Every call made on
the same store object after `later` sees those writes (read-your-writes), and they reach the
store in the order they were queued, before anything queued after them; what is lost in a
crash is a suffix of them, never a write without the ones queued before it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from botweave.store.carrier import InboundCarrier
    from botweave.store.patience import Patience

#: What `set_if_absent_capped` did: wrote the key, found it there, or found no room.
CappedSet = Literal["set", "exists", "full"]


@dataclass(frozen=True, slots=True)
class Append:
    """Append `values` to the list at `key`, then keep only its newest `max_len` items."""

    key: str
    values: tuple[str, ...]
    max_len: int | None = None


@dataclass(frozen=True, slots=True)
class Put:
    """Set `key` to `value` (expiring after `ttl` seconds when given)."""

    key: str
    value: str
    ttl: float | None = None


@dataclass(frozen=True, slots=True)
class Remove:
    """Delete `key`, whatever it holds."""

    key: str


Operation = Append | Put | Remove


@dataclass(frozen=True, slots=True)
class LogSlice:
    """Part of a bounded log: `entries` as (seq, value), oldest first; `first`, the oldest seq
    the log still holds (`head + 1` when it holds none); `head`, the newest seq it ever gave
    (0 before the first append)."""

    entries: tuple[tuple[int, str], ...]
    first: int
    head: int


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One append as a feed reports it; `key` None marks a gap (the feed was cut off for a
    while and may have missed appends: whoever follows it reads the logs again)."""

    key: str | None
    seq: int = 0
    value: str = ""


class LogFeed(ABC):
    """What is appended to the logs under a prefix, by every process sharing the store."""

    @abstractmethod
    def __aiter__(self) -> AsyncIterator[LogEntry]: ...

    @abstractmethod
    async def close(self) -> None: ...


class Store(ABC):
    async def connect(self) -> None:
        """Open connections; the in-memory store has none."""

    async def close(self) -> None:
        """Release connections."""

    def describe(self) -> str:
        """Where the state lives, safe to print (no password)."""
        return type(self).__name__

    @property
    def shared(self) -> bool:
        """Whether several worker processes, on several hosts, work from this store at once:
        what one writes the others read at once, so cool-downs, budgets and questions waiting
        for an answer are read from the store rather than kept in the process."""
        return False

    @property
    def external(self) -> bool:
        """Whether the state lives outside this process (a file, a server): it outlasts the
        process, and other processes (`botweave pair`, the next start) open it too."""
        return True

    @abstractmethod
    def inbound_carrier(
        self, *, dedup_ttl: float, lease: float, lock_ttl: float, patience: Patience | None = None, via: Store | None = None
    ) -> InboundCarrier:
        """The carrier received items are recorded in until their turns are done: the shared
        stream of a store workers share, else the journal kept in this store. It remembers an
        item `dedup_ttl` seconds (a platform's retry is recognised); a shared one gives a turn's
        entry `lease` seconds without a heartbeat before another worker takes it over, and its
        conversation and platform-leader locks outlive a silent holder by `lock_ttl`;
        `patience` waits out its server's outages. `via` is the store callers use when this one is wrapped (a `PatientStore`):
        a carrier kept in the store writes through it."""

    @abstractmethod
    async def get(self, key: str) -> str | None: ...

    @abstractmethod
    async def set(self, key: str, value: str, *, ttl: float | None = None) -> None: ...

    @abstractmethod
    async def set_if_absent(self, key: str, value: str, *, ttl: float | None = None) -> bool:
        """Atomically claim `key`; False when it already exists (the basis of dedup)."""

    @abstractmethod
    async def set_if_absent_capped(
        self, key: str, value: str, *, prefix: str, cap: int, ttl: float | None = None
    ) -> CappedSet:
        """Claim `key` unless it exists or `prefix` already holds `cap` live keys: one atomic step.

        `key` starts with `prefix`, and every key under `prefix` is written by this method
        only. "exists" when `key` is there (nothing written); "full" when `cap` or more keys
        under `prefix` are live (nothing written); else `key` is set to `value` (expiring
        after `ttl`) and "set". A key that is deleted or expires frees its place. However many
        callers race, in this process or in others sharing the store, no more than `cap` keys
        under `prefix` ever get "set" at once: the check and the write are one step. (Pairing
        uses it for its pending-code cap and its approval attempts.)
        """

    @abstractmethod
    async def delete(self, *keys: str) -> None: ...

    @abstractmethod
    async def incr(self, key: str, amount: int = 1, *, ttl: float | None = None) -> int:
        """Add to a counter; `ttl` is set when the counter is created."""

    async def get_many(self, keys: Sequence[str]) -> list[str | None]:
        """The values of `keys`, in order (None for a missing one), in one round trip where
        the backend can: a model call reads its cool-downs and budget counters this way."""
        return [await self.get(key) for key in keys]

    async def incr_many(self, amounts: Mapping[str, tuple[int, float | None]]) -> None:
        """Add to several counters at once: key → (amount, ttl set when the counter is
        created). One round trip where the backend can; usage is counted this way."""
        for key, (amount, ttl) in amounts.items():
            await self.incr(key, amount, ttl=ttl)

    @abstractmethod
    async def list_append(self, key: str, *values: str, max_len: int | None = None) -> None:
        """Append, then keep only the newest `max_len` items."""

    @abstractmethod
    async def list_range(self, key: str, start: int = 0, end: int = -1) -> list[str]:
        """Items from `start` to `end` inclusive (negative counts from the end), like LRANGE."""

    @abstractmethod
    async def window_add(self, key: str, now: float, window: float) -> int:
        """Record an event at `now`, forget events older than `window`, return how many remain."""

    @abstractmethod
    async def keys(self, prefix: str) -> list[str]: ...

    @abstractmethod
    async def commit(
        self, marker: str, operations: Sequence[Operation], *, value: str = "1", ttl: float | None = None
    ) -> bool:
        """Apply `operations` and set `marker` to `value` in one atomic step, only when `marker`
        does not exist yet. True when this call applied them; False when the marker was there
        (an earlier run committed, and nothing was written now)."""

    @abstractmethod
    async def slots_acquire(self, claims: Sequence[tuple[str, int]], holder: str, ttl: float) -> bool:
        """Take a slot named `holder` in every `(key, limit)` of `claims`, all or none: False when
        any key already has `limit` live holders. A slot expires `ttl` seconds after it was last
        taken; taking it again while held renews it. A limit of 0 means unlimited."""

    @abstractmethod
    async def slots_release(self, keys: Sequence[str], holder: str) -> None:
        """Give `holder`'s slot back in each of `keys` (a slot not held is ignored)."""

    @abstractmethod
    async def slots_held(self, key: str) -> int:
        """How many live slots `key` has."""

    @abstractmethod
    async def log_append(
        self, key: str, value: str, *, max_len: int, unique: str | None = None, unique_ttl: float | None = None
    ) -> int:
        """Append `value` to the log at `key` under the next seq and keep only the newest
        `max_len` entries; the seq given. With `unique`, a key naming this append (expiring
        after `unique_ttl`): when an append under the same `unique` was made before, nothing
        is appended and 0 is returned, so a retried append happens once."""

    @abstractmethod
    async def log_read(self, key: str, *, after: int = 0, limit: int = 100) -> LogSlice:
        """The entries with a seq above `after`, oldest first, at most `limit` of them."""

    @abstractmethod
    def later(self, *operations: Operation) -> None:
        """Apply `operations` in order, without the caller waiting for them.

        Every call on this store made after this one sees their effects (a read submitted
        after a queued write reads it), and they are applied before any write queued after
        them. Backends batch them: the SQLite thread runs them in the transaction it has
        open, Redis sends what queued up meanwhile in one pipeline. A write that fails is
        logged (with its key) and dropped: use `later` only for writes whose loss a crash
        could cause anyway and the protocol absorbs (a journal entry answered again meets
        its turn's marker; an unconfirmed chunk is settled before it is sent again)."""

    async def settled(self) -> None:
        """Wait until every write handed to `later` so far has been applied (or failed and
        been logged): for shutdown, and for whoever must know they landed."""

    def log_feed(self, prefix: str) -> LogFeed | None:
        """Appends to logs whose key starts with `prefix` made by any process sharing this
        store, as they happen; None for a store only this process uses (its appends are known
        to whoever made them)."""
        return None


def redact_url(url: str) -> str:
    """The URL with its password replaced, safe for logs and dumps."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))
