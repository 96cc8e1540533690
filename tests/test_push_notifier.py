"""The notifier: delivery per preference, counted suppression, digests on an injected clock,
and the pure trigger helpers (mentions, questions)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from botweave.push import (
    PRIVATE_TEXT,
    DeliveryResult,
    DetailLevel,
    DirectMessageTransport,
    NotificationCategory,
    Notifier,
    PreferenceStore,
    PushMessage,
    Recipient,
    asks_question,
    mention_triggers,
    mentioned_people,
    parse_push_config,
)
from botweave.store import MemoryStore
from botweave.types import MessageActionResult

C = NotificationCategory
BERLIN = ZoneInfo("Europe/Berlin")

CONFIG = parse_push_config(
    {
        "defaults": {"categories": ["approval_requested", "agent_question", "human_mentioned"]},
        "webhooks": {"ops": {"url": "https://hooks.example.org/x"}},
        "recipients": {
            "telegram:42": {
                "name": "alice",
                "quiet_hours": "22:00-07:30",
                "timezone": "Europe/Berlin",
                "digest": True,
            },
            "telegram:43": {"name": "bob", "quiet_hours": "22:00-07:30", "timezone": "Europe/Berlin"},
            "discord:7": {"name": "carol", "detail": "detailed"},
            "slack:U1": {"name": "dave", "webhook": "ops"},
        },
    }
)
ALICE, BOB, CAROL, DAVE = (CONFIG.directory[k] for k in ("telegram:42", "telegram:43", "discord:7", "slack:U1"))


class FakeClock:
    """Time the test can jump; the notifier reads it through `clock()`."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


class RecordingTransport:
    """Records deliveries; fails for user ids listed in `failing`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[tuple[Recipient, PushMessage]] = []
        self.failing: set[str] = set()

    async def deliver(self, recipient: Recipient, message: PushMessage) -> DeliveryResult:
        self.sent.append((recipient, message))
        if recipient.user_id in self.failing:
            return DeliveryResult(False, self.name, "failed: blocked")
        return DeliveryResult(True, self.name, "ok")


def berlin(day: int, hh: int, mm: int = 0) -> datetime:
    return datetime(2026, 1, day, hh, mm, tzinfo=BERLIN)


@pytest.fixture
def setup():
    store = MemoryStore()
    clock = FakeClock(berlin(15, 12))
    dm, hook = RecordingTransport("dm"), RecordingTransport("webhook")
    notifier = Notifier(
        PreferenceStore.from_config(store, CONFIG),
        {"dm": dm, "webhook:ops": hook},
        store,
        clock,
        directory=CONFIG.directory,
    )
    return notifier, clock, dm, hook, store


async def test_delivers_redacted_to_each_recipients_level(setup) -> None:
    notifier, _, dm, _, _ = setup
    outcomes = await notifier.notify(C.HUMAN_MENTIONED, [ALICE, CAROL], "@alice @carol please look", identity="room standup")
    assert [o.status for o in outcomes] == ["sent", "sent"]
    texts = {r.name: m.text for r, m in dm.sent}
    assert texts == {"alice": "Activity in room standup", "carol": "@alice @carol please look"}
    assert all(o.decision is not None and o.decision.reason == "ok" for o in outcomes)


async def test_webhook_recipients_use_their_webhook_and_strings_resolve(setup) -> None:
    notifier, _, dm, hook, _ = setup
    outcomes = await notifier.notify("approval_requested", ["slack:U1", "slack:U1", "telegram:99"], "approve deploy?", identity="#ops")
    assert [o.recipient.key for o in outcomes] == ["slack:U1", "telegram:99"]  # duplicates notified once
    assert [r.key for r, _ in hook.sent] == ["slack:U1"]
    assert [r.key for r, _ in dm.sent] == ["telegram:99"]  # unknown people default to a DM


async def test_every_suppression_is_counted_with_its_reason(setup) -> None:
    notifier, clock, dm, _, _ = setup
    await notifier.notify(C.AGENT_FINISHED, [CAROL], "done")  # not subscribed
    clock.now = berlin(15, 23)
    bob_quiet = await notifier.notify(C.AGENT_QUESTION, [BOB], "?")  # quiet hours, no digest
    urgent = await notifier.notify(C.AGENT_QUESTION, [BOB], "prod is down", urgent=True)
    assert bob_quiet[0].status == "suppressed" and bob_quiet[0].decision.reason == "quiet_hours"
    assert urgent[0].status == "sent" and urgent[0].decision.reason == "urgent_override"
    counters = await notifier.counters()
    assert counters["push:suppressed:category_not_subscribed"] == 1
    assert counters["push:suppressed:quiet_hours"] == 1
    assert counters["push:sent"] == 1
    assert len(dm.sent) == 1


async def test_failed_and_unroutable_deliveries_are_counted(setup) -> None:
    notifier, _, dm, _, _ = setup
    dm.failing.add("7")
    outcomes = await notifier.notify(C.AGENT_QUESTION, [CAROL, Recipient("console", "me", transport="pager")], "x")
    assert [o.status for o in outcomes] == ["failed", "failed"]
    assert "no transport 'pager'" in outcomes[1].delivery.detail
    assert (await notifier.counters())["push:failed"] == 2


async def test_digest_is_queued_in_quiet_hours_and_delivered_once_when_they_end(setup) -> None:
    notifier, clock, dm, _, _ = setup
    clock.now = berlin(15, 22, 30)
    for content, identity in [("a", "room standup"), ("b", "room standup"), ("c", "#ops")]:
        [outcome] = await notifier.notify(C.HUMAN_MENTIONED, [ALICE], content, identity=identity)
        assert outcome.status == "queued" and outcome.decision.reason == "quiet_hours"
    assert dm.sent == [] and await notifier.pending_digest(ALICE) == 3

    clock.now = berlin(16, 3)
    assert await notifier.flush_digests() == []  # still quiet: nothing yet
    clock.now = berlin(16, 7, 29)
    assert await notifier.flush_digests() == []

    clock.now = berlin(16, 7, 30)  # the window's end
    [digest] = await notifier.flush_digests()
    assert digest.status == "sent" and digest.category == "digest"
    [(recipient, message)] = dm.sent
    assert recipient.key == "telegram:42" and message.kind == "digest" and message.count == 3
    assert message.text == (
        "While your quiet hours were on, 3 notifications arrived:\n"
        "• Activity in room standup (×2)\n"
        "• Activity in #ops"
    )
    assert await notifier.flush_digests(berlin(16, 8)) == []  # exactly once
    assert await notifier.pending_digest(ALICE) == 0
    counters = await notifier.counters()
    assert counters["push:digest_queued"] == 3 and counters["push:digests_sent"] == 1
    assert counters["push:suppressed:quiet_hours"] == 3


async def test_digest_uses_the_detail_level_in_force_when_it_is_sent(setup) -> None:
    notifier, clock, dm, _, _ = setup
    clock.now = berlin(15, 23)
    await notifier.notify(C.AGENT_QUESTION, [ALICE], "secret plans", identity="room war")
    prefs = notifier.preferences
    current = await prefs.get("telegram", "42")
    await prefs.set("telegram", "42", dataclasses.replace(current, detail_level=DetailLevel.PRIVATE))
    clock.now = berlin(16, 9)
    await notifier.flush_digests()
    [(_, message)] = dm.sent
    assert message.text == f"{PRIVATE_TEXT}: 1 notification during your quiet hours."
    assert "war" not in message.text and "secret" not in message.text


async def test_a_failed_digest_stays_queued_for_the_next_flush(setup) -> None:
    notifier, clock, dm, _, _ = setup
    clock.now = berlin(15, 23)
    await notifier.notify(C.AGENT_QUESTION, [ALICE], "q", identity="room a")
    dm.failing.add("42")
    clock.now = berlin(16, 8)
    [failed] = await notifier.flush_digests()
    assert failed.status == "failed" and await notifier.pending_digest(ALICE) == 1
    dm.failing.clear()
    [sent] = await notifier.flush_digests()
    assert sent.status == "sent" and await notifier.pending_digest(ALICE) == 0


async def test_private_level_keeps_the_identity_out_of_the_message(setup) -> None:
    notifier, _, dm, _, _ = setup
    await notifier.preferences.apply_command("discord", "7", "detail private")
    await notifier.notify(C.AGENT_QUESTION, [CAROL], "content", identity="room secret")
    [(_, message)] = dm.sent
    assert message.text == PRIVATE_TEXT and message.identity is None and "secret" not in str(message.to_dict())


async def test_works_end_to_end_with_the_dm_transport_and_adapter_results() -> None:
    store = MemoryStore()
    sent: list[tuple[str, str, str]] = []

    async def send_direct(platform: str, user_id: str, text: str) -> MessageActionResult:
        sent.append((platform, user_id, text))
        return MessageActionResult("ok", user_id, message_id="1")

    notifier = Notifier(
        PreferenceStore.from_config(store, CONFIG),
        CONFIG.transports(send_direct),
        store,
        lambda: datetime(2026, 1, 15, 12, tzinfo=timezone.utc),
    )
    [outcome] = await notifier.notify(C.SCHEDULED_TASK_FAILED, [CAROL], "stand-up failed", identity="room standup")
    assert outcome.status == "suppressed"  # carol did not subscribe to scheduled failures
    await notifier.preferences.apply_command("discord", "7", "on scheduled_task_failed")
    [outcome] = await notifier.notify(C.SCHEDULED_TASK_FAILED, [CAROL], "stand-up failed", identity="room standup")
    assert outcome.sent and sent == [("discord", "7", "stand-up failed")]


# ------------------------------------------------------------------ trigger helpers

KNOWN = CONFIG.known_people()


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("@alice can you check?", ["alice"]),
        ("Thanks @Alice and @bob, and @alice again.", ["alice", "bob"]),
        ("mail me at carol@example.org", []),
        ("@@alice is not a mention", []),
        ("@planner and @critic are agents, not people", []),
        ("cc @dave.", ["dave"]),
        ("(@carol) see above", ["carol"]),
    ],
)
def test_mentioned_people(text: str, names: list[str]) -> None:
    assert [r.name for r in mentioned_people(text, KNOWN)] == names


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("@alice can you check the logs?", True),
        ("@alice, what do you think?!", True),
        ("Can you confirm, @alice?", True),
        ('@alice: "is this right?"', True),
        ("@alice can you check the logs?\nThanks.", True),
        ("Thanks @alice. Can you check the logs?", False),  # the question is a different sentence
        ("@alice the logs are clean.", False),
        ("@bob is this right? @alice fyi.", False),
        ("alice, is this right?", False),  # only @-mentions count
    ],
)
def test_asks_question_rule(text: str, expected: bool) -> None:
    assert asks_question(text, "alice") is expected
    assert asks_question(text, "@Alice") is expected


def test_mention_triggers_classify_questions_and_mentions() -> None:
    triggers = mention_triggers("@alice is the build green? cc @bob.", KNOWN)
    assert [(r.name, c) for r, c in triggers] == [("alice", C.AGENT_QUESTION), ("bob", C.HUMAN_MENTIONED)]


def test_dm_transport_is_the_default_transport() -> None:
    transports = CONFIG.transports(lambda *a: None)  # type: ignore[arg-type,return-value]
    assert isinstance(transports["dm"], DirectMessageTransport)


async def test_concurrent_flushes_send_one_digest(setup) -> None:
    import asyncio

    notifier, clock, dm, _, _ = setup
    clock.now = berlin(15, 23)
    await notifier.notify(C.AGENT_QUESTION, [ALICE], "q", identity="room a")
    clock.now = berlin(16, 8)
    results = await asyncio.wait_for(asyncio.gather(notifier.flush_digests(), notifier.flush_digests()), 5)
    assert sum(len(r) for r in results) == 1 and len(dm.sent) == 1
