"""People control what is kept: /memory, /forget, the tools' refusals of bad input, /link and
/unlink (Telegram and the web gateway), and the guessing budget on link codes."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from botweave import App
from botweave.gateway import GatewayError
from botweave.memory.items import MAX_FACT_CHARS
from botweave.store import MemoryStore

from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.gateway.support import TOKEN_CONFIG, answer_of, client
from tests.memory.support import leaks, memory_block, model, secret_of
from tests.support import RecordingAdapter, message


def config(llm: OpenAIEmulator, **more: Any) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback",
                                 "memory": {"enabled": True, "max_items": 5}}},
        **more,
    }


async def started(llm: OpenAIEmulator) -> tuple[App, RecordingAdapter]:
    app = App.from_config(config(model(llm)), store=MemoryStore())
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    return app, adapter


async def said(app: App, adapter: RecordingAdapter, text: str, **who: Any) -> str:
    before = len(adapter.texts())
    await app.handle(message(text, **who))
    return "\n".join(adapter.texts()[before:])


async def test_memory_lists_numbered_and_forget_deletes_one_or_all_for_good(llm):
    app, adapter = await started(llm)
    for fact in ("likes tea", "has a cat", "lives in Porto"):
        await app.handle(message(f"remember {fact}"))
    await app.handle(message("remember a dog", user_id="bob", chat_id="c2"))
    listing = await said(app, adapter, "/memory")
    assert "1. likes tea\n2. has a cat\n3. lives in Porto" in listing and "dog" not in listing
    assert await said(app, adapter, "/forget 2") == "Deleted: has a cat"
    assert "1. likes tea\n2. lives in Porto" in await said(app, adapter, "/memory")
    assert "There is no item 7" in await said(app, adapter, "/forget 7")
    assert "Usage: /forget" in await said(app, adapter, "/forget banana")
    assert await said(app, adapter, "/forget all") == "Deleted everything I remembered about you (2 items)."
    assert await said(app, adapter, "/memory") == "I don't remember anything about you."
    assert await app.memory.backend.recent(scope("test:u1")) == []  # gone from the store, not hidden
    assert "1. a dog" in await said(app, adapter, "/memory", user_id="bob", chat_id="c2")
    in_group = await said(app, adapter, "/memory", user_id="bob", chat_id="team", channel_type="group")
    assert "private chat" in in_group and "dog" not in in_group  # never listed where others read
    assert "private chat" in await said(app, adapter, "/forget 1", user_id="bob", chat_id="team", channel_type="group")
    await app.stop()


def scope(person: str) -> Any:
    from botweave.memory.stores import Scope

    return Scope("assistant", person)


async def test_bad_facts_and_someone_elses_id_are_refused_with_a_clear_result(llm):
    app, adapter = await started(llm)
    await app.handle(message("remember a dog", user_id="bob", chat_id="c2"))
    bobs = (await app.memory.backend.recent(scope("test:bob")))[0].id
    llm.on_request = None
    llm.queue_tool_calls(
        tool_call("remember", {"fact": "   "}),
        tool_call("remember", {"fact": "x" * 10_000_000}),
        tool_call("forget", {"item_id": bobs}),
    )
    llm.queue_text("Sorry.")
    await app.handle(message("try things"))
    results = [json.loads(r["content"]) for r in llm.tool_results(-1)]
    assert results[0] == {"error": "the fact is empty; nothing was remembered"}
    assert "10000000 characters long" in results[1]["error"] and str(MAX_FACT_CHARS) in results[1]["error"]
    assert results[2] == {"error": f"there is no item {bobs!r} in this person's memory"}
    assert [i.id for i in await app.memory.backend.recent(scope("test:bob"))] == [bobs]  # Bob's item stays
    assert await app.memory.backend.recent(scope("test:u1")) == []
    await app.stop()


async def test_a_full_memory_refuses_the_next_fact(llm):
    app, adapter = await started(llm)
    for number in range(6):
        await app.handle(message(f"remember fact {number}"))
    last = json.loads(llm.tool_results(-1)[-1]["content"])
    assert last == {"error": "this person's memory is full (5 items); forget an item before remembering more"}
    assert len(await app.memory.backend.recent(scope("test:u1"))) == 5
    await app.stop()


async def test_recall_finds_items_beyond_the_injected_ones_and_moves_them_up(llm):
    app = App.from_config(
        {**config(llm), "agents": {"assistant": {**config(llm)["agents"]["assistant"],
                                                 "memory": {"enabled": True, "inject_tokens": 12}}}},
        store=MemoryStore(),
    )
    app.add_adapter(RecordingAdapter())
    model(llm)
    for fact in ("the boat is blue", "prefers tea", "works at night"):
        await app.handle(message(f"remember {fact}"))
    await app.handle(message("hello"))
    assert "boat" not in memory_block(llm.requests[-1])  # only the newest fits 12 tokens
    llm.on_request = None
    llm.queue_tool_calls(tool_call("recall", {"query": "what colour is the boat"}))
    llm.queue_text("Blue.")
    await app.handle(message("the boat?"))
    found = json.loads(llm.tool_results(-1)[-1]["content"])["items"]
    assert [i["text"] for i in found] == ["the boat is blue"]
    llm.queue_text("ok")
    await app.handle(message("and now?"))
    assert "the boat is blue" in memory_block(llm.requests[-1])  # used last, so first now
    await app.stop()


async def test_link_needs_a_private_chat_and_fifty_guesses_lock_it(llm):
    app, adapter = await started(llm)
    assert "private chat" in await said(app, adapter, "/link", channel_type="group", chat_id="g1")
    answers = [await said(app, adapter, f"/link WRONG{n:03d}", user_id="mallory", chat_id="m") for n in range(50)]
    assert answers[0].startswith("That link code is not valid")
    assert sum("paused" in a for a in answers) >= 45
    code = re.search(r"code: (\w+)", await said(app, adapter, "/link"))
    assert code is not None
    assert "paused" in await said(app, adapter, f"/link {code.group(1)}", user_id="other", chat_id="o")
    await app.stop()


async def bot_says(c: Any) -> str:
    """The text of the bot's next message in the client's sessions (a command's answer)."""
    event = await c.next_event(20, where=lambda e: e.event == "message" and e.data["author"]["kind"] == "bot")
    return str(event.data["text"])


async def test_a_telegram_account_and_a_web_principal_share_one_memory_once_linked(
    telegram_emulator, openai_emulator, start_app
):
    emu, llm = telegram_emulator, model(openai_emulator)
    app = await start_app({
        "agents": {"helper": {"model": "openai/gpt-4o-mini", "api_base": llm.base_url, "api_key": "sk-test",
                              "memory": {"enabled": True}}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu)}},
        "gateway": {"listen": "127.0.0.1:0", "tokens": TOKEN_CONFIG},
    })
    ann = TelegramEmulator.user(7, "Ann", "ann")
    chat = emu.private_chat(ann)
    fact = secret_of("p1")
    emu.push_message(chat, ann, f"I am p1, remember {fact}")
    await wait_until(lambda: len(emu.sent_texts(chat["id"])) >= 1, timeout=20, what="the answer")
    emu.push_message(chat, ann, "/link")
    await wait_until(lambda: len(emu.sent_texts(chat["id"])) >= 2, timeout=20, what="the code")
    code = re.search(r"code: (\w+)", emu.sent_texts(chat["id"])[-1]).group(1)

    async with client(app, "bob") as bob:
        session = await bob.create_session("link")
        assert (await bob.call("memory.list"))["items"] == []
        await bob.send(session, f"/link {code}")
        assert (await bot_says(bob)).startswith("Linked: both accounts now share one memory.")
        await answer_of(bob, await bob.send(session, "I am p1, what do you know?"))
        assert fact in memory_block(llm.requests[-1])
        listed = (await bob.call("memory.list"))["items"]
        assert [(i["number"], i["text"]) for i in listed] == [(1, fact)]
        item_id = listed[0]["id"]
        with pytest.raises(GatewayError) as missing:
            await bob.call("memory.forget", {"item_id": "nosuchitem"})
        assert missing.value.code == "not_found"
        async with client(app, "eve") as eve:
            assert (await eve.call("memory.list"))["items"] == []  # another principal sees nothing
        await bob.send(session, "/unlink")
        assert (await bot_says(bob)).startswith("Unlinked")
        assert (await bob.call("memory.list"))["items"] == []
        await answer_of(bob, await bob.send(session, "I am p2, what do you know?"))
        assert memory_block(llm.requests[-1]) == ""
    emu.push_message(chat, ann, "/memory")
    await wait_until(lambda: len(emu.sent_texts(chat["id"])) >= 3, timeout=20, what="/memory")
    assert f"1. {fact}" in emu.sent_texts(chat["id"])[-1]
    async with client(app, "bob") as bob:
        assert await bob.call("memory.forget", {"all": True}) == {"forgotten": 0}
        with pytest.raises(GatewayError):  # unlinked: Ann's item is not Bob's to delete
            await bob.call("memory.forget", {"item_id": item_id})
    async with client(app, "ann") as web_ann:  # another principal, never linked
        with pytest.raises(GatewayError):
            await web_ann.call("memory.forget", {"item_id": item_id})
    emu.push_message(chat, ann, "/forget 1")
    await wait_until(lambda: len(emu.sent_texts(chat["id"])) >= 4, timeout=20, what="/forget")
    assert emu.sent_texts(chat["id"])[-1] == f"Deleted: {fact}"
    assert leaks(llm) == []
