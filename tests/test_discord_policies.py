"""Policies end to end on Discord: loop guard, mention gating, admission.

The real App and discord.py's real REST and gateway clients run against the Discord emulator;
the assertions count what the channel shows: how many answers the bot posted, to whom, and
the busy notice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App
from botweave.types import BotMessage, PlatformEvent

from tests.adapters.test_discord import Harness, eventually, make_config, started
from tests.emulators.discord import BOT_ID, CHANNEL_ID, THREAD_ID, DiscordEmulator, thread, user
from tests.emulators.openai import OpenAIEmulator
from tests.support import StartApp

MENTION = f"<@{BOT_ID}>"
#: Bound on waiting for in-flight turns (the first agent call in a process imports litellm).
TURN_TIMEOUT_S = 20.0
BUDGET = 3
COOLDOWN_S = 2.0
#: Two more threads under #general: separate conversations in the same chat.
THREAD_B = "2101"
THREAD_C = "2102"


class BoundedHarness(Harness):
    """The Discord test harness with every wait for turns bounded, so a hang fails one test."""

    async def deliver(self, event: str, data: dict[str, Any]) -> BotMessage | PlatformEvent | None:
        before = len(self.items)
        await self.emu.dispatch(event, data)
        await eventually(lambda: len(self.items) > before)
        await drained(self.app)
        return self.items[before]


async def drained(app: App) -> None:
    """Wait until every submitted item has been handled, for at most TURN_TIMEOUT_S."""
    await asyncio.wait_for(app.drain(), TURN_TIMEOUT_S)


@pytest.fixture
async def emulator() -> AsyncIterator[DiscordEmulator]:
    emu = DiscordEmulator()
    emu.threads[THREAD_B] = thread(THREAD_B, CHANNEL_ID, "budget", "7002")
    emu.threads[THREAD_C] = thread(THREAD_C, CHANNEL_ID, "hiring", "7003")
    await emu.start()
    yield emu
    await emu.stop()


@pytest.fixture
async def llm() -> AsyncIterator[OpenAIEmulator]:
    """A model that takes half a second per answer, so a burst's turns overlap."""
    emu = OpenAIEmulator("On it.", delay=0.5)
    await emu.start()
    yield emu
    await emu.stop()


class Running:
    """Starts Apps on the emulator (the shared `start_app` stops them after the test)."""

    def __init__(self, emulator: DiscordEmulator, start_app: StartApp) -> None:
        self.emulator = emulator
        self._start_app = start_app

    async def start(self, config: dict[str, Any]) -> Harness:
        return await started(self.emulator, self._start_app, config, BoundedHarness)


@pytest.fixture
def running(emulator: DiscordEmulator, start_app: StartApp) -> Running:
    return Running(emulator, start_app)


def answered(bot: Harness, speaker: str, channel_id: str = CHANNEL_ID) -> int:
    """How many of the bot's posts answer `speaker` (the echo model quotes `[name]`)."""
    return sum(1 for m in bot.replies(channel_id) if f"heard: [{speaker}]" in m["content"])


async def test_two_bots_stop_at_the_loop_budget_and_resume_after_the_cooldown(
    emulator: DiscordEmulator, running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    bot = await running.start(
        make_config(
            emulator,
            allow_bots=True,
            group_policy="respond_all",
            bot_loop_protection={
                "max_events_per_window": BUDGET,
                "window_seconds": 60,
                "cooldown_seconds": COOLDOWN_S,
            },
        )
    )
    other = emulator.other_bot
    with caplog.at_level(logging.WARNING, logger="botweave.policies.authors"):
        for i in range(BUDGET + 2):
            await bot.say(f"ping {i}", author=other)
        tripped_at = time.time()  # the guard's clock; the cooldown began at the 4th message
        assert answered(bot, "otherbot") == BUDGET  # the 4th tripped the guard, the 5th met the cooldown
        # a person in the same channel is never held back by the bots' budget
        await bot.say("are you two done?")
        assert answered(bot, "Alice") == 1
        await asyncio.sleep(max(0.0, tripped_at + COOLDOWN_S + 0.1 - time.time()))
        for i in range(BUDGET + 1):
            await bot.say(f"pong {i}", author=other)
    assert answered(bot, "otherbot") == 2 * BUDGET  # a fresh budget after the cooldown, and it holds again
    [first_pong] = [m for m in bot.replies() if m["content"].endswith("heard: [otherbot] pong 0")]
    assert first_pong["author"]["id"] == BOT_ID
    drops = [r.getMessage() for r in caplog.records if "bot loop guard" in r.getMessage()]
    assert len(drops) == 2  # logged once per cooldown, not once per dropped message
    assert f"between {BOT_ID} and {other['id']}" in drops[0]


async def test_mention_only_channel_ignores_unaddressed_messages_and_answers_addressed_ones(
    emulator: DiscordEmulator, running: Running
) -> None:
    bot = await running.start(make_config(emulator, group_policy="mention_only"))
    await bot.say("lunch at noon?")
    await bot.say("agreed", author=emulator.bob)
    await bot.say("in the thread, not for the bot", channel_id=THREAD_ID)
    await bot.settle()
    assert bot.replies(CHANNEL_ID) == [] and bot.replies(THREAD_ID) == []
    question = await bot.say(f"{MENTION} what is on the agenda?", mentions=[emulator.bot])
    [answer] = bot.replies(CHANNEL_ID)
    assert answer["content"] == "assistant (offline echo) heard: [Alice] what is on the agenda?"
    assert answer["sent_with"]["message_reference"]["message_id"] == question.message_id
    await bot.say("and after that?", author=emulator.bob, reply_to=answer["id"])  # replying to the bot addresses it
    await bot.say(f"{MENTION} and here?", channel_id=THREAD_ID, mentions=[emulator.bot])
    assert [m["content"].split("heard: ", 1)[1].split("\n")[-1] for m in bot.replies(CHANNEL_ID)] == [
        "[Alice] what is on the agenda?",
        "and after that?",
    ]
    assert answered(bot, "Bob") == 1
    assert len(bot.replies(THREAD_ID)) == 1


async def test_a_burst_over_the_admission_limit_gets_one_answer_and_a_busy_notice_per_sender(
    emulator: DiscordEmulator, running: Running, llm: OpenAIEmulator
) -> None:
    config = make_config(emulator, group_policy="respond_all")
    config["agents"] = {
        "assistant": {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback"}
    }
    config["admission"] = {"max_concurrent_turns": 1, "overflow": "reject"}
    bot = await running.start(config)
    busy = bot.app.config.admission.busy_message
    carol = user("7003", "carol", global_name="Carol")
    burst = [
        emulator.message("can someone review my PR?", channel_id=THREAD_ID, author=emulator.alice),
        emulator.message("what's our Q3 budget?", channel_id=THREAD_B, author=emulator.bob),
        emulator.message("any open roles?", channel_id=THREAD_C, author=carol),
    ]
    before = len(bot.items)
    for payload in burst:  # all three arrive together, before the first turn can finish
        await emulator.dispatch("MESSAGE_CREATE", payload)
    await eventually(lambda: len(bot.items) >= before + len(burst))
    await drained(bot.app)
    posts = [m for t in (THREAD_ID, THREAD_B, THREAD_C) for m in bot.replies(t)]
    assert [m["content"] for m in posts].count("On it.") == 1
    # nothing vanishes silently: each refused sender hears it, once
    assert [m["content"] for m in posts].count(busy) == 2
    assert len(posts) == 3
    assert len(llm.requests) == 1  # the rejected ones cost no LLM call
    answered_thread = next(m["channel_id"] for m in posts if m["content"] == "On it.")
    noticed_threads = {m["channel_id"] for m in posts if m["content"] == busy}
    assert answered_thread not in noticed_threads and len(noticed_threads) == 2
    # once the turn is over the slot is free again, and nobody gets a second busy notice
    await bot.say("thanks, anyone there now?", channel_id=THREAD_C, author=carol)
    contents = [m["content"] for t in (THREAD_ID, THREAD_B, THREAD_C) for m in bot.replies(t)]
    assert contents.count("On it.") == 2 and contents.count(busy) == 2
