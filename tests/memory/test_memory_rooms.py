"""In a room each agent keeps its own memory of each person, and a room's turns answer the
person whose message opened them: only that person's items, only that agent's."""

from __future__ import annotations

import re
from typing import Any

from botweave import App, PlatformCapabilities

from tests.emulators.openai import OpenAIEmulator, text_of, tool_call
from tests.memory.support import AUTHOR, leaks, memory_block, secret_of
from tests.support import RecordingAdapter, message


class Wide(RecordingAdapter):
    capabilities = PlatformCapabilities(max_message_length=4000)


def room_model(body: dict[str, Any]) -> Any:
    """The planner remembers what the person who opened the activity asked it to."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return "Saved."
    prompt = text_of(last)
    lines = [line for line in prompt.splitlines() if AUTHOR.search(line)]
    wanted = re.search(r"remember (secret-\S+)", lines[-1]) if lines else None
    if wanted and "You are planner" in prompt and body.get("tools"):
        return tool_call("remember", {"fact": wanted.group(1)})
    return "noted"


def room_request(llm: OpenAIEmulator, agent: str, author: str) -> dict[str, Any]:
    return [
        r for r in llm.requests
        if f"You are {agent}" in text_of(r["messages"][-1]) and AUTHOR.findall(text_of(r["messages"][-1]))[-1] == author
    ][-1]


async def test_room_agents_each_keep_their_own_memory_of_each_person(llm):
    llm.on_request = room_model
    model = {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback", "memory": {"enabled": True}}
    app = App.from_config({
        "bot": {"unknown_user_policy": "allow", "group_policy": "respond_all"},
        "agents": {"planner": model, "critic": model},
        "rooms": {"standup": {"roster": ["planner", "critic"], "max_rounds": 1}},
        "routes": [{"match": {"chat_id": "team"}, "room": "standup"}],
    })
    app.add_adapter(Wide())
    ann = secret_of("p1")
    await app.handle(message(f"I am p1, remember {ann}", user_id="ann", name="Ann", chat_id="team", channel_type="group"))
    await app.handle(message("I am p2, what do you know?", user_id="bob", name="Bob", chat_id="team", channel_type="group"))
    await app.handle(message("I am p1, what do you know?", user_id="ann", name="Ann", chat_id="team", channel_type="group"))
    assert ann in memory_block(room_request(llm, "planner", "p1"))  # the planner kept it for Ann
    assert ann not in memory_block(room_request(llm, "critic", "p1"))  # the critic's memory is its own
    assert memory_block(room_request(llm, "planner", "p2")) == ""  # and Bob's turn has none of Ann's
    assert leaks(llm) == []
    await app.stop()
