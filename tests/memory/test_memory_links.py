"""Linked accounts are one person (botweave.identity), on every store: a code works once, the
joining account's items move into the joined memory, and /unlink from either side parts them."""

from __future__ import annotations

from botweave.identity import person_of
from botweave.memory import Links, MemoryConfig, MemoryKeeper


async def test_a_code_joins_two_accounts_once_and_unlink_parts_them(store):
    links = Links(store)
    code = await links.issue("telegram", "1")
    assert (await links.redeem("web", "ann", "wrong-code")).status == "wrong_code"
    joined = await links.redeem("web", "ann", code.lower())  # codes are read case-blind
    assert (joined.status, joined.person, joined.was) == ("linked", "telegram:1", "web:ann")
    assert await person_of(store, "web", "ann") == "telegram:1"
    assert (await links.redeem("discord", "9", code)).status == "wrong_code"  # used once
    again = await links.issue("web", "ann")
    assert (await links.redeem("telegram", "1", again)).status == "same_person"
    third = await links.issue("telegram", "1")
    assert (await links.redeem("discord", "9", third)).status == "linked"
    assert sorted(await links.members("telegram:1")) == ["discord:9", "web:ann"]
    assert await links.unlink("web", "ann") == ["telegram:1"]
    assert await person_of(store, "web", "ann") == "web:ann"
    assert await person_of(store, "discord", "9") == "telegram:1"
    assert await links.unlink("telegram", "1") == ["discord:9"]  # the person's own account parts the rest
    assert await person_of(store, "discord", "9") == "discord:9"
    assert await links.unlink("telegram", "1") == []


async def test_the_joining_accounts_items_move_into_the_joined_memory(store):
    keeper = MemoryKeeper(store, {"assistant": MemoryConfig(enabled=True, max_items=3)})
    await keeper.remember("assistant", "telegram:1", "likes tea", "telegram:dm:1")
    await keeper.remember("assistant", "web:ann", "works nights", "web:s1")
    await keeper.remember("assistant", "web:ann", "has a boat", "web:s1")
    await keeper.remember("assistant", "web:ann", "one too many", "web:s1")
    left = await keeper.merge("web:ann", "telegram:1")
    assert left == 1  # the joined memory holds three: the most recently used move first
    assert [e.item.text for e in await keeper.listing("telegram:1")] == ["likes tea", "has a boat", "one too many"]
    assert [e.item.text for e in await keeper.listing("web:ann")] == ["works nights"]


async def test_a_turn_reads_the_block_of_the_person_its_account_belongs_to(store):
    keeper = MemoryKeeper(store, {"assistant": MemoryConfig(enabled=True)})
    links = Links(store)
    await keeper.remember("assistant", "telegram:1", "likes tea", "telegram:dm:1")
    assert await keeper.backend.account_block("assistant", "web", "ann", 800, 200) == ""
    await links.redeem("web", "ann", await links.issue("telegram", "1"))
    assert "likes tea" in await keeper.backend.account_block("assistant", "web", "ann", 800, 200)
    await keeper.remember("assistant", "telegram:1", "has a boat", "web:s1")  # a change shows at once
    assert "has a boat" in await keeper.backend.account_block("assistant", "web", "ann", 800, 200)
    await links.unlink("web", "ann")
    assert await keeper.backend.account_block("assistant", "web", "ann", 800, 200) == ""
    assert "has a boat" in await keeper.backend.account_block("assistant", "telegram", "1", 800, 200)
