"""botweave's own OpenAI-compatible client: what it sends, what it reads back (words, tool
calls whole and in fragments, images, token counts), how it fails, and when `auto` uses it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from botweave.agents import Agent, AgentError
from botweave.config import AgentConfig
from botweave.model_calls import litellm_module
from botweave.model_clients import ModelClients
from botweave.model_guard import GuardSettings, ModelGuard, ModelsResting
from botweave.openai_compatible import OpenAICompatible
from botweave.runtime.config import load_config
from botweave.tooling import Tool
from botweave.tools.python import function_tool
from botweave.types import OutboundFile

from tests.emulators.openai import OpenAIEmulator, Reply, tool_call

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def agent_for(llm: OpenAIEmulator, *, tools: dict[str, Tool] | None = None, **config: Any) -> Agent:
    settings = {"model": "openai/gpt-4o", "api_base": llm.base_url, "api_key": "sk-loopback", **config}
    return Agent("direct", AgentConfig(**settings), tools=tools or {}, calls=OpenAICompatible())


def weather_tool(seen: list[dict[str, Any]]) -> Tool:
    async def weather(city: str) -> dict[str, str]:
        """The weather in a city."""
        seen.append({"city": city})
        return {"city": city, "sky": "clear"}

    return function_tool(weather)


async def test_the_request_is_the_agents_in_openais_format_and_nothing_of_litellms(llm):
    agent = agent_for(llm, temperature=0.2, max_tokens=50)
    assert await agent.complete([{"role": "user", "content": "before"}, {"role": "assistant", "content": "ok"}], "hi") == llm.reply
    sent = llm.requests[-1]
    assert sent["model"] == "gpt-4o"
    assert sent["temperature"] == 0.2 and sent["max_tokens"] == 50
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]
    assert not {"metadata", "drop_params", "timeout", "api_key", "api_base"} & set(sent)


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
async def test_a_tool_round_runs_and_its_result_goes_back(llm, streaming):
    seen: list[dict[str, Any]] = []
    agent = agent_for(llm, tools={"weather": weather_tool(seen)})
    llm.queue_tool_calls(tool_call("weather", {"city": "Lisbon"}), text="Let me look." if streaming else None)
    llm.queue(Reply(text="Clear skies in Lisbon.", chunk_delay=0.01))
    if streaming:
        text = "".join([piece async for piece in agent.stream([], "weather?")])
        assert [part.strip() for part in text.split("\n\n")] == ["Let me look.", "Clear skies in Lisbon."]
    else:
        assert await agent.complete([], "weather?") == "Clear skies in Lisbon."
    assert seen == [{"city": "Lisbon"}]
    llm.assert_tool_protocol()
    [result] = llm.tool_results(1)
    assert '"sky": "clear"' in result["content"]


async def test_a_stream_reports_its_token_counts(llm):
    from botweave import metrics

    usage = {"prompt_tokens": 7, "completion_tokens": 11, "total_tokens": 18}
    llm.queue(Reply(text="a few words", usage=usage, chunk_delay=0.01))
    with metrics.counting_usage() as counted:
        assert "".join([p async for p in agent_for(llm).stream([], "hi")]).strip() == "a few words"
    assert llm.requests[-1]["stream_options"] == {"include_usage": True}
    assert (counted.tokens_in, counted.tokens_out) == (7, 11)


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
async def test_images_in_the_answer_become_files(llm, streaming):
    llm.queue(Reply(text="Here it is.", images=[("image/png", PNG)]))
    files: list[OutboundFile] = []
    agent = agent_for(llm)
    if streaming:
        assert "".join([p async for p in agent.stream([], "draw", images=files)]).strip() == "Here it is."
    else:
        assert await agent.complete([], "draw", images=files) == "Here it is."
    assert [(f.mime, f.data) for f in files] == [("image/png", PNG)]


async def test_a_providers_own_finish_reason_is_read_like_any_other(llm):
    agent = agent_for(llm)
    llm.queue(Reply(text="Odd ending.", finish_reason="eos"), Reply(text="Odd ending streamed.", finish_reason="eos"))
    assert await agent.complete([], "plain") == "Odd ending."
    assert "".join([piece async for piece in agent.stream([], "streamed")]).strip() == "Odd ending streamed."


async def test_a_refused_key_is_an_authentication_error_and_is_not_tried_again(llm):
    llm.queue(Reply(status=401, error_message="Incorrect API key provided", error_type="invalid_request_error"))
    with pytest.raises(AgentError, match="AuthenticationError: Incorrect API key provided") as failed:
        await agent_for(llm).complete([], "hi")
    assert "sk-loopback" not in str(failed.value)
    assert [e.status for e in llm.exchanges] == [401]


async def test_a_rate_limit_is_waited_out_as_the_server_asks(llm):
    llm.queue(Reply(status=429, error_message="slow down", headers={"retry-after-ms": "50"}))
    assert await agent_for(llm).complete([], "hi") == llm.reply
    assert [e.status for e in llm.exchanges] == [429, 200]
    assert llm.exchanges[1].arrived - llm.exchanges[0].arrived >= 0.045


async def test_a_server_that_keeps_failing_rests_and_the_person_is_told_when_to_come_back(llm):
    """A 503 cools the model down (5 s without a Retry-After); an agent with no other model
    does not wait longer than `max_wait_seconds` for it, and is not asked in the meantime."""
    llm.fail_with = 503
    agent = agent_for(llm)
    agent.guard = ModelGuard(settings=GuardSettings(max_wait_seconds=1.0))
    with pytest.raises(ModelsResting, match="cooled down until") as resting:
        async for _ in agent.stream([], "hi"):
            pass
    assert resting.value.notice is not None and "try again after" in resting.value.notice
    with pytest.raises(ModelsResting):
        await agent.complete([], "again")
    assert [e.status for e in llm.exchanges] == [503], "a resting model gets no request"


async def test_a_model_slower_than_the_timeout_is_a_timeout(llm):
    llm.delay = 1.0
    with pytest.raises(AgentError, match="Timeout"):
        await agent_for(llm, timeout_seconds=0.2).complete([], "hi")


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
    cut = CutShort("never finished")
    await cut.start()
    try:
        pieces: list[str] = []
        with pytest.raises(AgentError, match="ended before the model said it was finished"):
            async for piece in agent_for(cut).stream([], "hi"):
                pieces.append(piece)
    finally:
        await cut.stop()
    # asked once more after a pause (a broken stream may be passing); each time the words
    # shown are taken back (`Rewind` to nothing), since no answer followed them
    assert pieces == ["Half an ", "", "Half an ", ""]
    assert [getattr(piece, "keep", None) for piece in pieces] == [None, 0, None, 0]
    assert len(cut.exchanges) == 2


async def test_openai_itself_needs_a_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = Agent("direct", AgentConfig(model="openai/gpt-4o"), calls=OpenAICompatible())
    with pytest.raises(AgentError, match="no API key"):
        await agent.complete([], "hi")


async def test_an_open_client_shares_its_connections_and_closes_them(llm):
    client = OpenAICompatible()
    client.open()
    agent = Agent("direct", AgentConfig(model="openai/gpt-4o", api_base=llm.base_url, api_key="k"), calls=client)
    try:
        await asyncio.gather(*(agent.complete([], f"hi {n}") for n in range(5)))
        assert len(llm.requests) == 5
    finally:
        await client.close()
    assert await agent.complete([], "after closing") == llm.reply  # a call of its own, closed after it


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
        for name in ("callbacks", "success_callback", "_async_success_callback", "failure_callback",
                     "_async_failure_callback", "input_callback"):
            registered = getattr(litellm, name, None) or []
            while recorder in registered:
                registered.remove(recorder)


async def test_auto_calls_openai_models_directly_and_the_rest_through_litellm():
    clients = ModelClients("auto")
    assert clients.client_for("openai/gpt-4o") is clients.direct
    assert clients.client_for("anthropic/claude-sonnet-4") is clients.litellm
    assert clients.client_for("offline/echo") is clients.offline  # answered here: no litellm at all
    assert ModelClients("litellm").client_for("openai/gpt-4o") is not None
    litellm_only = ModelClients("litellm")
    assert litellm_only.client_for("openai/gpt-4o") is litellm_only.litellm
    assert litellm_only.client_for("offline/echo") is litellm_only.offline


async def test_with_a_litellm_integration_auto_lets_litellm_make_the_call_so_it_is_logged(llm, integration):
    clients = ModelClients("auto")
    agent = Agent("logged", AgentConfig(model="openai/gpt-4o", api_base=llm.base_url, api_key="k"), calls=clients)
    assert await agent.complete([], "hi") == llm.reply
    for _ in range(100):  # litellm logs in a background task
        if integration:
            break
        await asyncio.sleep(0.05)
    assert len(integration) == 1


def test_direct_for_every_agent_names_the_one_it_cannot_call(tmp_path):
    from botweave.config import ConfigError

    path = tmp_path / "bot.yaml"
    path.write_text(
        "agents: {fast: {model: openai/gpt-4o-mini}, local: {model: offline/echo}}\nmodels: {client: direct}\n"
    )
    with pytest.raises(ConfigError) as failed:
        load_config(path)
    assert "agents.local.model" in str(failed.value) and "not an openai/ model" in str(failed.value)
    assert "agents.fast" not in str(failed.value)


async def test_a_request_that_names_its_retries_gets_that_many_and_sends_them_nowhere(llm):
    from botweave.openai_compatible import ServiceUnavailableError

    llm.fail_with = 503
    request = {"model": "openai/gpt-4o", "api_base": llm.base_url, "api_key": "k", "num_retries": 0,
               "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(ServiceUnavailableError):
        await OpenAICompatible().answer(request)
    assert [e.status for e in llm.exchanges] == [503]
    assert "num_retries" not in llm.requests[-1]


def test_litellms_own_cache_hook_left_behind_without_a_cache_is_not_an_integration():
    litellm = litellm_module()
    assert litellm.cache is None
    litellm.success_callback.append("cache")
    try:
        clients = ModelClients("auto")
        assert clients.client_for("openai/gpt-4o") is clients.direct
    finally:
        litellm.success_callback.remove("cache")
