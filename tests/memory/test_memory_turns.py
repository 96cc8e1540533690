"""Memory through whole turns: what the model is sent (every request the loopback model
records) shows whose items reached which turn."""

from __future__ import annotations

import json
from typing import Any

from botweave import App
from botweave.store import MemoryStore, Store

from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.support import RecordingAdapter, message


def agent_config(llm: OpenAIEmulator, **memory: Any) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {
            "assistant": {
                "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback",
                "memory": {"enabled": True, **memory},
            }
        },
    }


async def started(llm: OpenAIEmulator, store: Store, **memory: Any) -> tuple[App, RecordingAdapter]:
    app = App.from_config(agent_config(llm, **memory), store=store)
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    await app.store.connect()
    return app, adapter


def system_of(llm: OpenAIEmulator, index: int) -> str:
    return str(llm.messages(index)[0]["content"])


async def test_a_remembered_fact_reaches_the_same_person_after_new_and_nobody_else(llm):
    app, adapter = await started(llm, MemoryStore())
    llm.queue_tool_calls(tool_call("remember", {"fact": "Ann's cat is called Miso"}))
    llm.queue_text("Noted.")
    await app.handle(message("remember my cat is Miso", user_id="ann"))
    assert json.loads(llm.tool_results(1)[0]["content"])["remembered"] == "Ann's cat is called Miso"
    await app.handle(message("/new", user_id="ann"))
    llm.queue_text("Miso!")
    await app.handle(message("what is my cat called?", user_id="ann"))
    assert "Ann's cat is called Miso" in system_of(llm, 2)
    assert {"remember", "recall", "forget"} <= set(llm.tools_offered(2))
    llm.queue_text("I don't know.")
    await app.handle(message("what is my cat called?", user_id="bob", name="Bob", chat_id="c2"))
    assert "Miso" not in json.dumps(llm.messages(3))
    await app.stop()
