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
from botweave.runtime.config import load_config
from botweave.runtime.dump import dump_config
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
    assert config.default_preference.categories == {C.APPROVAL_REQUESTED, C.AGENT_QUESTION, C.HUMAN_MENTIONED}
    alice = config.preferences["telegram:42"]
    assert (alice.quiet_start, alice.quiet_end, alice.timezone) == (time(22), time(7, 30), "Europe/Berlin")
    assert alice.digest and alice.categories == config.default_preference.categories  # only named keys override
    assert config.preferences["slack:U7"].detail_level is DetailLevel.PRIVATE
    assert config.preferences["discord:9"] == config.default_preference
    assert config.directory["slack:U7"].transport == "webhook:ops"
    assert config.directory["telegram:42"] == Recipient("telegram", "42", name="alice", aliases=("al",))
    assert config.known_people() == {"alice": config.directory["telegram:42"], "al": config.directory["telegram:42"]}


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
    assert parse_push_config(None).default_preference == DEFAULT_PREFERENCE
    assert parse_push_config({}).directory == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"recipients": {"telegram:42": {"quiet_hours": "25:00-07:00"}}}, "push.recipients.telegram:42.quiet_hours: '25:00' is not a time of day"),
        ({"recipients": {"telegram:42": {"quiet_hours": "late"}}}, 'push.recipients.telegram:42.quiet_hours: expected "HH:MM-HH:MM"'),
        ({"recipients": {"telegram:42": {"quiet_hours": {"start": 1320, "end": "07:30"}}}}, "quote it as"),
        ({"recipients": {"telegram:42": {"timezone": "Europe/Atlantis"}}}, "push.recipients.telegram:42.timezone: unknown time zone 'Europe/Atlantis'"),
        ({"recipients": {"telegram:42": {"categories": ["coffee"]}}}, "push.recipients.telegram:42.categories.0: unknown notification category 'coffee'; choose one of: approval_requested"),
        ({"recipients": {"telegram:42": {"categories": "agent_question"}}}, "push.recipients.telegram:42.categories: expected a list of categories (or all), e.g. categories: [agent_question]"),
        ({"recipients": {"telegram:42": {"detail": "verbose"}}}, "push.recipients.telegram:42.detail: unknown detail level"),
        ({"recipients": {"telegram:42": {"digest": "yes"}}}, "push.recipients.telegram:42.digest: must be true or false (got 'yes')"),
        ({"recipients": {"telegram:42": {"quiet": "22:00-07:00"}}}, "push.recipients.telegram:42.quiet: unknown key (did you mean 'quiet_hours'?); allowed keys: categories, quiet_hours, timezone"),
        ({"recipients": {"telegram:42": {"webhook": "nope"}}}, "push.recipients.telegram:42.webhook: unknown webhook 'nope'"),
        ({"recipients": {"fax:42": {}}}, "push.recipients.fax:42: write recipients as <platform>:<user_id>"),
        ({"recipients": {"telegram:42": {"name": "al ice"}}}, "push.recipients.telegram:42.name: 'al ice' is not an @-handle"),
        ({"defaults": {"timezone": "Nowhere"}}, "push.defaults.timezone: unknown time zone 'Nowhere'"),
        ({"webhooks": {"ops": {"url": "ftp://x"}}}, "push.webhooks.ops.url: must be an http(s)://host/... URL (got 'ftp://x')"),
        ({"webhooks": {"ops": {"url": "https://x", "token": "t"}}}, "push.webhooks.ops.token: unknown key; allowed keys: url, secret, retries, backoff, timeout"),
        ({"pager": {}}, "push.pager: unknown key; allowed keys: defaults, webhooks, recipients"),
        ({"webhooks": {"ops": {"url": "https://x", "retries": -1}}}, "push.webhooks.ops.retries: must be at least 0 (got -1)"),
        ({"webhooks": {"ops": {"secret": "s"}}}, "push.webhooks.ops.url: is required"),
        ({"agent_finished_after_seconds": 0}, "push.agent_finished_after_seconds: must be greater than 0 (got 0)"),
        ({"agent_finished_after_seconds": True}, "push.agent_finished_after_seconds: must be a number of seconds (got True)"),
        ({"recipients": {"telegram": {}}}, "push.recipients.telegram: write recipients as <platform>:<user_id>"),
        ({"recipients": {"telegram:42": {"aliases": ["ok", "not ok"]}}}, "push.recipients.telegram:42.aliases.1: 'not ok' is not an @-handle"),
        ({"recipients": {"telegram:42": {"urgent_overrides_quiet": 1}}}, "push.recipients.telegram:42.urgent_overrides_quiet: must be true or false (got 1)"),
        ({"recipients": ["telegram:42"]}, "push.recipients: must be a mapping of keys to values (got list)"),
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


def test_a_webhook_url_with_a_token_in_its_path_stays_out_of_errors() -> None:
    with pytest.raises(ConfigError) as info:
        parse_push_config({"webhooks": {"ops": {"url": "ftp://hooks.example.org/T123/secretpath"}}})
    assert "secretpath" not in str(info.value) and "ftp://hooks.example.org" in str(info.value)


def test_short_forms_and_empty_blocks() -> None:
    config = parse_push_config(
        yaml.safe_load(
            """
defaults:
  categories: all
  quiet_hours: "22:00-07:00"
webhooks:
  ops: https://hooks.example.org/x
  plain: {url: "https://hooks.example.org/y", secret: ""}
recipients:
  "telegram:42":
  "telegram:43": {aliases: "@bee", quiet_hours: off, webhook: plain}
  "slack:U1": {categories: null}
"""
        )
    )
    assert config.default_preference.categories == frozenset(C)
    assert config.preferences["telegram:42"] == config.default_preference
    assert not config.preferences["telegram:43"].has_quiet_hours  # `off` overrides the default window
    assert config.directory["telegram:43"].aliases == ("bee",)
    assert config.preferences["slack:U1"].categories == frozenset()
    assert config.webhooks["ops"].url == "https://hooks.example.org/x"
    assert config.webhooks["plain"].secret is None
    assert parse_push_config(None) == parse_push_config({})


def test_recipients_must_be_on_an_installed_platform() -> None:
    agents = {"agents": {"a": {"model": "offline/echo"}}}
    with pytest.raises(ConfigError) as info:
        load_config({**agents, "push": {"recipients": {"fax:1": {}, "telegram:1": {"detail": "loud"}}}}, env={})
    assert info.value.problems == [
        "push.recipients.fax:1: write recipients as <platform>:<user_id> with platform one of "
        "console, discord, email, matrix, slack, teams, telegram, web, whatsapp, e.g. \"telegram:123456\" (got 'fax:1')",
        "push.recipients.telegram:1.detail: unknown detail level 'loud'; choose one of: private, identified, detailed",
    ]
    config = load_config({**agents, "push": {"recipients": {"slack:U1": {"name": "sam"}}}}, env={})
    assert config.push.directory["slack:U1"].name == "sam"


def test_the_push_section_dump_hides_secrets_and_webhook_paths() -> None:
    config = load_config({"agents": {"a": {"model": "offline/echo"}}, "push": CONFIG}, env={})
    dumped = dump_config(config)
    assert "s3cret" not in dumped and "secretpath" not in dumped
    assert "hooks.example.org" in dumped and "quiet_hours:" in dumped


async def test_store_prefers_notify_changes_over_config_over_defaults() -> None:
    config = parse_push_config(CONFIG)
    prefs = PreferenceStore.from_config(MemoryStore(), config)
    assert (await prefs.get("telegram", "42")).timezone == "Europe/Berlin"
    assert await prefs.get("telegram", "unknown") == config.default_preference
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
