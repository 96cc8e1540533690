"""One client's connection: its outgoing frames and, per conversation it follows, how far it
has been sent.

Frames leave through a queue and one writer task, so a client that reads slowly holds up
only itself. The queue is bounded by `max_buffered`: a client so far behind is closed with
`slow_consumer` (4008) instead of having events skipped, and resumes from its last seq.

Per followed conversation a `Cursor` holds the last seq sent. Events arrive from the log's
feed in order, but a feed may be late, lose events (Redis pub/sub while reconnecting) or
bring them out of order (several writers in one process): an event right after the cursor
is sent at once, one already sent is dropped, and one further ahead starts a catch-up that
reads the missing events from the conversation's log, in order. A cursor older than the log
gets a `resync` (the conversation's history and newest seq) and carries on from there. So a
client gets each event once, in order, whatever the feed did.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from botweave.events import ConversationEvents
from botweave.methods import Caller
from botweave.tasks import TaskOwner

from . import metrics
from .auth import Principal
from .protocol import CLOSE_SLOW_CONSUMER, event_frame, logged_event_frame

log = logging.getLogger(__name__)

#: Events read from the log at a time while catching up.
CATCH_UP_BATCH = 500
#: Messages a `resync` carries.
RESYNC_MESSAGES = 100
#: How long a close waits for its frame to go out before the connection is cut.
CLOSE_WAIT_S = 3.0


#: What a share is not shown of the events it follows: who may answer an approval (a platform
#: identity) and who did. It reads the session, not the people around it.
_HIDDEN_FROM_SHARES = {"approval.requested": ("approver",), "approval.resolved": ("by",)}


def for_share(logged: str) -> str:
    """An event as the conversation's log holds it, without what a share is not shown."""
    if not logged.startswith('{"event":"approval.'):
        return logged
    parsed = json.loads(logged)
    data = parsed.get("data")
    if isinstance(data, dict):
        for name in _HIDDEN_FROM_SHARES.get(str(parsed.get("event")), ()):
            data.pop(name, None)
    return json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))


def encoded(frame: str) -> bytes:
    """A frame as UTF-8; a lone surrogate (a model may produce one) goes as its JSON escape,
    which is what it was in the JSON it came in."""
    return frame.encode("utf-8", "backslashreplace")


@dataclass(slots=True)
class Cursor:
    """How far one conversation has been sent: `delivered` is the last seq sent (None while
    the subscription is being set up); `seen` the highest seq the feed offered meanwhile."""

    delivered: int | None = None
    catching_up: bool = True
    seen: int = 0


@dataclass(eq=False)
class Connection:
    ws: web.WebSocketResponse
    request: web.Request
    principal: Principal
    conn_id: str
    client: dict[str, Any]
    events: ConversationEvents
    max_buffered: int
    since: float
    cursors: dict[str, Cursor] = field(default_factory=dict)
    closed: bool = False

    def __post_init__(self) -> None:
        self.caller: Caller = self.principal.caller(self.conn_id)
        self._queue: deque[bytes] = deque()
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()  # the queue is at most half full again
        self._catching = asyncio.Lock()
        self.tasks = TaskOwner(f"gateway {self.conn_id}")
        self._share = self.principal.kind == "share"

    def start(self) -> None:
        self.tasks.spawn(self._write(), name="writer")

    def presence(self) -> dict[str, Any]:
        return {"conn_id": self.conn_id, "principal": self.principal.to_dict(), "client": self.client, "since": self.since}

    # --- sending ------------------------------------------------------------------------------

    def send(self, frame: str | bytes) -> None:
        """Queue a frame (text, or text already encoded: one event's frame is encoded once for
        all its followers); a client `max_buffered` frames behind is closed, not skipped."""
        if self.closed:
            return
        self._queue.append(encoded(frame) if isinstance(frame, str) else frame)
        if len(self._queue) > self.max_buffered:
            metrics.SLOW_CONSUMERS.inc()
            log.info("gateway: %s (%s) fell %d events behind; closed as slow", self.conn_id, self.principal.name,
                     len(self._queue))
            self.close_soon(CLOSE_SLOW_CONSUMER, "slow_consumer")
            return
        self._wake.set()

    async def _write(self) -> None:
        ws = self.ws
        queue = self._queue
        while not self.closed:
            await self._wake.wait()
            self._wake.clear()
            while queue and not self.closed:
                frame = queue.popleft()
                try:
                    await ws.send_frame(frame, WSMsgType.TEXT)
                except (ConnectionError, RuntimeError):
                    self.closed = True  # the client went away; the reader notices and cleans up
                    self._drained.set()
                    return
                metrics.FRAMES.labels("out").inc()
                if len(queue) <= self.max_buffered // 2:
                    self._drained.set()

    async def _room(self, frames: int) -> None:
        """Until `frames` more fit in the queue's first half: a catch-up sends at the client's
        pace, so a long backlog is never what makes a client look slow."""
        while len(self._queue) + frames > self.max_buffered // 2 and not self.closed:
            self._drained.clear()
            await self._drained.wait()

    def close_soon(self, code: int, reason: str) -> None:
        """Close from where no await is possible (the queue overflowed while an event was offered)."""
        if self.closed:
            return
        self.closed = True
        self._queue.clear()
        self._wake.set()
        self._drained.set()
        self.tasks.spawn(self._close(code, reason), name="close")

    async def close(self, code: int, reason: str) -> None:
        if not self.closed:
            self.closed = True
            self._queue.clear()
            self._wake.set()
            self._drained.set()
        await self._close(code, reason)

    async def _close(self, code: int, reason: str) -> None:
        try:
            await asyncio.wait_for(self.ws.close(code=code, message=reason.encode()), CLOSE_WAIT_S)
        except (asyncio.TimeoutError, ConnectionError, RuntimeError):
            transport = self.request.transport
            if transport is not None:  # the client does not read even a close frame: cut it
                transport.abort()

    async def flush(self) -> None:
        """Wait until the queued frames went out (a handshake answer before a close)."""
        for _ in range(100):
            if not self._queue or self.closed:
                return
            await asyncio.sleep(0.01)

    async def finish(self) -> None:
        self.closed = True
        self._wake.set()
        self._drained.set()
        await self.tasks.close(1.0, grace=1.0)

    # --- following conversations --------------------------------------------------------------

    def follow(self, conversation: str, after: int | None) -> Cursor:
        """Start following; `after` is the last seq the client has (None: from now on). The
        cursor stays `catching_up` until `catch_up` ran."""
        cursor = self.cursors.get(conversation)
        if cursor is None:
            cursor = self.cursors[conversation] = Cursor()
        cursor.catching_up = True
        cursor.delivered = after
        return cursor

    def offer(self, conversation: str, seq: int, logged: str, framed: bytes | None = None) -> None:
        """An event the feed brought (see the module docstring); `framed`, its frame encoded."""
        cursor = self.cursors.get(conversation)
        if cursor is None or self.closed:
            return
        if cursor.catching_up or cursor.delivered is None:
            cursor.seen = max(cursor.seen, seq)
            return
        if seq <= cursor.delivered:
            return
        if seq == cursor.delivered + 1:
            cursor.delivered = seq
            if self._share:
                self.send(logged_event_frame(conversation, seq, for_share(logged)))
            else:
                self.send(framed if framed is not None else logged_event_frame(conversation, seq, logged))
            return
        cursor.catching_up = True
        cursor.seen = seq
        self.tasks.spawn(self.catch_up(conversation, cursor), name=f"catch up {conversation}")

    def recheck(self) -> None:
        """The feed may have missed events (it reconnected): read every followed log again."""
        for conversation, cursor in list(self.cursors.items()):
            if not cursor.catching_up and cursor.delivered is not None:
                cursor.catching_up = True
                self.tasks.spawn(self.catch_up(conversation, cursor), name=f"catch up {conversation}")

    async def catch_up(self, conversation: str, cursor: Cursor) -> None:
        """Send what the log holds after the cursor, in order (or a `resync` when it no longer
        reaches back that far), until nothing the feed offered meanwhile is left."""
        try:
            if cursor.delivered is None:
                cursor.delivered = await self.events.head(conversation)
            batch = max(1, min(CATCH_UP_BATCH, self.max_buffered // 4))
            while not self.closed and self.cursors.get(conversation) is cursor:
                async with self._catching:  # one catch-up at a time fills this client's queue
                    await self._room(batch)
                    held = await self.events.read(conversation, after=cursor.delivered, limit=batch)
                    gone = held.head > cursor.delivered and held.first > cursor.delivered + 1
                    if gone or cursor.delivered > held.head:  # trimmed away, or a cursor from another store
                        await self._resync(conversation, cursor, held.head)
                        continue
                    for seq, logged in held.entries:
                        if seq == cursor.delivered + 1:
                            cursor.delivered = seq
                            self.send(logged_event_frame(conversation, seq, for_share(logged) if self._share else logged))
                if len(held.entries) < batch and cursor.seen <= cursor.delivered:
                    break
        finally:
            cursor.catching_up = False

    async def _resync(self, conversation: str, cursor: Cursor, head: int) -> None:
        messages, _ = await self.events.history(conversation, limit=RESYNC_MESSAGES)
        metrics.RESYNCS.inc()
        cursor.delivered = head
        self.send(event_frame("resync", {"seq": head, "messages": messages}, conversation=conversation, seq=head))

    def unfollow(self, conversation: str) -> None:
        self.cursors.pop(conversation, None)
