"""Access and admission on Telegram, end to end: Bot API emulator ⇄ python-telegram-bot ⇄ App ⇄ agent.

Pairing with the owner approving from the CLI against the shared Redis store, a denied
stranger, admission under a burst, and bot-authored commands. (A mention-only group ignoring
unaddressed chatter and answering an @-mention is tests/test_telegram_app.py::
test_group_answers_only_when_addressed; `mention_only` is the default group policy.)
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from botweave import App
from botweave.pipeline import TurnOutcome
from botweave.policies.access_control import TRY_LATER

from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[1]
ANN = TelegramEmulator.user(7, "Ann", "ann")
SAM = TelegramEmulator.user(8, "Sam", "sam")
OTHER_BOT = TelegramEmulator.user(99, "Helper", "HelperBot", is_bot=True)
HEARD = "assistant (offline echo) heard: "
BUSY = "I'm busy right now; please try again shortly."
CODE = re.compile(r"Your pairing code is ([A-Z2-9]{8})\b")

Starter = Callable[..., Any]


def config_for(emu: TelegramEmulator, agent_model: str = "offline/echo", **telegram: Any) -> dict[str, Any]:
    return {
        "agents": {"assistant": {"model": agent_model}},
        "platforms": {"telegram": {**adapter_config(emu), **telegram}},
    }


def record_outcomes(app: App) -> list[TurnOutcome]:
    """Every pipeline outcome, in completion order (the adapter calls `app.handle` via submit)."""
    outcomes: list[TurnOutcome] = []
    handle = app.handle

    async def recording(item: Any, **options: Any) -> TurnOutcome:
        outcome = await handle(item, **options)
        outcomes.append(outcome)
        return outcome

    app.handle = recording  # type: ignore[method-assign]
    return outcomes


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run(
        [sys.executable, "-m", "botweave", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )


async def stream_settled(app: App, entries: int, timeout: float = 10.0) -> None:
    """With the Redis store, inbound items go through the shared stream: wait until `entries`
    were published and every one of them was handled and acknowledged."""
    assert app.stream is not None
    stream = app.stream
    deadline = asyncio.get_running_loop().time() + timeout
    while not (await stream.redis.xlen(stream.stream) >= entries and await stream.backlog() == 0):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {entries} handled stream entries")
        await asyncio.sleep(0.02)


# --- pairing and deny -----------------------------------------------------------------------


async def test_stranger_gets_a_code_the_owner_approves_from_the_cli_and_the_next_message_is_answered(
    start_app, telegram_emulator, redis_url, tmp_path
):
    emu = telegram_emulator
    config = config_for(emu, unknown_user_policy="pair")
    config["store"] = {"url": redis_url, "prefix": f"tg-pair-{uuid.uuid4().hex[:8]}:"}
    path = tmp_path / "bot.yaml"
    path.write_text(yaml.safe_dump(config))
    app = await start_app(path)  # no owner_user_id: the first CLI approval makes the owner
    chat = emu.private_chat(ANN)

    emu.push_message(chat, ANN, "hello, who are you?")
    await wait_until(lambda: emu.sent(ANN["id"]), timeout=15, what="the pairing code")
    (offer,) = emu.sent_texts(ANN["id"])
    assert "owner" in offer and "approve" in offer
    match = CODE.search(offer)
    assert match, offer
    code = match.group(1)
    assert not set(code) & set("0O1I")

    emu.push_message(chat, ANN, "still there?")  # while pending: nothing new, no second code
    await stream_settled(app, entries=2)

    approved = await asyncio.to_thread(cli, "pair", "approve", "telegram", code, "--config", str(path))
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == f"approved Ann (id {ANN['id']}) on telegram and made them the owner"

    emu.push_message(chat, ANN, "may I come in now?")
    await wait_until(lambda: len(emu.sent(ANN["id"])) >= 2, timeout=15, what="the agent's answer")
    await asyncio.sleep(0.3)  # a late answer to "still there?" would show up now
    assert emu.sent_texts(ANN["id"]) == [offer, HEARD + "may I come in now?"]


async def all_handled(app: App, emu: TelegramEmulator, entries: int, timeout: float = 30.0) -> None:
    """Every update pushed so far was received and its turn finished: through the shared
    stream with Redis, through this process's journal with SQLite."""
    if app.stream is not None:
        await stream_settled(app, entries=entries, timeout=timeout)
        return
    await wait_until(lambda: not emu.pending, timeout=timeout, what="every update to be received")
    await asyncio.wait_for(app.drain(), timeout)
    assert app.journal is not None and await app.journal.pending() == []


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
async def test_fifty_strangers_at_once_get_three_codes_and_one_try_later_each(
    start_app, telegram_emulator, backend, tmp_path, request
):
    """The cap of three pending codes is one atomic step in the store: fifty strangers
    writing at once (their turns run concurrently, on the stream's workers with Redis, in
    this process with the embedded SQLite store) get three codes, the owner three notices,
    and everyone else one plain "try again later", once."""
    emu = telegram_emulator
    config = config_for(emu, unknown_user_policy="pair", owner_user_id="1000", requests_per_second=1000)
    if backend == "redis":
        config["store"] = {"url": request.getfixturevalue("redis_url"), "prefix": f"tg-fifty-{uuid.uuid4().hex[:8]}:"}
    else:
        config["store"] = {"url": f"sqlite:///{tmp_path / 'state.db'}"}
    app = await start_app(config)
    strangers = [TelegramEmulator.user(2000 + n, f"Stranger{n}", f"stranger{n}") for n in range(50)]
    for person in strangers:
        emu.push_message(emu.private_chat(person), person, "hello?")
    await all_handled(app, emu, entries=50)

    told = {person["id"]: emu.sent_texts(person["id"]) for person in strangers}
    coded = [texts for texts in told.values() if len(texts) == 1 and CODE.search(texts[0])]
    later = [texts for texts in told.values() if texts == [TRY_LATER]]
    assert len(coded) == 3 and len(later) == 47, told
    notices = emu.sent_texts(1000)
    assert len(notices) == 3 and all(n.startswith("Pairing request on telegram") for n in notices)
    assert len(await app.access.pairing.pending("telegram")) == 3

    for person in strangers:  # asking again: a pending code is not sent twice, a refusal not repeated
        emu.push_message(emu.private_chat(person), person, "hello again?")
    await all_handled(app, emu, entries=100)
    assert {person["id"]: emu.sent_texts(person["id"]) for person in strangers} == told
    assert emu.sent_texts(1000) == notices


async def test_denied_stranger_gets_no_reply_and_costs_no_llm_call(start_app, telegram_emulator):
    emu = telegram_emulator
    app = await start_app(config_for(emu, unknown_user_policy="deny"))
    outcomes = record_outcomes(app)
    agent = app.agents["assistant"]
    llm_calls: list[str] = []
    complete = agent.complete

    async def counting(history: list[dict[str, str]], user_turn: str) -> str:
        llm_calls.append(user_turn)
        return await complete(history, user_turn)

    agent.complete = counting  # type: ignore[method-assign]
    emu.push_message(emu.private_chat(SAM), SAM, "let me in")
    emu.push_message(emu.group(-1001), SAM, "@ThisBot let me in")
    await wait_until(lambda: len(outcomes) == 2, what="both messages to be handled")
    await app.drain()
    assert [o.status for o in outcomes] == ["denied", "denied"]
    assert emu.calls_to("sendMessage") == [] and emu.calls_to("sendChatAction") == []
    assert llm_calls == []


# --- admission ------------------------------------------------------------------------------


class _SlowEcho:
    """The offline echo's answer from a litellm custom provider, given only after a pause, so
    turns overlap like real model calls."""

    provider = "slowtelegram"
    delay = 0.8

    @classmethod
    def register(cls) -> None:
        from botweave.model_calls import litellm_module
        from botweave.offline_model import reply_to
        from litellm import CustomLLM

        delay = cls.delay

        class SlowEcho(CustomLLM):  # type: ignore[misc]
            async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any):  # type: ignore[override]
                await asyncio.sleep(delay)
                metadata = (kwargs.get("litellm_params") or {}).get("metadata") or {}
                response = kwargs["model_response"]
                response.model = model
                response.choices[0].message.content = reply_to({"messages": messages, "metadata": metadata}).text
                return response

        litellm = litellm_module()
        if not any(p.get("provider") == cls.provider for p in litellm.custom_provider_map):
            litellm.custom_provider_map.append({"provider": cls.provider, "custom_handler": SlowEcho()})


async def test_a_burst_across_forum_topics_gets_one_answer_and_one_busy_notice(start_app, telegram_emulator):
    _SlowEcho.register()
    emu = telegram_emulator
    config = config_for(emu, agent_model=f"{_SlowEcho.provider}/echo", unknown_user_policy="allow")
    config["admission"] = {"max_concurrent_turns": 1, "overflow": "reject"}
    app = await start_app(config)
    outcomes = record_outcomes(app)
    forum = emu.group(-1003, "Forum", forum=True)
    topics = [emu.topic(forum, ANN, f"Topic {i}")["message_id"] for i in range(4)]
    # four topics of one supergroup: four conversations, one chat, arriving together
    questions = [emu.push_message(forum, ANN, f"@ThisBot q{i}", thread_id=t) for i, t in enumerate(topics)]
    await wait_until(lambda: len(outcomes) == 4, timeout=15, what="all four turns")
    await app.drain()
    await asyncio.sleep(0.2)

    assert sorted(o.status for o in outcomes) == ["busy", "busy", "busy", "replied"]
    sent = emu.sent(-1003)
    answers = [m for m in sent if m["text"].startswith(HEARD)]
    notices = [m for m in sent if m["text"] == BUSY]
    assert len(sent) == 2 and len(answers) == 1 and len(notices) == 1
    (answer,), (notice,) = answers, notices
    asked = next(q for q in questions if answer["text"] == HEARD + "[Ann] " + q["text"])
    assert answer["message_thread_id"] == asked["message_thread_id"]  # answered in its own topic
    assert notice["message_thread_id"] in topics and notice["message_thread_id"] != answer["message_thread_id"]


# --- bot-authored content -------------------------------------------------------------------


async def test_a_bot_authored_command_is_content_not_a_command(start_app, telegram_emulator):
    """Telegram never shows a bot other bots' group messages, but a bot-authored message can
    still arrive (e.g. via a reply chain or a self-hosted Bot API); with `allow_bots: true` it
    reaches the agent, yet a `/new` in it is not executed (allow_control=False)."""
    emu = telegram_emulator
    app = await start_app(config_for(emu, unknown_user_policy="allow", allow_bots=True))
    group = emu.group(-1001)
    emu.push_message(group, ANN, "@ThisBot remember the milk")
    await wait_until(lambda: len(emu.sent(-1001)) == 1, timeout=15, what="the answer to Ann")
    emu.push_message(group, OTHER_BOT, "/new@ThisBot")
    await wait_until(lambda: len(emu.sent(-1001)) == 2, timeout=15, what="the answer to the bot")
    await app.drain()
    assert emu.sent_texts(-1001) == [
        HEARD + "[Ann] @ThisBot remember the milk",
        HEARD + "[Helper] /new@ThisBot",  # not "Started a new conversation; ..."
    ]
    history = await app.history.load("telegram:-1001", 10)
    assert history[0] == {"role": "user", "content": "[Ann] @ThisBot remember the milk"}  # nothing was forgotten
    assert len(history) == 4
