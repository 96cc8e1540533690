"""The memory backends hold the same contract on every state store (memory, SQLite, Redis):
items per agent and person, most recently used first, the cap, search, deletion for good."""

from __future__ import annotations

import pytest
from botweave.memory.items import MemoryItem, for_prompt, matches, render
from botweave.memory.stores import MemoryBackend, Scope, SQLiteMemory, memory_backend
from botweave.store import SQLiteStore

ANN = Scope("assistant", "telegram:1")
BOB = Scope("assistant", "telegram:2")
ANN_ELSEWHERE = Scope("critic", "telegram:1")


def item(item_id: str, text: str, used: float) -> MemoryItem:
    return MemoryItem(item_id, text, used, used, "telegram:dm:1")


async def filled(store) -> MemoryBackend:
    memory = memory_backend(store)
    for number, text in enumerate(["likes green tea", "has a cat named Miso", "lives in Porto"]):
        assert await memory.add(ANN, item(f"a{number}", text, 100.0 + number), max_items=10)
    assert await memory.add(BOB, item("b0", "has a dog named Rex", 200.0), max_items=10)
    assert await memory.add(ANN_ELSEWHERE, item("c0", "writes Rust", 300.0), max_items=10)
    return memory


async def test_items_come_back_most_recently_used_first_and_only_in_their_scope(store):
    memory = await filled(store)
    assert [i.text for i in await memory.recent(ANN)] == ["lives in Porto", "has a cat named Miso", "likes green tea"]
    assert [i.text for i in await memory.recent(ANN, 2)] == ["lives in Porto", "has a cat named Miso"]
    assert [i.text for i in await memory.recent(BOB)] == ["has a dog named Rex"]
    assert [i.text for i in await memory.recent(ANN_ELSEWHERE)] == ["writes Rust"]
    await memory.touch(ANN, ["a0"], 500.0)
    await memory.touch(ANN, ["b0"], 600.0)  # Bob's id is not Ann's: nothing happens
    assert [i.id for i in await memory.recent(ANN)] == ["a0", "a2", "a1"]
    assert (await memory.recent(ANN))[0].last_used == 500.0
    assert [i.id for i in await memory.recent(BOB)] == ["b0"]


async def test_search_finds_words_in_the_persons_items_only(store):
    memory = await filled(store)
    assert [i.id for i in await memory.search(ANN, "what is the cat called?")] == ["a1"]
    assert await memory.search(ANN, "dog Rex") == []
    assert [i.id for i in await memory.search(BOB, "dog")] == ["b0"]
    assert await memory.search(ANN, "   ") == []


async def test_the_cap_refuses_and_deletion_is_for_good(store):
    memory = await filled(store)
    assert not await memory.add(ANN, item("a9", "one too many", 900.0), max_items=3)
    assert await memory.delete(ANN, ["b0", "a1"]) == 1  # another person's id deletes nothing
    assert [i.id for i in await memory.recent(BOB)] == ["b0"]
    assert await memory.search(ANN, "cat") == []
    assert await memory.clear(ANN) == 2
    assert await memory.recent(ANN) == [] and await memory.search(ANN, "tea") == []
    assert [i.id for i in await memory.recent(ANN_ELSEWHERE)] == ["c0"]


async def test_sqlite_items_survive_reopening_the_file_and_recall_uses_fts5(tmp_path):
    first = SQLiteStore(tmp_path / "state.db")
    await first.connect()
    memory = memory_backend(first)
    assert isinstance(memory, SQLiteMemory)
    assert await memory.add(ANN, item("a0", "prefers window seats on trains", 1.0), max_items=5)
    await first.close()
    again = SQLiteStore(tmp_path / "state.db")
    await again.connect()
    reopened = memory_backend(again)
    assert [i.text for i in await reopened.search(ANN, "trains")] == ["prefers window seats on trains"]
    plan = await again.run(
        lambda db: db.execute("EXPLAIN QUERY PLAN SELECT * FROM memory_fts WHERE memory_fts MATCH 'x'").fetchall(),
        write=False,
    )
    assert any("VIRTUAL TABLE INDEX" in str(row) for row in plan)
    await again.close()


@pytest.mark.parametrize(
    ("budget", "expected"),
    # a line costs (text + id + 6) / 4 tokens, rounded up: 4, 5 and 6 here
    [(0, []), (3, []), (4, ["newest"]), (8, ["newest"]), (9, ["newest", "middle one"]), (14, ["newest", "middle one"]),
     (15, ["newest", "middle one", "oldest of all"])],
)
def test_the_prompt_carries_the_newest_items_that_fit(budget, expected):
    items = [item("i1", "newest", 3), item("i2", "middle one", 2), item("i3", "oldest of all", 1)]
    assert [i.text for i in for_prompt(items, budget)] == expected


def test_the_rendered_block_names_each_item_with_its_id_and_nothing_when_empty():
    assert render([]) == ""
    block = render([item("abc", "likes tea", 1)])
    assert block.endswith("- [abc] likes tea") and "recall" in block


def test_the_scan_ranks_by_shared_words_then_recency():
    items = [item("1", "tea with milk", 1), item("2", "green tea and honey", 2), item("3", "coffee", 3)]
    assert [i.id for i in matches(items, "green tea")] == ["2", "1"]
    assert matches(items, "!!!") == []


async def test_the_block_a_turn_reads_follows_every_change(store):
    memory = await filled(store)
    first = await memory.block(ANN, 800, 10)
    assert first.index("lives in Porto") < first.index("likes green tea") and "Rex" not in first
    assert await memory.block(ANN, 800, 10) == first  # read again unchanged
    await memory.touch(ANN, ["a0"], 900.0)
    moved = await memory.block(ANN, 800, 10)
    assert moved.index("likes green tea") < moved.index("lives in Porto")
    assert await memory.add(ANN, item("a7", "plays the cello", 950.0), max_items=10)
    assert "- [a7] plays the cello" in (await memory.block(ANN, 800, 10)).splitlines()[1]
    await memory.delete(ANN, ["a7"])
    assert "cello" not in await memory.block(ANN, 800, 10)
    assert await memory.block(ANN, 9, 10) == render([item("a0", "likes green tea", 900.0)])  # only what fits
    await memory.clear(ANN)
    assert await memory.block(ANN, 800, 10) == "" and "Rex" in await memory.block(BOB, 800, 10)
