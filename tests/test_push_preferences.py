"""Preferences: the `push:` config block, the store, and the `/notify` command."""

from __future__ import annotations

from datetime import time

import pytest
import yaml
from botweave.config import ConfigError
from botweave.push import (
    DEFAULT_PREFERENCE,
    DetailLevel,
    NotificationCategory,
    NotificationPreference,
    PreferenceStore,
    Recipient,
    WebhookTransport,
    handle_notify_command,
    parse_push_config,
)
from botweave.store import MemoryStore

C = NotificationCategory

CONFIG = yaml.safe_load(
    """
defaults:
  categories: [approval_requested, agent_question, human_mentioned]
  detail: identified
webhooks:
  ops: {url: "https://hooks.example.org/T123/secretpath", secret: s3cret, retries: 2}
recipients:
  "telegram:42":
    name: alice
    aliases: ["@al"]
    quiet_hours: "22:00-07:30"
    timezone: Europe/Berlin
    digest: true
  "slack:U7":
    webhook: ops
    detail: private
  "discord:9": {}
"""
)


def test_config_block_parses_with_defaults_and_overrides() -> None:
    config = parse_push_config(CONFIG)
    assert config.defaults.categories == {C.APPROVAL_REQUESTED, C.AGENT_QUESTION, C.HUMAN_MENTIONED}
    alice = config.preferences["telegram:42"]
    assert (alice.quiet_start, alice.quiet_end, alice.timezone) == (time(22), time(7, 30), "Europe/Berlin")
    assert alice.digest and alice.categories == config.defaults.categories  # only named keys override
    assert config.preferences["slack:U7"].detail_level is DetailLevel.PRIVATE
    assert config.preferences["discord:9"] == config.defaults
    assert config.recipients["slack:U7"].transport == "webhook:ops"
    assert config.recipients["telegram:42"] == Recipient("telegram", "42", name="alice", aliases=("al",))
    assert config.known_people() == {"alice": config.recipients["telegram:42"], "al": config.recipients["telegram:42"]}


def test_webhook_secret_and_path_stay_out_of_reprs() -> None:
    config = parse_push_config(CONFIG)
    transports = config.transports(send_direct=None)  # type: ignore[arg-type]
    assert set(transports) == {"dm", "webhook:ops"}
    hook = transports["webhook:ops"]
    assert isinstance(hook, WebhookTransport) and hook.retries == 2
    for text in (repr(config), repr(hook), repr(config.webhooks["ops"])):
        assert "s3cret" not in text and "secretpath" not in text
    assert "hooks.example.org" in repr(hook)


def test_empty_or_missing_block_gives_the_spec_defaults() -> None:
    assert parse_push_config(None).defaults == DEFAULT_PREFERENCE
    assert parse_push_config({}).recipients == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"recipients": {"telegram:42": {"quiet_hours": "25:00-07:00"}}}, "push.recipients.telegram:42.quiet_hours: '25:00' is not a time of day"),
        ({"recipients": {"telegram:42": {"quiet_hours": "late"}}}, 'push.recipients.telegram:42.quiet_hours: expected "HH:MM-HH:MM"'),
        ({"recipients": {"telegram:42": {"quiet_hours": {"start": 1320, "end": "07:30"}}}}, "quote it as"),
        ({"recipients": {"telegram:42": {"timezone": "Europe/Atlantis"}}}, "push.recipients.telegram:42.timezone: unknown time zone 'Europe/Atlantis'"),
        ({"recipients": {"telegram:42": {"categories": ["coffee"]}}}, "push.recipients.telegram:42.categories: unknown notification category 'coffee'"),
        ({"recipients": {"telegram:42": {"categories": "agent_question"}}}, "expected a list of categories"),
        ({"recipients": {"telegram:42": {"detail": "verbose"}}}, "push.recipients.telegram:42.detail: unknown detail level"),
        ({"recipients": {"telegram:42": {"digest": "yes"}}}, "push.recipients.telegram:42.digest: expected true or false"),
        ({"recipients": {"telegram:42": {"quiet": "22:00-07:00"}}}, "push.recipients.telegram:42.quiet: unknown setting"),
        ({"recipients": {"telegram:42": {"webhook": "nope"}}}, "push.recipients.telegram:42.webhook: unknown webhook 'nope'"),
        ({"recipients": {"fax:42": {}}}, "push.recipients.fax:42: write recipients as <platform>:<user_id>"),
        ({"recipients": {"telegram:42": {"name": "al ice"}}}, "push.recipients.telegram:42.name: 'al ice' is not an @-handle"),
        ({"defaults": {"timezone": "Nowhere"}}, "push.defaults.timezone: unknown time zone 'Nowhere'"),
        ({"webhooks": {"ops": {"url": "ftp://x"}}}, "push.webhooks.ops: webhook url must be http(s)"),
        ({"webhooks": {"ops": {"url": "https://x", "token": "t"}}}, "push.webhooks.ops.token: unknown setting"),
        ({"pager": {}}, "push.pager: unknown setting"),
    ],
)
def test_config_errors_name_the_path(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_push_config(raw, platforms=("console", "telegram", "discord", "slack"))
    assert isinstance(info.value, ValueError)
    assert any(message in line for line in info.value.problems), info.value.problems


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_push_config({"recipients": {"telegram:1": {"timezone": "X/Y", "digest": 1}}})
    assert len(info.value.problems) == 2


async def test_store_prefers_notify_changes_over_config_over_defaults() -> None:
    config = parse_push_config(CONFIG)
    prefs = config.preference_store(MemoryStore())
    assert (await prefs.get("telegram", "42")).timezone == "Europe/Berlin"
    assert await prefs.get("telegram", "unknown") == config.defaults
    changed = NotificationPreference(categories={C.AGENT_FINISHED}, detail_level=DetailLevel.DETAILED)
    await prefs.set("telegram", "42", changed)
    assert await prefs.get("telegram", "42") == changed
    await prefs.reset("telegram", "42")
    assert await prefs.get("telegram", "42") == config.preferences["telegram:42"]


async def test_unreadable_stored_preference_falls_back_to_config() -> None:
    store = MemoryStore()
    await store.set("push:prefs:telegram:42", '{"timezone": "Gone/Zone"}')
    assert await PreferenceStore(store).get("telegram", "42") == DEFAULT_PREFERENCE


# ------------------------------------------------------------------------- /notify


def run(args: str, current: NotificationPreference = DEFAULT_PREFERENCE):
    return handle_notify_command(args, current)


def test_notify_alone_shows_readable_settings() -> None:
    result = run("")
    assert not result.changed and result.preference == DEFAULT_PREFERENCE
    assert "on: approval_requested, agent_question" in result.reply
    assert "quiet hours: none" in result.reply
    assert "detail: identified" in result.reply and "Activity in <room>" in result.reply


@pytest.mark.parametrize(
    ("args", "check"),
    [
        ("on human_mentioned", lambda p: C.HUMAN_MENTIONED in p.categories),
        ("on agent-finished", lambda p: C.AGENT_FINISHED in p.categories),
        ("off agent_question", lambda p: p.categories == {C.APPROVAL_REQUESTED}),
        ("on all", lambda p: p.categories == frozenset(C)),
        ("off all", lambda p: p.categories == frozenset()),
        ("quiet 22:00-07:30 Europe/Berlin", lambda p: (p.quiet_start, p.quiet_end, p.timezone) == (time(22), time(7, 30), "Europe/Berlin")),
        ("quiet 22:00 - 07:30 UTC", lambda p: (p.quiet_start, p.quiet_end, p.timezone) == (time(22), time(7, 30), "UTC")),
        ("quiet 23:15-06:00", lambda p: (p.quiet_start, p.timezone) == (time(23, 15), "UTC")),
        ("detail private", lambda p: p.detail_level is DetailLevel.PRIVATE),
        ("detail DETAILED", lambda p: p.detail_level is DetailLevel.DETAILED),
        ("digest on", lambda p: p.digest),
        ("urgent off", lambda p: not p.urgent_overrides_quiet),
    ],
)
def test_notify_changes(args: str, check) -> None:
    result = run(args)
    assert result.changed and check(result.preference), result.reply
    assert "Your notifications:" in result.reply


def test_notify_quiet_off_keeps_the_zone() -> None:
    quiet = run("quiet 22:00-07:30 Asia/Tokyo").preference
    result = run("quiet off", quiet)
    assert result.changed and not result.preference.has_quiet_hours
    assert result.preference.timezone == "Asia/Tokyo"
    assert "quiet hours: none" in result.reply


@pytest.mark.parametrize(
    ("args", "reply"),
    [
        ("on coffee", "unknown notification category 'coffee'"),
        ("quiet 22:00-07:30 Mars/Base", "unknown time zone 'Mars/Base'"),
        ("quiet 24:00-07:00", "not a time of day"),
        ("quiet soon", 'expected "HH:MM-HH:MM"'),
        ("detail loud", "unknown detail level 'loud'"),
        ("digest maybe", "Usage:"),
        ("frobnicate", "Usage:"),
        ("help", "/notify quiet 22:00-07:30"),
    ],
)
def test_notify_mistakes_explain_and_change_nothing(args: str, reply: str) -> None:
    result = run(args)
    assert not result.changed and result.preference == DEFAULT_PREFERENCE
    assert reply in result.reply


async def test_apply_command_persists_for_that_person_only() -> None:
    prefs = PreferenceStore(MemoryStore())
    result = await prefs.apply_command("telegram", "42", "quiet 22:00-07:30 Europe/Berlin")
    assert result.changed
    assert (await prefs.get("telegram", "42")).has_quiet_hours
    assert not (await prefs.get("telegram", "43")).has_quiet_hours
    assert not (await prefs.apply_command("telegram", "42", "")).changed
