"""Tool turns in history survive a restart: the calls and results a model saw are sent back,
paired, by a new process on the same store (every backend of the store interface)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botweave import App
from botweave.store import MemoryStore, Store
from botweave.store.redis import RedisStore

from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.support import RecordingAdapter, message


@pytest.fixture(params=["memory", "redis"])
def reopen(request: pytest.FixtureRequest, redis_url: str) -> Callable[[], Store]:
    """Opens the same store again, the way a restarted process would (a new connection to
    Redis; the in-memory store can only be handed over)."""
    if request.param == "memory":
        shared = MemoryStore()
        return lambda: shared
    prefix = f"test:{uuid.uuid4().hex}:"
    return lambda: RedisStore(redis_url, prefix=prefix)


async def started(llm: OpenAIEmulator, store: Store) -> tuple[App, RecordingAdapter]:
    config: dict[str, Any] = {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {
            "remote": {
                "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback",
                "tools": [{"python": "tests.tooldemo:weather"}],
            }
        },
    }
    app = App.from_config(config, store=store)
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    await app.store.connect()
    return app, adapter


async def test_tool_turns_survive_a_restart(llm, reopen):
    app, _ = await started(llm, reopen())
    llm.queue_tool_calls(tool_call("weather", {"city": "Lisbon"}), tool_call("weather", {"city": "Porto"}))
    llm.queue_text("Both warm.")
    await app.handle(message("weather in Lisbon and Porto?"))
    await app.stop()

    again, adapter = await started(llm, reopen())
    llm.queue_text("You asked about Lisbon and Porto.")
    await again.handle(message("what did I ask?"))
    await again.stop()

    sent = llm.messages(2)
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool", "assistant", "user"]
    assert [c["id"] for c in sent[2]["tool_calls"]] == [c.id for c in llm.issued_calls]
    assert [m["tool_call_id"] for m in sent[3:5]] == [c.id for c in llm.issued_calls]
    assert adapter.texts() == ["You asked about Lisbon and Porto."]
    llm.assert_tool_protocol()
