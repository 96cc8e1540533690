"""The tool loop through litellm's real HTTP path: the loopback OpenAI emulator answers with
`tool_calls`, checks every tool result it is sent back against the calls it issued, and
streams; Python tools from tests/tooldemo.py run for real."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest
from botweave import App
from botweave.agents import History
from botweave.model_calls import load_litellm

from tests import tooldemo
from tests.emulators.openai import OpenAIEmulator, Reply, tool_call
from tests.support import RecordingAdapter, message


def agent(llm: OpenAIEmulator, tools: list[Any], **options: Any) -> dict[str, Any]:
    return {
        "model": "openai/gpt-emulated",
        "api_base": llm.base_url,
        "api_key": "sk-loopback",
        "instructions": "Be brief.",
        "tools": tools,
        **options,
    }


def make_app(llm: OpenAIEmulator, tools: list[Any], *, bot: dict[str, Any] | None = None, **options: Any) -> tuple[App, RecordingAdapter]:
    app = App.from_config(
        {"bot": {"unknown_user_policy": "allow", **(bot or {})}, "agents": {"remote": agent(llm, tools, **options)}}
    )
    adapter = RecordingAdapter()
    adapter.capabilities = adapter.capabilities.__class__(max_message_length=2000, typing=True)
    app.add_adapter(adapter)
    return app, adapter


WEATHER = {"python": "tests.tooldemo:weather"}


async def test_a_python_tool_is_described_called_and_answered(llm):
    app, adapter = make_app(llm, [WEATHER, {"python": "tests.tooldemo:whoami"}])
    llm.queue_tool_calls(tool_call("weather", {"city": "Lisbon"}))
    llm.queue_text("It is 21°C in Lisbon.")
    question = message("weather in Lisbon?", message_id="m-42")
    outcome = await app.handle(question)

    assert outcome.status == "replied"
    assert adapter.texts() == ["It is 21°C in Lisbon."]
    assert llm.tools_offered(0) == ["weather", "whoami"]
    declared = llm.requests[0]["tools"][0]["function"]
    assert declared["description"] == "Current weather for a city."
    assert declared["parameters"]["required"] == ["city"]
    assert declared["parameters"]["properties"]["city"] == {"type": "string", "description": 'The city\'s name, e.g. "Lisbon".'}
    assert declared["parameters"]["properties"]["unit"]["enum"] == ["C", "F"]
    assert "context" not in llm.requests[1]["tools"][1]["function"]["parameters"]["properties"]
    (call,) = llm.issued_calls
    assert llm.tool_output(call.id) == {"city": "Lisbon", "temperature": 21, "unit": "C"}
    # The model is told which message it answers, so it could react to it.
    assert "has id m-42" in llm.messages(0)[0]["content"]
    llm.assert_tool_protocol()


async def test_calls_of_one_round_run_concurrently(llm):
    tooldemo.NAPS.clear()
    app, adapter = make_app(llm, [{"python": "tests.tooldemo:nap"}])
    llm.queue_tool_calls(*(tool_call("nap", {"seconds": 0.4}) for _ in range(3)))
    llm.queue_text("Rested.")
    await load_litellm()  # its import takes seconds the first time: not what is timed here
    started = time.monotonic()
    await app.handle(message("take three naps"))
    elapsed = time.monotonic() - started

    assert len(tooldemo.NAPS) == 3
    assert max(start for start, _ in tooldemo.NAPS) < min(end for _, end in tooldemo.NAPS), "the naps overlapped"
    assert elapsed < 1.0, f"three 0.4 s calls took {elapsed:.2f}s: they ran one after another"
    assert [m["role"] for m in llm.messages(1)[-4:]] == ["assistant", "tool", "tool", "tool"]
    llm.assert_tool_protocol()


async def test_failing_slow_unknown_and_misused_tools_answer_errors_and_the_turn_goes_on(llm, caplog):
    caplog.set_level(logging.INFO)
    tools = [WEATHER, {"python": "tests.tooldemo:explode"}, {"python": "tests.tooldemo:slow"}]
    app, adapter = make_app(llm, tools)
    llm.queue_tool_calls(
        tool_call("explode", {"secret": "hunter2-password"}),
        tool_call("slow_lookup", {"seconds": 5}),
        tool_call("teleport", {"to": "Mars"}),
        tool_call("weather", {"city": "Oslo", "unit": "K"}),
        tool_call("weather", "{not json"),
    )
    llm.queue_text("Some tools failed, sorry.")
    started = time.monotonic()
    outcome = await app.handle(message("try everything"))

    assert outcome.status == "replied" and adapter.texts() == ["Some tools failed, sorry."]
    assert time.monotonic() - started < 3, "the slow tool was cut off at its timeout"
    explode, slow, unknown, misused, garbled = (llm.tool_output(c.id) for c in llm.issued_calls)
    assert explode == {"error": "explode failed: RuntimeError: the vault is closed"}
    assert slow == {"error": "slow_lookup timed out after 0.2s"}
    assert unknown["error"].startswith("there is no tool named 'teleport'; tools: explode, slow_lookup, weather")
    assert misused["error"].startswith("invalid arguments for weather: unit:")
    assert garbled["error"].startswith("the arguments are not valid JSON")
    llm.assert_tool_protocol()
    assert "tool explode raised RuntimeError" in caplog.text
    assert "tool slow_lookup timed out" in caplog.text
    assert "hunter2" not in caplog.text, "tool arguments never reach the log"


async def test_a_lone_surrogate_in_the_arguments_is_replaced_not_a_crash(llm, caplog):
    app, adapter = make_app(llm, ["send_message"])
    llm.queue_tool_calls(tool_call("send_message", '{"target": "origin", "text": "half an emoji: \\ud83d!"}'))
    llm.queue_text("ok")
    assert (await app.handle(message("go"))).status == "replied"
    assert llm.tool_output(llm.issued_calls[0].id)["status"] == "ok"
    assert adapter.texts() == ["half an emoji: \ufffd!", "ok"]
    assert " raised " not in caplog.text


async def test_arguments_nested_too_deep_to_read_are_an_error(llm):
    from botweave.tooling import ToolCall, ToolContext, run_call

    app, _ = make_app(llm, [WEATHER])
    deep = ToolCall("c1", "weather", "[" * 5000 + "]" * 5000)
    text = await run_call(deep, app.agents["remote"].tools, ToolContext("remote"))
    assert json.loads(text) == {"error": "the arguments are nested too deep"}


async def test_streaming_streams_the_final_answer_after_the_tool_rounds(llm):
    app, adapter = make_app(llm, [WEATHER], bot={"streaming": True, "stream_edit_interval_ms": 0})
    llm.queue(
        Reply(tool_calls=[tool_call("weather", {"city": "Porto"})]),
        Reply(tool_calls=[tool_call("weather", {"city": "Faro", "unit": "F"})]),
        Reply(text="Porto is 21°C and Faro is 70°F today.", chunks=6),
    )
    outcome = await app.handle(message("Porto and Faro?"))

    assert outcome.status == "replied"
    assert all(body["stream"] is True for body in llm.requests) and len(llm.requests) == 3
    assert len(adapter.sent) == 1, "one streamed message, begun once the answer's words came"
    assert len(adapter.edits) >= 2
    assert adapter.edits[-1][1] == "Porto is 21°C and Faro is 70°F today."
    faro = llm.issued_calls[1]
    assert llm.tool_output(faro.id) == {"city": "Faro", "temperature": 70, "unit": "F"}
    llm.assert_tool_protocol()


async def test_rounds_are_capped_and_the_last_request_forbids_calls(llm):
    app, adapter = make_app(llm, [WEATHER], max_tool_rounds=2)

    def model(body: dict[str, Any]) -> Any:
        if body.get("tool_choice") == "none":
            return "Enough weather."
        return tool_call("weather", {"city": "Lima"})

    llm.on_request = model
    await app.handle(message("weather forever"))
    assert len(llm.requests) == 3
    assert "tool_choice" not in llm.requests[1] and llm.requests[2]["tool_choice"] == "none"
    assert adapter.texts() == ["Enough weather."]
    llm.assert_tool_protocol()


async def test_later_turns_see_the_calls_and_results_and_the_footer_names_tools_only(llm):
    app, adapter = make_app(llm, [WEATHER], bot={"footer": True})
    llm.queue_tool_calls(tool_call("weather", {"city": "Secret-Town"}))
    llm.queue_text("Mild.")
    llm.queue_text("You asked about Secret-Town.")
    await app.handle(message("weather?"))
    await app.handle(message("what did I ask?"))

    first_answer = adapter.texts()[0]
    assert first_answer.startswith("Mild.\n\n— openai/gpt-emulated · ") and first_answer.endswith(" · tools: weather")
    assert "Secret-Town" not in first_answer, "the footer never shows tool arguments"
    roles = [m["role"] for m in llm.messages(2)]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert llm.messages(2)[2]["tool_calls"][0]["id"] == llm.issued_calls[0].id
    llm.assert_tool_protocol()


async def test_trimming_keeps_whole_turns(llm):
    app, adapter = make_app(llm, [WEATHER], max_history=2)
    for city in ("A", "B", "C"):
        llm.queue_tool_calls(tool_call("weather", {"city": city}), tool_call("weather", {"city": city + city}))
        llm.queue_text(f"Done {city}.")
        await app.handle(message(f"weather in {city}"))
    kept = await app.history.load("test:dm:u1", 2)
    assert [m["role"] for m in kept] == ["user", "assistant", "tool", "tool", "assistant"] * 2
    assert kept[0]["content"] == "weather in B"
    llm.queue_text("ok")
    await app.handle(message("and now?"))
    llm.assert_tool_protocol()


async def test_history_written_before_turns_were_whole_is_repaired_on_load():
    from botweave.store import MemoryStore

    store = MemoryStore()
    history = History(store)
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    orphan_result = {"role": "tool", "tool_call_id": "c0", "content": "{}"}
    await history.append("conv", 10, orphan_result, {"role": "user", "content": "hi"}, call)
    await history.append("conv", 10, {"role": "tool", "tool_call_id": "c1", "content": "{}"}, {"role": "assistant", "content": "x"})
    assert await history.load("conv", 10) == [
        {"role": "user", "content": "hi"}, call, {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        {"role": "assistant", "content": "x"},
    ]
    await history.reset("conv")
    await history.append("conv", 10, call, {"role": "assistant", "content": "answer without the result"})
    assert await history.load("conv", 10) == [{"role": "assistant", "content": "answer without the result"}]


def test_the_readme_python_tool_works_as_shown():
    import re
    import types
    from pathlib import Path

    from botweave.tools import function_tool

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(# mytools\.py.*?)```", readme, re.DOTALL).group(1)
    assert len(code.strip().splitlines()) <= 10
    module = types.ModuleType("mytools")
    exec(compile(code, "mytools.py", "exec"), module.__dict__)
    made = function_tool(module.weather)
    assert made.description == "Current weather for a city."
    assert made.parameters["properties"]["city"]["description"] == 'The city\'s name, e.g. "Lisbon".'
    assert made.parameters["required"] == ["city"]


def test_a_python_tool_that_cannot_be_found_is_named_at_load_time(llm):
    from botweave import ConfigError

    for reference, problem in (
        ("tests.nowhere:weather", "agents.remote.tools.0.python: cannot import module 'tests.nowhere'"),
        ("tests.tooldemo:sunshine", "agents.remote.tools.0.python: module 'tests.tooldemo' has no function 'sunshine'"),
    ):
        with pytest.raises(ConfigError) as caught:
            make_app(llm, [{"python": reference}])
        assert problem in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        make_app(llm, ["teleport"])
    assert "agents.remote.tools.0: unknown built-in tool 'teleport'; built-ins: send_message, react" in str(caught.value)


def test_a_module_star_offers_every_marked_function(llm):
    app, _ = make_app(llm, [{"python": "tests.tooldemo:*"}])
    assert sorted(app.agents["remote"].tools) == ["book", "explode", "nap", "slow_lookup", "weather", "whoami"]
    assert app.agents["remote"].tools["slow_lookup"].timeout_seconds == 0.2
