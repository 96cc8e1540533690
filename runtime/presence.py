"""How other processes reach a running bot through the state it keeps: its record in the
store, and the reload requests it watches for.

A bot process on a store other processes can open (the SQLite file of its configuration, or
Redis) keeps a record of itself there (`ops:process:<id>`: host, pid, role, the revision it
runs and how the file on disk differs from it), renewed every few seconds and expiring soon
after the process is gone, and it looks for a reload request (`ops:reload`) every second.
That is all `botweave reload` and `botweave doctor` need, on one host or many, without pid
files or signals that cannot cross hosts: `reload` finds the processes by their records,
leaves a request, and reads each one's answer (`ops:reload:<request>:<process>`); with
Redis, every worker and the ingress answer, each reloading its own file.

A process does not answer a request it left itself (`App.reload(everywhere=True)` reloads
here first, then asks the others). With state in memory nothing of this exists: no other
process could read it; SIGHUP reaches such a bot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from botweave.runtime.reload_plan import ReloadResult
from botweave.store import Store, open_store, store_failures
from botweave.store.sqlite import sqlite_path

log = logging.getLogger(__name__)

PROCESS_PREFIX = "ops:process:"
REQUEST_KEY = "ops:reload"
#: How often a process looks for a reload request, and renews its record.
POLL_S = 1.0
BEAT_S = 5.0
#: A record outlives its process by this much at most.
RECORD_TTL_S = 15.0
#: How long a process's answer to a request is kept.
ANSWER_TTL_S = 600.0


def process_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:4]}"


def _answer_key(request: str, process: str) -> str:
    return f"{REQUEST_KEY}:{request}:{process}"


@dataclass(frozen=True)
class Record:
    """A running process, as its record in the store says."""

    id: str
    host: str
    pid: int
    role: str
    revision: str
    source: str | None
    #: How the configuration file differs from what runs ("" when it does not).
    drift: str

    def who(self) -> str:
        return f"{self.host} pid {self.pid} ({self.role})"

    @classmethod
    def parse(cls, raw: str) -> Record | None:
        try:
            data = json.loads(raw)
            return cls(
                str(data["id"]), str(data["host"]), int(data["pid"]), str(data["role"]), str(data["revision"]),
                data.get("source"), str(data.get("drift") or ""),
            )
        except (ValueError, KeyError, TypeError):
            return None


class Presence:
    """A serving process's record and its watch for reload requests (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        role: str,
        revision: Callable[[], str],
        source: Callable[[], str | None],
        drift: Callable[[], Mapping[str, str]],
        reload: Callable[[], Awaitable[ReloadResult]],
    ) -> None:
        self.id = process_id()
        self._store = store
        self._role = role
        self._revision = revision
        self._source = source
        self._drift = drift
        self._reload = reload
        self._seen: str | None = None

    def _record(self) -> str:
        host, pid, _ = self.id.rsplit(":", 2)
        return json.dumps({
            "id": self.id, "host": host, "pid": int(pid), "role": self._role, "revision": self._revision(),
            "source": self._source(), "drift": "; ".join(self._drift().values()),
        })

    async def announce(self) -> None:
        await self._store.set(PROCESS_PREFIX + self.id, self._record(), ttl=RECORD_TTL_S)

    async def run(self, stopping: asyncio.Event) -> None:
        """Until `stopping`: renew the record, answer reload requests; then remove the record."""
        self._seen = _request_id(await self._store.get(REQUEST_KEY))  # only requests from now on
        await self.announce()
        renewed = time.monotonic()
        while not stopping.is_set():
            try:
                await asyncio.wait_for(stopping.wait(), POLL_S)
            except asyncio.TimeoutError:
                pass
            if stopping.is_set():
                break
            try:
                await self._look()
                if time.monotonic() - renewed >= BEAT_S:
                    await self.announce()
                    renewed = time.monotonic()
            except Exception as exc:  # boundary: a reload another process asked for (it imports the file's tools) and its store round; the next look tries again
                log.debug("presence: %s", exc)
        try:
            await self._store.delete(PROCESS_PREFIX + self.id)
        except store_failures() as exc:  # the record expires on its own
            log.debug("presence: could not remove the record: %s", exc)

    async def _look(self) -> None:
        raw = await self._store.get(REQUEST_KEY)
        request = _request_id(raw)
        if request is None or request == self._seen:
            return
        self._seen = request
        if raw is not None and json.loads(raw).get("from") == self.id:
            return  # ours: this process reloaded before asking
        result = await self._reload()  # which announces the revision it left running
        await self._store.set(_answer_key(request, self.id), json.dumps(result.to_dict()), ttl=ANSWER_TTL_S)

    async def ask_others(self) -> str:
        """Leave a reload request for every other process on this store."""
        return await request_reload(self._store, origin=self.id)


def _request_id(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return str(json.loads(raw)["id"])
    except (ValueError, KeyError, TypeError):
        return None


# --- from another process (the CLI) ------------------------------------------------------------


def state_of(url: str, prefix: str, base: Path | None) -> Store | None:
    """The store a bot on these settings keeps its state in, when a bot could be running
    there for another process to find: None for memory:// (out of reach) and for a SQLite
    file that does not exist yet (nothing ran on it, and opening it would make it)."""
    if url.startswith("memory://"):
        return None
    if url.startswith("sqlite://") and not sqlite_path(url, base).exists():
        return None
    return open_store(url, prefix, base=base)


async def running(store: Store) -> list[Record]:
    """The processes serving on this store, by their records."""
    found = []
    for key in sorted(await store.keys(PROCESS_PREFIX)):
        raw = await store.get(key)
        record = Record.parse(raw) if raw is not None else None
        if record is not None:
            found.append(record)
    return found


async def request_reload(store: Store, *, origin: str = "cli") -> str:
    request = uuid.uuid4().hex
    await store.set(REQUEST_KEY, json.dumps({"id": request, "from": origin, "at": time.time()}), ttl=ANSWER_TTL_S)
    return request


async def answers(
    store: Store, request: str, processes: Sequence[Record], timeout: float
) -> dict[str, ReloadResult | None]:
    """Each process's answer to `request`, waiting up to `timeout` seconds for all of them
    (None: no answer; a process whose record expired meanwhile is not waited for)."""
    found: dict[str, ReloadResult | None] = {process.id: None for process in processes}
    deadline = time.monotonic() + timeout
    while True:
        for process in processes:
            if found[process.id] is None:
                raw = await store.get(_answer_key(request, process.id))
                if raw is not None:
                    found[process.id] = ReloadResult.from_dict(json.loads(raw))
        waiting = [p for p in processes if found[p.id] is None]
        if not waiting or time.monotonic() >= deadline:
            return found
        alive = {record.id for record in await running(store)}
        if not any(p.id in alive for p in waiting):
            return found
        await asyncio.sleep(0.2)

