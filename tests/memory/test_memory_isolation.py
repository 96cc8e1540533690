"""Isolation is the contract: a turn only ever sees the memory of the person whose message it
answers. Many people at once through the Telegram emulator (private chats and one group), after
a restart on the SQLite store, and two workers on one Redis; every request the loopback model
recorded is checked."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from botweave import App
from botweave.store import SQLiteStore
from botweave.store.redis import RedisStore

from tests.emulators.openai import OpenAIEmulator
from tests.emulators.telegram import BOT_USERNAME, TelegramEmulator, adapter_config, wait_until
from tests.memory.support import leaks, memory_block, model, secret_of
from tests.support import RecordingAdapter, message

PEOPLE = 30


def telegram_config(emu: TelegramEmulator, llm: OpenAIEmulator, store: str = "memory://") -> dict[str, Any]:
    return {
        "agents": {
            "assistant": {
                "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback",
                "memory": {"enabled": True},
            }
        },
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu, requests_per_second=1000)}},
        "store": {"url": store},
    }


async def test_thirty_people_at_once_each_get_only_their_own_items_in_private_and_in_a_group(
    telegram_emulator, start_app, openai_emulator
):
    emu, llm = telegram_emulator, model(openai_emulator)
    await start_app(telegram_config(emu, llm))
    people = {f"p{n}": TelegramEmulator.user(100 + n, f"Person{n}", f"person{n}") for n in range(PEOPLE)}
    secrets = {person: secret_of(person) for person in people}
    chats = {person: emu.private_chat(user) for person, user in people.items()}
    for person, user in people.items():  # everyone at once
        emu.push_message(chats[person], user, f"I am {person}, remember {secrets[person]}")
    await wait_until(lambda: all(emu.sent_texts(chats[p]["id"]) for p in people), timeout=60, what="every answer")
    for person, user in people.items():
        emu.push_message(chats[person], user, "/new")
    await wait_until(lambda: all(len(emu.sent_texts(chats[p]["id"])) >= 2 for p in people), timeout=60, what="/new")
    for person, user in people.items():
        emu.push_message(chats[person], user, f"I am {person}, what do you know about me?")
    group = emu.group(-500)
    for person, user in people.items():
        emu.push_message(group, user, f"@{BOT_USERNAME} I am {person}, what do you know about me?")
    await wait_until(
        lambda: all(len(emu.sent_texts(chats[p]["id"])) >= 3 for p in people) and len(emu.sent_texts(-500)) >= PEOPLE,
        timeout=60, what="every later answer",
    )
    later = [r for r in llm.requests if "what do you know" in str(r["messages"][-1]["content"])]
    assert len(later) == 2 * PEOPLE
    for request in later:  # each later request carries its author's own item, after /new and in the group
        author = str(request["messages"][-1]["content"]).split("I am ")[1].split(",")[0]
        assert secrets[author] in memory_block(request)
    assert leaks(llm) == []


async def test_memory_survives_a_restart_on_the_sqlite_store(tmp_path, openai_emulator):
    llm = model(openai_emulator)
    config: dict[str, Any] = {
        "agents": {"assistant": {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback",
                                 "memory": {"enabled": True}}},
        "bot": {"unknown_user_policy": "allow"},
    }
    ann = secret_of("p1")
    first = App.from_config(config, store=SQLiteStore(tmp_path / "state.db"))
    first.add_adapter(RecordingAdapter())
    await first.handle(message(f"I am p1, remember {ann}", user_id="1"))
    await first.stop()
    again = App.from_config(config, store=SQLiteStore(tmp_path / "state.db"))
    again.add_adapter(RecordingAdapter())
    await again.handle(message("I am p1, what do you know?", user_id="1"))
    await again.handle(message("I am p2, what do you know?", user_id="2", chat_id="c2"))
    await again.stop()
    assert ann in memory_block(llm.requests[-2])
    assert memory_block(llm.requests[-1]) == "" and leaks(llm) == []


@pytest.mark.parametrize("run", range(3))
async def test_two_workers_on_one_redis_never_hand_one_persons_items_to_another(redis_url, openai_emulator, run):
    """Each person remembers through one worker and asks through the other, all at once."""
    llm = model(openai_emulator)
    prefix = f"test:{uuid.uuid4().hex}:"
    config: dict[str, Any] = {
        "agents": {"assistant": {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback",
                                 "memory": {"enabled": True}}},
        "bot": {"unknown_user_policy": "allow", "group_policy": "respond_all"},
    }
    workers = [App.from_config(config, store=RedisStore(redis_url, prefix=prefix)) for _ in range(2)]
    for worker in workers:
        worker.add_adapter(RecordingAdapter())
        await worker.store.connect()
    secrets = {f"p{n}": secret_of(f"p{n}") for n in range(PEOPLE)}

    async def person(number: int) -> None:
        who = f"p{number}"
        one, other = workers[number % 2], workers[(number + 1) % 2]
        await one.handle(message(f"I am {who}, remember {secrets[who]}", user_id=who, chat_id=who))
        await other.handle(message(f"I am {who}, what do you know?", user_id=who, chat_id=f"g{number % 3}",
                                   channel_type="group"))

    await asyncio.gather(*(person(n) for n in range(PEOPLE)))
    for worker in workers:
        await worker.stop()
    later = [r for r in llm.requests if "what do you know" in str(r["messages"][-1]["content"])]
    assert len(later) == PEOPLE
    for request in later:
        author = str(request["messages"][-1]["content"]).split("I am ")[1].split(",")[0]
        assert secrets[author] in memory_block(request)
    assert leaks(llm) == []
