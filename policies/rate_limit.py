"""A per-user message budget (`user_rate_limit: {messages, per_seconds}`): the first message
over it gets one notice per window, the rest get silence, so a flood cannot buy a flood."""

from __future__ import annotations

import time

from botweave.pipeline import Handler, Inbound, TurnOutcome, TurnStatus
from botweave.store import Store

RATE_LIMIT_NOTICE = "You're sending messages faster than I can answer; please wait a moment."


class RateLimit:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def __call__(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        limit = inbound.config.user_rate_limit
        if limit is None:
            return await call_next(inbound)
        msg = inbound.message
        key = f"rate:{msg.platform}:{msg.sender.user_id}"
        if await self._store.window_add(key, time.time(), limit.per_seconds) <= limit.messages:
            return await call_next(inbound)
        if await self._store.set_if_absent(key + ":notice", "1", ttl=limit.per_seconds):
            await inbound.reply.send_text(RATE_LIMIT_NOTICE, purpose="notice")
        return TurnOutcome(TurnStatus.RATE_LIMITED)
