import logging
import textwrap

import pytest
from botweave import ConfigError, load_config
from botweave.runtime.dump import dump_config

AGENTS = {"agents": {"a": {"model": "offline/echo"}}}


def problems(data, env=None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(data, env=env or {})
    return info.value.problems


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {**AGENTS, "platforms": {"telegram": {"unknown_user_policy": "maybe"}}},
            "platforms.telegram.unknown_user_policy: must be one of deny, pair, allow (got 'maybe')",
        ),
        (
            {**AGENTS, "bot": {"group_policy": "everyone"}},
            "bot.group_policy: must be one of respond_all, mention_only, command_only, observe (got 'everyone')",
        ),
        ({**AGENTS, "colour": "blue"}, "colour: unknown key; allowed keys: bot, agents, platforms, routes"),
        ({**AGENTS, "platforms": {"telegram": {"tokn": "x"}}}, "platforms.telegram.tokn: unknown key (did you mean 'token'?); allowed keys:"),
        ({**AGENTS, "bot": {"streming": True}}, "bot.streming: unknown key (did you mean 'streaming'?); allowed keys:"),
        ({**AGENTS, "platforms": {"irc": {}}}, "platforms.irc: unknown key; allowed keys: console, discord, slack, teams, telegram"),
        ({**AGENTS, "bot": {"stream_edit_interval_ms": "soon"}}, "bot.stream_edit_interval_ms: must be a whole number (got 'soon')"),
        ({**AGENTS, "bot": {"stream_edit_interval_ms": -5}}, "bot.stream_edit_interval_ms: must be at least 0 (got -5)"),
        ({**AGENTS, "bot": {"streaming": "sometimes"}}, "bot.streaming: must be true or false (got 'sometimes')"),
        ({"agents": {"a": {"instructions": "hi"}}}, "agents.a.model: is required"),
        ({"agents": {"a": {"model": "m", "temperature": "hot"}}}, "agents.a.temperature: must be a number (got 'hot')"),
        ({}, "at least one agent is required under `agents:`"),
        ({**AGENTS, "routes": [{"agent": "b"}]}, "routes.0.agent: unknown agent 'b'; defined agents: a"),
        ({**AGENTS, "routes": [{"match": {"platform": "x"}}]}, "routes.0: a route needs exactly one of `agent: NAME` or `room: NAME`"),
        ({**AGENTS, "routes": [{"match": {"chat_type": "team"}, "agent": "a"}]}, "routes.0.match.chat_type: must be one of dm, group, channel, thread (got 'team')"),
        ({**AGENTS, "store": {"url": "postgres://x"}}, "store.url: must start with sqlite://, memory:// or redis://"),
        ({**AGENTS, "platforms": {"slack": {"mode": "carrier-pigeon"}}}, "platforms.slack.mode: must be one of socket, http (got 'carrier-pigeon')"),
        ({**AGENTS, "agents": ["a"]}, "agents: must be a mapping of keys to values (got list)"),
        ({**AGENTS, "rooms": {"team": {"roster": ["a", "b"]}}}, "rooms.team.roster: b not defined under `agents:`; defined agents: a"),
        ({**AGENTS, "rooms": {"team": {"agents": "a b"}}}, "rooms.team.agents: must be a list of agent names, e.g. agents: [a, b]"),
        ({**AGENTS, "rooms": {"team": {"roster": ["a"], "max_rounds": 0}}}, "rooms.team.max_rounds: must be at least 1 (got 0)"),
        ({**AGENTS, "rooms": {"": {"roster": ["a"]}}}, "rooms: a room needs a non-empty name (got '')"),
        ({**AGENTS, "rooms": ["team"]}, "rooms: must be a mapping of keys to values (got list)"),
        ({**AGENTS, "routes": [{"room": "team"}]}, "routes.0.room: unknown room 'team'; defined rooms: none defined under `rooms:`"),
    ],
)
def test_each_config_error_names_the_field_and_the_fix(data, expected):
    found = problems(data)
    assert any(p.startswith(expected) for p in found), found


def test_every_broken_reference_is_reported_at_its_own_path():
    found = problems(
        {
            **AGENTS,
            "rooms": {"team": {"roster": ["a", "ghost"]}},
            "routes": [{"agent": "b"}, {"room": "team"}, {"room": "lobby"}],
        }
    )
    assert found == [
        "routes.0.agent: unknown agent 'b'; defined agents: a",
        "routes.2.room: unknown room 'lobby'; defined rooms: team",
        "rooms.team.roster: ghost not defined under `agents:`; defined agents: a",
    ]


def test_rooms_are_typed_and_named_by_their_key():
    assert load_config({**AGENTS, "rooms": None, "push": None}).rooms == {}  # every entry commented out
    config = load_config({**AGENTS, "rooms": {"team": {"agents": ["a"], "max_rounds": 2}}})
    room = config.rooms["team"]
    assert (room.name, room.roster, room.max_rounds) == ("team", ("a",), 2)
    assert "max_rounds: 2" in dump_config(config) and "name: team" not in dump_config(config)


def problems_with_env(data, env):
    with pytest.raises(ConfigError) as info:
        load_config(data, env=env)
    return info.value.problems


def test_broken_yaml_file_is_reported_with_its_path(tmp_path):
    path = tmp_path / "bot.yaml"
    path.write_text("agents:\n  a:\n    model: [unclosed\n")
    found = problems(path)
    assert found[0].startswith(f"{path}:4:1: not valid YAML: while parsing a flow sequence")
    assert problems(tmp_path / "missing.yaml") == [f"{tmp_path / 'missing.yaml'}: file not found"]


def test_env_substitution_with_defaults(tmp_path):
    path = tmp_path / "bot.yaml"
    path.write_text(
        textwrap.dedent(
            """
            agents:
              a:
                model: ${MODEL:-offline/echo}
                instructions: "You are ${NAME}."
            platforms:
              telegram:
                token: ${TG_TOKEN}
            """
        )
    )
    config = load_config(path, env={"NAME": "Bob", "TG_TOKEN": "123:secret"})
    assert config.agents["a"].model == "offline/echo"
    assert config.agents["a"].instructions == "You are Bob."
    assert config.platforms.telegram.token.get_secret_value() == "123:secret"


def test_a_variable_that_is_not_set_is_a_config_error_naming_it():
    data = {**AGENTS, "platforms": {"discord": {"token": "${DISCORD_BOT_TOKEN}"}}}
    assert problems_with_env(data, {}) == [
        "platforms.discord.token: ${DISCORD_BOT_TOKEN} is not set "
        "(export DISCORD_BOT_TOKEN=..., or write ${DISCORD_BOT_TOKEN:-} to allow it empty)"
    ]
    set_but_empty = load_config(data, env={"DISCORD_BOT_TOKEN": ""})  # set, even if empty: taken as it is
    assert set_but_empty.platforms.discord.token.get_secret_value() == ""


def test_platform_with_empty_token_variable_is_skipped_with_one_warning(caplog):
    data = {**AGENTS, "platforms": {"console": {}, "discord": {"token": "${DISCORD_BOT_TOKEN:-}"}}}
    config = load_config(data, env={})
    with caplog.at_level(logging.WARNING):
        enabled = config.enabled_platforms()
    assert list(enabled) == ["console"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["platform discord skipped: platforms.discord.token is empty (set DISCORD_BOT_TOKEN)"]


def test_platform_overrides_and_per_platform_defaults():
    config = load_config(
        {**AGENTS, "bot": {"streaming": True, "footer": True}, "platforms": {"telegram": {"token": "t", "footer": False}}}
    )
    telegram = config.bot_config_for("telegram")
    assert telegram.streaming is True and telegram.footer is False
    assert telegram.unknown_user_policy == "pair"
    assert config.bot_config_for("console").unknown_user_policy == "allow"


def test_nested_platform_overrides_stay_validated_sections():
    config = load_config(
        {
            **AGENTS,
            "bot": {"bot_loop_protection": {"max_events_per_window": 7}},
            "platforms": {"console": {"user_rate_limit": {"messages": 2, "per_seconds": 5}}},
        }
    )
    console = config.bot_config_for("console")
    assert console.user_rate_limit is not None and console.user_rate_limit.per_seconds == 5.0
    assert console.bot_loop_protection.max_events_per_window == 7
    assert "max_events_per_window: 7" in dump_config(config)


def test_secrets_never_appear_in_dumps_or_reprs():
    config = load_config(
        {
            "agents": {"a": {"model": "gpt-4o", "api_key": "sk-very-secret"}},
            "bot": {"owner_user_id": 12345},
            "platforms": {"telegram": {"token": "999:tg-secret", "webhook_secret": "hook-secret"}},
            "store": {"url": "redis://:redis-pass@localhost:6379/0"},
        }
    )
    dumped = dump_config(config)
    for secret in ("sk-very-secret", "999:tg-secret", "hook-secret", "redis-pass", "12345"):
        assert secret not in dumped
        assert secret not in repr(config)
    assert "owner_user_id: '***'" in dumped
