"""The Anthropic, Gemini and Ollama emulators on the wire: what they stream, in which order,
and what they refuse, so the tests that drive litellm through them can trust them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.emulators.anthropic import VERSION, AnthropicEmulator
from tests.emulators.gemini import GeminiEmulator
from tests.emulators.ollama import OllamaEmulator
from tests.emulators.openai import Reply, tool_call

USAGE = {"prompt_tokens": 12, "completion_tokens": 5}


@pytest.fixture
async def anthropic() -> AsyncIterator[AnthropicEmulator]:
    emu = AnthropicEmulator()
    await emu.start()
    yield emu
    await emu.stop()


@pytest.fixture
async def gemini() -> AsyncIterator[GeminiEmulator]:
    emu = GeminiEmulator()
    await emu.start()
    yield emu
    await emu.stop()


@pytest.fixture
async def ollama() -> AsyncIterator[OllamaEmulator]:
    emu = OllamaEmulator()
    await emu.start()
    yield emu
    await emu.stop()


async def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json=body, headers=headers or {}) as response:
            return response.status, await response.read()


def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.decode().replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            events.append((fields.get("event", ""), json.loads(fields["data"])))
    return events


ANTHROPIC_HEADERS = {"x-api-key": "k", "anthropic-version": VERSION}


async def test_anthropic_streams_blocks_and_counts_in_the_messages_api_order(anthropic: AnthropicEmulator) -> None:
    anthropic.queue(Reply(text="Looking it up.", tool_calls=[tool_call("weather", {"city": "Porto"})], usage=USAGE))
    body = {"model": "claude", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "weather?"}]}
    status, raw = await post(anthropic.root + "/v1/messages", body, ANTHROPIC_HEADERS)
    events = sse_events(raw)
    assert status == 200
    assert [kind for kind, _ in events if kind != "content_block_delta"] == [
        "message_start", "content_block_start", "ping", "content_block_stop",
        "content_block_start", "content_block_stop", "message_delta", "message_stop",
    ]
    assert all(kind == data["type"] for kind, data in events)
    assert events[0][1]["message"]["usage"]["input_tokens"] == 12
    deltas = [data["delta"] for kind, data in events if kind == "content_block_delta"]
    assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == "Looking it up."
    assert json.loads("".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta")) == {"city": "Porto"}
    (call,) = anthropic.issued_calls
    starts = [data["content_block"] for kind, data in events if kind == "content_block_start"]
    assert starts[1] == {"type": "tool_use", "id": call.id, "name": "weather", "input": {}}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" and events[-2][1]["usage"] == {"output_tokens": 5}


async def test_anthropic_refuses_what_the_api_refuses(anthropic: AnthropicEmulator) -> None:
    url = anthropic.root + "/v1/messages"
    hello = [{"role": "user", "content": "hi"}]
    assert (await post(url, {"model": "c", "max_tokens": 8, "messages": hello}))[0] == 401
    assert (await post(url, {"model": "c", "messages": hello}, ANTHROPIC_HEADERS))[0] == 400
    unanswered = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_x", "name": "weather", "input": {}}]},
        {"role": "user", "content": "well?"},
    ]
    status, raw = await post(url, {"model": "c", "max_tokens": 8, "messages": unanswered}, ANTHROPIC_HEADERS)
    error = json.loads(raw)
    assert status == 400 and error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_x" in error["error"]["message"]
    stray = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_y", "content": "21"}]}]
    assert (await post(url, {"model": "c", "max_tokens": 8, "messages": stray}, ANTHROPIC_HEADERS))[0] == 400
    assert len(anthropic.violations) == 5 and not anthropic.issued_calls


async def test_gemini_streams_usage_metadata_and_calls_whole(gemini: GeminiEmulator) -> None:
    gemini.queue(Reply(text="Checking.", tool_calls=[tool_call("weather", {"city": "Faro"})], usage=USAGE))
    body = {"contents": [{"role": "user", "parts": [{"text": "weather?"}]}]}
    url = gemini.base_url + "/models/gemini-x:streamGenerateContent?alt=sse"
    status, raw = await post(url, body, {"x-goog-api-key": "k"})
    chunks = [data for _, data in sse_events(raw)]
    assert status == 200 and len(chunks) == 4  # the text in three pieces, then the call
    assert "".join(c["candidates"][0]["content"]["parts"][0].get("text", "") for c in chunks) == "Checking."
    assert chunks[-1]["candidates"][0]["content"]["parts"] == [{"functionCall": {"name": "weather", "args": {"city": "Faro"}}}]
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None, None, None, "STOP"]
    assert [c["usageMetadata"].get("candidatesTokenCount") for c in chunks] == [None, None, None, 5]
    assert all(c["usageMetadata"]["promptTokenCount"] == 12 for c in chunks)
    assert gemini.model_of() == "gemini-x" and gemini.received[-1].streamed

    gemini.queue(Reply(text="As an array."))
    status, raw = await post(url.replace("?alt=sse", ""), body, {"x-goog-api-key": "k"})
    assert status == 200 and isinstance(json.loads(raw), list)


async def test_gemini_refuses_a_function_response_that_answers_no_call(gemini: GeminiEmulator) -> None:
    url = gemini.base_url + "/models/gemini-x:generateContent"
    contents = [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {"role": "user", "parts": [{"function_response": {"name": "weather", "response": {"t": 21}}}]},
    ]
    assert (await post(url, {"contents": contents}))[0] == 403  # no API key
    status, raw = await post(url, {"contents": contents}, {"x-goog-api-key": "k"})
    assert status == 400 and json.loads(raw)["error"]["status"] == "INVALID_ARGUMENT"
    assert "comes immediately after a function call turn" in json.loads(raw)["error"]["message"]
    answered = [contents[0], {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {}}}]}, contents[1]]
    status, raw = await post(url, {"contents": answered}, {"x-goog-api-key": "k"})
    assert status == 200 and gemini.function_responses() == [{"name": "weather", "response": {"t": 21}}]


async def test_ollama_streams_lines_counts_last_and_describes_its_model(ollama: OllamaEmulator) -> None:
    ollama.queue(Reply(text="One moment.", tool_calls=[tool_call("weather", {"city": "Braga"})], usage=USAGE))
    body = {"model": "qwen3:8b", "messages": [{"role": "user", "content": "weather?"}]}  # streams by default
    status, raw = await post(ollama.root + "/api/chat", body)
    lines = [json.loads(line) for line in raw.splitlines()]
    assert status == 200 and [line["done"] for line in lines] == [False, False, False, False, True]
    assert "".join(line["message"]["content"] for line in lines) == "One moment."
    assert lines[3]["message"]["tool_calls"] == [{"function": {"name": "weather", "arguments": {"city": "Braga"}}}]
    assert (lines[-1]["prompt_eval_count"], lines[-1]["eval_count"], lines[-1]["done_reason"]) == (12, 5, "stop")
    assert all("eval_count" not in line for line in lines[:-1])

    status, raw = await post(ollama.root + "/api/show", {"model": "qwen3:8b"})
    assert status == 200 and "tools" in json.loads(raw)["capabilities"] and ollama.shown == ["qwen3:8b"]
    stray = {"model": "qwen3:8b", "stream": False, "messages": [{"role": "tool", "content": "21"}]}
    status, raw = await post(ollama.root + "/api/chat", stray)
    assert status == 200 and json.loads(raw)["done"] is True  # Ollama takes it; the emulator notes it
    assert ollama.violations == ["request 1: tool message 0 follows no assistant message with tool_calls"]


async def test_scripted_errors_come_in_each_providers_error_body(
    anthropic: AnthropicEmulator, gemini: GeminiEmulator, ollama: OllamaEmulator
) -> None:
    for emu in (anthropic, gemini, ollama):
        emu.queue_error(429, "slow down")
    hello = [{"role": "user", "content": "hi"}]
    status, raw = await post(anthropic.root + "/v1/messages", {"model": "c", "max_tokens": 8, "messages": hello},
                             ANTHROPIC_HEADERS)
    assert status == 429 and json.loads(raw)["error"] == {"type": "rate_limit_error", "message": "slow down"}
    status, raw = await post(gemini.base_url + "/models/g:generateContent",
                             {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, {"x-goog-api-key": "k"})
    assert status == 429 and json.loads(raw)["error"] == {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}
    status, raw = await post(ollama.root + "/api/chat", {"model": "m", "messages": hello})
    assert status == 429 and json.loads(raw) == {"error": "slow down"}
    assert [emu.received[-1].status for emu in (anthropic, gemini, ollama)] == [429, 429, 429]
