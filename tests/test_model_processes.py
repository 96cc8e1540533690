"""Model calls made in helper processes (`models.processes`): the same answers, tool calls,
streams, images, token counts and failures as calls made in the bot's own process, through
litellm's real HTTP path to the loopback OpenAI emulator."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App
from botweave.config import ConfigError
from botweave.model_calls import CallPart, ModelCallFailed, ModelOutput
from botweave.runtime.config import load_config
from botweave.runtime.model_host import Coalesced
from botweave.runtime.model_processes import ModelProcesses

from tests import tooldemo
from tests.emulators.openai import OpenAIEmulator, Reply, tool_call
from tests.emulators.telegram import wait_until
from tests.support import RecordingAdapter, message

KEY = "sk-loopback-secret"


@pytest.fixture
async def processes() -> AsyncIterator[ModelProcesses]:
    calls = ModelProcesses(1)
    await calls.start()
    yield calls
    await calls.close()


def request(llm: OpenAIEmulator, text: str = "hi", **options: Any) -> dict[str, Any]:
    return {
        "model": "openai/gpt-emulated",
        "messages": [{"role": "user", "content": text}],
        "api_base": llm.base_url,
        "api_key": KEY,
        "timeout": 30,
        "stream": False,
        **options,
    }


def pids(calls: ModelProcesses) -> list[int]:
    return [child.process.pid for child in calls._children if child is not None and child.alive]


async def test_an_answer_comes_back_with_its_calls_images_and_token_counts(llm, processes):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    llm.queue(Reply(text="Here.", images=[("image/png", png)], usage={"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}))
    llm.queue_tool_calls(tool_call("weather", {"city": "Oslo"}, id="call-7"))

    answer = await processes.answer(request(llm, "a picture"))
    called = await processes.answer(request(llm, "weather?"))

    assert answer.text == "Here." and answer.usage == (11, 4)
    assert [base64.b64decode(url.split(",", 1)[1]) for url in answer.image_urls] == [png]
    assert called.calls == (CallPart(0, "call-7", "weather", '{"city": "Oslo"}'),)
    assert llm.last_user_text(0) == "a picture" and llm.last_user_text(1) == "weather?"


async def test_a_stream_arrives_piece_by_piece_with_tool_call_fragments_and_usage(llm, processes):
    llm.queue(Reply(text="one two three four", chunks=4, chunk_delay=0.15))
    llm.queue(Reply(text="a b c d e f g h", chunks=8, chunk_delay=0.0))
    llm.queue_tool_calls(tool_call("weather", {"city": "Oslo"}, id="call-9"))

    paced = [piece async for piece in processes.stream(request(llm, stream=True))]
    burst = [piece async for piece in processes.stream(request(llm, stream=True))]
    calls = [piece async for piece in processes.stream(request(llm, stream=True))]

    # words that come apart arrive apart; words that come together are sent on together
    assert len([p for p in paced if p.text]) == 4
    assert "".join(p.text for p in paced).split() == ["one", "two", "three", "four"]
    assert "".join(p.text for p in burst).split() == list("abcdefgh")
    assert len([p for p in burst if p.text]) <= 2
    assert paced[-1].usage is not None  # asked for, as in-process
    assert llm.requests[0]["stream_options"] == {"include_usage": True}
    fragments = [part for piece in calls for part in piece.calls]
    assert {part.id for part in fragments if part.id} == {"call-9"}
    assert "".join(part.arguments for part in fragments) == '{"city": "Oslo"}'


async def test_streamed_text_waits_at_most_the_window_and_never_for_the_next_chunk():
    sent: list[ModelOutput] = []
    pieces = Coalesced(sent.append, every=0.05)
    pieces.add(ModelOutput("Hello"))
    pieces.add(ModelOutput(" there"))
    pieces.add(ModelOutput(""))
    assert [p.text for p in sent] == ["Hello"]
    await asyncio.sleep(0.1)
    assert [p.text for p in sent] == ["Hello", " there"]
    pieces.add(ModelOutput(" again"))
    pieces.add(ModelOutput(usage=(3, 4)))
    assert sent[2:] == [ModelOutput(" again"), ModelOutput(usage=(3, 4))]


async def test_a_failure_comes_back_with_its_kind_and_the_process_goes_on(llm, processes):
    llm.queue(Reply(status=401, error_message="bad key"))
    with pytest.raises(ModelCallFailed) as failed:
        await processes.answer(request(llm))
    assert failed.value.kind == "AuthenticationError" and "bad key" in str(failed.value)
    assert (await processes.answer(request(llm))).text == llm.reply


async def test_a_call_the_caller_stops_waiting_for_is_dropped_and_others_still_answer(llm, processes):
    llm.queue(Reply(text="too late", delay=5.0))
    waiting = asyncio.ensure_future(processes.answer(request(llm, "slow")))
    await wait_until(lambda: len(llm.requests) == 1, what="the slow request to reach the model", timeout=60)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not processes._children[0].waiting  # type: ignore[union-attr]
    stream = processes.stream(request(llm, "streamed", stream=True))
    first = await anext(stream)
    await stream.aclose()  # a reader that stops early
    assert isinstance(first, ModelOutput)
    assert (await asyncio.wait_for(processes.answer(request(llm, "next")), 5)).text == llm.reply


async def test_a_process_that_dies_fails_what_it_held_and_the_next_call_starts_another(llm, processes, caplog):
    caplog.set_level(logging.WARNING)
    llm.queue(Reply(text="never", delay=5.0))
    held = asyncio.ensure_future(processes.answer(request(llm, "doomed")))
    await wait_until(lambda: len(llm.requests) == 1, what="the request to reach the model", timeout=60)
    [first] = pids(processes)
    os.kill(first, signal.SIGKILL)

    with pytest.raises(ModelCallFailed) as failed:
        await asyncio.wait_for(held, 5)
    assert failed.value.kind == "ModelProcessExited"
    assert (await asyncio.wait_for(processes.answer(request(llm, "again")), 30)).text == llm.reply
    assert pids(processes) and pids(processes) != [first]
    assert "model process 1 exited with code -9; 1 call(s) it held failed" in caplog.text


def app_for(llm: OpenAIEmulator, **bot: Any) -> tuple[App, RecordingAdapter]:
    app = App.from_config(
        {
            "bot": {"unknown_user_policy": "allow", **bot},
            "models": {"processes": 1},
            "agents": {
                "remote": {
                    "model": "openai/gpt-emulated",
                    "api_base": llm.base_url,
                    "api_key": KEY,
                    "tools": [{"python": "tests.tooldemo:nap"}],
                }
            },
        }
    )
    adapter = RecordingAdapter()
    adapter.capabilities = adapter.capabilities.__class__(max_message_length=1000)
    app.add_adapter(adapter)
    return app, adapter


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
async def test_a_turn_with_a_tool_round_runs_its_tool_here_and_its_model_calls_there(llm, streaming, caplog):
    tooldemo.NAPS.clear()
    app, adapter = app_for(llm, streaming=streaming, stream_edit_interval_ms=0)
    await app.start()
    try:
        llm.queue_tool_calls(tool_call("nap", {"seconds": 0.01}))
        llm.queue(Reply(text="Rested, and ready for more.", chunks=4))
        outcome = await app.handle(message("take a nap"))
        [child] = pids(app.model_processes)  # type: ignore[arg-type]
        llm.fail_with = 401
        failed = await app.handle(message("and again"))
    finally:
        await app.stop()

    assert outcome.status == "replied" and failed.status == "agent_error"
    shown = adapter.edits[-1][1] if adapter.edits else adapter.texts()[0]
    assert shown.startswith("Rested, and ready for more.")
    assert bool(adapter.edits) == streaming
    assert len(tooldemo.NAPS) == 1  # the tool ran in the bot's process
    assert [m["role"] for m in llm.messages(1)[-2:]] == ["assistant", "tool"]
    llm.assert_tool_protocol()
    assert "agent remote (openai/gpt-emulated) failed: AuthenticationError" in caplog.text
    assert KEY not in caplog.text
    with pytest.raises(ProcessLookupError):  # stopping the bot stopped its model process
        os.kill(child, 0)


def test_a_negative_count_of_model_processes_is_named(tmp_path):
    path = tmp_path / "bot.yaml"
    path.write_text("agents: {a: {model: offline/echo}}\nmodels: {processes: -1}\n")
    with pytest.raises(ConfigError) as failed:
        load_config(path)
    assert "models.processes" in str(failed.value)
