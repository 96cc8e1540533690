"""Streaming a reply by editing one message in place.

The driver posts a message on the first text, then edits it as text grows, never sooner than
`interval` after the previous edit. The streamed message *is* the final reply: `finish`
writes the exact final text into it (and into overflow messages when the text outgrew one
message), so no second "final" post ever appears.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from botweave.replies import chunk_text
from botweave.types import LengthUnit, MessageActionResult


class Rewind(str):
    """A streamed delta that takes words back: the text streamed so far is cut to its first
    `keep` characters (the model that was speaking failed mid-answer, and the next one's
    answer is written in their place). It is an empty string, so a reader that does not know
    it adds nothing."""

    keep: int

    def __new__(cls, keep: int) -> Rewind:
        rewind = super().__new__(cls, "")
        rewind.keep = keep
        return rewind


SendFn = Callable[[str, int], Awaitable[MessageActionResult]]  # (text, message index) -> result
EditFn = Callable[[str, str], Awaitable[MessageActionResult]]  # (message_id, text)
DeleteFn = Callable[[str], Awaitable[MessageActionResult]]  # (message_id)


@dataclass
class StreamingReply:
    send: SendFn
    edit: EditFn
    delete: DeleteFn
    interval: float  # seconds between edits of one message
    limit: int | None = None
    unit: LengthUnit = "chars"
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    message_ids: list[str] = field(default_factory=list)
    edits: int = 0
    _shown: list[str] = field(default_factory=list)  # text currently visible in each message
    _last_write: float = float("-inf")

    @property
    def last_write(self) -> float:
        """When the stream last changed what people see (`clock` time; -inf before its first post)."""
        return self._last_write

    def adopt(self, message_ids: list[str]) -> None:
        """Write into these messages (an earlier answer's) before posting new ones; those the
        final text does not need are deleted when it is finished."""
        self.message_ids.extend(message_ids)
        self._shown.extend("" for _ in message_ids)

    async def update(self, text: str) -> None:
        """Show the text streamed so far; writes to the platform only when the interval allows."""
        if not text.strip():
            return
        if self.message_ids and self.clock() - self._last_write < self.interval:
            return
        await self._render(text)

    async def finish(self, final_text: str) -> list[str]:
        """Make the messages show exactly `final_text`; returns every message id used."""
        if not final_text.strip():
            return self.message_ids
        wait = self.interval - (self.clock() - self._last_write)
        if self.message_ids and wait > 0:
            await self.sleep(wait)  # the final edit respects the floor too
        await self._render(final_text)
        needed = len(chunk_text(final_text, self.limit, self.unit))
        for message_id in self.message_ids[needed:]:  # an adopted answer was longer
            await self.delete(message_id)
        del self.message_ids[needed:]
        del self._shown[needed:]
        return self.message_ids

    async def discard(self) -> None:
        """Remove what was streamed (the agent chose silence)."""
        for message_id in self.message_ids:
            await self.delete(message_id)
        self.message_ids.clear()
        self._shown.clear()

    async def _render(self, text: str) -> None:
        pieces = chunk_text(text, self.limit, self.unit)
        for index, piece in enumerate(pieces):
            if index < len(self.message_ids):
                if self._shown[index] != piece:
                    result = await self.edit(self.message_ids[index], piece)
                    self.edits += 1
                    if result.ok:
                        self._shown[index] = piece
            else:
                result = await self.send(piece, len(self.message_ids))
                if not result.ok or result.message_id is None:
                    return
                self.message_ids.append(result.message_id)
                self._shown.append(piece)
        self._last_write = self.clock()
