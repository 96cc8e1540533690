"""The gateway and a reload of bot.yaml: `config.reload` (admins only) runs the reload and
answers what `botweave reload` prints of it, `health` shows the revision that runs and says
when the file on disk differs, and the tokens of bot.yaml follow the file without a restart
(a removed token's connections are closed, an added one is let in). Spoken through the
Python client and raw frames, against a bot made from a file on disk."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from botweave import App
from botweave.gateway import Client, GatewayError
from botweave.gateway.protocol import CLOSE_REVOKED

from tests.emulators.openai import OpenAIEmulator
from tests.gateway.support import TOKEN_CONFIG, TOKENS, Raw, client, config

ZED = "zed-token-0123456789abcdef"


def write(path: Path, settings: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


@pytest.fixture
def settings(llm: OpenAIEmulator) -> dict[str, Any]:
    return config(llm)


@pytest.fixture
async def started(start_app: Any, settings: dict[str, Any], tmp_path: Path) -> tuple[App, Path]:
    path = write(tmp_path / "bot.yaml", settings)
    return await start_app(path), path


async def test_config_reload_applies_the_file_for_an_admin_and_answers_what_botweave_reload_prints(
    started: tuple[App, Path], settings: dict[str, Any], llm: OpenAIEmulator
) -> None:
    app, path = started
    before = app.revision
    settings["agents"]["critic"] = {"model": "openai/gpt-4o-mini", "api_base": llm.base_url, "api_key": "sk-test"}
    write(path, settings)
    async with client(app, "ann") as ann:
        with pytest.raises(GatewayError) as refused:
            await ann.call("config.reload")
        assert refused.value.code == "forbidden" and "admin" in str(refused.value)
        assert app.revision == before and "critic" not in app.agents
    async with client(app, "root") as root:
        answer = await root.call("config.reload")
        assert answer["status"] == "applied" and answer["before"] == before and answer["after"] == app.revision != before
        assert answer["changed"] == ["agents"] and answer["problems"] == [] and answer["error"] is None
        assert answer["message"] == f"config reloaded: revision {before} -> {app.revision}; applied: agents"
        assert "critic" in app.agents
        assert {"name": "critic"} in (await root.call("agents.list"))["agents"]  # what a new session may pick
        assert (await root.call("health"))["config"] == {"revision": app.revision}
        assert (await root.call("config.reload"))["message"] == f"config unchanged: revision {app.revision}"


async def test_a_refused_file_changes_nothing_and_health_says_the_file_differs(
    started: tuple[App, Path], settings: dict[str, Any]
) -> None:
    app, path = started
    running = app.revision
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["root"])
        health = await ws.request(1, "health")
        assert health["result"]["status"] == "ok" and health["result"]["config"] == {"revision": running}

        settings["agents"]["helper"]["temprature"] = 0.2
        write(path, settings)
        edited = (await ws.request(2, "health"))["result"]["config"]
        assert edited["revision"] == running and "changed on disk since it was read" in edited["differs"]

        answer = await ws.request(3, "config.reload")
        assert answer["ok"] is True
        result = answer["result"]
        assert result["status"] == "invalid" and result["before"] == result["after"] == running
        assert any("agents.helper.temprature" in line and "unknown key" in line for line in result["problems"])
        assert result["message"].startswith(f"config reload refused, still running revision {running}: ")
        assert app.revision == running
        refused = (await ws.request(4, "health"))["result"]
        assert refused["status"] == "ok" and refused["config"]["revision"] == running
        assert "differs from what runs" in refused["config"]["differs"] and "temprature" in refused["config"]["differs"]


async def test_tokens_follow_the_file_a_removed_one_is_cut_off_and_an_added_one_let_in(
    started: tuple[App, Path], settings: dict[str, Any]
) -> None:
    app, path = started
    kept = [token for token in TOKEN_CONFIG if token["name"] != "eve"]
    bob = next(token for token in kept if token["name"] == "bob")
    bob["scopes"] = ["write"]  # bob loses approvals: his connection stands for other rights now
    settings["gateway"]["tokens"] = [*kept, {"name": "zed", "token": ZED, "scopes": ["read"]}]
    async with Raw(app.gateway.url) as eve, Raw(app.gateway.url) as bob_ws, client(app, "ann") as ann:
        assert (await eve.connect(TOKENS["eve"]))["ok"] is True
        assert (await bob_ws.connect(TOKENS["bob"]))["ok"] is True
        async with Raw(app.gateway.url) as zed:
            assert (await zed.connect(ZED))["error"]["code"] == "unauthorized"  # not in the file yet

        closing = [asyncio.create_task(ws.closed()) for ws in (eve, bob_ws)]  # reading, as a client does
        write(path, settings)
        async with client(app, "root") as root:
            answer = await root.call("config.reload")
        assert answer["status"] == "applied" and answer["changed"] == ["gateway.tokens"], answer
        assert answer["platforms"] == {}  # no platform connection was touched for it

        assert await asyncio.gather(*closing) == [CLOSE_REVOKED, CLOSE_REVOKED]
        assert (await ann.call("health"))["status"] == "ok"  # her token did not change: still connected
        async with Raw(app.gateway.url) as again:
            assert (await again.connect(TOKENS["eve"]))["error"]["code"] == "unauthorized"
        async with Client(app.gateway.url, ZED) as zed_client:
            assert (await zed_client.call("health"))["config"] == {"revision": app.revision}
        async with Client(app.gateway.url, TOKENS["bob"]) as bob_again:
            with pytest.raises(GatewayError) as refused:
                await bob_again.call("approvals.list")
            assert refused.value.code == "forbidden"


async def test_the_first_token_in_the_file_ends_the_open_loopback_connections(
    start_app: Any, llm: OpenAIEmulator, tmp_path: Path
) -> None:
    settings = config(llm, tokens=False)
    path = write(tmp_path / "bot.yaml", settings)
    app = await start_app(path)
    async with Raw(app.gateway.url) as local:
        connected = await local.connect(None)
        assert connected["ok"] is True and connected["result"]["principal"]["name"] == "local"
        settings["gateway"]["tokens"] = [{"name": "root", "token": TOKENS["root"], "scopes": ["admin"]}]
        write(path, settings)
        result = await app.reload()  # as SIGHUP does (the caller's own connection is the one to go)
        assert result.status == "applied" and result.changed == ("gateway.tokens",)
        assert await local.closed() == CLOSE_REVOKED
    async with Raw(app.gateway.url) as anonymous:
        assert (await anonymous.connect(None))["error"]["code"] == "unauthorized"
    async with client(app, "root") as root:
        assert (await root.call("health"))["status"] == "ok"
