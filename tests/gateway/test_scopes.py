"""Every method in the registry, table-driven: a principal without the method's scope is
refused with `forbidden` before anything else happens, one with it gets past the scope check,
and a method nobody classified needs admin."""

from __future__ import annotations

import asyncio

import pytest
from botweave import App
from botweave.methods import Caller, MethodError, MethodRegistry, NoParams

from tests.gateway.support import TOKENS, Raw, config

#: For each scope, a principal of tests/gateway/support.py that lacks it (every token reads).
LACKING = {"write": "eve", "approvals": "eve", "pairing": "bob", "admin": "ann"}
HOLDING = {"read": "eve", "write": "ann", "approvals": "ann", "pairing": "ann", "admin": "root"}


@pytest.fixture
async def app(start_app, llm) -> App:
    return await start_app(config(llm, rooms={"standup": {"roster": ["helper"]}}))


async def test_every_method_is_refused_to_a_principal_without_its_scope(app: App) -> None:
    assert app.gateway is not None
    registry = app.gateway.methods
    names = [method.name for method in registry]
    assert {"chat.send", "approvals.resolve", "pairing.approve", "rooms.list", "subscribe", "health"} <= set(names)
    refused, passed = [], []
    for method in registry:
        if method.scope == "read":
            continue  # held by every principal: nobody to refuse
        async with Raw(app.gateway.url) as ws:
            await ws.connect(TOKENS[LACKING[method.scope]])
            answer = await ws.request(method.name, method.name, {})
            assert answer["ok"] is False and answer["error"]["code"] == "forbidden", (method.name, answer)
            assert method.scope in answer["error"]["message"]
            refused.append(method.name)
    for method in registry:
        async with Raw(app.gateway.url) as ws:
            await ws.connect(TOKENS[HOLDING[method.scope]])
            answer = await ws.request(method.name, method.name, {})
            assert answer["ok"] or answer["error"]["code"] != "forbidden" or "scope" not in answer["error"]["message"], (
                method.name, answer
            )
            passed.append(method.name)
    assert {"chat.send", "chat.stop", "approvals.list", "pairing.list", "shares.create"} <= set(refused)
    assert len(passed) == len(names)


async def test_a_method_nobody_classified_needs_admin(app: App) -> None:
    assert app.gateway is not None

    async def purge(caller: Caller, params: NoParams) -> dict[str, str]:
        return {"purged": caller.name}

    app.gateway.methods.register("maintenance.purge", purge)
    assert app.gateway.methods.scope_of("maintenance.purge") == "admin"
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["ann"])
        assert (await ws.request(1, "maintenance.purge"))["error"]["code"] == "forbidden"
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["root"])
        assert (await ws.request(1, "maintenance.purge"))["result"] == {"purged": "root"}


async def test_the_registry_refuses_before_the_handler_runs_and_validates_params() -> None:
    registry = MethodRegistry()
    ran: list[str] = []

    async def handler(caller: Caller, params: NoParams) -> None:
        ran.append(caller.name)

    registry.register("thing.do", handler, scope="write")
    reader = Caller("eve", frozenset({"read"}))
    writer = Caller("ann", frozenset({"read", "write"}))
    with pytest.raises(MethodError) as refused:
        await registry.call(reader, "thing.do", {})
    assert refused.value.code == "forbidden" and ran == []
    with pytest.raises(MethodError) as bad:
        await registry.call(writer, "thing.do", {"unexpected": 1})
    assert bad.value.code == "bad_request" and "unexpected" in bad.value.message and ran == []
    await registry.call(writer, "thing.do", None)
    assert ran == ["ann"]
    with pytest.raises(ValueError):
        registry.register("bad name", handler)
    with pytest.raises(ValueError):
        registry.register("thing.other", handler, scope="superuser")  # type: ignore[arg-type]


#: What a share may call: its one session, read. Everything else in the registry is refused.
SHARE_METHODS = {"sessions.list", "chat.history", "subscribe", "unsubscribe"}


async def test_a_share_reads_its_one_session_and_nothing_else(app: App) -> None:
    assert app.gateway is not None
    async with Raw(app.gateway.url) as owner:
        await owner.connect(TOKENS["ann"])
        session = (await owner.request("s", "sessions.create", {"title": "shared"}))["result"]["session"]["id"]
        share = (await owner.request("sh", "shares.create", {"session": session, "expires_seconds": 600}))["result"]
        async with Raw(app.gateway.url) as reader:
            welcome = (await reader.connect(share["token"]))["result"]
            assert sorted(welcome["methods"]) == sorted(SHARE_METHODS)
            conversation = f"web:{session}"
            allowed = {
                "sessions.list": {}, "chat.history": {"conversation": conversation},
                "subscribe": {"conversation": conversation}, "unsubscribe": {"conversation": conversation},
            }
            for name, params in allowed.items():
                assert (await reader.request(name, name, params))["ok"], name
            refused = []
            for method in app.gateway.methods:
                if method.name in SHARE_METHODS:
                    continue
                answer = await reader.request(method.name, method.name, {})
                assert answer["ok"] is False and answer["error"]["code"] == "forbidden", (method.name, answer)
                refused.append(method.name)
            assert {"presence", "health", "agents.list", "conversations.list", "rooms.list"} <= set(refused)
            # Others come and go: the share is told nothing of it, while the owner is.
            async with Raw(app.gateway.url) as other:
                await other.connect(TOKENS["bob"])
                async with asyncio.timeout(10):
                    while True:
                        came = await owner.next()
                        assert came is not None
                        joined = came.get("data", {}).get("joined", []) if came.get("event") == "presence" else []
                        if any(p["principal"]["name"] == "bob" for p in joined):
                            break
            assert (await reader.request("still", "sessions.list", {}))["ok"]
            assert not [e for e in reader.events if e.get("event") == "presence"], reader.events
            with pytest.raises(TimeoutError):
                await reader.next(timeout=1.5)  # a presence notice would come within half a second
