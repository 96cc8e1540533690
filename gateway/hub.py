"""The gateway's connections and who follows which conversation: every event appended to a
conversation's log reaches each connection following it (one text, framed once), and
approval and pairing events also reach the principals who may answer them wherever they are.

Events come from this process's publications (`ConversationEvents.listen`) or, with a store
several processes share, from the store's feed of everyone's appends, never from both. When
the feed says it may have missed something, every connection reads its logs again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from botweave.events import LOG_PREFIX, ConversationEvents
from botweave.methods import Caller
from botweave.store import LogFeed
from botweave.tasks import TaskOwner

from .connection import Connection, encoded
from .protocol import CLOSE_GOING_AWAY, event_frame, logged_event_frame

log = logging.getLogger(__name__)

#: How often who came and went is told to everyone but shares (`presence`).
PRESENCE_EVERY_S = 0.5
#: Events that also go to whoever may answer them, followers of their conversation or not.
NOTICES = ('{"event":"approval.', '{"event":"pairing.')


def may_answer(caller: Caller, event: str, data: dict[str, Any]) -> bool:
    """Whether an approval or pairing event concerns this principal: it is the approver (or
    the platform's owner, for pairing), or an admin."""
    if event.startswith("approval."):
        if not caller.has("approvals"):
            return False
        approver = data.get("approver") or {}
        return caller.admin or caller.speaks_for(str(approver.get("platform")), str(approver.get("user_id")))
    if not caller.has("pairing"):
        return False
    owner = data.get("owner")
    return caller.admin or (owner is not None and caller.speaks_for(str(data.get("platform")), str(owner)))


class Hub:
    def __init__(self, events: ConversationEvents) -> None:
        self.events = events
        self.connections: dict[str, Connection] = {}
        self._followers: dict[str, set[Connection]] = {}
        self._tasks = TaskOwner("gateway hub")
        self._stop_listening: Callable[[], None] | None = None
        self._feed: LogFeed | None = None
        self._joined: list[dict[str, Any]] = []
        self._left: list[str] = []
        self._presence_timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        feed = self.events.store.log_feed(LOG_PREFIX)
        if feed is None:
            self._stop_listening = self.events.listen(self.on_append)
        else:
            self._feed = feed
            self._tasks.spawn(self._follow(feed), name="follow the store's feed")

    async def stop(self) -> None:
        if self._presence_timer is not None:
            self._presence_timer.cancel()
            self._presence_timer = None
        if self._stop_listening is not None:
            self._stop_listening()
        if self._feed is not None:
            await self._feed.close()
        for conn in list(self.connections.values()):
            await conn.close(CLOSE_GOING_AWAY, "the gateway is stopping")
        await self._tasks.close(0.0, grace=1.0)

    async def _follow(self, feed: LogFeed) -> None:
        skip = len(LOG_PREFIX)
        async for entry in feed:
            if entry.key is None:
                for conn in list(self.connections.values()):
                    conn.recheck()
                continue
            self.on_append(entry.key[skip:], entry.seq, entry.value)

    # --- connections --------------------------------------------------------------------------

    def add(self, conn: Connection) -> None:
        """A connection past its handshake (its answer went out first): everyone hears of it."""
        self.connections[conn.conn_id] = conn
        self._presence_change(joined=conn.presence())

    def remove(self, conn: Connection) -> None:
        for conversation in list(conn.cursors):
            self.unfollow(conn, conversation)
        if self.connections.pop(conn.conn_id, None) is not None:
            self._presence_change(left=conn.conn_id)

    def presence(self) -> list[dict[str, Any]]:
        return [conn.presence() for conn in self.connections.values()]

    def _presence_change(self, *, joined: dict[str, Any] | None = None, left: str | None = None) -> None:
        """Who came and went, told to everyone at most every PRESENCE_EVERY_S: a crowd
        connecting at once is a few small frames each, not one full list per arrival."""
        if joined is not None:
            self._joined.append(joined)
        if left is not None:
            self._left.append(left)
        if self._presence_timer is None:
            self._presence_timer = asyncio.get_running_loop().call_later(PRESENCE_EVERY_S, self._tell_presence)

    def _tell_presence(self) -> None:
        self._presence_timer = None
        gone = set(self._left)
        joined = [p for p in self._joined if p["conn_id"] not in gone]
        left = [c for c in self._left if c not in {p["conn_id"] for p in self._joined}]
        self._joined, self._left = [], []
        if not joined and not left:
            return
        frame = encoded(event_frame("presence", {"joined": joined, "left": left}))
        for conn in list(self.connections.values()):
            if conn.caller.conversations is None:  # a share reads its session, not who is here
                conn.send(frame)

    def by_share(self, share_ids: Iterable[str]) -> list[Connection]:
        wanted = set(share_ids)
        return [c for c in self.connections.values() if c.principal.share_id in wanted]

    # --- following ----------------------------------------------------------------------------

    def follow(self, conn: Connection, conversation: str, after: int | None) -> None:
        """`conn` follows `conversation` from `after` (None: from now on); the events it
        missed are sent by `catch_up`, which the caller starts once its answer went out."""
        conn.follow(conversation, after)
        self._followers.setdefault(conversation, set()).add(conn)

    def unfollow(self, conn: Connection, conversation: str) -> None:
        conn.unfollow(conversation)
        followers = self._followers.get(conversation)
        if followers is not None:
            followers.discard(conn)
            if not followers:
                del self._followers[conversation]

    def on_append(self, conversation: str, seq: int, logged: str) -> None:
        followers = self._followers.get(conversation)
        if followers:
            framed = encoded(logged_event_frame(conversation, seq, logged))  # once, whoever follows
            for conn in tuple(followers):
                conn.offer(conversation, seq, logged, framed)
        if logged.startswith(NOTICES):
            self._notify(conversation, logged, followers or set())

    def _notify(self, conversation: str, logged: str, followers: set[Connection]) -> None:
        try:
            parsed = json.loads(logged)
        except ValueError:
            return
        event, data = str(parsed.get("event")), parsed.get("data") or {}
        frame: bytes | None = None
        for conn in tuple(self.connections.values()):
            if conn in followers or not may_answer(conn.caller, event, data):
                continue
            frame = frame or encoded(event_frame(event, {**data, "conversation": conversation}))
            conn.send(frame)
