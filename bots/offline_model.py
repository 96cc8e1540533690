"""`offline/echo`: a stand-in model so botweave runs with no key and no network.

It answers in botweave's own process without litellm (`OfflineCalls`, which
`model_clients` picks for every `offline/` model whatever `models.client` says), so a bot on
it, `botweave chat` with no bot.yaml among them, starts without importing litellm (seconds of
CPU) and a turn pays nothing for a model that is not there. What comes back is what any
client's answer is (`ModelOutput`: words, or streamed word by word, tool calls, zero tokens),
so the turn around it runs as it does for a real model. The answer names the agent and
repeats the whole user turn it received, which lets a person and the tests see exactly what
the agent was given (attribution, quoted context and all).

It can also call tools, so tools can be tried with no key: a user turn `call <tool>
<json-args>` (say `call fetch_url {"url": "https://example.com"}`) is answered with that call
when the agent offers the tool, and the tool's result is then answered with what it returned.
It cannot see, so each image it is shown is described by its type and size (`[image image/png
12 KB]`): with no key at all, a person can check that a photo reached the agent.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from botweave.files import human_size
from botweave.model_calls import CallPart, ModelOutput

#: Every model named so is the echo model.
PREFIX = "offline/"
AGENT_METADATA_KEY = "botweave_agent"
_WORDS = re.compile(r"\S+\s*|\s+")
_CALL = re.compile(r"^\s*call\s+(\S+)\s*(.*)$", re.DOTALL)
_call_ids = itertools.count(1)
#: What a call to the echo model costs, reported with its answer as a provider reports usage.
NO_TOKENS = (0, 0)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the echo model says: text, or one tool call (`tool` and its JSON `arguments`)."""

    text: str = ""
    tool: str | None = None
    arguments: str = "{}"


def describe_image(part: dict[str, Any]) -> str:
    """`[image image/png 12 KB]` for an image content part sent as a data: URL."""
    image = part.get("image_url")
    url = str(image.get("url", "") if isinstance(image, dict) else image or "")
    if not url.startswith("data:") or "," not in url:
        return "[image]"
    header, payload = url[len("data:") :].split(",", 1)
    mime = header.split(";", 1)[0] or "image"
    try:
        size = len(base64.b64decode(payload))
    except ValueError:
        return f"[image {mime}]"
    return f"[image {mime} {human_size(size)}]"


def echo_reply(agent: str, messages: list[dict[str, Any]]) -> str:
    user_turns = [m for m in messages if m.get("role") == "user"]
    turn = user_turns[-1].get("content", "") if user_turns else ""
    if isinstance(turn, list):  # content parts: the words, then what each image is
        words = [str(p.get("text", "")) for p in turn if isinstance(p, dict) and p.get("type") == "text"]
        images = [describe_image(p) for p in turn if isinstance(p, dict) and p.get("type") == "image_url"]
        turn = " ".join(part for part in (*words, *images) if part)
    return f"{agent} (offline echo) heard: {turn}"


def _agent_name(request: dict[str, Any]) -> str:
    metadata = request.get("metadata") or {}
    return str(metadata.get(AGENT_METADATA_KEY) or "assistant")


def _called_names(messages: list[dict[str, Any]]) -> dict[str, str]:
    names = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            names[str(call.get("id"))] = str(function.get("name"))
    return names


def answer(agent: str, messages: list[dict[str, Any]], optional_params: dict[str, Any] | None = None) -> Answer:
    """The echo model's answer: what the tools returned when the conversation ends in tool
    results, a tool call for `call <tool> <json-args>`, and otherwise the echo."""
    params = optional_params or {}
    trailing: list[dict[str, Any]] = []
    for message in reversed(messages):
        if message.get("role") != "tool":
            break
        trailing.insert(0, message)
    if trailing:
        names = _called_names(messages)
        parts = [f"{names.get(str(m.get('tool_call_id')), 'a tool')} returned {m.get('content', '')}" for m in trailing]
        return Answer(f"{agent} (offline echo): " + "; ".join(parts))
    text = echo_reply(agent, messages)
    user_turns = [m for m in messages if m.get("role") == "user"]
    turn = user_turns[-1].get("content", "") if user_turns else ""
    match = _CALL.match(turn) if isinstance(turn, str) else None
    if match is None or params.get("tool_choice") == "none":
        return Answer(text)
    name, arguments = match.group(1), match.group(2).strip() or "{}"
    offered = [t.get("function", {}).get("name") for t in params.get("tools") or []]
    if name not in offered:
        known = ", ".join(str(n) for n in offered) or "none (add some under the agent's `tools:`)"
        return Answer(f"{agent} (offline echo): there is no tool named {name}; tools: {known}")
    try:
        parsed = json.loads(arguments)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return Answer(f"{agent} (offline echo): write the arguments as a JSON object, e.g. call {name} {{}}")
    return Answer(tool=name, arguments=json.dumps(parsed, ensure_ascii=False))


def _call_id() -> str:
    return f"call_offline_{next(_call_ids)}"


def is_offline(model: str) -> bool:
    return model.startswith(PREFIX)


def reply_to(request: dict[str, Any]) -> Answer:
    """The echo model's answer to a request (the `acompletion` arguments an agent builds)."""
    return answer(_agent_name(request), list(request.get("messages") or []), request)


class OfflineCalls:
    """`ModelCalls` for `offline/` models: the echo model's answer, made here."""

    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        # As a provider's answer would, it comes after a pass of the loop: what the turn
        # started beside the call (its typing indicator, say) gets to begin first.
        await asyncio.sleep(0)
        result = reply_to(request)
        if result.tool is not None:
            return ModelOutput(calls=(CallPart(0, _call_id(), result.tool, result.arguments),), usage=NO_TOKENS)
        return ModelOutput(result.text, usage=NO_TOKENS)

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        """Word by word, as a provider streams; the token counts come last."""
        await asyncio.sleep(0)
        result = reply_to(request)
        if result.tool is not None:
            yield ModelOutput(calls=(CallPart(0, _call_id(), result.tool, result.arguments),))
        else:
            for piece in _WORDS.findall(result.text):
                yield ModelOutput(piece)
        yield ModelOutput(usage=NO_TOKENS)
