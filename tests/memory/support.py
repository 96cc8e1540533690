"""What the memory tests share: a loopback model that calls `remember` when asked to, and the
check that no request ever carried another person's items."""

from __future__ import annotations

import re
import uuid
from typing import Any

from tests.emulators.openai import OpenAIEmulator, text_of, tool_call

SECRET = re.compile(r"secret-(p\d+)-[0-9a-f]{8}")
AUTHOR = re.compile(r"I am (p\d+)")


def secret_of(person: str) -> str:
    return f"secret-{person}-{uuid.uuid4().hex[:8]}"


def remembering(body: dict[str, Any]) -> Any:
    """The model: `remember X` in the newest user message becomes a `remember` call."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return "Saved."
    found = re.search(r"remember (.+)$", text_of(last))
    if found and body.get("tools"):
        return tool_call("remember", {"fact": found.group(1).strip()})
    return "ok"


def memory_block(request: dict[str, Any]) -> str:
    """What the request's instructions say the agent remembers (after its own instructions)."""
    system = str(request["messages"][0]["content"])
    marker = "What you remember about the person"
    return system[system.index(marker):] if marker in system else ""


def author_of(request: dict[str, Any]) -> str | None:
    users = [m for m in request["messages"] if m["role"] == "user"]
    found = AUTHOR.findall(text_of(users[-1])) if users else []
    return found[-1] if found else None  # a room's prompt quotes its transcript: the newest line opened it


def leaks(llm: OpenAIEmulator) -> list[str]:
    """Every item that reached a request answering someone else: the instructions of each
    request may name only the secrets of the person whose message it answers."""
    found = []
    for index, request in enumerate(llm.requests):
        author = author_of(request)
        for owner in SECRET.findall(memory_block(request)):
            if owner != author:
                found.append(f"request {index} answering {author} carried {owner}'s item")
    return found


def model(llm: OpenAIEmulator) -> OpenAIEmulator:
    llm.on_request = remembering
    return llm
