"""Discord under fuzz: mutated real gateway dispatches, sent over the emulator's gateway
WebSocket to the real discord.py client, through the adapter's normaliser.

Every dispatch must become a message, an event or a logged skip; the gateway connection must
survive all of them (one login, still connected), and a valid message must still be answered
afterwards.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from botweave.types import BotMessage
from hypothesis import given
from hypothesis import strategies as st

from tests.adapters.platforms import discord_into_a_list
from tests.emulators import discord as discord_emulator
from tests.emulators.discord import CHANNEL_ID, DM_CHANNEL_ID, GUILD_ID, DiscordEmulator, thread, user
from tests.fuzz.strategies import mutated
from tests.fuzz.support import Tally, counting_tracebacks, describe


def real_dispatches(emu: DiscordEmulator) -> list[tuple[str, dict[str, Any]]]:
    """One gateway dispatch of every kind the adapter reads, as the emulator (and Discord) sends them."""
    first = emu.message(f"hello <@{discord_emulator.BOT_ID}> see <#{CHANNEL_ID}>", channel_id=CHANNEL_ID,
                        mentions=[user(discord_emulator.BOT_ID, "weaver", bot=True)])
    reply = emu.message("a reply", channel_id=CHANNEL_ID, reply_to=first)
    file = emu.message("", channel_id=CHANNEL_ID, attachments=[{
        "id": "5000", "filename": "a.png", "size": 4, "url": f"{emu.cdn_base}/attachments/a.png",
        "proxy_url": f"{emu.cdn_base}/attachments/a.png", "content_type": "image/png"}])
    dm = emu.message("in a DM", channel_id=DM_CHANNEL_ID)
    hooked = emu.message("from a webhook", channel_id=CHANNEL_ID, webhook_id="4242",
                         author=user("4242", "hook", bot=True))
    created = copy.deepcopy(first)  # the edit below changes the stored message in place
    return [
        ("MESSAGE_CREATE", created),
        ("MESSAGE_CREATE", reply),
        ("MESSAGE_CREATE", file),
        ("MESSAGE_CREATE", dm),
        ("MESSAGE_CREATE", hooked),
        ("MESSAGE_UPDATE", emu.user_edit(first, "hello, edited")),
        ("MESSAGE_DELETE", {"id": reply["id"], "channel_id": CHANNEL_ID, "guild_id": GUILD_ID}),
        ("MESSAGE_DELETE_BULK", {"ids": ["11", "12"], "channel_id": CHANNEL_ID, "guild_id": GUILD_ID}),
        ("MESSAGE_REACTION_ADD", emu.reaction(first, emu.alice, "👍")),
        ("MESSAGE_REACTION_REMOVE", emu.reaction(first, emu.alice, "party:123")),
        ("THREAD_CREATE", thread("2400", CHANNEL_ID, "notes", discord_emulator.ALICE_ID, newly_created=True)),
        ("GUILD_MEMBER_REMOVE", {"guild_id": GUILD_ID, "user": user("7002", "carol")}),
        ("INTERACTION_CREATE", emu.button_press(dm, "choice:1")),
    ]


async def _deliver(emu: DiscordEmulator, received: list[Any], event: str, data: Any, barrier: int) -> list[Any]:
    """Send one dispatch, then a message whose arrival shows the first one was read; what
    the adapter handed on for the first one."""
    before = len(received)
    await emu.dispatch(event, data)
    marker = f"barrier {barrier}"
    await emu.dispatch("MESSAGE_CREATE", emu.message(marker, channel_id=DM_CHANNEL_ID, store=False))
    for _ in range(1000):
        if any(isinstance(i, BotMessage) and i.text == marker for i in received[before:]):
            break
        await asyncio.sleep(0.005)
    else:
        raise AssertionError(f"the gateway stopped delivering after a {event} dispatch")
    return [i for i in received[before:] if not (isinstance(i, BotMessage) and i.text == marker)]


def test_any_gateway_dispatch_becomes_items_or_a_skip_and_the_connection_stays() -> None:
    tally = Tally("discord gateway normaliser")
    with asyncio.Runner() as runner, counting_tracebacks(tally) as tracebacks:
        emu, adapter, received = runner.run(discord_into_a_list())
        dispatches = real_dispatches(emu)
        counter = iter(range(10**9))
        try:

            @given(dispatch=st.sampled_from(dispatches).flatmap(
                lambda d: mutated(d[1]).map(lambda data: (d[0], data))))
            def example(dispatch: tuple[str, Any]) -> None:
                event, data = dispatch
                tally.tried += 1
                items = runner.run(_deliver(emu, received, event, data, next(counter)))
                tally.handed_on(items, none="skipped")

            example()
            assert emu.connected and len(emu.calls("GET", "/users/@me")) == 1  # never reconnected or logged in again
            items = runner.run(_deliver(emu, received, *dispatches[0], barrier=-1))
            assert [i.text for i in items if isinstance(i, BotMessage)] == ["hello see #general"]
        finally:
            runner.run(adapter.stop())
            runner.run(emu.stop())
    assert tracebacks.records == [], describe(tracebacks.records)
    tally.report()
