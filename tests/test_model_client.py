"""litellm without pricing and success logging while nobody reads them, and with all of it the
moment someone does (a logging integration, plain or streamed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from botweave.agents import Agent, litellm_module
from botweave.config import AgentConfig
from botweave.model_client import listening, quieted

from tests.emulators.openai import OpenAIEmulator


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
        litellm.callbacks.remove(recorder)


def test_every_bookkeeping_step_of_this_litellm_is_covered():
    litellm = litellm_module()
    assert not listening(litellm)
    assert set(quieted(litellm)) == {
        "Logging.response_cost_calculator",
        "Logging.async_success_handler",
        "Logging.dispatch_success_handlers",
        "litellm.utils.dispatch_success_logging",
        "CustomStreamWrapper._finalize_completed_stream",
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
