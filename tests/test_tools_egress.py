"""The network egress policy, and `fetch_url` against a web server the test runs on 127.0.0.1,
driven by the model through the loopback OpenAI emulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from botweave import App, ConfigError
from botweave.policies.egress import EgressPolicy, normalise_host

from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.support import RecordingAdapter, message

# --- the policy -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "normal"),
    [
        ("Example.COM.", "example.com"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("BÜCHER.example.", "xn--bcher-kva.example"),
        ("127.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("[::ffff:10.0.0.1]", "10.0.0.1"),
        ("[::1]", "::1"),
    ],
)
def test_hosts_are_normalised(written: str, normal: str) -> None:
    assert normalise_host(written) == normal


def test_deny_wins_allow_means_default_deny_and_wildcards_match_subdomains() -> None:
    policy = EgressPolicy(allow_hosts=["*.example.com", "api.other.org"], deny_hosts=["secret.example.com"])
    assert policy.refusal("https://docs.example.com/x") is None
    assert policy.refusal("https://DOCS.Example.com./x") is None
    assert policy.refusal("https://api.other.org") is None
    assert "denied" in (policy.refusal("https://secret.example.com/") or "")
    assert "denied" in (policy.refusal("https://SECRET.example.com./") or "")
    assert "not in the network policy's allow_hosts" in (policy.refusal("https://example.com/") or "")
    assert "not in the network policy's allow_hosts" in (policy.refusal("https://evil.org/") or "")
    assert policy.refusal("ftp://docs.example.com/") is not None
    assert policy.refusal("file:///etc/passwd") is not None


def test_international_names_match_in_either_spelling() -> None:
    policy = EgressPolicy(deny_hosts=["bücher.example"])
    assert policy.refusal("http://xn--bcher-kva.example/") is not None
    assert policy.refusal("http://BÜCHER.example/") is not None


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8080/", "http://localhost/", "http://10.1.2.3/", "http://192.168.0.1/", "http://169.254.169.254/",
     "http://[::1]/", "http://0.0.0.0/", "http://127.1/", "http://[::ffff:127.0.0.1]/", "http://app.localhost/"],
)
def test_local_and_private_addresses_are_refused_even_with_a_wildcard(url: str) -> None:
    assert EgressPolicy().refusal(url) is not None
    assert EgressPolicy(allow_hosts=["*"]).refusal(url) is not None


def test_an_allow_entry_naming_a_local_address_opens_it() -> None:
    assert EgressPolicy(allow_hosts=["127.0.0.1"]).refusal("http://127.0.0.1:9/") is None
    assert EgressPolicy(allow_hosts=["127.0.0.1"]).refusal("http://127.1:9/") is None
    assert EgressPolicy(allow_hosts=["10.0.0.0/8"]).refusal("http://10.9.8.7/") is None
    assert EgressPolicy(allow_hosts=["localhost"]).refusal("http://localhost:3000/") is None
    assert EgressPolicy(allow_hosts=["127.0.0.1"]).refusal("http://10.0.0.1/") is not None


def test_a_public_host_is_reachable_without_any_policy() -> None:
    assert EgressPolicy().refusal("https://example.com/") is None


def test_bad_entries_are_configuration_errors() -> None:
    with pytest.raises(ConfigError) as caught:
        App.from_config({"agents": {"a": {"model": "offline/echo"}}, "network": {"allow_hosts": ["ex*ample.com"]}})
    assert "network.allow_hosts.0: 'ex*ample.com': a wildcard may only start an entry" in str(caught.value)


# --- fetch_url through the tool loop --------------------------------------------------------

PAGE = """<!doctype html><html><head><title>Tide tables</title><style>body{color:red}</style>
<script>alert('no')</script></head><body><nav>Menu</nav><h1>High tide</h1>
<p>High tide is at <b>14:05</b> today.</p><ul><li>Low: 08:01</li><li>Low: 20:17</li></ul></body></html>"""


@pytest.fixture
async def web_server() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def hop(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def plain(request: web.Request) -> web.Response:
        return web.Response(text="just text", content_type="text/plain")

    async def whoami(request: web.Request) -> web.Response:
        return web.Response(text=f"authorization: {request.headers.get('Authorization')}", content_type="text/plain")

    async def pieces(request: web.Request) -> web.StreamResponse:
        """`count` lines of `size` characters, each written on its own after a pause."""
        count, size = int(request.query["count"]), int(request.query.get("size", "10"))
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        try:
            for number in range(count):
                await response.write(f"{number:06d}".ljust(size - 1, "x").encode() + b"\n")
                await asyncio.sleep(0.002)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the reader stopped at its cap
        return response

    app = web.Application()
    app.router.add_get("/tides", page)
    app.router.add_get("/hop", hop)
    app.router.add_get("/plain", plain)
    app.router.add_get("/whoami", whoami)
    app.router.add_get("/pieces", pieces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


def make_app(llm: OpenAIEmulator, *, network: dict[str, Any] | None = None, agent_network: dict[str, Any] | None = None) -> App:
    remote: dict[str, Any] = {
        "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback", "tools": ["fetch_url"],
        # a model with a large window: what is measured here is the page cap, not the window's
        "context": {"max_tokens": 1_000_000},
    }
    if agent_network is not None:
        remote["network"] = agent_network
    config: dict[str, Any] = {"bot": {"unknown_user_policy": "allow"}, "agents": {"remote": remote}}
    if network is not None:
        config["network"] = network
    app = App.from_config(config)
    app.add_adapter(RecordingAdapter())
    return app


async def fetch(app: App, llm: OpenAIEmulator, url: str) -> Any:
    llm.queue_tool_calls(tool_call("fetch_url", {"url": url}))
    llm.queue_text("read it")
    outcome = await app.handle(message(f"read {url}"))
    assert outcome.status == "replied"
    llm.assert_tool_protocol()
    return llm.tool_output(llm.issued_calls[-1].id)


async def test_fetch_url_allowed_by_name_returns_readable_text(llm, web_server):
    app = make_app(llm, network={"allow_hosts": ["127.0.0.1"]})
    text = await fetch(app, llm, f"{web_server}/tides")
    assert text == "# Tide tables\n\nMenu\n\n# High tide\n\nHigh tide is at 14:05 today.\n\n- Low: 08:01\n- Low: 20:17"
    assert await fetch(app, llm, f"{web_server}/plain") == "just text"


async def test_fetch_url_refuses_a_private_host_nobody_allowed(llm, web_server):
    app = make_app(llm)
    refused = await fetch(app, llm, f"{web_server}/tides")
    assert refused == {
        "error": "fetch_url: 127.0.0.1 refused: host 127.0.0.1 is a local or private address; "
        "allow it by name in allow_hosts to reach it"
    }


async def test_every_redirect_is_checked_again(llm, web_server):
    app = make_app(llm, network={"allow_hosts": ["127.0.0.1"], "deny_hosts": ["localhost"]})
    port = web_server.rsplit(":", 1)[1]
    followed = await fetch(app, llm, f"{web_server}/hop?to=/tides")
    assert followed.startswith("# Tide tables")
    refused = await fetch(app, llm, f"{web_server}/hop?to=http://localhost:{port}/tides")
    assert refused == {"error": "fetch_url: localhost refused: host localhost is denied by the network policy (localhost)"}


async def test_an_agents_own_network_replaces_the_global_one(llm, web_server):
    app = make_app(llm, network={"allow_hosts": ["127.0.0.1"]}, agent_network={"deny_hosts": ["*.example.com"]})
    refused = await fetch(app, llm, f"{web_server}/plain")
    assert "local or private address" in refused["error"], "the global allow entry does not apply to this agent"


async def test_a_page_that_arrives_in_pieces_is_read_whole(llm, web_server):
    app = make_app(llm, network={"allow_hosts": ["127.0.0.1"]})
    text = await fetch(app, llm, f"{web_server}/pieces?count=40")
    assert text.splitlines() == [f"{number:06d}xxx" for number in range(40)]


@pytest.mark.parametrize("size", [1000, 100_000])  # 300 KB cut by characters, 30 MB by bytes
async def test_where_the_cap_cuts_a_page_the_model_is_told(llm, web_server, size):
    app = make_app(llm, network={"allow_hosts": ["127.0.0.1"]})
    text = await fetch(app, llm, f"{web_server}/pieces?count=300&size={size}")
    lines = text.splitlines()
    assert lines[0] == "000000".ljust(size - 1, "x")[:20_000]
    assert lines[-1] == "[… cut: the page goes on past the first 2048 KB or 20000 characters]"
    assert len(text) < 20_100


async def test_credentials_in_a_url_are_refused_and_never_sent(llm, web_server, caplog):
    app = make_app(llm, network={"allow_hosts": ["127.0.0.1"]})
    base = web_server.removeprefix("http://")
    assert await fetch(app, llm, f"{web_server}/whoami") == "authorization: None"
    for url in (f"http://ann:hunter2@{base}/whoami", f"http://ann@{base}/whoami", f"http://:hunter2@{base}/whoami"):
        assert await fetch(app, llm, url) == {
            "error": "fetch_url: 127.0.0.1 refused: the URL carries credentials (user:password@host); they are never sent"
        }
    redirected = await fetch(app, llm, f"{web_server}/hop?to=http://ann:hunter2@{base}/whoami")
    assert redirected == {
        "error": "fetch_url: 127.0.0.1 refused: the URL carries credentials (user:password@host); they are never sent"
    }
    assert "hunter2" not in caplog.text
