"""Sending notifications: policy → transport, with suppression counted and digests queued.

`Notifier.notify` is the public API for every trigger (room mentions, agent questions, long
turns, failed schedules, approvals from hooks). For each recipient it evaluates their
preference, then either delivers through their transport or records why not: every
suppression is logged and counted in the store under `push:suppressed:<reason>`, so nothing
disappears without a trace. Notifications held back by quiet hours for recipients with
`digest` on are queued in the store and delivered as ONE message by `flush_digests` once the
recipient's quiet window is over; the runtime calls it periodically, and tests drive it with
an injected clock.

Counters: `push:sent`, `push:failed`, `push:suppressed:<reason>`, `push:digest_queued`,
`push:digests_sent`. Digest queues: `push:digest-queue:<platform>:<user_id>`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from botweave.push.model import PushMessage, Recipient
from botweave.push.policy import (
    PRIVATE_TEXT,
    DetailLevel,
    NotificationCategory,
    NotificationDecision,
    evaluate,
    redact,
)
from botweave.push.preferences import PreferenceStore
from botweave.push.transports import DeliveryResult, Transport
from botweave.store import Store

__all__ = [
    "Clock",
    "NotificationOutcome",
    "Notifier",
    "asks_question",
    "digest_text",
    "mention_triggers",
    "mentioned_people",
]

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
OutcomeStatus = Literal["sent", "failed", "suppressed", "queued"]

SENT_COUNTER = "push:sent"
FAILED_COUNTER = "push:failed"
SUPPRESSED_PREFIX = "push:suppressed:"
DIGEST_QUEUED_COUNTER = "push:digest_queued"
DIGESTS_SENT_COUNTER = "push:digests_sent"
DIGEST_QUEUE_PREFIX = "push:digest-queue:"
DIGEST_LOCK_PREFIX = "push:digest-lock:"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class NotificationOutcome:
    """What happened for one recipient. `decision` is None for a digest (already decided);
    `delivery` is None when nothing was sent (suppressed or queued)."""

    recipient: Recipient
    category: str
    status: OutcomeStatus
    decision: NotificationDecision | None = None
    delivery: DeliveryResult | None = None

    @property
    def sent(self) -> bool:
        return self.status == "sent"


class Notifier:
    """Evaluate, deliver, count. Safe to share between tasks; state lives in the store."""

    def __init__(
        self,
        preferences: PreferenceStore,
        transports: Mapping[str, Transport],
        store: Store,
        clock: Clock = utc_now,
        *,
        directory: Mapping[str, Recipient] | None = None,
        digest_max_items: int = 200,
    ) -> None:
        """`directory` (key `<platform>:<user_id>` → Recipient, e.g. `PushConfig.recipients`)
        lets callers name recipients as strings and still reach a configured webhook."""
        self.preferences = preferences
        self.transports = dict(transports)
        self.store = store
        self.clock = clock
        self.directory = dict(directory or {})
        self.digest_max_items = digest_max_items

    def resolve(self, recipient: Recipient | str) -> Recipient:
        if isinstance(recipient, Recipient):
            return recipient
        return self.directory.get(str(recipient)) or Recipient.parse(str(recipient))

    async def notify(
        self,
        category: NotificationCategory | str,
        recipients: Iterable[Recipient | str],
        content: str,
        identity: str | None = None,
        urgent: bool = False,
    ) -> list[NotificationOutcome]:
        """Notify each recipient (once, even if listed twice) per their own preference.

        Recipients are handled concurrently so one slow webhook does not delay a DM; the
        outcomes come back in the order the recipients were given.
        """
        category = NotificationCategory.parse(category)
        unique: dict[str, Recipient] = {}
        for item in recipients:
            resolved = self.resolve(item)
            unique.setdefault(resolved.key, resolved)
        now = self.clock()
        return list(
            await asyncio.gather(
                *(self._notify_one(category, r, content, identity, urgent, now) for r in unique.values())
            )
        )

    async def _notify_one(
        self,
        category: NotificationCategory,
        recipient: Recipient,
        content: str,
        identity: str | None,
        urgent: bool,
        now: datetime,
    ) -> NotificationOutcome:
        pref = await self.preferences.get(recipient.platform, recipient.user_id)
        decision = evaluate(category, pref, now=now, is_urgent=urgent, content=content, identity=identity)
        if not decision.send:
            await self.store.incr(SUPPRESSED_PREFIX + decision.reason)
            if decision.reason == "quiet_hours" and pref.digest:
                await self._queue_digest(recipient, category, content, identity, urgent, now)
                log.info("push: %s for %s held for the digest (quiet hours)", category.value, recipient.key)
                return NotificationOutcome(recipient, category.value, "queued", decision)
            log.info("push: %s for %s suppressed: %s", category.value, recipient.key, decision.reason)
            return NotificationOutcome(recipient, category.value, "suppressed", decision)
        message = PushMessage(
            text=decision.content or PRIVATE_TEXT,
            category=category.value,
            recipient=recipient,
            created_at=now,
            identity=None if pref.detail_level is DetailLevel.PRIVATE else identity,
            urgent=urgent,
        )
        delivery = await self._deliver(recipient, message)
        return NotificationOutcome(recipient, category.value, "sent" if delivery.ok else "failed", decision, delivery)

    async def _deliver(self, recipient: Recipient, message: PushMessage) -> DeliveryResult:
        transport = self.transports.get(recipient.transport)
        if transport is None:
            delivery = DeliveryResult(False, recipient.transport, f"no transport {recipient.transport!r} configured", 0)
        else:
            try:
                delivery = await transport.deliver(recipient, message)
            except Exception as exc:  # boundary: a transport, perhaps a custom one (user code), whatever it raises
                log.exception("push: transport %s raised for %s", recipient.transport, recipient.key)
                delivery = DeliveryResult(False, recipient.transport, f"error: {type(exc).__name__}")
        if delivery.ok:
            await self.store.incr(SENT_COUNTER)
        else:
            await self.store.incr(FAILED_COUNTER)
            log.warning("push: %s to %s failed: %s", message.kind, recipient.key, delivery.detail)
        return delivery

    # ------------------------------------------------------------------ digests

    async def _queue_digest(
        self,
        recipient: Recipient,
        category: NotificationCategory,
        content: str,
        identity: str | None,
        urgent: bool,
        now: datetime,
    ) -> None:
        """Queue the raw pieces, not the redacted text: the digest is redacted at delivery with
        the detail level in force then, so lowering it meanwhile also covers queued items."""
        item = {
            "category": category.value,
            "content": content,
            "identity": identity,
            "urgent": urgent,
            "at": now.isoformat(),
            "recipient": recipient.to_dict(),
        }
        await self.store.list_append(
            DIGEST_QUEUE_PREFIX + recipient.key, json.dumps(item), max_len=self.digest_max_items
        )
        await self.store.incr(DIGEST_QUEUED_COUNTER)

    async def pending_digest(self, recipient: Recipient) -> int:
        """How many notifications wait in this recipient's digest."""
        return len(await self.store.list_range(DIGEST_QUEUE_PREFIX + recipient.key))

    async def flush_digests(self, now: datetime | None = None) -> list[NotificationOutcome]:
        """Deliver one digest to every recipient with queued items whose quiet window is over.

        Recipients still inside their window are left alone. A failed delivery keeps the queue
        for the next flush. A short lock per recipient stops two workers sending the same
        digest twice.
        """
        now = self.clock() if now is None else now
        outcomes = []
        for key in sorted(await self.store.keys(DIGEST_QUEUE_PREFIX)):
            outcome = await self._flush_one(key, now)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    async def _flush_one(self, queue_key: str, now: datetime) -> NotificationOutcome | None:
        items = [i for i in map(_load_item, await self.store.list_range(queue_key)) if i is not None]
        if not items:
            await self.store.delete(queue_key)
            return None
        recipient = _recipient_of(items[-1], queue_key.removeprefix(DIGEST_QUEUE_PREFIX))
        pref = await self.preferences.get(recipient.platform, recipient.user_id)
        if pref.in_quiet_hours(now):
            return None
        lock = DIGEST_LOCK_PREFIX + recipient.key
        if not await self.store.set_if_absent(lock, "1", ttl=60):
            return None
        try:
            # Re-read under the lock: another worker may have sent this digest meanwhile.
            raw_items = await self.store.list_range(queue_key)
            items = [i for i in map(_load_item, raw_items) if i is not None]
            if not items:
                return None
            message = PushMessage(
                text=digest_text(items, pref.detail_level),
                category="digest",
                recipient=recipient,
                created_at=now,
                urgent=any(bool(i.get("urgent")) for i in items),
                kind="digest",
                count=len(items),
            )
            delivery = await self._deliver(recipient, message)
            if delivery.ok:
                # Keep anything queued while we were sending (only possible across a clock edge).
                arrived = (await self.store.list_range(queue_key))[len(raw_items):]
                await self.store.delete(queue_key)
                if arrived:
                    await self.store.list_append(queue_key, *arrived, max_len=self.digest_max_items)
                await self.store.incr(DIGESTS_SENT_COUNTER)
                log.info("push: digest of %d sent to %s", len(items), recipient.key)
            return NotificationOutcome(recipient, "digest", "sent" if delivery.ok else "failed", None, delivery)
        finally:
            await self.store.delete(lock)

    async def counters(self) -> dict[str, int]:
        """The push counters, for status output and tests."""
        names = [SENT_COUNTER, FAILED_COUNTER, DIGEST_QUEUED_COUNTER, DIGESTS_SENT_COUNTER]
        names += await self.store.keys(SUPPRESSED_PREFIX)
        values = {}
        for name in names:
            raw = await self.store.get(name)
            values[name] = int(raw) if raw is not None else 0
        return values


def _load_item(raw: str) -> dict[str, Any] | None:
    try:
        item = json.loads(raw)
    except ValueError:
        log.warning("push: dropping an unreadable digest item")
        return None
    return item if isinstance(item, dict) else None


def _recipient_of(item: Mapping[str, Any], key: str) -> Recipient:
    try:
        return Recipient.from_dict(item["recipient"])
    except (KeyError, TypeError, ValueError):
        return Recipient.parse(key)


def digest_text(items: list[dict[str, Any]], level: DetailLevel) -> str:
    """One message summing up queued notifications, redacted to `level`; repeats are merged
    (`×3`) so a busy night reads as a short list."""
    count = len(items)
    noun = "notification" if count == 1 else "notifications"
    if level is DetailLevel.PRIVATE:
        return f"{PRIVATE_TEXT}: {count} {noun} during your quiet hours."
    lines: dict[str, int] = {}
    for item in items:
        line = redact(level, item.get("content"), item.get("identity"))
        lines[line] = lines.get(line, 0) + 1
    body = "\n".join(f"• {line}" + (f" (×{n})" if n > 1 else "") for line, n in lines.items())
    return f"While your quiet hours were on, {count} {noun} arrived:\n{body}"


# ---------------------------------------------------------------------- trigger helpers

# The rooms' mention form: letters, digits, `_`, `-`, `.`, not preceded by a word character or
# `@` (so `a@b.c` is not a mention). Kept local so push does not depend on rooms.
_MENTION = re.compile(r"(?<![\w@])@([\w.\-]+)")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?…])\s+|\n+")
_CLOSERS = "\"'’”»)]}*_~` \t"


def _handle(token: str) -> str:
    """`alice.` at the end of a sentence is `alice`."""
    return token.rstrip(".-").lower()


def mentioned_people(text: str, known: Mapping[str, Recipient]) -> list[Recipient]:
    """Known people @-mentioned in `text`, each once, in order of first mention.

    `known` maps handles (case-insensitive, `@` optional) to recipients, e.g.
    `PushConfig.known_people()`. Unknown handles (other agents, strangers) are ignored.
    """
    lookup = {name.lstrip("@").lower(): r for name, r in known.items()}
    found: dict[str, Recipient] = {}
    for match in _MENTION.finditer(text or ""):
        token = match.group(1)
        recipient = lookup.get(token.lower()) or lookup.get(_handle(token))
        if recipient is not None:
            found.setdefault(recipient.key, recipient)
    return list(found.values())


def asks_question(text: str, name: str) -> bool:
    """Does `text` ask @`name` a question?

    The rule: split the text into sentences (a break after `.`, `!`, `?` or `…` followed by
    whitespace, or a line break); the person is asked a question when a sentence that
    @-mentions them ends with a `?` (closing quotes/brackets and markdown marks after it
    are ignored, and `?!` counts). Only @-mentions count, so a bare name in prose does not.
    """
    wanted = _handle(name.lstrip("@"))
    for sentence in _SENTENCE_BREAK.split(text or ""):
        if not any(_handle(m.group(1)) == wanted for m in _MENTION.finditer(sentence)):
            continue
        tail = sentence.rstrip(_CLOSERS)
        ending = tail[len(tail.rstrip(".!?…")) :]
        if "?" in ending:
            return True
    return False


def mention_triggers(text: str, known: Mapping[str, Recipient]) -> list[tuple[Recipient, NotificationCategory]]:
    """For an agent's message: each mentioned known person with `agent_question` when the
    message asks them something (see `asks_question`), else `human_mentioned`."""
    triggers = []
    for recipient in mentioned_people(text, known):
        handles = {h for h, r in known.items() if r.key == recipient.key} | set(recipient.handles)
        asked = any(asks_question(text, handle) for handle in handles)
        category = NotificationCategory.AGENT_QUESTION if asked else NotificationCategory.HUMAN_MENTIONED
        triggers.append((recipient, category))
    return triggers
