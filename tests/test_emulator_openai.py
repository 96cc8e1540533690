"""The OpenAI emulator driven through litellm itself, so tool, media and benchmark tests elsewhere
can trust its wire format, its bookkeeping and its refusals."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from typing import Any

import aiohttp
import litellm
import pytest

from tests.emulators.openai import OpenAIEmulator, Reply, ToolCall, tool_call

MODEL = "openai/gpt-4o-mini"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


@pytest.fixture
def llm(openai_emulator: OpenAIEmulator) -> OpenAIEmulator:
    return openai_emulator


async def complete(llm: OpenAIEmulator, messages: list[dict[str, Any]], **options: Any) -> Any:
    return await litellm.acompletion(
        model=MODEL, messages=messages, api_base=llm.base_url, api_key="sk-test", **options
    )


async def collect(llm: OpenAIEmulator, messages: list[dict[str, Any]], **options: Any) -> list[Any]:
    stream = await complete(llm, messages, stream=True, **options)
    return [chunk async for chunk in stream]


def assistant_turn(message: Any) -> dict[str, Any]:
    """The assistant message as a client keeps it in history, in OpenAI's format."""
    return {
        "role": "assistant",
        "content": message.content,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
        ],
    }


# --- tool calls ---------------------------------------------------------------------------


async def test_tool_calls_then_text_without_streaming(llm: OpenAIEmulator) -> None:
    llm.queue_tool_calls({"name": "get_weather", "arguments": {"city": "Oslo"}})
    llm.queue_text("It is sunny in Oslo.")
    question = [{"role": "user", "content": "Weather in Oslo?"}]

    first = await complete(llm, question, tools=[WEATHER])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    assert call.id.startswith("call_") and call.id in llm.issued
    assert llm.tools_offered() == ["get_weather"] and first.usage.total_tokens > 0

    result = {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "clear"})}
    second = await complete(llm, [*question, assistant_turn(choice.message), result], tools=[WEATHER])
    assert second.choices[0].message.content == "It is sunny in Oslo."
    assert second.choices[0].finish_reason == "stop"
    assert llm.tool_results() == [result]
    assert llm.tool_output(call.id) == {"sky": "clear"}
    assert llm.unanswered_calls() == [] and llm.pending_replies == 0
    llm.assert_tool_protocol()


async def test_parallel_tool_calls_stream_in_openai_fragments(llm: OpenAIEmulator) -> None:
    llm.queue_tool_calls(("get_weather", {"city": "Oslo"}), tool_call("get_weather", {"city": "Rome"}))
    chunks = await collect(llm, [{"role": "user", "content": "Oslo and Rome?"}], tools=[WEATHER])

    deltas = [c.choices[0].delta for c in chunks if c.choices]
    fragments = [d.tool_calls[0] for d in deltas if d.tool_calls]
    headers = [f for f in fragments if f.id]
    assert [(h.index, h.function.name) for h in headers] == [(0, "get_weather"), (1, "get_weather")]
    assert all(f.id is None and f.function.name is None for f in fragments if f not in headers)
    assert len([f for f in fragments if f.index == 0 and not f.id]) == llm.argument_chunks
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    built = litellm.stream_chunk_builder(chunks)
    calls = built.choices[0].message.tool_calls
    assert [json.loads(c.function.arguments) for c in calls] == [{"city": "Oslo"}, {"city": "Rome"}]
    assert [c.id for c in calls] == [c.id for c in llm.issued_calls]
    assert llm.exchanges[-1].streamed and [c.name for c in llm.exchanges[-1].tool_calls] == ["get_weather"] * 2


async def test_a_streamed_round_trip_with_parallel_results(llm: OpenAIEmulator) -> None:
    llm.queue(
        [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})],
        Reply(text="Oslo is clear, Rome is warm.", chunks=4),
    )
    question = [{"role": "user", "content": "Both?"}]
    built = litellm.stream_chunk_builder(await collect(llm, question, tools=[WEATHER]))
    message = built.choices[0].message
    results = [{"role": "tool", "tool_call_id": c.id, "content": f"result {i}"} for i, c in enumerate(message.tool_calls)]

    chunks = await collect(llm, [*question, assistant_turn(message), *results], tools=[WEATHER])
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) == 4 and "".join(texts) == "Oslo is clear, Rome is warm."
    assert [m["tool_call_id"] for m in llm.tool_results()] == [c.id for c in message.tool_calls]
    llm.assert_tool_protocol()


async def test_results_that_answer_no_call_are_refused_like_openai(llm: OpenAIEmulator) -> None:
    llm.queue_tool_calls(("get_weather", {"city": "Oslo"}))
    question = [{"role": "user", "content": "Weather?"}]
    first = (await complete(llm, question, tools=[WEATHER])).choices[0].message

    wrong_id = {"role": "tool", "tool_call_id": "call_made_up", "content": "{}"}
    with pytest.raises(litellm.BadRequestError, match="must be a response to a preceeding message"):
        await complete(llm, [*question, assistant_turn(first), wrong_id], tools=[WEATHER])
    assert any("never issued" in v for v in llm.violations)
    assert any("without results" in v for v in llm.violations)

    unanswered = [*question, assistant_turn(first), {"role": "user", "content": "never mind"}]
    with pytest.raises(litellm.BadRequestError, match="tool_call_ids did not have response messages"):
        await complete(llm, unanswered, tools=[WEATHER])
    assert llm.unanswered_calls() == llm.issued_calls

    orphan = [*question, {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "{}"}]
    with pytest.raises(litellm.BadRequestError, match="must be a response to a preceeding message"):
        await complete(llm, orphan, tools=[WEATHER])
    assert llm.unanswered_calls() == []  # the orphan did carry its id


async def test_non_strict_mode_records_violations_and_answers(llm: OpenAIEmulator) -> None:
    llm.strict_tools = False
    forged = {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "call_forged", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
    }
    history = [{"role": "user", "content": "hi"}, forged, {"role": "tool", "tool_call_id": "call_forged", "content": "x"}]
    reply = await complete(llm, history, tools=[WEATHER])
    assert reply.choices[0].message.content == llm.reply
    assert len(llm.violations) == 2 and all("call_forged" in v for v in llm.violations)
    with pytest.raises(AssertionError, match="tool protocol violations"):
        llm.assert_tool_protocol()


async def test_a_hook_answers_by_what_the_conversation_holds(llm: OpenAIEmulator) -> None:
    async def agent(body: dict[str, Any]) -> Any:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return f"tool said {last['content']}"
        if "weather" in last["content"]:
            return ToolCall("get_weather", {"city": "Oslo"})
        return None  # the default reply

    llm.on_request = agent
    question = [{"role": "user", "content": "weather please"}]
    first = (await complete(llm, question, tools=[WEATHER])).choices[0].message
    result = {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "rain"}
    second = await complete(llm, [*question, assistant_turn(first), result], tools=[WEATHER])
    assert second.choices[0].message.content == "tool said rain"
    third = await complete(llm, [{"role": "user", "content": "hello"}])
    assert third.choices[0].message.content == llm.reply


# --- content parts ------------------------------------------------------------------------


async def test_image_content_parts_are_decoded(llm: OpenAIEmulator) -> None:
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url, "detail": "low"}}]
    await complete(llm, [{"role": "user", "content": content}])
    (part,) = llm.image_parts()
    assert (part.mime, part.data, part.detail, part.role) == ("image/png", PNG, "low", "user")
    assert llm.images() == [PNG] and llm.last_user_text() == "What is this?"


async def test_broken_image_data_is_refused(llm: OpenAIEmulator) -> None:
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@not-base64@@"}}]
    with pytest.raises(litellm.BadRequestError, match="unsupported image"):
        await complete(llm, [{"role": "user", "content": content}])
    assert llm.violations


# --- audio --------------------------------------------------------------------------------


async def test_transcription_uploads_are_recorded(llm: OpenAIEmulator) -> None:
    llm.transcript = "remind me at five"
    audio = b"OggS" + bytes(60)
    result = await litellm.atranscription(
        model="openai/whisper-1", file=("voice.ogg", audio, "audio/ogg"), api_base=llm.base_url, api_key="sk-test",
        language="en", prompt="Names: Ann",
    )
    assert result.text == "remind me at five"
    upload = llm.transcriptions[-1]
    assert (upload.filename, upload.data, upload.model) == ("voice.ogg", audio, "whisper-1")
    assert (upload.language, upload.prompt) == ("en", "Names: Ann")

    named = io.BytesIO(b"RIFF0000WAVEfmt ")
    named.name = "note.wav"
    llm.on_transcription = lambda upload: f"{len(upload.data)} bytes of {upload.filename}"
    result = await litellm.atranscription(
        model="openai/whisper-1", file=named, api_base=llm.base_url, api_key="sk-test", response_format="text"
    )
    assert result.text == "16 bytes of note.wav"


async def test_transcription_refuses_files_whisper_cannot_read(llm: OpenAIEmulator) -> None:
    with pytest.raises(litellm.BadRequestError, match="Invalid file format"):
        await litellm.atranscription(
            model="openai/whisper-1", file=("voice.bin", b"\x00\x01", "application/octet-stream"),
            api_base=llm.base_url, api_key="sk-test",
        )
    assert llm.transcriptions[-1].filename == "voice.bin"


# --- shape, usage and latency -------------------------------------------------------------


async def test_default_stream_keeps_its_word_by_word_shape(llm: OpenAIEmulator) -> None:
    chunks = await collect(llm, [{"role": "user", "content": "hi"}])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == llm.reply + " "


async def test_usage_is_reported_plainly_and_in_the_last_chunk_when_asked(llm: OpenAIEmulator) -> None:
    plain = await complete(llm, [{"role": "user", "content": "hi"}])
    assert plain.usage.prompt_tokens > 0 and plain.usage.completion_tokens > 0

    llm.queue(Reply(text="counted", usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}))
    chunks = await collect(llm, [{"role": "user", "content": "hi"}], stream_options={"include_usage": True})
    usage = litellm.stream_chunk_builder(chunks).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (11, 3, 14)


async def test_latency_and_chunked_streaming_are_honoured(llm: OpenAIEmulator) -> None:
    llm.delay = 0.3
    llm.stream_chunks = 5
    llm.chunk_delay = 0.05
    started = time.monotonic()
    stream = await complete(llm, [{"role": "user", "content": "hi"}], stream=True)
    arrivals = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic() - started)
    assert len(arrivals) == 5
    # the server sleeps before each piece, so neither can arrive sooner; the gap between
    # arrivals can shrink when the reader is late for the first one, the total cannot
    assert arrivals[0] >= 0.3 and arrivals[-1] >= 0.3 + 4 * 0.05


async def test_errors_scripted_or_persistent(llm: OpenAIEmulator) -> None:
    llm.queue_error(429, "slow down", error_type="rate_limit_error")
    with pytest.raises(litellm.RateLimitError):
        await complete(llm, [{"role": "user", "content": "hi"}], max_retries=0)
    llm.fail_with = 503
    with pytest.raises(litellm.ServiceUnavailableError):
        await complete(llm, [{"role": "user", "content": "hi"}], max_retries=0)
    llm.fail_with = None
    assert (await complete(llm, [{"role": "user", "content": "hi"}])).choices[0].message.content == llm.reply
    assert [e.status for e in llm.exchanges] == [429, 503, 200]


async def test_hundreds_of_concurrent_requests_overlap(llm: OpenAIEmulator) -> None:
    """The emulator must not be what a 200-chat benchmark measures."""
    llm.delay = 0.5
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> int:
            async with session.post(f"{llm.base_url}/chat/completions", json=body) as response:
                await response.read()
                return response.status

        started = time.monotonic()
        statuses = await asyncio.gather(*(one() for _ in range(200)))
    assert statuses == [200] * 200
    assert llm.max_in_flight == 200 and time.monotonic() - started < 2.0
