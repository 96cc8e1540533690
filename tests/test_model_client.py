"""litellm without pricing and success logging while nobody reads them, and with all of it the
moment someone does (a logging integration, plain or streamed)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from botweave.agents import Agent, AgentError
from botweave.config import AgentConfig
from botweave.model_calls import litellm_module
from botweave.model_client import CALLBACK_LISTS, listening, quieted

from tests.emulators.openai import OpenAIEmulator, Reply, tool_call


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIEmulator]:
    emulator = OpenAIEmulator("Priced answer.")
    await emulator.start()
    yield emulator
    await emulator.stop()


def agent_for(llm: OpenAIEmulator) -> Agent:
    return Agent("priced", AgentConfig(model="openai/gpt-4o", api_base=llm.base_url, api_key="sk-loopback"))


@pytest.fixture
def integration() -> Iterator[list[dict[str, Any]]]:
    """A litellm logging integration (a CustomLogger in litellm.callbacks) for one test."""
    litellm = litellm_module()
    from litellm.integrations.custom_logger import CustomLogger

    seen: list[dict[str, Any]] = []

    class Recorder(CustomLogger):  # type: ignore[misc]
        async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
            seen.append(kwargs)

    recorder = Recorder()
    litellm.callbacks.append(recorder)
    try:
        yield seen
    finally:
        for name in CALLBACK_LISTS:  # litellm copies a callback into its per-event lists
            registered = getattr(litellm, name, None) or []
            while recorder in registered:
                registered.remove(recorder)
        assert not listening(litellm)


def test_every_bookkeeping_step_of_this_litellm_is_covered():
    litellm = litellm_module()
    assert not listening(litellm)
    assert set(quieted(litellm)) == {
        "Logging.response_cost_calculator",
        "Logging.async_success_handler",
        "Logging.dispatch_success_handlers",
        "litellm.utils.dispatch_success_logging",
        "CustomStreamWrapper._finalize_completed_stream",
        "CustomStreamWrapper.__anext__",
        "openai.BaseClient._process_response_data",
        "httpx.Cookies.extract_cookies",
    }


async def test_nothing_is_priced_while_nobody_listens(llm):
    litellm = litellm_module()
    response = await litellm.acompletion(
        model="openai/gpt-4o", api_base=llm.base_url, api_key="sk-loopback", messages=[{"role": "user", "content": "hi"}]
    )
    assert response.choices[0].message.content == "Priced answer."
    assert response._hidden_params.get("response_cost") is None


async def test_an_integration_gets_priced_success_events_plain_and_streamed(llm, integration):
    agent = agent_for(llm)
    assert await agent.complete([], "plain") == "Priced answer."
    streamed = "".join([piece async for piece in agent.stream([], "streamed")])
    assert streamed.strip() == "Priced answer."
    for _ in range(100):  # litellm logs in background tasks
        if len(integration) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(integration) == 2
    assert all(event.get("response_cost") is not None for event in integration)


async def stream_with_usage(llm: OpenAIEmulator, words: int) -> tuple[str, Any]:
    litellm = litellm_module()
    usage = {"prompt_tokens": 7, "completion_tokens": 11, "total_tokens": 18}
    llm.queue(Reply(text=" ".join(f"w{n}" for n in range(words)), usage=usage))
    response = await litellm.acompletion(
        model="openai/gpt-4o", api_base=llm.base_url, api_key="sk-loopback", stream=True,
        stream_options={"include_usage": True}, messages=[{"role": "user", "content": "hi"}],
    )
    text, usage = "", None
    async for chunk in response:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if getattr(chunk, "usage", None) is not None:
            usage = chunk.usage
    return text, usage


async def test_a_stream_hands_over_the_usage_the_provider_reported_without_rebuilding_the_reply(llm, monkeypatch):
    litellm = litellm_module()
    rebuilt: list[int] = []
    original = litellm.stream_chunk_builder
    monkeypatch.setattr(litellm, "stream_chunk_builder", lambda *a, **k: rebuilt.append(1) or original(*a, **k))
    text, usage = await stream_with_usage(llm, 5)
    assert text.split() == ["w0", "w1", "w2", "w3", "w4"]
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (7, 11, 18)
    assert rebuilt == []


class SilentAboutUsage(OpenAIEmulator):
    """A provider that ignores `stream_options`: its streams never say what they used."""

    async def _stream(self, request: Any, body: dict[str, Any], *args: Any) -> Any:
        return await super()._stream(request, {**body, "stream_options": None}, *args)


async def test_a_stream_without_reported_usage_still_gets_litellms_estimate():
    litellm = litellm_module()
    silent = SilentAboutUsage("a few words here")
    await silent.start()
    try:
        response = await litellm.acompletion(
            model="openai/gpt-4o", api_base=silent.base_url, api_key="sk-loopback", stream=True,
            stream_options={"include_usage": True}, messages=[{"role": "user", "content": "hi"}],
        )
        usages = [chunk.usage async for chunk in response if getattr(chunk, "usage", None) is not None]
    finally:
        await silent.stop()
    assert usages and usages[-1].completion_tokens > 0


async def test_a_stream_is_read_through_one_iterator_not_one_per_chunk(llm):
    """Each chunk used to leave an unfinished async generator for the loop to finalize."""
    started: list[str] = []
    hooks = sys.get_asyncgen_hooks()

    def first_iteration(generator: Any) -> None:
        started.append(generator.__qualname__)
        if hooks.firstiter is not None:
            hooks.firstiter(generator)

    sys.set_asyncgen_hooks(firstiter=first_iteration, finalizer=hooks.finalizer)
    try:
        text, usage = await stream_with_usage(llm, 40)
    finally:
        sys.set_asyncgen_hooks(*hooks)
    assert len(text.split()) == 40 and usage is not None
    assert started.count("AsyncStream.__aiter__") <= 1, started


async def test_an_answer_the_sdk_types_do_not_describe_is_still_read(llm):
    """A provider's own finish reason fails the SDK's validation: it is built leniently, as
    the SDK always did, plain and streamed."""
    agent = agent_for(llm)
    llm.queue(Reply(text="Odd ending.", finish_reason="eos"), Reply(text="Odd ending streamed.", finish_reason="eos"))
    assert await agent.complete([], "plain") == "Odd ending."
    assert "".join([piece async for piece in agent.stream([], "streamed")]).strip() == "Odd ending streamed."


@pytest.fixture
def chunks_remade(monkeypatch) -> list[int]:
    """Counts the chunks litellm turns into chunks of its own."""
    from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper

    made: list[int] = []
    original = CustomStreamWrapper.chunk_creator

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CustomStreamWrapper, "chunk_creator", counting)
    return made


async def test_an_openai_stream_is_read_from_the_sdk_with_its_text_tool_calls_and_usage(llm, chunks_remade):
    """Nobody listens: the SDK's own chunks reach the agent, and the turn is the same."""
    litellm_module()
    agent = agent_for(llm)
    llm.queue(Reply(text="Streamed straight through.", usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}))
    assert "".join([piece async for piece in agent.stream([], "hi")]).strip() == "Streamed straight through."
    assert chunks_remade == []
    llm.queue(Reply(tool_calls=[tool_call("weather", {"city": "Lisbon"}, id="call_9")]))
    litellm = litellm_module()
    response = await litellm.acompletion(
        model="openai/gpt-4o", api_base=llm.base_url, api_key="sk-loopback", stream=True,
        stream_options={"include_usage": True}, messages=[{"role": "user", "content": "weather?"}],
        tools=[{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
    )
    from botweave.model_client import direct_chunks

    direct = direct_chunks(litellm, response)
    assert direct is not None
    arguments, names, usage = "", set(), None
    async for chunk in direct:
        usage = chunk.usage or usage
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            names.add(call.function.name)
            arguments += call.function.arguments or ""
    assert names >= {"weather"} and arguments == '{"city": "Lisbon"}'
    assert usage is not None and usage.total_tokens > 0
    assert chunks_remade == []


async def test_with_an_integration_litellm_reads_the_stream_itself(llm, integration, chunks_remade):
    agent = agent_for(llm)
    assert "".join([piece async for piece in agent.stream([], "hi")]).strip() == "Priced answer."
    assert chunks_remade, "litellm made its own chunks for the integration"


class CutShort(OpenAIEmulator):
    """A stream that stops after its first words, with no finish reason and no [DONE]."""

    async def _stream(self, request: Any, body: dict[str, Any], *args: Any) -> Any:
        from aiohttp import web

        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(self._chunk(body.get("model", "m"), {"role": "assistant", "content": "Half an "}, None))
        await response.write_eof()
        return response


async def test_a_stream_cut_before_its_finish_is_a_failure_not_a_short_answer():
    litellm_module()
    cut = CutShort("never finished")
    await cut.start()
    try:
        agent = agent_for(cut)
        pieces: list[str] = []
        with pytest.raises(AgentError, match="finish_reason"):
            async for piece in agent.stream([], "hi"):
                pieces.append(piece)
    finally:
        await cut.stop()
    assert pieces == ["Half an "]


def test_httpx_still_keeps_the_cookies_a_response_sets():
    import httpx

    litellm_module()
    request = httpx.Request("GET", "https://api.example.com/v1/models")
    jar = httpx.Cookies()
    jar.extract_cookies(httpx.Response(200, request=request))
    assert not jar
    jar.extract_cookies(httpx.Response(200, request=request, headers={"Set-Cookie": "session=abc; Path=/"}))
    assert jar.get("session") == "abc"


async def test_openai_requests_are_prepared_on_the_loop_and_other_work_still_in_threads(llm):
    import contextvars
    import functools
    import threading

    import litellm.main
    from botweave.model_client import ModelCallExecutor, prepared_on_loop

    def as_litellm_hands_it_over(model: str) -> functools.partial[Any]:
        return functools.partial(contextvars.copy_context().run, functools.partial(litellm.main.completion, model=model))

    assert prepared_on_loop(as_litellm_hands_it_over("openai/gpt-4o"))
    assert not prepared_on_loop(as_litellm_hands_it_over("vertex_ai/gemini-pro"))  # may fetch a token
    assert not prepared_on_loop(functools.partial(print, "unrelated"))

    prepared: list[int] = []

    class Watched(ModelCallExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            if prepared_on_loop(fn):
                prepared.append(threading.get_ident())
            return super().submit(fn, *args, **kwargs)

    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.get_running_loop()
    executor = Watched()
    loop.set_default_executor(executor)
    try:
        assert await agent_for(llm).complete([], "hi") == "Priced answer."
        assert prepared == [threading.get_ident()], "litellm's preparation was handed over and ran right here"
        assert await asyncio.to_thread(threading.get_ident) != threading.get_ident()
    finally:
        loop.set_default_executor(ThreadPoolExecutor())
        executor.shutdown(wait=False)
