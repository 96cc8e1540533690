"""Conversation events in the kernel: numbered per conversation, messages kept as records,
a run's words published without holding the model back yet never out of the run's order."""

from __future__ import annotations

import asyncio
import json

from botweave.events import ConversationEvents
from botweave.store import MemoryStore


class SlowStore(MemoryStore):
    """Each log append takes a while, as a busy SQLite file or a distant Redis would."""

    async def log_append(self, key, value, **options):  # type: ignore[override]
        await asyncio.sleep(0.02)
        return await super().log_append(key, value, **options)


async def events_of(events: ConversationEvents, conversation: str) -> list[dict]:
    return [json.loads(v) for _, v in (await events.read(conversation)).entries]


async def test_words_that_come_while_one_is_written_go_out_together_and_the_end_waits_for_them() -> None:
    events = ConversationEvents(SlowStore())
    run = events.run("web:s", "w-1")
    for word in ("The ", "capital ", "of ", "France ", "is ", "Paris."):
        await run.delta(word)  # never waits for the store
        await asyncio.sleep(0)  # a model's stream gives the loop a turn between its pieces
    await run.tool("c1", "lookup", "started", {"password": "hunter2"})
    await run.final("The capital of France is Paris.", ["b-1"])
    logged = await events_of(events, "web:s")
    deltas = [e["data"]["text"] for e in logged if e["event"] == "delta"]
    assert "".join(deltas) == "The capital of France is Paris."
    assert 1 < len(deltas) < 6, "the first word alone, the rest together once it was written"
    assert [e["event"] for e in logged] == ["delta"] * len(deltas) + ["tool", "final"]
    assert all(e["data"]["run_id"] == run.run_id and e["data"]["message_id"] == "w-1" for e in logged)


async def test_a_post_that_names_no_title_keeps_the_conversations_name() -> None:
    events = ConversationEvents(MemoryStore())
    await events.post("telegram:-100", {"id": "1", "text": "what is new?", "at": 1}, title="Team")
    await events.post("telegram:-100", {"id": "2", "text": "alice on it", "at": 2})  # the bot's post: no chat name to hand
    listed = await events.conversations()
    assert listed == [{"conversation": "telegram:-100", "platform": "telegram", "kind": "group", "title": "Team",
                       "last_at": 2, "last_text": "alice on it"}]
    await events.post("telegram:-100", {"id": "3", "text": "renamed", "at": 3}, title="Team B")
    assert (await events.listing("telegram:-100") or {})["title"] == "Team B"


async def test_the_listing_shows_the_newest_message_as_it_grows_not_its_first_words() -> None:
    events = ConversationEvents(MemoryStore())
    await events.post("web:s", {"id": "1", "text": "tell me", "at": 1})
    await events.post("web:s", {"id": "2", "text": "Once", "at": 2})
    await events.update("web:s", {"id": "2", "text": "Once upon a time", "at": 2})
    await events.update("web:s", {"id": "1", "text": "tell me a story", "at": 1, "edited": True})  # not the newest
    listed = await events.conversations()
    assert [(c["conversation"], c["last_text"], c["last_at"]) for c in listed] == [("web:s", "Once upon a time", 2)]
    assert set(listed[0]) == {"conversation", "platform", "kind", "title", "last_at", "last_text"}


async def test_messages_are_kept_once_and_replaced_by_their_newer_selves() -> None:
    events = ConversationEvents(MemoryStore(), history=3)
    for n in range(5):
        await events.post("telegram:1", {"id": str(n), "text": f"m{n}", "at": n}, title="Team")
    await events.post("telegram:1", {"id": "4", "text": "m4 again", "at": 4}, unique="evonce:x")
    assert await events.post("telegram:1", {"id": "4", "text": "m4 once more"}, unique="evonce:x") == 0
    await events.update("telegram:1", {"id": "3", "text": "m3 edited", "at": 3})
    messages, more = await events.history("telegram:1")
    assert [m["text"] for m in messages] == ["m2", "m3 edited", "m4 again"] and more is False
    older, more = await events.history("telegram:1", before="3", limit=1)
    assert [m["id"] for m in older] == ["2"] and more is False
    listed = await events.conversations()
    assert listed[0] | {"last_at": 0} == {"conversation": "telegram:1", "platform": "telegram", "kind": "group",
                                          "title": "Team", "last_at": 0, "last_text": "m4"}
    assert await events.head("telegram:1") == 7  # five posts, one again, one update: the once-only one not
