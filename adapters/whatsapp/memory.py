"""What WhatsApp does not tell the bot twice, kept in the runtime's store.

The Cloud API has no call to read a message back or to ask when a person last wrote, yet
both matter: a reply names only the id of the message it quotes (`context.id`), and a
free-form message may go to a person only within 24 hours of their last message (the
customer-service window); after that, only an approved template. So the adapter notes, as it
goes, when each chat last wrote and its latest message id (the read receipt and typing
indicator name it), what each message said (the bot's own too) so a quote can be shown to
the model, which phone number a business-scoped user id belongs to, so a person keeps
one identity when Meta sends only the new id, and which keyed send Meta reported as sent
(its status carries the key back), so a send whose answer was lost is not sent twice. With a shared store every process sees the
same (a worker sends, the ingress received); without one (an adapter used alone) it is
kept in memory.

`window_open` is the rule itself, a pure function.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from botweave.store import MemoryStore, Store

#: How long a message is remembered for quoting: a reply to something older shows its id only.
MESSAGE_TTL_S = 30 * 86400.0
#: How long the last-inbound mark is kept: long after the window closed, so "closed 3 days ago"
#: can be told apart from "never wrote".
WINDOW_MARK_TTL_S = 90 * 86400.0
ALIAS_TTL_S = 365 * 86400.0
#: How long a status that names a chunk key is kept: longer than any takeover takes.
CHUNK_TTL_S = 7 * 86400.0


def window_open(last_inbound: float | None, now: float, hours: float = 24.0) -> bool:
    """Whether a free-form message may go to a chat whose person last wrote at `last_inbound`
    (a Unix time; None: never, as far as the bot knows)."""
    return last_inbound is not None and 0 <= now - last_inbound < hours * 3600.0


@dataclass(frozen=True, slots=True)
class Remembered:
    """A message as a quote shows it: its words, who wrote it, and its files."""

    text: str
    author: str  # "bot" or "user"
    attachments: tuple[dict[str, Any], ...] = ()


class Memory:
    def __init__(self, store: Store | None) -> None:
        self.store: Store = store if store is not None else MemoryStore()

    # --- the customer-service window ---------------------------------------------------------

    async def person_wrote(self, chat_id: str, message_id: str, at: float) -> None:
        """A message from the chat's person: the window opens again from `at`."""
        await self.store.set(f"whatsapp:window:{chat_id}", json.dumps([at, message_id]), ttl=WINDOW_MARK_TTL_S)

    async def last_inbound(self, chat_id: str) -> tuple[float, str] | None:
        """(when, message id) of the person's latest message, if known."""
        raw = await self.store.get(f"whatsapp:window:{chat_id}")
        if raw is None:
            return None
        try:
            at, message_id = json.loads(raw)
            return float(at), str(message_id)
        except (ValueError, TypeError):
            return None

    # --- messages, for quotes ----------------------------------------------------------------

    async def remember(self, message_id: str, message: Remembered) -> None:
        value = {"text": message.text[:4096], "author": message.author, "attachments": list(message.attachments)}
        await self.store.set(f"whatsapp:message:{message_id}", json.dumps(value), ttl=MESSAGE_TTL_S)

    async def recall(self, message_id: str) -> Remembered | None:
        raw = await self.store.get(f"whatsapp:message:{message_id}")
        if raw is None:
            return None
        try:
            value = json.loads(raw)
            attachments = tuple(a for a in value.get("attachments") or () if isinstance(a, dict))
            return Remembered(str(value.get("text") or ""), str(value.get("author") or "user"), attachments)
        except (ValueError, AttributeError):
            return None

    # --- keyed sends, as Meta's statuses report them ------------------------------------------

    async def reported_sent(self, key: str, message_id: str) -> None:
        """Meta reported the message sent with `key` (its `biz_opaque_callback_data`)."""
        await self.store.set(f"whatsapp:chunk:{key}", message_id, ttl=CHUNK_TTL_S)

    async def sent_under(self, key: str) -> str | None:
        return await self.store.get(f"whatsapp:chunk:{key}")

    # --- business-scoped user ids ------------------------------------------------------------

    async def link(self, user_id: str, phone: str) -> None:
        """`user_id` (a business-scoped id) is the person with this phone number."""
        await self.store.set(f"whatsapp:alias:{user_id}", phone, ttl=ALIAS_TTL_S)

    async def phone_of(self, user_id: str) -> str | None:
        return await self.store.get(f"whatsapp:alias:{user_id}")


def now() -> float:
    return time.time()
