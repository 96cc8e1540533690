"""The gateway from the command line, the way an operator meets it: `botweave run
--gateway-listen` spoken to by a raw WebSocket client, `botweave gateway token add|list|revoke`
against the running bot, a gateway open to other machines without a token refused with exit
code 2, `/readyz` and `/metrics` naming the gateway, `botweave doctor`'s lines, and SIGHUP giving a running bot
bot.yaml's new tokens."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from botweave.runtime.doctor import doctor

from tests.conftest import free_port
from tests.gateway.support import Raw

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "botweave", *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def write(path: Path, **sections: Any) -> Path:
    config = {"agents": {"assistant": {"model": "offline/echo"}}, **sections}
    path.write_text(yaml.safe_dump(config))
    return path


async def listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while True:
            assert proc.poll() is None, f"botweave run exited with {proc.returncode}"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.1)


@pytest.fixture
def running(tmp_path: Path):
    procs: list[subprocess.Popen[bytes]] = []

    def start(config: Path, *args: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"run-{len(procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, "-m", "botweave", "run", str(config), *args], cwd=ROOT, env=ENV,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)


async def test_botweave_run_serves_the_gateway_to_a_raw_websocket_client(tmp_path: Path, running) -> None:
    port, ops = free_port(), free_port()
    proc = running(write(tmp_path / "bot.yaml"), "--gateway-listen", f"127.0.0.1:{port}", "--ops-listen", f"127.0.0.1:{ops}")
    await listening(port, proc)
    async with Raw(f"ws://127.0.0.1:{port}/ws") as ws:
        welcome = await ws.connect(None)  # loopback, no token anywhere: the person at this machine
        assert welcome["result"]["principal"] == {"name": "local", "kind": "local"}
        session = (await ws.request(1, "sessions.create", {"title": "cli"}))["result"]["session"]
        await ws.request(2, "subscribe", {"conversation": session["conversation"]})
        sent = await ws.request(3, "chat.send", {"session": session["id"], "text": "hi there", "idempotency_key": "a"})
        assert sent["ok"], sent
        final = None
        while final is None:
            frame = await ws.event(60)
            assert frame is not None
            if frame["event"] == "final":
                final = frame
        assert final["data"]["text"].startswith("assistant (offline echo) heard: hi there")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{ops}/readyz") as response:
                assert response.status == 200, await response.text()
            async with http.get(f"http://127.0.0.1:{ops}/metrics") as response:
                metrics = await response.text()
    assert "botweave_gateway_connections 1.0" in metrics
    assert 'botweave_gateway_frames_total{direction="in"}' in metrics
    for name in ("resumes", "resyncs", "slow_consumer_closes"):
        assert f"botweave_gateway_{name}_total" in metrics


async def test_tokens_are_added_listed_and_revoked_from_the_command_line(tmp_path: Path, running) -> None:
    port = free_port()
    config = write(tmp_path / "bot.yaml", gateway={"listen": f"127.0.0.1:{port}"})
    added = cli("gateway", "token", "add", "ann", "--scopes", "write,approvals", "--user", "telegram:1",
                "--config", str(config))
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert token.startswith("bwg_") and len(token) > 40 and "shown this once" in added.stderr
    listed = cli("gateway", "token", "list", "--config", str(config))
    assert listed.stdout.splitlines() == ["ann  scopes: approvals,read,write  user: telegram:1  (store)"]
    assert token not in listed.stdout
    assert cli("gateway", "token", "add", "ann", "--config", str(config)).returncode == 2  # the name is taken
    bad = cli("gateway", "token", "add", "x", "--scopes", "root", "--config", str(config))
    assert bad.returncode == 2 and "unknown scope" in bad.stderr
    proc = running(config)
    await listening(port, proc)
    async with Raw(f"ws://127.0.0.1:{port}/ws") as ws:
        result = (await ws.connect(token))["result"]
        assert result["principal"] == {"name": "ann", "kind": "token", "user": "telegram:1"}
        assert result["scopes"] == ["approvals", "read", "write"]
    async with Raw(f"ws://127.0.0.1:{port}/ws") as ws:  # a token exists now: none is no longer enough
        assert (await ws.connect(None))["error"]["code"] == "unauthorized"
    assert cli("gateway", "token", "revoke", "ann", "--config", str(config)).returncode == 0
    async with Raw(f"ws://127.0.0.1:{port}/ws") as ws:
        assert (await ws.connect(token))["error"]["code"] == "unauthorized"
    assert cli("gateway", "token", "revoke", "ann", "--config", str(config)).returncode == 1
    memory = write(tmp_path / "memory.yaml", store={"url": "memory://"})
    assert cli("gateway", "token", "add", "x", "--config", str(memory)).returncode == 2


async def test_a_gateway_open_to_other_machines_without_a_token_exits_with_2(tmp_path: Path) -> None:
    result = cli("run", str(write(tmp_path / "bot.yaml")), "--gateway-listen", f"0.0.0.0:{free_port()}", timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "reachable from other machines and no gateway token exists" in result.stderr
    bad = cli("run", str(write(tmp_path / "bot.yaml")), "--gateway-listen", "nowhere")
    assert bad.returncode == 2 and "--gateway-listen" in bad.stderr


async def test_doctor_checks_the_gateways_address_and_tokens(tmp_path: Path) -> None:
    async def lines(**gateway: Any) -> tuple[int, list[str]]:
        out = io.StringIO()
        config = write(tmp_path / "bot.yaml", gateway=gateway, store={"url": "memory://"})
        code = await doctor(str(config), model=False, out=out)
        return code, [line for line in out.getvalue().splitlines() if line[5:].startswith("gateway")]

    port = free_port()
    assert await lines(listen=f"127.0.0.1:{port}") == (0, [
        f"ok   gateway listen: 127.0.0.1:{port} can be bound",
        "ok   gateway tokens: none: clients on this machine connect without one (loopback)",
    ])
    code, found = await lines(listen=f"0.0.0.0:{port}")
    assert code == 1 and any(line.startswith("FAIL gateway tokens:") and "fix: add one" in line for line in found)
    token = {"name": "ann", "token": "x" * 20, "user": "nowhere:1"}
    code, found = await lines(listen=f"127.0.0.1:{port}", tokens=[token])
    assert code == 1 and any("bound to a platform that is not installed: ann (nowhere:1)" in line for line in found)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        code, found = await lines(listen=f"127.0.0.1:{busy}")
    assert code == 1 and found[0].startswith(f"FAIL gateway listen: 127.0.0.1:{busy}:")
    code, found = await lines()
    assert found == ["skip gateway: off (no gateway.listen)"]


def test_check_shows_the_gateway_with_its_tokens_masked(tmp_path: Path) -> None:
    secret = "supersecrettoken12345"
    config = write(tmp_path / "bot.yaml", store={"url": "memory://"},
                   gateway={"listen": "127.0.0.1:8787", "tokens": [{"name": "ann", "token": secret, "scopes": ["write"]}]})
    shown = cli("check", str(config))
    assert shown.returncode == 0, shown.stderr
    assert "gateway:\n  listen: 127.0.0.1:8787" in shown.stdout and "token: '***'" in shown.stdout
    assert secret not in shown.stdout + shown.stderr


async def test_sighup_gives_botweave_run_the_files_new_tokens_and_nothing_else_differs(tmp_path: Path, running) -> None:
    """The reload reads the file the way `run` did (its --gateway-listen and --ops-listen), so
    what the file adds is applied and nothing is reported as waiting for a restart."""
    port, ops = free_port(), free_port()
    root, zed = "root-token-0123456789abcdef", "zed-token-0123456789abcdef"
    tokens = [{"name": "root", "token": root, "scopes": ["admin"]}]
    config = write(tmp_path / "bot.yaml", gateway={"tokens": tokens})
    proc = running(config, "--gateway-listen", f"127.0.0.1:{port}", "--ops-listen", f"127.0.0.1:{ops}")
    await listening(port, proc)
    url = f"ws://127.0.0.1:{port}/ws"
    async with Raw(url) as ws:
        assert (await ws.connect(zed))["error"]["code"] == "unauthorized"
    async with Raw(url) as ws:
        await ws.connect(root)
        before = (await ws.request(1, "health"))["result"]["config"]
        assert set(before) == {"revision"}

    write(config, gateway={"tokens": [*tokens, {"name": "zed", "token": zed, "scopes": ["read"]}]})
    proc.send_signal(signal.SIGHUP)
    async with asyncio.timeout(30):
        while True:
            async with Raw(url) as ws:
                if (await ws.connect(zed))["ok"]:
                    health = (await ws.request(1, "health"))["result"]
                    break
            await asyncio.sleep(0.2)
    assert health["config"]["revision"] != before["revision"] and "differs" not in health["config"]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{ops}/readyz") as response:
            assert "config" not in await response.json()
    assert proc.poll() is None
    log = (tmp_path / "run-0.log").read_text()
    assert f"config reloaded: revision {before['revision']} -> {health['config']['revision']}; applied: gateway.tokens" in log
