"""Every method in the registry, table-driven: a principal without the method's scope is
refused with `forbidden` before anything else happens, one with it gets past the scope check,
and a method nobody classified needs admin."""

from __future__ import annotations

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
