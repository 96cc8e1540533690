"""A turn with a tool round on each provider's own API, through litellm and the whole bot.

A Telegram message (python-telegram-bot against the Telegram emulator) is answered by an agent
on `anthropic/`, `gemini/` or `ollama_chat/` (or `openai/`, for comparison), each pointed at a
loopback emulator of that provider's wire format, with the reply streamed into the message or
sent whole. The model calls the weather tool first, then answers. What an operator and the
provider would see is checked: the reply, the tool's result sent back in the provider's own
format, and the token counts, which must be the ones the provider reported, in the turn's log
line and in `botweave_tokens_total` alike, streamed or not.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.emulators.anthropic import AnthropicEmulator
from tests.emulators.gemini import GeminiEmulator
from tests.emulators.ollama import OllamaEmulator
from tests.emulators.openai import OpenAIEmulator, Reply, tool_call
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.support import StartApp

ANN = TelegramEmulator.user(1, "Ann", "ann")
ANSWER = "It is 21°C in Lisbon today, with a light breeze from the sea."
LISBON = {"city": "Lisbon", "temperature": 21, "unit": "C"}
#: What the provider reports for each of the turn's two calls: the tool call, then the answer.
CALLED = {"prompt_tokens": 131, "completion_tokens": 17, "total_tokens": 148}
ANSWERED = {"prompt_tokens": 172, "completion_tokens": 23, "total_tokens": 195}


@dataclass(frozen=True)
class Provider:
    """How a test drives one provider's emulator and reads what it was sent."""

    model: str
    emulator: Callable[[], Any]
    #: The tool results of the latest request, decoded, in the provider's own format.
    tool_results: Callable[[Any], list[Any]]
    #: Whether each model request (in order) asked for a stream.
    streamed: Callable[[Any], list[bool]] = lambda emu: [r.streamed for r in emu.received]


def _anthropic_results(emu: AnthropicEmulator) -> list[Any]:
    (call,) = emu.issued_calls
    blocks = emu.tool_results()
    assert [b["tool_use_id"] for b in blocks] == [call.id], "the result answers the tool_use block by its id"
    return [emu.tool_output(call.id)]


def _gemini_results(emu: GeminiEmulator) -> list[Any]:
    responses = emu.function_responses()
    assert [r["name"] for r in responses] == ["weather"], "the functionResponse names the function it answers"
    return [r["response"] for r in responses]


def _ollama_results(emu: OllamaEmulator) -> list[Any]:
    return [json.loads(m["content"]) for m in emu.tool_messages()]


def _openai_results(emu: OpenAIEmulator) -> list[Any]:
    return [emu.tool_output(call.id) for call in emu.issued_calls]


PROVIDERS = {
    "anthropic": Provider("anthropic/claude-sonnet-4-5", AnthropicEmulator, _anthropic_results),
    "gemini": Provider("gemini/gemini-2.5-flash", GeminiEmulator, _gemini_results),
    # A model litellm has no price for: logging its calls makes litellm ask the server about it.
    "ollama": Provider("ollama_chat/qwen3:8b", OllamaEmulator, _ollama_results),
    "openai": Provider("openai/gpt-4o-mini", OpenAIEmulator, _openai_results,
                       lambda emu: [exchange.streamed for exchange in emu.exchanges]),
}


@pytest.fixture(params=sorted(PROVIDERS))
async def provider(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Provider, Any]]:
    """Each provider, with its emulator started; stopped afterwards."""
    chosen = PROVIDERS[request.param]
    emulator = chosen.emulator()
    await emulator.start()
    try:
        yield chosen, emulator
    finally:
        await emulator.stop()


class TurnLines(logging.Handler):
    """The turn lines (`turn ...: ... tokens_in=... tokens_out=...`) logged while attached."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "tokens_in"):
            self.records.append(record)


@pytest.fixture
def turn_lines() -> Iterator[TurnLines]:
    logger = logging.getLogger("botweave.runtime.turns")
    handler, level = TurnLines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def tokens_counted(port: int, agent: str) -> tuple[float, float]:
    """`botweave_tokens_total` for `agent` (prompt, completion), read from /metrics as a scraper would."""
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            text = await response.text()
    found = {
        sample.labels["kind"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "botweave_tokens_total" and sample.labels.get("agent") == agent
    }
    return found.get("prompt", 0.0), found.get("completion", 0.0)


async def weather_turn(
    chosen: Provider, model: Any, emu: TelegramEmulator, start_app: StartApp, turn_lines: TurnLines, *,
    streaming: bool, agent: str, **config: Any,
) -> None:
    """One Telegram message answered after a weather tool round, and everything checked."""
    model.queue(
        Reply(tool_calls=[tool_call("weather", {"city": "Lisbon"})], usage=CALLED),
        Reply(text=ANSWER, usage=ANSWERED),
    )
    app = await start_app({
        "agents": {agent: {"model": chosen.model, "api_base": model.base_url, "api_key": "sk-loopback",
                           "tools": [{"python": "tests.tooldemo:weather"}]}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", "streaming": streaming,
                                   "stream_edit_interval_ms": 0, **adapter_config(emu, poll_timeout=1)}},
        "ops": {"listen": "127.0.0.1:0"},
        **config,
    })
    assert app.ops is not None
    before = await tokens_counted(app.ops.port, agent)

    emu.push_message(emu.private_chat(ANN), ANN, "What is the weather in Lisbon?")
    await wait_until(lambda: turn_lines.records, timeout=60, what="the turn's log line")
    await app.drain()

    (sent,) = emu.sent(1)
    assert emu.current(1, sent["message_id"])["text"] == ANSWER
    assert chosen.streamed(model) == [streaming, streaming]
    assert chosen.tool_results(model) == [LISBON]
    (line,) = turn_lines.records
    expected = (CALLED["prompt_tokens"] + ANSWERED["prompt_tokens"], CALLED["completion_tokens"] + ANSWERED["completion_tokens"])
    assert (line.outcome, line.model) == ("replied", chosen.model)
    assert (line.tokens_in, line.tokens_out) == expected, "the turn line counts what the provider reported"
    after = await tokens_counted(app.ops.port, agent)
    assert (after[0] - before[0], after[1] - before[1]) == expected, "the metric counts what the provider reported"
    model.assert_tool_protocol()


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
async def test_a_tool_round_reports_the_providers_token_counts(
    provider: tuple[Provider, Any], streaming: bool, telegram_emulator: TelegramEmulator,
    start_app: StartApp, turn_lines: TurnLines,
) -> None:
    chosen, model = provider
    agent = f"weather-{chosen.model.split('/')[0]}-{'streamed' if streaming else 'whole'}"
    await weather_turn(chosen, model, telegram_emulator, start_app, turn_lines, streaming=streaming, agent=agent)


async def test_a_streamed_turn_whose_calls_run_in_a_model_process_reports_them_too(
    telegram_emulator: TelegramEmulator, start_app: StartApp, turn_lines: TurnLines,
) -> None:
    """The counts cross the pipe from the helper process like the words do (one provider whose
    counts are not OpenAI's stands for all: the helper runs the same calls)."""
    model = AnthropicEmulator()
    await model.start()
    try:
        await weather_turn(PROVIDERS["anthropic"], model, telegram_emulator, start_app, turn_lines, streaming=True,
                           agent="weather-in-a-process", models={"processes": 1})
    finally:
        await model.stop()
