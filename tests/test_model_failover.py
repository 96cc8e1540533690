"""Models that keep answering: fallbacks, cool-downs shared in the store, keys used in turn,
everything through the whole bot against the loopback OpenAI emulator, which fails per model
and per key and counts every request it gets.

What a person and an operator would notice is checked: which model answered (the footer, the
turn's log line), how many requests each model and key got (none to a resting one), that a
streamed answer is rewritten in place, that a tool runs once, that a plain 400 fails the turn.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from botweave import App
from botweave.metrics import REGISTRY

from tests import failover_tools
from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.support import RecordingAdapter, StartApp, message

KEY_A, KEY_B, KEY_C = "sk-key-a-0001", "sk-key-b-0002", "sk-key-c-0003"
ANN = TelegramEmulator.user(1, "Ann", "ann")


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_section(request: pytest.FixtureRequest, tmp_path: Any) -> dict[str, Any]:
    """Where cool-downs and counters live: each backend in turn."""
    if request.param == "memory":
        return {"url": "memory://"}
    if request.param == "sqlite":
        return {"url": f"sqlite:///{tmp_path / 'state.db'}"}
    return {"url": request.getfixturevalue("redis_url"), "prefix": f"test:{uuid.uuid4().hex}:"}


#: Notifications everyone opted in to, the operator's among them (only the owner gets those).
OWNER_PUSH = {"defaults": {"categories": ["approval_requested", "model_failed", "budget"]}}


def settings(llm: OpenAIEmulator, *, store: dict[str, Any] | None = None, client: str = "direct",
             bot: dict[str, Any] | None = None, models: dict[str, Any] | None = None, **agent: Any) -> dict[str, Any]:
    section = {"model": "openai/primary", "api_base": llm.base_url, "api_key": KEY_A,
               "fallbacks": [{"model": "openai/backup", "api_base": llm.base_url, "api_key": KEY_C}], **agent}
    if "api_keys" in agent:
        section.pop("api_key")
    return {
        "bot": {"unknown_user_policy": "allow", "footer": True, **(bot or {})},
        "agents": {"assistant": section},
        "models": {"client": client, **(models or {})},
        "store": store or {"url": "memory://"},
        "push": OWNER_PUSH,
    }


def sample(name: str, labels: dict[str, str]) -> float:
    """A series' value as /metrics would show it (0 before its first count)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


@contextlib.asynccontextmanager
async def running(*apps: App) -> AsyncIterator[None]:
    """The apps started (their store connected, their model processes up) and then stopped."""
    for app in apps:
        await app.start(platforms=[])
    try:
        yield
    finally:
        for app in apps:
            await app.stop()


def bot(config: dict[str, Any]) -> tuple[App, RecordingAdapter]:
    app = App.from_config(config)
    adapter = RecordingAdapter()
    adapter.capabilities = adapter.capabilities.__class__(max_message_length=2000, can_edit=True)
    app.add_adapter(adapter)
    return app, adapter


@pytest.fixture
def turn_lines() -> Iterator[list[logging.LogRecord]]:
    """The turns' log lines (they carry the model that answered)."""
    records: list[logging.LogRecord] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if hasattr(record, "outcome"):
                records.append(record)

    logger = logging.getLogger("botweave.runtime.turns")
    handler, level = Lines(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.parametrize("client", ["direct", "litellm"])
async def test_a_rate_limited_model_hands_the_turn_to_its_fallback_and_rests(llm, client, store_section, turn_lines):
    llm.fail("primary", "429", retry_after=30)
    app, adapter = bot(settings(llm, store=store_section, client=client))
    failovers = {"agent": "assistant", "from_model": "openai/primary", "to_model": "openai/backup",
                 "reason": "rate_limited"}
    before = (sample("botweave_model_failovers_total", failovers),
              sample("botweave_model_cooldowns_total", {"model": "openai/primary"}))
    async with running(app):
        first = await app.handle(message("hello"))
        second = await app.handle(message("again"))
    after = (sample("botweave_model_failovers_total", failovers),
             sample("botweave_model_cooldowns_total", {"model": "openai/primary"}))
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1), "one failover, one cool-down: then skipped"
    assert first.status == second.status == "replied"
    assert [text.split("\n")[0] for text in adapter.texts()] == [llm.reply, llm.reply]
    assert all("openai/backup" in text for text in adapter.texts()), "the footer names the model that answered"
    assert llm.count("primary") == 1, "no request to a model inside its Retry-After"
    assert llm.count("backup") == 2
    assert [line.model for line in turn_lines] == ["openai/backup", "openai/backup"]


async def test_a_plain_bad_request_is_not_handed_on(llm):
    llm.fail("primary", "400")
    app, adapter = bot(settings(llm))
    async with running(app):
        outcome = await app.handle(message("hello"))
    assert outcome.status == "agent_error" and "BadRequestError" in outcome.detail and "temperature" in outcome.detail
    assert adapter.texts()[0].startswith("Sorry")
    assert (llm.count("primary"), llm.count("backup")) == (1, 0)


async def test_a_context_window_error_tries_only_models_with_a_larger_window(llm):
    llm.fail("gpt-3.5-turbo", "context")
    app, adapter = bot(settings(
        llm, model="openai/gpt-3.5-turbo",
        fallbacks=["openai/babbage-002", "openai/gpt-4", "openai/gpt-4o"],  # 16k, 8k, 128k tokens
    ))
    async with running(app):
        await app.handle(message("a very long question"))
    assert adapter.texts()[0].startswith(llm.reply) and "openai/gpt-4o" in adapter.texts()[0]
    assert (llm.count("babbage-002"), llm.count("gpt-4"), llm.count("gpt-4o")) == (0, 0, 1)
    assert llm.count("gpt-4o", KEY_A) == 1, "a fallback of the same provider uses the agent's server and key"


@pytest.mark.parametrize("kind", ["503", "cut"])
async def test_overloaded_and_broken_streams_fail_over_too(llm, kind):
    llm.fail("primary", kind)
    app, adapter = bot(settings(llm, bot={"streaming": True, "stream_edit_interval_ms": 0}))
    async with running(app):
        outcome = await app.handle(message("hello"))
    assert outcome.status == "replied"
    assert len(adapter.sent) == 1, "one message: the fallback's answer was written into it"
    final = adapter.edits[-1][1] if adapter.edits else adapter.sent[0].text
    assert final.startswith(llm.reply.strip()) and "These words never finish" not in final
    assert "openai/backup" in final


async def test_keys_are_used_in_turn_and_a_rate_limited_key_is_skipped(llm, store_section):
    app, adapter = bot(settings(llm, store=store_section, api_keys=[KEY_A, KEY_B], fallbacks=[]))
    async with running(app):
        for number in range(4):
            await app.handle(message(f"question {number}"))
        assert (llm.count("primary", KEY_A), llm.count("primary", KEY_B)) == (2, 2), "round robin"
        llm.fail("primary", "429", key=KEY_A, retry_after=60)
        for number in range(4):
            await app.handle(message(f"more {number}"))
    assert llm.count("primary", KEY_A) == 3, "one 429, then skipped while it rests"
    assert llm.count("primary", KEY_B) == 6
    assert len(adapter.texts()) == 8 and all(text.startswith(llm.reply) for text in adapter.texts())


async def test_a_refused_key_moves_on_and_tells_the_owner_once(llm):
    llm.fail("primary", "401", key=KEY_A)
    app, adapter = bot(settings(llm, api_keys=[KEY_A, KEY_B], fallbacks=[], bot={"owner_user_id": "boss"}))
    async with running(app):
        for number in range(4):
            await app.handle(message(f"question {number}", user_id="u1", chat_id="c1"))
        await wait_until(lambda: [s for s in adapter.sent if s.chat_id == "boss"], timeout=5, what="the owner's alert")
    answers = [s.text for s in adapter.sent if s.chat_id == "c1"]
    assert len(answers) == 4 and all(text.startswith(llm.reply) for text in answers)
    alerts = [s.text for s in adapter.sent if s.chat_id == "boss"]
    assert alerts == ["Activity in agent assistant: openai/primary refused its key"]
    assert llm.count("primary", KEY_A) == 2 and llm.count("primary", KEY_B) == 4


async def test_a_tool_that_ran_is_not_run_again_after_a_failover(llm):
    failover_tools.BOOKINGS.clear()
    llm.queue_tool_calls(tool_call("book_table", {"name": "Ann"}))
    llm.fail("primary", "503", after=1)  # the tool round answers; the next call fails
    app, adapter = bot(settings(llm, tools=[{"python": "tests.failover_tools:book_table"}]))
    async with running(app):
        outcome = await app.handle(message("book me a table"))
    assert outcome.status == "replied" and adapter.texts()[0].startswith(llm.reply)
    assert failover_tools.BOOKINGS == ["Ann"], "the tool ran once"
    assert (llm.count("primary"), llm.count("backup")) == (2, 1)
    (call,) = llm.issued_calls
    assert llm.tool_output(call.id) == "booked for Ann", "the fallback continued from the tool's result"
    llm.assert_tool_protocol()


async def test_when_every_model_rests_the_person_is_told_when_to_come_back(llm, store_section):
    llm.fail("primary", "429", retry_after=600)
    llm.fail("backup", "503", retry_after=900)
    app, adapter = bot(settings(llm, store=store_section))
    async with running(app):
        first = await app.handle(message("hello"))
        second = await app.handle(message("hello again"))
    assert first.status == second.status == "agent_error"
    assert len(adapter.texts()) == 2
    for text in adapter.texts():
        # Retry-After asked for 10 and 15 minutes: capped at models.max_cooldown_seconds (300)
        assert "try again after" in text and "in about 5 min" in text and "moment" not in text
    assert (llm.count("primary"), llm.count("backup")) == (1, 1), "no request while they rest"


async def test_a_short_cooldown_is_waited_out(llm):
    llm.fail("primary", "429", retry_after=1, times=1)
    app, adapter = bot(settings(llm, fallbacks=[]))
    async with running(app):
        outcome = await app.handle(message("hello"))
    assert outcome.status == "replied" and adapter.texts()[0].startswith(llm.reply)
    (first, second) = llm.exchanges
    assert second.arrived - first.arrived >= 0.95


async def test_a_cooldown_one_worker_saw_is_skipped_by_the_other(llm, redis_url):
    store = {"url": redis_url, "prefix": f"test:{uuid.uuid4().hex}:"}
    llm.fail("primary", "429", retry_after=60)
    one, said_one = bot(settings(llm, store=store))
    two, said_two = bot(settings(llm, store=store))
    async with running(one, two):
        await one.handle(message("to the first worker"))
        await two.handle(message("to the second worker"))
    assert said_one.texts()[0].startswith(llm.reply) and said_two.texts()[0].startswith(llm.reply)
    assert llm.count("primary") == 1, "the second worker never asked the resting model"
    assert llm.count("backup") == 2


async def test_calls_made_in_a_model_process_fail_over_the_same_way(llm):
    llm.fail("primary", "429", retry_after=30)
    app, adapter = bot(settings(llm, models={"processes": 1}))
    async with running(app):
        await app.handle(message("hello"))
        await app.handle(message("again"))
    assert all(text.startswith(llm.reply) and "openai/backup" in text for text in adapter.texts())
    assert (llm.count("primary"), llm.count("backup")) == (1, 2)


async def test_a_streamed_reply_on_telegram_is_rewritten_in_place(
    llm: OpenAIEmulator, telegram_emulator: TelegramEmulator, start_app: StartApp
) -> None:
    llm.fail("primary", "cut")
    llm.reply = "The backup model answers in full."
    emu = telegram_emulator
    await start_app({
        "agents": {"assistant": {
            "model": "openai/primary", "api_base": llm.base_url, "api_key": KEY_A,
            "fallbacks": [{"model": "openai/backup", "api_base": llm.base_url, "api_key": KEY_C}],
        }},
        "platforms": {"telegram": {"unknown_user_policy": "allow", "streaming": True, "stream_edit_interval_ms": 0,
                                   **adapter_config(emu, poll_timeout=1)}},
    })
    emu.push_message(emu.private_chat(ANN), ANN, "Tell me something")
    await wait_until(lambda: llm.count("backup") == 1 and emu.sent(1)
                     and emu.current(1, emu.sent(1)[0]["message_id"])["text"] == llm.reply, timeout=20,
                     what="the backup's answer in the streamed message")
    (sent,) = emu.sent(1)
    assert emu.current(1, sent["message_id"])["text"] == llm.reply
    assert len(emu.sent(1)) == 1, "no second message, no apology"


async def test_config_errors_name_the_field_and_the_fix(tmp_path):
    from botweave.config import ConfigError
    from botweave.runtime.config import load_config

    bad = {
        "agents": {
            "a": {"model": "openai/x", "fallbacks": ["gpt 4o", {"api_base": "http://x"}]},
            "b": {"model": "openai/x", "api_key": "k", "api_keys": ["k1", "k2"]},
        },
        "budgets": {"per_user": {"cost_per_day": -1}, "per_agent": {"nobody": {"tokens_per_day": 5}}},
    }
    with pytest.raises(ConfigError) as failed:
        load_config(bad)
    text = str(failed.value)
    assert "agents.a.fallbacks.0" in text and "not a model id" in text
    assert "agents.a.fallbacks.1" in text and "needs `model:`" in text
    assert "agents.b.api_keys" in text and "keep one" in text
    assert "budgets.per_user.cost_per_day" in text and "negative" in text
    with pytest.raises(ConfigError, match=r"budgets\.per_agent\.nobody: unknown agent 'nobody'; defined agents: a"):
        load_config({"agents": {"a": {"model": "openai/x"}}, "budgets": {"per_agent": {"nobody": {"tokens_per_day": 5}}}})



async def test_the_gateways_tool_and_final_events_carry_the_model_that_answered(llm):
    import json

    from botweave.conversations import conversation_key

    failover_tools.BOOKINGS.clear()
    llm.queue_tool_calls(tool_call("book_table", {"name": "Ann"}))
    llm.fail("primary", "503", after=1)
    config = settings(llm, tools=[{"python": "tests.failover_tools:book_table"}])
    config["gateway"] = {"listen": "127.0.0.1:0"}
    app, adapter = bot(config)
    asked = message("book me a table")
    async with running(app):
        await app.handle(asked)
        assert app.events is not None
        logged = await app.events.read(conversation_key(asked))
    events = [json.loads(value) for _, value in logged.entries]
    tools = [e["data"] for e in events if e["event"] == "tool"]
    (final,) = [e["data"] for e in events if e["event"] == "final"]
    assert tools and all(tool["model"] == "openai/primary" for tool in tools), "the tool round was the primary's"
    assert final["model"] == "openai/backup", "the answer was the fallback's"


async def test_a_restarted_bot_on_its_sqlite_file_still_lets_a_resting_model_rest(llm, tmp_path):
    store = {"url": f"sqlite:///{tmp_path / 'state.db'}"}
    llm.fail("primary", "429", retry_after=120)
    first, _ = bot(settings(llm, store=store))
    async with running(first):
        await first.handle(message("before the restart"))
    again, said = bot(settings(llm, store=store))
    async with running(again):
        await again.handle(message("after the restart"))
    assert said.texts()[0].startswith(llm.reply)
    assert (llm.count("primary"), llm.count("backup")) == (1, 2)


async def test_words_of_a_model_that_failed_mid_stream_do_not_stay_when_no_model_answers(llm):
    llm.fail("primary", "cut")
    llm.fail("backup", "400")
    app, adapter = bot(settings(llm, bot={"streaming": True, "stream_edit_interval_ms": 0}))
    async with running(app):
        outcome = await app.handle(message("hello"))
    assert outcome.status == "agent_error"
    streamed = adapter.sent[0]
    assert streamed.text.startswith("These") and streamed.message_id in adapter.deleted, "taken back"
    assert adapter.texts()[-1].startswith("Sorry")
