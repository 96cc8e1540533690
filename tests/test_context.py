"""Conversations that never outgrow the model: the folding decision as a table, the estimate,
and whole chats against the loopback model (every request it records is measured)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botweave import App
from botweave.context import (
    SUMMARY_INSTRUCTIONS,
    SUMMARY_PREFIX,
    SUMMARY_TOKENS,
    ContextPlan,
    TokenCounter,
    estimate_message,
    estimate_text,
    plan_context,
)
from botweave.store import MemoryStore

from tests.emulators.openai import OpenAIEmulator, Reply, text_of
from tests.support import RecordingAdapter, message

T = [(100, 2)] * 10  # ten turns of 100 tokens, two messages each


@pytest.mark.parametrize(
    ("items", "fixed", "window", "keep_recent", "compaction", "plan"),
    [
        # fits: nothing happens
        (T, 100, 1100, 4, "summarize", ContextPlan()),
        (T, 100, 10_000, 4, "trim", ContextPlan()),
        # over: everything before the last 4 messages (2 turns) is folded, not just enough
        (T, 101, 1100, 4, "summarize", ContextPlan(fold=8, summarize=True)),
        (T, 101, 1100, 4, "trim", ContextPlan(fold=8)),
        # keep_recent counts messages: 5 messages need the last 3 turns
        (T, 200, 1100, 5, "trim", ContextPlan(fold=7)),
        # the protected turns plus the summary's room do not fit: fold into them too
        (T, 100, 200 + SUMMARY_TOKENS + 100, 12, "summarize", ContextPlan(fold=8, summarize=True)),
        # nothing but the newest turn fits with trim
        (T, 900, 1000, 12, "trim", ContextPlan(fold=9)),
        # even with no history the new message is over the window
        (T, 5000, 1000, 4, "trim", ContextPlan(fold=10, overflow=True)),
        ([], 5000, 1000, 4, "summarize", ContextPlan(overflow=True)),
        # keep_recent 0 folds everything
        (T, 101, 1100, 0, "trim", ContextPlan(fold=10)),
        # a turn with tool calls is one item: it is folded or kept whole
        ([(300, 4), (100, 2), (100, 2)], 100, 550, 2, "trim", ContextPlan(fold=2)),
    ],
)
def test_what_is_folded(items, fixed, window, keep_recent, compaction, plan):
    assert plan_context(items, fixed, window, keep_recent, compaction) == plan


def test_a_growing_chat_is_compacted_rarely_not_every_turn():
    """A chat of equal turns against a window of 40 turns: folding everything older than the
    protected messages means the next fold is due only when the window has filled again."""
    keep_recent, window, turn = 12, 4000, (100, 2)
    items: list[tuple[int, int]] = []
    compactions = []
    for number in range(200):
        plan = plan_context(items, 50, window, keep_recent, "summarize")
        if plan.fold:
            compactions.append(number)
            items = [(SUMMARY_TOKENS, 1), *items[plan.fold:]]
        items.append(turn)
    gaps = [b - a for a, b in zip(compactions, compactions[1:])]
    assert compactions and min(gaps) >= keep_recent


def test_the_estimate_counts_ascii_by_three_and_other_characters_one_each():
    assert estimate_text("a" * 42) == 14
    assert estimate_text("日本語") == 3
    assert estimate_text("ab日本") == 3
    counter = TokenCounter("offline/echo")
    assert counter.messages([{"role": "user", "content": "a" * 42}]) == 18
    assert counter.messages([{"role": "user", "content": [{"type": "text", "text": "abcd"}, {"type": "image_url"}]}]) == 1006


def test_a_model_litellm_knows_counts_the_larger_of_its_tokenizer_and_the_estimate():
    from botweave.model_calls import litellm_module

    litellm = litellm_module()
    tiktoken = {"type": "openai_tokenizer", "tokenizer": litellm.utils.encoding}
    counter = TokenCounter("openai/gpt-4o-mini")
    dense = {"role": "user", "content": " ".join(f"{n:x}{n * 7919:x}" for n in range(400))}
    prose = {"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 40}
    for sent in (dense, prose):
        exact = litellm.token_counter(model="openai/gpt-4o-mini", messages=[sent], custom_tokenizer=tiktoken)
        assert counter.message(sent) == max(exact, estimate_message(sent))
    assert counter.message(dense) > estimate_message(dense)  # ids tokenize densely: the count wins


COUNT_IN_A_FRESH_PROCESS = """
import sys, time
from botweave.model_calls import litellm_module
from botweave.context import TokenCounter
litellm_module()
started = time.monotonic()
for model in sys.argv[1:]:
    TokenCounter(model).message({"role": "user", "content": "How many tokens is this? " * 50})
print(time.monotonic() - started)
"""


def test_counting_tokens_never_fetches_a_tokenizer_from_the_network():
    """Left to choose, litellm downloads Llama's, Replicate's (and on older litellm any prefixed
    model's) tokenizer from Hugging Face, with retries, inside the turn: the count must not."""
    import http.server
    import os
    import subprocess
    import sys
    import threading

    asked: list[str] = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_error(404)

        do_HEAD = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{hub.server_port}", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("HF_HUB_OFFLINE", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", COUNT_IN_A_FRESH_PROCESS, "openai/gpt-4o", "replicate/meta/llama-2-70b-chat"],
            env=env, capture_output=True, text=True, timeout=120,
        )
    finally:
        hub.shutdown()
    assert done.returncode == 0, done.stderr
    assert asked == []
    assert float(done.stdout.strip().splitlines()[-1]) < 2.0


WINDOW = 600


def chat_config(llm: OpenAIEmulator, compaction: str = "summarize", **context: Any) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {
            "assistant": {
                "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback",
                "max_history": 200,
                "context": {"max_tokens": WINDOW, "keep_recent": 6, "compaction": compaction, **context},
            }
        },
    }


def summary_requests(llm: OpenAIEmulator) -> list[dict[str, Any]]:
    return [r for r in llm.requests if r["messages"][0]["content"] == SUMMARY_INSTRUCTIONS]


def answer(body: dict[str, Any]) -> str:
    if body["messages"][0]["content"] == SUMMARY_INSTRUCTIONS:
        return "They counted sheep, one message at a time."
    return "Noted: " + text_of(body["messages"][-1])[:40]


async def forty_messages(llm: OpenAIEmulator, compaction: str, **context: Any) -> tuple[App, RecordingAdapter]:
    llm.on_request = answer
    app = App.from_config(chat_config(llm, compaction, **context), store=MemoryStore())
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    for number in range(40):
        await app.handle(message(f"message {number}: " + "sheep " * 15))
    return app, adapter


@pytest.mark.parametrize("compaction", ["summarize", "trim"])
async def test_a_forty_message_chat_never_sends_more_than_the_window_and_keeps_the_newest_verbatim(llm, compaction):
    app, adapter = await forty_messages(llm, compaction)
    counter = TokenCounter("openai/gpt-emulated")
    turns = [r for r in llm.requests if r["messages"][0]["content"] != SUMMARY_INSTRUCTIONS]
    assert len(turns) == 40 and len(adapter.texts()) == 40
    for request in turns:
        assert counter.messages(request["messages"]) <= WINDOW
    last = turns[-1]["messages"]
    users = [text_of(m) for m in last if m["role"] == "user"]
    assert users[-3:] == [f"message {n}: " + "sheep " * 15 for n in (37, 38, 39)]  # word for word
    summaries = summary_requests(llm)
    if compaction == "trim":
        assert summaries == [] and not any(SUMMARY_PREFIX in json.dumps(r) for r in turns)
    else:
        assert 1 <= len(summaries) <= 40 // 6  # written once per fold, not every turn
        assert last[1]["role"] == "system" and last[1]["content"].startswith(SUMMARY_PREFIX)
        stored = await app.history.load("test:dm:u1", 200)
        assert stored[0]["content"] == SUMMARY_PREFIX + "They counted sheep, one message at a time."
        await app.handle(message("/status"))
        assert "(summarised)" in "\n".join(adapter.texts()[-2:])
    await app.stop()


async def test_a_failing_summary_call_still_answers_trimmed_and_claims_no_summary(llm):
    def failing(body: dict[str, Any]) -> Any:
        if body["messages"][0]["content"] == SUMMARY_INSTRUCTIONS:
            return Reply(status=500, error_message="summaries are down")
        return "fine"

    llm.on_request = failing
    app = App.from_config(chat_config(llm), store=MemoryStore())
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    for number in range(20):
        await app.handle(message(f"message {number}: " + "sheep " * 15))
    turns = [r for r in llm.requests if r["messages"][0]["content"] != SUMMARY_INSTRUCTIONS]
    assert summary_requests(llm), "a summary was asked for"
    assert adapter.texts() == ["fine"] * 20  # every turn answered
    counter = TokenCounter("openai/gpt-emulated")
    assert all(counter.messages(r["messages"]) <= WINDOW for r in turns)
    assert not any(SUMMARY_PREFIX in json.dumps(r) for r in turns)
    assert len(await app.history.load("test:dm:u1", 200)) == 40  # nothing was lost from history
    await app.stop()


async def test_a_message_longer_than_the_window_is_cut_to_fit(llm):
    llm.on_request = answer
    app = App.from_config(chat_config(llm, "trim"), store=MemoryStore())
    app.add_adapter(RecordingAdapter())
    await app.handle(message("x" * 20_000))
    sent = llm.requests[-1]["messages"]
    assert TokenCounter("openai/gpt-emulated").messages(sent) <= WINDOW
    assert "longer than the model's window" in text_of(sent[-1])
    await app.stop()


def long_page(number: int) -> str:
    """A page of a long document (the tests' stand-in for a tool with a big result)."""
    return f"page {number}: " + "lorem ipsum " * 3000


async def test_tool_rounds_are_cut_to_the_window_and_end_when_it_is_full(llm):
    from tests.emulators.openai import tool_call

    config = chat_config(llm, "trim")
    config["agents"]["assistant"]["tools"] = [{"python": "tests.test_context:long_page"}]
    app = App.from_config(config, store=MemoryStore())
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    def reader(body: dict[str, Any]) -> Any:
        if body.get("tool_choice") == "none":  # as OpenAI does: no calls when told so
            return "Read what fitted."
        return tool_call("long_page", {"number": sum(m["role"] == "tool" for m in body["messages"])})

    llm.on_request = reader
    await app.handle(message("read the whole document"))
    counter = TokenCounter("openai/gpt-emulated")
    sent = [r for r in llm.requests]
    assert all(counter.messages(r["messages"]) + estimate_text(json.dumps(r.get("tools", []))) <= WINDOW for r in sent)
    assert "the model's window is full" in json.dumps(sent[1]["messages"])  # the result was cut, not dropped
    assert sent[-1].get("tool_choice") == "none"  # out of room: the last request answers in words
    llm.assert_tool_protocol()
    assert adapter.texts() == ["Read what fitted."]
    await app.stop()
