"""How a received item travels from the platform's acknowledgement to its finished turn: the
inbound carrier, which each store hands out for itself (`Store.inbound_carrier`), the way
aiogram gives each storage its own event isolation.

An item is recorded before the platform is acknowledged and is done only once its turn has
finished, so a crash loses nothing: a restart, or another worker, answers what was cut off.
Two carriers exist, one per kind of store, and the runtime tells them apart only by what
they say of themselves (`shared`):

* the inbound journal (store/journal.py), for a store of this process's own (SQLite; memory
  in tests): the process that records an item answers it, marks it `done`, and at its next
  start answers what is still `pending`, in arrival order;
* the inbound stream (store/redis_stream.py), for Redis: any worker sharing the store `run`s
  what any process recorded, in each conversation's order, taking over what a dead worker
  left; the platform connections are held by one process each, through a `PlatformLeader`.

An item may run more than once (at least once); the turn's atomic commit and the outbox
(bots/delivery.py) keep its effects to once, as far as each platform allows
(docs/delivery.md).
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol

from botweave.types import BotMessage, PlatformEvent, revision_suffix

#: What a platform hands over: a message, or an event (a reaction, an edit, a button press, ...).
Received = BotMessage | PlatformEvent
#: What a carrier that reads for itself hands each item to: the item's turn.
Handler = Callable[[Received], Awaitable[Any]]


def dedup_key(item: Received) -> str | None:
    """The identity a platform retry repeats: (platform, chat, message or event id); None for
    an event the platform gave no id, which nothing could recognise as repeated anyway."""
    if isinstance(item, BotMessage):
        return f"dedup:{item.platform}:{item.channel.channel_id}:{item.message_id}{revision_suffix(item)}"
    return f"dedup:{item.platform}:{item.chat_id}:event:{item.event_id}" if item.event_id else None


def encode(item: Received) -> str:
    kind = "message" if isinstance(item, BotMessage) else "event"
    return json.dumps({"kind": kind, "data": item.to_dict()}, ensure_ascii=False)


def decode(raw: str) -> Received:
    payload = json.loads(raw)
    if payload["kind"] == "message":
        return BotMessage.from_dict(payload["data"])
    return PlatformEvent(**payload["data"])


class Connection(Protocol):
    """What a leader does with a platform's receiving connection (an adapter, to the runtime):
    open it, and close it when it lets go or loses the lock."""

    @property
    def mode(self) -> str: ...

    async def start(self, *, inbound: bool = True) -> None: ...

    async def stop(self) -> None: ...


class PlatformLeader(Protocol):
    """Holds one platform's receiving connection for a whole deployment whose carrier is
    `shared`: whoever holds the platform's leader lock receives; when it dies, a standby takes
    over. `renew` gives it new connection settings (a reload), or None to let go."""

    platform: str
    #: The receiving adapter while this process holds the connection (readiness reads it).
    adapter: Any

    def renew(self, make_adapter: Callable[[], Connection] | None) -> None: ...

    async def run(self, stop: asyncio.Event) -> None: ...


class InboundCarrier(ABC):
    """What a store records received items in, until their turns are done."""

    #: Whether any process sharing the store answers what one records (`run` reads it), rather
    #: than the process that recorded it (which answers it now, and `pending` at its next start).
    shared: ClassVar[bool] = False

    async def open(self) -> None:
        """Make ready what recording needs (the stream's consumer group); nothing by default."""

    @abstractmethod
    async def record(self, item: Received, *, ordered: bool = True) -> str | None:
        """Keep `item` before the platform is acknowledged; its entry, or None when the item was
        recorded already (a platform retry: `dedup_key` says so, checked in the same step).
        An item not `ordered` (an event, a /stop) need not wait for its conversation's earlier
        messages: a shared carrier gives it no place in the conversation's order (the journal's
        process orders what it answers itself)."""

    @abstractmethod
    async def pending(self) -> list[tuple[str, Received]]:
        """What an earlier run of this process recorded and did not finish, oldest first, for
        it to answer now; a malformed entry is logged and dropped. A shared carrier has none:
        its `run`, in whichever worker, takes over what a stopped one left."""

    @abstractmethod
    async def done(self, entry: str) -> None:
        """The turn of `entry` is finished: it is not answered again."""

    @abstractmethod
    async def backlog(self) -> int:
        """How many recorded items are not done yet."""

    async def run(self, handler: Handler, stop: asyncio.Event, drain: Callable[[], float] = lambda: 5.0) -> None:
        """Answer what is recorded, with `handler`, until `stop` is set (then turns already
        started get `drain()` seconds). An item is done once `handler` returns or raises (a
        failing turn is logged, not retried forever), and left for a retry when it met a store
        outage longer than the grace. Only a shared carrier has anything to read: the others'
        items are answered by the process that recorded them, so this returns at once."""

    def leader(self, platform: str, make_adapter: Callable[[], Connection]) -> PlatformLeader | None:
        """Who holds `platform`'s receiving connection (made by `make_adapter`) among the
        processes sharing the store; None when nobody else receives from it (not `shared`):
        this process holds its connections itself."""
        return None
