"""The notification policy, as a table: categories, quiet windows, urgency, detail levels, zones."""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone

import pytest
from botweave.push import (
    DEFAULT_PREFERENCE,
    PRIVATE_TEXT,
    DetailLevel,
    NotificationCategory,
    NotificationDecision,
    NotificationPreference,
    evaluate,
)

C = NotificationCategory
UTC = timezone.utc
ALL = frozenset(C)


def pref(**kw: object) -> NotificationPreference:
    base: dict[str, object] = {"categories": ALL, "detail_level": DetailLevel.DETAILED}
    base.update(kw)
    return NotificationPreference(**base)  # type: ignore[arg-type]


def at(hh: int, mm: int = 0, tz: timezone = UTC) -> datetime:
    return datetime(2026, 1, 15, hh, mm, tzinfo=tz)


NIGHT = {"quiet_start": time(22, 0), "quiet_end": time(7, 30)}  # wraps midnight
LUNCH = {"quiet_start": time(12, 0), "quiet_end": time(13, 0)}
BERLIN_NIGHT = {**NIGHT, "timezone": "Europe/Berlin"}

CASES = [
    # id, category, preference, now, urgent, expected (send, reason, content)
    ("default: approval is on", C.APPROVAL_REQUESTED, None, at(12), False, (True, "ok", "Activity in room standup")),
    ("default: question is on", C.AGENT_QUESTION, None, at(3), False, (True, "ok", "Activity in room standup")),
    ("default: mention is off", C.HUMAN_MENTIONED, None, at(12), False, (False, "category_not_subscribed", None)),
    ("default: finished is off", C.AGENT_FINISHED, None, at(12), False, (False, "category_not_subscribed", None)),
    ("default: scheduled failure is off", C.SCHEDULED_TASK_FAILED, None, at(12), False, (False, "category_not_subscribed", None)),
    ("default: background failure off", C.BACKGROUND_TASK_FAILED, None, at(12), False, (False, "category_not_subscribed", None)),
    ("urgency does not override an opt-out", C.HUMAN_MENTIONED, None, at(12), True, (False, "category_not_subscribed", None)),
    ("string category accepted", "agent-finished", pref(), at(12), False, (True, "ok", "the build broke")),
    # quiet windows
    ("before a wrapping window", C.AGENT_FINISHED, pref(**NIGHT), at(21, 59), False, (True, "ok", "the build broke")),
    ("at the start of a wrapping window", C.AGENT_FINISHED, pref(**NIGHT), at(22), False, (False, "quiet_hours", "the build broke")),
    ("after midnight inside the window", C.AGENT_FINISHED, pref(**NIGHT), at(3), False, (False, "quiet_hours", "the build broke")),
    ("the end is exclusive", C.AGENT_FINISHED, pref(**NIGHT), at(7, 30), False, (True, "ok", "the build broke")),
    ("a minute before the end", C.AGENT_FINISHED, pref(**NIGHT), at(7, 29), False, (False, "quiet_hours", "the build broke")),
    ("inside a same-day window", C.AGENT_FINISHED, pref(**LUNCH), at(12, 30), False, (False, "quiet_hours", "the build broke")),
    ("outside a same-day window", C.AGENT_FINISHED, pref(**LUNCH), at(23), False, (True, "ok", "the build broke")),
    ("start == end means no window", C.AGENT_FINISHED, pref(quiet_start=time(9), quiet_end=time(9)), at(9), False, (True, "ok", "the build broke")),
    # urgency
    ("urgent overrides quiet by default", C.AGENT_FINISHED, pref(**NIGHT), at(23), True, (True, "urgent_override", "the build broke")),
    ("urgent override switched off", C.AGENT_FINISHED, pref(**NIGHT, urgent_overrides_quiet=False), at(23), True, (False, "quiet_hours", "the build broke")),
    ("urgent outside quiet hours is just ok", C.AGENT_FINISHED, pref(**NIGHT), at(12), True, (True, "ok", "the build broke")),
    # detail levels
    ("private", C.AGENT_FINISHED, pref(detail_level=DetailLevel.PRIVATE), at(12), False, (True, "ok", PRIVATE_TEXT)),
    ("identified", C.AGENT_FINISHED, pref(detail_level="identified"), at(12), False, (True, "ok", "Activity in room standup")),
    ("detailed", C.AGENT_FINISHED, pref(detail_level="detailed"), at(12), False, (True, "ok", "the build broke")),
    # zones: 21:30 UTC is 22:30 in Berlin (winter, UTC+1) → quiet there, not in UTC
    ("aware now converted to Berlin", C.AGENT_FINISHED, pref(**BERLIN_NIGHT), at(21, 30), False, (False, "quiet_hours", "the build broke")),
    ("same instant, UTC recipient", C.AGENT_FINISHED, pref(**NIGHT), at(21, 30), False, (True, "ok", "the build broke")),
    ("aware now in another zone (UTC-5 → 06:00 Berlin)", C.AGENT_FINISHED, pref(**BERLIN_NIGHT), at(0, 0, timezone(timedelta(hours=-5))), False, (False, "quiet_hours", "the build broke")),
    ("naive now is UTC (06:30 UTC = 07:30 Berlin, window over)", C.AGENT_FINISHED, pref(**BERLIN_NIGHT), datetime(2026, 1, 15, 6, 30), False, (True, "ok", "the build broke")),
    ("DST: 20:30 UTC in July is 22:30 Berlin", C.AGENT_FINISHED, pref(**BERLIN_NIGHT), datetime(2026, 7, 15, 20, 30, tzinfo=UTC), False, (False, "quiet_hours", "the build broke")),
]


@pytest.mark.parametrize(("category", "prefs", "now", "urgent", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_evaluate_table(category, prefs, now, urgent, expected) -> None:
    decision = evaluate(category, prefs, now=now, is_urgent=urgent, content="the build broke", identity="room standup")
    assert decision == NotificationDecision(*expected)


REDACTION = [
    ("identified without identity falls back to private", "identified", "x", None, PRIVATE_TEXT),
    ("identified with blank identity", "identified", "x", "  ", PRIVATE_TEXT),
    ("detailed without content falls back to identified", "detailed", None, "#ops", "Activity in #ops"),
    ("detailed without either is private", "detailed", "", None, PRIVATE_TEXT),
    ("private never shows the identity", "private", "secret", "#ops", PRIVATE_TEXT),
]


@pytest.mark.parametrize(("level", "content", "identity", "text"), [r[1:] for r in REDACTION], ids=[r[0] for r in REDACTION])
def test_redaction_fallbacks(level, content, identity, text) -> None:
    decision = evaluate(C.AGENT_QUESTION, pref(detail_level=level), now=at(12), content=content, identity=identity)
    assert decision.content == text


def test_default_preference_matches_the_spec() -> None:
    assert DEFAULT_PREFERENCE.categories == {C.APPROVAL_REQUESTED, C.AGENT_QUESTION}
    assert DEFAULT_PREFERENCE.detail_level is DetailLevel.IDENTIFIED
    assert not DEFAULT_PREFERENCE.has_quiet_hours
    assert DEFAULT_PREFERENCE.urgent_overrides_quiet is True
    assert DEFAULT_PREFERENCE.digest is False
    assert evaluate(C.AGENT_QUESTION).send  # prefs=None and now=None use the defaults


def test_unknown_zone_is_rejected_at_construction_and_named() -> None:
    with pytest.raises(ValueError, match="Mars/Olympus"):
        NotificationPreference(timezone="Mars/Olympus")
    with pytest.raises(ValueError, match="time zone"):
        NotificationPreference(timezone="")


def test_quiet_hours_need_both_ends_and_unknown_categories_fail() -> None:
    with pytest.raises(ValueError, match="both"):
        NotificationPreference(quiet_start=time(22))
    with pytest.raises(ValueError, match="approval_requested"):
        evaluate("coffee_ready")
    with pytest.raises(ValueError, match="detail level"):
        NotificationPreference(detail_level="verbose")  # type: ignore[arg-type]


def test_preference_round_trips_through_json_form() -> None:
    original = pref(**BERLIN_NIGHT, digest=True, urgent_overrides_quiet=False, detail_level="private")
    assert NotificationPreference.from_dict(original.to_dict()) == original
    assert original.to_dict()["quiet_start"] == "22:00"
