"""Budgets and usage: the pure check as a table, and the whole bot against the OpenAI
emulator (which reports the token counts), on each store: usage counted from what the provider
reported (streamed too), a spent limit stopping model calls with one notice a day and one push
to the owner, `/usage`, `/usage all`, `usage.get`, the cost metric and `botweave check`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import aiohttp
import pytest
from botweave.budgets import Limit, Spent, Who, day_key, limit_notice, next_midnight, over_budget, usage_increments
from botweave.methods import Caller, MethodError, MethodRegistry
from botweave.runtime.usage import register_usage_method
from prometheus_client.parser import text_string_to_metric_families

from tests import failover_tools
from tests.emulators.openai import OpenAIEmulator, Reply, tool_call
from tests.support import message
from tests.test_model_failover import bot, running, settings, store_section  # noqa: F401  (the store fixture)

USAGE = {"prompt_tokens": 80, "completion_tokens": 40, "total_tokens": 120}
DAY = "2026-03-01"


def limits(**scopes: Limit) -> list:
    return [(scope, f"{scope}-1", limit) for scope, limit in scopes.items()]


@pytest.mark.parametrize(
    "what, configured, counts, expected",
    [
        ("no counters: room", limits(user=Limit(tokens_per_day=100)), {}, None),
        ("under the token limit", limits(user=Limit(tokens_per_day=100)), {day_key("user", "user-1", DAY, "tokens"): 99}, None),
        ("at the token limit", limits(user=Limit(tokens_per_day=100)), {day_key("user", "user-1", DAY, "tokens"): 100},
         Spent("user", "user-1", "100 tokens")),
        ("cost is counted in millionths", limits(user=Limit(cost_per_day=1.0)), {day_key("user", "user-1", DAY, "cost"): 999_999},
         None),
        ("cost at the limit", limits(user=Limit(cost_per_day=1.0)), {day_key("user", "user-1", DAY, "cost"): 1_000_000},
         Spent("user", "user-1", "1.00 USD")),
        ("the agent's limit first", limits(agent=Limit(tokens_per_day=5), user=Limit(tokens_per_day=5)),
         {day_key("agent", "agent-1", DAY, "tokens"): 9, day_key("user", "user-1", DAY, "tokens"): 9},
         Spent("agent", "agent-1", "5 tokens")),
        ("yesterday's counter does not count", limits(chat=Limit(tokens_per_day=5)),
         {day_key("chat", "chat-1", "2026-02-28", "tokens"): 9}, None),
        ("a zero limit stops everything", limits(chat=Limit(cost_per_day=0)), {}, Spent("chat", "chat-1", "0.00 USD")),
    ],
)
def test_which_limit_is_spent(what, configured, counts, expected):
    assert over_budget(configured, counts, DAY) == expected


def test_the_notice_names_the_limit_and_when_it_resets_in_the_budgets_zone():
    moment = datetime(2026, 3, 1, 22, 30, tzinfo=timezone.utc)
    assert limit_notice(Spent("user", "u", "1.00 USD"), next_midnight(moment, ZoneInfo("UTC"))) == (
        "Daily limit reached (1.00 USD). It resets at 00:00 UTC."
    )
    berlin = next_midnight(moment, ZoneInfo("Europe/Berlin"))  # 23:30 there: midnight is half an hour away
    assert berlin.astimezone(timezone.utc) == datetime(2026, 3, 1, 23, 0, tzinfo=timezone.utc)
    assert limit_notice(Spent("user", "u", "200,000 tokens"), berlin).endswith("It resets at 00:00 CET.")


def test_a_call_counts_for_the_agent_the_person_and_the_chat_and_the_persons_month():
    added = usage_increments(Who("a", "telegram:1", "telegram:9"), DAY, "2026-03", 120, 5000)
    assert added[day_key("user", "telegram:1", DAY, "tokens")] == (120, 2 * 86400)
    assert added[day_key("chat", "telegram:9", DAY, "cost")] == (5000, 2 * 86400)
    assert added["usage:user:telegram:1:m:2026-03:tokens"][0] == 120
    assert len(added) == 8


def budget_bot(llm: OpenAIEmulator, budgets: dict, store: dict | None = None, *, streaming: bool = False,
               ops: dict | None = None, **agent):
    """One agent on the emulator (no fallbacks), `boss` its owner, these budgets."""
    chat = {"owner_user_id": "boss", "footer": False, "streaming": streaming, "stream_edit_interval_ms": 0}
    config = settings(llm, store=store, bot=chat, **{"fallbacks": [], **agent})
    config["budgets"] = budgets
    if ops is not None:
        config["ops"] = ops
    return bot(config)


async def test_a_spent_daily_limit_stops_model_calls_with_one_notice_and_one_push(llm, store_section):
    llm.queue(Reply(text="First answer.", usage=USAGE))
    app, adapter = budget_bot(llm, {"per_user": {"tokens_per_day": 100}}, store_section)
    async with running(app):
        answered = await app.handle(message("one", user_id="ann"))
        refused = await app.handle(message("two", user_id="ann"))
        quiet = await app.handle(message("three", user_id="ann"))
        other = await app.handle(message("hi", user_id="bob", chat_id="c2"))
        usage = await app.handle(message("/usage", user_id="ann"))
    assert answered.status == "replied" and refused.status == quiet.status == "agent_error" and other.status == "replied"
    to_ann = [s.text for s in adapter.sent if s.chat_id == "c1"]
    assert to_ann[:2] == ["First answer.", "Daily limit reached (100 tokens). It resets at 00:00 UTC."]
    assert len([t for t in to_ann if t.startswith("Daily limit")]) == 1, "one notice a day"
    assert llm.count("primary") == 2, "no model call for Ann once her limit was spent; Bob's turn ran"
    alerts = [s.text for s in adapter.sent if s.chat_id == "boss"]
    assert alerts == ["Activity in agent assistant: a daily user limit reached"], "the lock screen names nobody"
    assert usage.status == "command"
    assert to_ann[-1].startswith("Today: 120 tokens") and "daily limit of 100 tokens" in to_ann[-1]


async def test_a_cost_limit_counts_the_agents_price_and_the_streamed_answers_tokens(llm):
    llm.queue(Reply(text="Streamed answer.", usage=USAGE))
    app, adapter = budget_bot(
        llm, {"per_chat": {"cost_per_day": 1.00}}, streaming=True,
        price={"input_per_mtok": 10_000, "output_per_mtok": 10_000},
    )
    async with running(app):
        await app.handle(message("stream please", chat_id="g1"))
        await app.handle(message("more", chat_id="g1"))
        usage = await app.models.usage_of("test:u1")
    assert llm.requests[0]["stream"] is True
    assert [s.text for s in adapter.sent if s.chat_id == "g1"][-1] == "Daily limit reached (1.00 USD). It resets at 00:00 UTC."
    assert usage.tokens_today == 120 and usage.cost_today == pytest.approx(1.20)
    assert llm.count("primary") == 1


async def test_litellm_public_prices_are_counted_and_exported(llm):
    llm.queue(Reply(text="Priced.", usage=USAGE))
    app, adapter = budget_bot(llm, {}, model="openai/gpt-4o", ops={"listen": "127.0.0.1:0"})
    async with running(app):
        before = await cost_metric(app, "openai/gpt-4o")
        await app.handle(message("hello"))
        after = await cost_metric(app, "openai/gpt-4o")
        usage = await app.models.usage_of("test:u1")
    expected = 80 * 2.5e-6 + 40 * 1e-5  # gpt-4o's price per token in litellm's model map
    assert usage.cost_today == pytest.approx(expected, abs=1e-6)
    assert after - before == pytest.approx(expected)


async def cost_metric(app, model: str) -> float:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{app.ops.port}/metrics") as response:
            text = await response.text()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "botweave_cost_usd_total" and sample.labels.get("model") == model
    )


async def test_a_turn_crossing_its_limit_finishes_its_call_but_starts_no_new_round(llm):
    failover_tools.BOOKINGS.clear()
    llm.queue(Reply(tool_calls=[tool_call("book_table", {"name": "Ann"})], usage=USAGE))
    app, adapter = budget_bot(
        llm, {"per_agent": {"assistant": {"tokens_per_day": 100}}},
        tools=[{"python": "tests.failover_tools:book_table"}],
    )
    async with running(app):
        outcome = await app.handle(message("book a table"))
    assert failover_tools.BOOKINGS == ["Ann"] and llm.count("primary") == 1
    assert outcome.status == "agent_error"
    assert [s.text for s in adapter.sent if s.chat_id == "c1"][-1].startswith("Daily limit reached (100 tokens)")


async def test_exempt_people_have_no_limit(llm):
    llm.queue(Reply(text="a", usage=USAGE), Reply(text="b", usage=USAGE))
    app, adapter = budget_bot(llm, {"per_user": {"tokens_per_day": 10}, "exempt_users": ["test:vip"]})
    async with running(app):
        await app.handle(message("one", user_id="vip"))
        await app.handle(message("two", user_id="vip"))
    assert adapter.texts() == ["a", "b"]


async def test_usage_all_is_for_the_owner_and_usage_get_for_oneself_unless_admin(llm):
    llm.queue(Reply(text="a", usage=USAGE), Reply(text="b", usage={**USAGE, "prompt_tokens": 300}))
    app, adapter = budget_bot(llm, {})
    async with running(app):
        await app.handle(message("one", user_id="ann", chat_id="ca"))
        await app.handle(message("two", user_id="bob", chat_id="cb"))
        await app.handle(message("/usage all", user_id="ann", chat_id="ca"))
        await app.handle(message("/usage all", user_id="boss", chat_id="cboss"))
        registry = MethodRegistry()
        register_usage_method(registry, app.models)
        ann = Caller("ann-web", frozenset({"read"}), (("web", "ann-web"), ("test", "ann")))
        own = await registry.call(ann, "usage.get", {})
        with pytest.raises(MethodError, match="admin"):
            await registry.call(ann, "usage.get", {"user": "test:bob"})
        admin = Caller("ops", frozenset({"admin"}))
        bobs = await registry.call(admin, "usage.get", {"user": "test:bob"})
    assert [s.text for s in adapter.sent if s.chat_id == "ca"][-1] == "Only the bot's owner can see everyone's usage."
    top = [s.text for s in adapter.sent if s.chat_id == "cboss"][-1].splitlines()
    assert top[1].startswith("1. test:bob: 340 tokens") and top[2].startswith("2. test:ann: 120 tokens")
    assert [entry["today"]["tokens"] for entry in own["users"]] == [0, 120]
    assert bobs["users"][0]["today"]["tokens"] == 340


def test_check_names_the_models_without_a_known_price(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text(textwrap.dedent("""
        agents:
          a:
            model: openai/my-local-model
            api_base: http://127.0.0.1:1/v1
            fallbacks: [openai/gpt-4o, {model: openai/other-local, price: {input_per_mtok: 1, output_per_mtok: 2}}]
        budgets:
          per_user: {cost_per_day: 1.00}
    """))
    result = subprocess.run([sys.executable, "-m", "botweave", "check", str(config)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "no known price" in line]
    assert line.endswith(": openai/my-local-model")


async def test_accounts_linked_by_one_person_share_one_budget(llm):
    """Ann's second account, linked to her first with /link, spends the same daily budget."""
    from botweave.identity import link_key

    llm.queue(Reply(text="First answer.", usage=USAGE))
    app, adapter = budget_bot(llm, {"per_user": {"tokens_per_day": 100}})
    async with running(app):
        await app.store.set(link_key("test", "ann-phone"), "test:ann")
        answered = await app.handle(message("one", user_id="ann"))
        refused = await app.handle(message("two", user_id="ann-phone", chat_id="c2"))
    assert answered.status == "replied" and refused.status == "agent_error"
    assert [s.text for s in adapter.sent if s.chat_id == "c2"] == [
        "Daily limit reached (100 tokens). It resets at 00:00 UTC."
    ]
    assert llm.count("primary") == 1, "no model call for the linked account once the person's limit was spent"


async def test_a_turn_nobody_wrote_counts_against_its_conversations_chat(llm):
    """A room's scheduled stand-up has no person's message: its calls count against the
    agent and the room's channel, so a channel's daily limit holds for it too."""
    from botweave.agents import AgentError, ToolTurn
    from botweave.tooling import ToolContext

    llm.queue(Reply(text="Stand-up notes.", usage=USAGE), Reply(text="Elsewhere.", usage=USAGE))
    app, _ = budget_bot(llm, {"per_chat": {"tokens_per_day": 100}})
    async with running(app):
        agent = app.agents["assistant"]
        first = await agent.complete([], "Plan the day", ToolTurn(ToolContext("assistant", None, "test:standup")))
        with pytest.raises(AgentError):
            await agent.complete([], "And again", ToolTurn(ToolContext("assistant", None, "test:standup")))
        other = await agent.complete([], "Plan the day", ToolTurn(ToolContext("assistant", None, "test:other")))
    assert (first, other) == ("Stand-up notes.", "Elsewhere.")
    assert llm.count("primary") == 2, "no model call in the channel whose limit was spent"
