"""The python-telegram-bot pieces we tune: the bot's update parsing and the update processor.

- `TolerantBot` keeps one malformed update from stalling polling. Every polled update is
  sanitised before PTB parses it (`schema.sanitise_update`: wrong-typed fields are absent,
  strings safe for the model call), as webhook updates are. Stock PTB parses a `getUpdates`
  batch in one go; if any update still fails to parse, the whole batch is dropped without
  advancing the offset, so the same batch is fetched (and fails) forever. Here the batch is
  then re-read and parsed update by update; an unparsable one is replaced by an empty
  `Update` with its id, which the handlers ignore but which still advances the offset.
- `PerChatUpdateProcessor` handles updates of different chats concurrently (PTB's default
  handles one at a time) while keeping each chat's updates in arrival order.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from botweave.payload import Dropped
from telegram import Update
from telegram.error import TelegramError
from telegram.ext import BaseUpdateProcessor, ExtBot
from telegram.warnings import PTBUserWarning

from .schema import sanitise_update

log = logging.getLogger(__name__)


def sanitised_batch(raw: Any) -> Any:
    """A `getUpdates` result with each update sanitised; one line per update that lost fields.
    An update without a usable id cannot be acknowledged or read, so it is left out."""
    if not isinstance(raw, list):
        return raw
    batch = []
    for data in raw:
        dropped = Dropped()
        cleaned = sanitise_update(data, dropped)
        if cleaned is None:
            log.error("telegram: skipped a polled update without a usable update_id")
            continue
        if dropped:
            log.warning("telegram: update %s: ignored malformed field(s) %s", cleaned["update_id"], ", ".join(dropped[:8]))
        batch.append(cleaned)
    return batch


class TolerantBot(ExtBot[None]):
    """An `ExtBot` whose polling survives updates it cannot parse."""

    def __init__(
        self,
        *args: Any,
        polled: Callable[[Sequence[Update]], None] | None = None,
        before_poll: Callable[[], Awaitable[None]] | None = None,
        **kwargs: Any,
    ) -> None:
        # PTB bots refuse attribute writes once constructed, so these are set first.
        #: Called with every polled batch, so the adapter can tell a persistent 409 conflict
        #: from a passing one and knows which updates it still owes a hand-over.
        self._polled = polled
        #: Awaited before each poll: the next getUpdates acknowledges (by its offset) every
        #: update fetched so far, so it waits until they were handed to the runtime.
        self._before_poll = before_poll
        self._halted = False
        self._stopping = False
        super().__init__(*args, **kwargs)

    def halt_polling(self) -> None:
        """Stop calling getUpdates at all (even PTB's final "confirm" call on shutdown), so a
        bot that lost a 409 conflict does not knock the other instance's poll over once more."""
        self._halted = True

    def stopping(self) -> None:
        """Polling is being stopped: a poll failing from now on (Telegram out of reach at
        shutdown) returns nothing instead of raising. Raised then, PTB's retry loop may see
        its stop signal in the same instant and leave the failure unretrieved in a task."""
        self._stopping = True

    async def call(self, method: str, **params: Any) -> Any:
        """A Bot API call whose answer is returned as Telegram sent it (a dict, or True), with
        the parameters, defaults and errors of PTB's own methods. Those build a whole object
        from the answer (every field and nested object, each attribute set through PTB's
        guarded `__setattr__`): about a fifth of a reply's CPU in the bot's loop, for a
        `Message` nothing reads beyond its id, or not at all after an edit."""
        return await self._post(method, params)

    async def _do_post(self, endpoint: str, data: Any, **kwargs: Any) -> Any:
        result = await super()._do_post(endpoint, data, **kwargs)
        return sanitised_batch(result) if endpoint == "getUpdates" else result

    async def get_updates(
        self,
        offset: int | None = None,
        limit: int | None = None,
        timeout: Any = None,
        allowed_updates: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> tuple[Update, ...]:
        if self._halted:
            return ()
        if self._before_poll is not None:
            await self._before_poll()
        try:
            updates = await super().get_updates(
                offset=offset, limit=limit, timeout=timeout, allowed_updates=allowed_updates, **kwargs
            )
        except TelegramError as exc:
            if self._stopping or self._halted:
                log.info("telegram: a poll failed while stopping (%s); updates not confirmed come again", exc)
                return ()
            raise
        except Exception:  # boundary: telegram's receive loop; a batch PTB could not parse is read again update by update
            log.warning("telegram: a polled batch did not parse; re-reading it update by update")
            updates = await self._reparse(offset, limit)
        if self._polled is not None:
            self._polled(updates)
        return updates

    async def _reparse(self, offset: int | None, limit: int | None) -> tuple[Update, ...]:
        params: dict[str, Any] = {"timeout": 0}
        if offset is not None:
            params["offset"] = offset
        if limit is not None:
            params["limit"] = limit
        with warnings.catch_warnings():  # PTB suggests get_updates, whose parsing just failed
            warnings.simplefilter("ignore", PTBUserWarning)
            raw = await self.do_api_request("getUpdates", api_kwargs=params)  # sanitised by _do_post
        if not isinstance(raw, list):
            return ()
        return tuple(update for update in map(self._parse_one, raw) if update is not None)

    def _parse_one(self, data: Any) -> Update | None:
        try:
            update = Update.de_json(data, self)
            self.insert_callback_data(update)
            return update
        except Exception:  # boundary: telegram's receive loop, per update: PTB's parser on a hostile update
            update_id = data.get("update_id") if isinstance(data, dict) else None
            log.error("telegram: skipped malformed update %s", update_id if update_id is not None else "?")
            if isinstance(update_id, int):
                return Update(update_id=update_id)  # keeps the offset moving past it
            return None


class PerChatUpdateProcessor(BaseUpdateProcessor):
    """Concurrent across chats, in order within a chat.

    PTB starts one task per update in arrival order; each task takes its chat's FIFO lock
    before its first suspension point, so the lock queue mirrors the arrival order.
    """

    def __init__(self, max_concurrent_updates: int = 64) -> None:
        super().__init__(max_concurrent_updates)
        self._locks: dict[int, asyncio.Lock] = {}
        self._users: dict[int, int] = {}

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        chat = update.effective_chat if isinstance(update, Update) else None
        if chat is None:
            await coroutine
            return
        key = chat.id
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                await coroutine
        finally:
            self._users[key] -= 1
            if not self._users[key]:
                del self._users[key]
                del self._locks[key]

    async def initialize(self) -> None:
        """Nothing to set up; locks are created on demand."""

    async def shutdown(self) -> None:
        """Nothing to tear down; PTB waits for running updates itself."""
