"""Reloading a running App's configuration file: what changed is applied in place, a turn
already under way finishes with what it started with, a refused file changes nothing and is
reported, and only a platform whose connection settings changed reconnects.

The bot runs on the recording adapter (and, for reconnects, on the Telegram and Discord
emulators through their real SDKs); the model is the offline echo, or the OpenAI emulator
where what the model was sent matters.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from botweave import App, tool

from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.support import RecordingAdapter, alive, message

ECHO = {"model": "offline/echo"}
SERVER = str(Path(__file__).with_name("mcp_server.py"))

#: Set by a test to let `hold` (a tool) return (each test that uses it makes its own).
RELEASE = asyncio.Event()


@tool
async def hold() -> str:
    """Wait until the test lets go."""
    await RELEASE.wait()
    return "released"


def write(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture
async def apps() -> Any:
    started: list[App] = []
    yield started
    for app in started:
        await asyncio.wait_for(app.stop(timeout=1.0), 30)


async def start(path: Path, apps: list[App], *, ops: bool = False) -> tuple[App, RecordingAdapter]:
    app = App.from_config(path)
    apps.append(app)
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    await app.start(platforms=[])
    return app, adapter


def base(**extra: Any) -> dict[str, Any]:
    return {"bot": {"unknown_user_policy": "allow"}, "agents": {"assistant": dict(ECHO)}, **extra}


async def test_a_reload_adds_an_agent_and_a_route_that_answers_at_once(tmp_path: Path, apps: list[App]) -> None:
    config = base()
    path = write(tmp_path / "bot.yaml", config)
    app, adapter = await start(path, apps)
    before = app.revision
    await app.handle(message("hello", chat_id="c2"))

    config["agents"]["helper"] = dict(ECHO)
    config["routes"] = [{"match": {"chat_id": "c2"}, "agent": "helper"}, {"match": {}, "agent": "assistant"}]
    write(path, config)
    result = await app.reload()

    assert result.status == "applied" and result.before == before and result.after == app.revision != before
    assert set(result.changed) == {"agents", "routes"} and result.platforms == {}
    await app.handle(message("again", chat_id="c2"))
    await app.handle(message("elsewhere", chat_id="c1"))
    await app.handle(message("/status", chat_id="c2"))
    assert adapter.texts()[:3] == [
        "assistant (offline echo) heard: hello",
        "helper (offline echo) heard: again",
        "assistant (offline echo) heard: elsewhere",
    ]
    assert "agent: helper" in adapter.texts()[3] and f"config: revision {app.revision}" in adapter.texts()[3]
    assert (await app.reload()).status == "unchanged"


async def test_a_turn_under_way_finishes_with_the_configuration_it_started_with(
    tmp_path: Path, apps: list[App], openai_emulator: OpenAIEmulator
) -> None:
    llm = openai_emulator
    model = {"model": "openai/gpt-emu", "api_base": llm.base_url, "api_key": "sk-loopback"}
    config = base(agents={"assistant": {**model, "instructions": "Old rules.", "tools": [{"python": "tests.test_reload:hold"}]}})
    path = write(tmp_path / "bot.yaml", config)
    app, adapter = await start(path, apps)
    global RELEASE
    RELEASE = asyncio.Event()
    llm.queue_tool_calls(tool_call("hold"))
    llm.queue_text("Finished the old way.")
    llm.queue_text("Answered the new way.")
    turn = asyncio.create_task(app.handle(message("long job")))
    await wait_until(lambda: len(llm.requests) == 1, what="the turn to call its tool")

    config["agents"]["assistant"]["instructions"] = "New rules."
    write(path, config)
    assert (await app.reload()).status == "applied"
    RELEASE.set()  # the tool returns; the turn asks its model again, after the reload
    assert (await turn).status == "replied"
    await app.handle(message("next one"))

    systems = [request["messages"][0]["content"] for request in llm.requests]
    assert systems[0].startswith("Old rules.") and systems[1].startswith("Old rules.")
    assert systems[2].startswith("New rules.")
    assert adapter.texts() == ["Finished the old way.", "Answered the new way."]


async def test_a_refused_file_changes_nothing_and_says_so_until_a_good_one_is_loaded(
    tmp_path: Path, apps: list[App], caplog: pytest.LogCaptureFixture
) -> None:
    config = base(ops={"listen": "127.0.0.1:0"})
    path = write(tmp_path / "bot.yaml", config)
    app, adapter = await start(path, apps)
    running = app.revision

    async def readyz() -> tuple[int, dict[str, Any]]:
        assert app.ops is not None
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{app.ops.port}/readyz") as response:
                return response.status, await response.json()

    broken = {**config, "agents": {"assistant": {**ECHO, "temprature": 0.2}}}
    write(path, broken)
    status, body = await readyz()
    assert status == 200 and "changed on disk since it was read" in body["config"]  # edited, not reloaded

    caplog.set_level(logging.INFO, logger="botweave")
    result = await app.reload()
    assert result.status == "invalid" and app.revision == running
    assert "agents.assistant.temprature: unknown key" in (result.error or "")
    refused = [r.getMessage() for r in caplog.records if "config reload refused" in r.getMessage()]
    assert len(refused) == 1 and "\n" not in refused[0] and "agents.assistant.temprature" in refused[0]
    assert running in refused[0]
    status, body = await readyz()
    assert status == 200 and body["status"] == "ready"
    assert "differs from what runs" in body["config"] and "temprature" in body["config"]
    assert app.reloads.config_status() == {"revision": running, "differs": body["config"]}

    bad_cron = {**config, "schedules": {"digest": {"cron": "61 * * * *", "agent": "assistant", "prompt": "p", "target": "test:c1"}}}
    write(path, bad_cron)
    result = await app.reload()
    assert result.status == "invalid" and "schedules.digest" in (result.error or "") and app.revision == running
    assert app.schedules is None
    await app.handle(message("still here?"))
    assert adapter.texts() == ["assistant (offline echo) heard: still here?"]

    write(path, {**config, "agents": {"assistant": {**ECHO, "temperature": 0.2}}})
    assert (await app.reload()).status == "applied"
    status, body = await readyz()
    assert (status, body) == (200, {"status": "ready"})
    assert app.reloads.config_status() == {"revision": app.revision}


async def test_policies_change_for_the_next_message(tmp_path: Path, apps: list[App]) -> None:
    config = base()
    path = write(tmp_path / "bot.yaml", config)
    app, adapter = await start(path, apps)
    config["bot"] = {"unknown_user_policy": "deny", "allowed_users": ["u1"]}
    write(path, config)
    result = await app.reload()
    assert result.changed == ("bot",)
    assert (await app.handle(message("me", user_id="u1"))).status == "replied"
    assert (await app.handle(message("stranger", user_id="u9"))).status == "denied"


async def test_mcp_servers_left_alone_stay_connected_and_removed_ones_stop(tmp_path: Path, apps: list[App]) -> None:
    pids = {name: tmp_path / f"{name}.pid" for name in ("files", "scratch")}

    def server(name: str) -> dict[str, Any]:
        return {"command": [sys.executable, SERVER, "files"], "env": {"MCP_PID_FILE": str(pids[name])}}

    config = base(agents={"assistant": {**ECHO, "tools": [{"mcp": {"files": server("files")}}, {"mcp": {"scratch": server("scratch")}}]}})
    path = write(tmp_path / "bot.yaml", config)
    app, _ = await start(path, apps)
    first = {name: int(pid.read_text()) for name, pid in pids.items()}
    assert "files__add" in app.agents["assistant"].tools and "scratch__add" in app.agents["assistant"].tools

    config["agents"]["assistant"]["tools"] = [{"mcp": {"files": server("files")}}]
    config["agents"]["helper"] = dict(ECHO)
    write(path, config)
    assert (await app.reload()).status == "applied"
    assert "files__add" in app.agents["assistant"].tools and "scratch__add" not in app.agents["assistant"].tools
    assert int(pids["files"].read_text()) == first["files"] and alive(first["files"])
    await wait_until(lambda: not alive(first["scratch"]), timeout=15, what="the removed server to stop")


async def test_a_schedule_whose_timing_changed_starts_afresh(tmp_path: Path, apps: list[App]) -> None:
    schedule = {"cron": "0 9 * * *", "agent": "assistant", "prompt": "report", "target": "test:c1"}
    config = base(schedules={"digest": schedule})
    path = write(tmp_path / "bot.yaml", config)
    app, _ = await start(path, apps)
    assert app.schedules is not None and app.schedules.running
    old = app.schedules
    week_ago = datetime.now(timezone.utc) - timedelta(days=7)
    await app.store.set(old.last_key("digest"), week_ago.isoformat())  # as if it last ran a week ago

    config["schedules"]["digest"] = {**schedule, "cron": "*/5 * * * *"}
    write(path, config)
    assert (await app.reload()).changed == ("schedules",)
    assert app.schedules is not old and app.schedules.running and not old.running
    assert await app.schedules.missed("digest") == []  # the new timing's past is not "missed"
    assert app.schedules.next_run("digest") is not None


async def test_tools_a_plugin_added_are_given_to_the_reloaded_agents(tmp_path: Path, apps: list[App]) -> None:
    config = base()
    path = write(tmp_path / "bot.yaml", config)
    app, _ = await start(path, apps)

    def ping() -> str:
        """Answer pong."""
        return "pong"

    app.add_tool(ping)
    config["agents"]["helper"] = dict(ECHO)
    write(path, config)
    assert (await app.reload()).status == "applied"
    assert "ping" in app.agents["assistant"].tools and "ping" in app.agents["helper"].tools


async def test_only_the_platform_whose_connection_changed_reconnects(
    tmp_path: Path, apps: list[App], telegram_emulator: TelegramEmulator
) -> None:
    discord = await DiscordEmulator().start()
    try:
        config = base(platforms={
            "telegram": adapter_config(telegram_emulator, poll_timeout=1),
            "discord": {"token": discord.token, "api_base_url": discord.api_base, "gateway_url": discord.gateway_url},
        })
        path = write(tmp_path / "bot.yaml", config)
        app = App.from_config(path)
        apps.append(app)
        await app.start()
        await discord.wait_ready()
        telegram = app.adapters["telegram"]
        identified = len(discord.identifies)

        config["platforms"]["discord"]["allowed_users"] = ["7001"]  # a policy: no reconnect
        config["platforms"]["telegram"]["poll_timeout"] = 2  # a connection setting
        write(path, config)
        result = await app.reload()
        assert result.platforms == {"telegram": "reconnect"} and set(result.changed) == {"platforms.discord", "platforms.telegram"}
        assert app.adapters["telegram"] is not telegram and app.adapters["telegram"].config.poll_timeout == 2
        assert len(discord.identifies) == identified == 1
        assert app._platforms.configs["discord"].allowed_users == ["7001"]

        user = telegram_emulator.user(501, "Ann")
        telegram_emulator.push_message(telegram_emulator.private_chat(user), user, "after the reconnect")
        await wait_until(lambda: telegram_emulator.sent_texts(501), timeout=15, what="an answer on Telegram")

        del config["platforms"]["telegram"]
        write(path, config)
        result = await app.reload()
        assert result.platforms == {"telegram": "stop"} and "telegram" not in app.adapters
        assert "platforms: telegram stopped" in result.summary()
        assert len(discord.identifies) == 1
    finally:
        await discord.stop()


def test_what_changed_is_named_secrets_included_and_layout_not() -> None:
    from botweave.runtime.config import load_config
    from botweave.runtime.reload import changed_sections, platform_moves

    base_config = {
        "agents": {"a": {"model": "openai/x", "api_key": "sk-one"}},
        "platforms": {"telegram": {"token": "1:one", "allowed_users": ["1"]}},
        "store": {"url": "memory://"},
    }
    old = load_config(base_config)
    same = load_config(yaml.safe_load(yaml.safe_dump(base_config, sort_keys=True)))
    key = load_config({**base_config, "agents": {"a": {"model": "openai/x", "api_key": "sk-two"}}})
    policy = load_config({**base_config, "platforms": {"telegram": {"token": "1:one", "allowed_users": ["2"]}}})
    token = load_config({**base_config, "platforms": {"telegram": {"token": "1:two", "allowed_users": ["1"]}}})
    store = load_config({**base_config, "store": {"url": "memory://", "prefix": "other:"}})

    assert same.revision == old.revision and changed_sections(old, same) == ([], [])
    assert key.revision != old.revision and changed_sections(old, key) == (["agents"], [])
    assert "sk-two" not in key.revision
    assert changed_sections(old, policy) == (["platforms.telegram"], [])
    assert platform_moves(old.enabled_platforms(), policy.enabled_platforms()) == {}
    assert platform_moves(old.enabled_platforms(), token.enabled_platforms()) == {"telegram": "reconnect"}
    assert changed_sections(old, store) == ([], ["store"])
