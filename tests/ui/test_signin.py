"""The UI's server side without a browser: one-time sign-in codes, the page under its
Content-Security-Policy, the files inside the package, and `botweave web` from the command
line."""

from __future__ import annotations

import html.parser
import re
import socket
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from botweave.gateway import Client, GatewayError
from botweave.gateway.auth import origin_allowed
from botweave.gateway.ui import CODE_PREFIX, STATIC, UI, SignIn
from botweave.runtime import web as web_command
from botweave.runtime.config import load_config

from tests.ui.harness import ROOT, Bot


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_code_works_once_and_a_wrong_one_does_not_use_it_up() -> None:
    shown: list[str] = []
    signin = SignIn(shown.append)
    signin.listening("127.0.0.1", 8787)
    code = shown[-1].split("#code=")[1]
    assert shown[-1].startswith("http://127.0.0.1:8787/#code=") and code.startswith(CODE_PREFIX)
    assert signin.exchange(code + "x") is None
    assert signin.exchange("") is None
    token = signin.exchange(code)
    assert token is not None and signin.lookup(token) is not None
    assert signin.exchange(code) is None, "a code works once"
    assert len(shown) == 2, "the next link is announced after a use"
    assert signin.end(token) and signin.lookup(token) is None


def test_a_code_expires_and_a_late_use_announces_a_new_one() -> None:
    shown: list[str] = []
    clock = Clock()
    signin = SignIn(shown.append, code_ttl=600, clock=clock)
    signin.listening("0.0.0.0", 9000)
    assert shown[-1].startswith("http://127.0.0.1:9000/#code=")
    clock.now += 601
    assert signin.exchange(shown[-1].split("#code=")[1]) is None
    assert len(shown) == 2
    assert signin.exchange(shown[-1].split("#code=")[1]) is not None


def test_only_tab_tokens_are_looked_up() -> None:
    signin = SignIn()
    assert signin.lookup("bwg_configured-token") is None
    assert signin.lookup("bwt_never-issued") is None


def _app(signin: SignIn | None) -> web.Application:
    app = web.Application()

    def origin_ok(request: web.Request) -> bool:
        return origin_allowed(request.headers.get("Origin"), request.headers.get("Host"), listen_host="127.0.0.1", allowed=[])

    UI(signin, origin_ok).add_routes(app)
    return app


async def _client(signin: SignIn | None) -> TestClient:
    client = TestClient(TestServer(_app(signin), host="127.0.0.1"))
    await client.start_server()
    return client


async def test_the_exchange_wants_the_code_in_the_body_from_the_own_origin() -> None:
    shown: list[str] = []
    signin = SignIn(shown.append)
    signin.listening("127.0.0.1", 1)
    code = shown[-1].split("#code=")[1]
    client = await _client(signin)
    own = f"http://{client.host}:{client.port}"
    try:
        response = await client.post("/session", json={"code": code})
        assert response.status == 403, "no Origin: not a page of ours"
        response = await client.post("/session", json={"code": code}, headers={"Origin": "http://evil.test"})
        assert response.status == 403
        response = await client.post("/session", data=b"not json", headers={"Origin": own})
        assert response.status == 400
        response = await client.post("/session", json={"code": code}, headers={"Origin": own})
        assert response.status == 201
        token = (await response.json())["token"]
        assert response.headers["Cache-Control"] == "no-store"
        again = await client.post("/session", json={"code": code}, headers={"Origin": own})
        assert again.status == 401 and (await again.json())["error"]["code"] == "unauthorized"
        ended = await client.delete("/session", headers={"Origin": own, "Authorization": f"Bearer {token}"})
        assert (await ended.json()) == {"ended": True}
        assert signin.lookup(token) is None
    finally:
        await client.close()


async def test_without_sign_in_links_the_exchange_says_so() -> None:
    client = await _client(None)
    try:
        response = await client.post("/session", json={"code": "x"}, headers={"Origin": f"http://{client.host}:{client.port}"})
        assert response.status == 404
    finally:
        await client.close()


async def test_the_page_and_its_files_carry_the_policy_and_nothing_else_is_served() -> None:
    client = await _client(None)
    try:
        page = await client.get("/")
        policy = page.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert page.headers["X-Content-Type-Options"] == "nosniff"
        assert page.headers["Content-Type"].startswith("text/html")
        script = await client.get("/static/js/app.js")
        assert script.status == 200 and script.headers["Content-Type"].startswith("text/javascript")
        assert "Content-Security-Policy" in script.headers
        for path in ("/static/../ui.py", "/static/%2e%2e/ui.py", "/static/js/../../server.py", "/static/nothing.js"):
            assert (await client.get(path)).status == 404, path
    finally:
        await client.close()


class _InlineFinder(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and "src" not in names:
            self.problems.append("an inline <script>")
        self.problems += [f"an inline handler {name}" for name in names if name.startswith("on")]
        if "style" in names:
            self.problems.append("an inline style")


def test_the_page_has_nothing_inline_and_the_code_never_parses_html() -> None:
    finder = _InlineFinder()
    finder.feed((STATIC / "index.html").read_text())
    assert finder.problems == []
    for source in (STATIC / "js").glob("*.js"):
        text = source.read_text()
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
            assert banned not in text, f"{source.name} uses {banned}"


def test_every_file_of_the_page_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["botweave.gateway"]
    for path in STATIC.rglob("*"):
        if path.is_file():
            relative = path.relative_to(STATIC.parent).as_posix()
            assert any(fnmatch(relative, p) and relative.count("/") == p.count("/") for p in patterns), relative


def test_botweave_web_takes_8787_or_a_free_port(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(web_command, "DEFAULT_PORT", port)
        config = load_config(web_command.BUILTIN_WEB_CONFIG)
        web_command.choose_listen(config, None)
        assert config.gateway.listen == "127.0.0.1:0"
    config = load_config(web_command.BUILTIN_WEB_CONFIG)
    web_command.choose_listen(config, None)
    assert config.gateway.listen == f"127.0.0.1:{port}"
    assert config.agents["assistant"].model == "offline/echo"
    assert "console" not in config.enabled_platforms(), "the terminal shows the link, not a chat"


async def test_botweave_web_prints_a_link_that_signs_a_client_in(tmp_path: Path) -> None:
    bot = Bot({"agents": {"assistant": {"model": "offline/echo"}}}, tmp_path)
    await bot.start()
    try:
        link = bot.links()[-1]
        base, code = link.split("/#code=")
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/session", json={"code": code}, headers={"Origin": base}) as response:
                assert response.status == 201
                token = (await response.json())["token"]
        async with Client(f"ws://127.0.0.1:{bot.port}/ws", token) as client:
            created = await client.call("sessions.create", {})
            assert created["session"]["owner"] == "local"
        with pytest.raises(GatewayError) as refused:
            async with Client(f"ws://127.0.0.1:{bot.port}/ws") as anonymous:
                await anonymous.call("sessions.list")
        assert refused.value.code == "unauthorized", "with sign-in links on, a token is needed on loopback too"
        await bot.next_link(after=1)
        logs = bot.logs()
        assert code not in logs and token not in logs
        assert re.search(r"signed in with a one-time link", logs)
    finally:
        await bot.stop()
