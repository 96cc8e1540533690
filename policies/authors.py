"""Who wrote it: the first pipeline step. Our own echoes are dropped, bots only when bots
are allowed, and then only within the bot-loop guard's budget; a command addressed to
another bot (`/cmd@otherbot`) is not ours to run.
"""

from __future__ import annotations

import logging
import time

from botweave.pipeline import Handler, Inbound, TurnOutcome, TurnStatus
from botweave.policies.loop_guard import BotLoopGuard
from botweave.store import Store

log = logging.getLogger(__name__)


class AuthorScreen:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._guards: dict[str, BotLoopGuard] = {}  # per platform: each has its own budget settings
        self._drop_logged_until: dict[frozenset[str], float] = {}

    def guard(self, inbound: Inbound) -> BotLoopGuard:
        platform = inbound.message.platform
        if platform not in self._guards:
            self._guards[platform] = BotLoopGuard(inbound.config.bot_loop_protection, self._store)
        return self._guards[platform]

    async def __call__(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        msg, me = inbound.message, inbound.adapter.self_user
        if inbound.adapter.is_self(msg.sender.user_id):
            return TurnOutcome(TurnStatus.DROPPED_SELF)
        if msg.sender.is_bot:
            if not inbound.config.allow_bots:
                return TurnOutcome(TurnStatus.DROPPED_BOT)
            self_id = me.user_id if me else msg.platform
            now = time.time()
            guard = self.guard(inbound)
            if not await guard.observe(self_id, msg.sender.user_id, now):
                await self._log_loop_drop(guard, self_id, msg.sender.user_id, now)
                return TurnOutcome(TurnStatus.DROPPED_LOOP_GUARD)
        addressed_to = msg.command_target
        if addressed_to and me is not None and me.username and addressed_to.lower() != me.username.lower():
            return TurnOutcome(TurnStatus.DROPPED_OTHER_BOT_COMMAND)
        return await call_next(inbound)

    async def _log_loop_drop(self, guard: BotLoopGuard, self_id: str, other: str, now: float) -> None:
        """Once per cooldown, not once per dropped message."""
        pair = frozenset((self_id, other))
        if self._drop_logged_until.get(pair, 0.0) <= now:
            left = await guard.cooldown_left(self_id, other, now)
            log.warning("bot loop guard: dropping messages between %s and %s for %.0fs", self_id, other, left)
            self._drop_logged_until[pair] = now + left
