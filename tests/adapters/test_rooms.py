"""A room of agents bound to a chat, the same cases on every platform (drivers in rooms.py).

What a person in the chat would see is asserted: one post per agent, each under the agent's
name (its own author where the platform allows, else the name in front of the text), in the
planned order, and nothing more: the room's own posts coming back never start it again. What
only one platform has (Discord's webhooks, Slack's icons and scopes, Telegram's bold entity)
is in that platform's room tests.

The room has no `schedule:` here (a cron occurrence during a test run would add posts); the
stand-up test fires the kickoff with `run_now`, the path `botweave room run` takes.
"""

from __future__ import annotations

import asyncio

from tests.adapters.rooms import ECHO_GRACE_S, KICKOFF, ROSTER, SHOWN, RoomDriver, Verbose


async def test_a_person_gets_one_reply_per_agent_each_under_its_name(room: RoomDriver) -> None:
    await room.start()
    await room.say("what is the plan today?")  # no mention of the bot: the chat is the room's
    assert room.speakers() == list(SHOWN)  # round 0, roster order, one each
    for (_, words), agent in zip(room.turns(), ROSTER, strict=True):
        assert words.startswith(f"{agent} (offline echo) heard: ")  # each agent answered for itself
        assert "what is the plan today?" in words  # and saw the person's words
    assert room.post_calls() == 3


async def test_a_mention_drives_one_follow_up_round_and_the_round_cap_holds(room: RoomDriver) -> None:
    await room.start()
    await room.say("@critic please check the numbers")
    # A person's mention admits nobody, but the echo agents repeat what they heard, so each of
    # them mentions @critic: critic alone speaks in round 1, and max_rounds=2 ends it there.
    assert room.speakers() == [*SHOWN, "critic"]
    assert "This is round 2." in room.turns()[3][1]
    assert await room.quiet() == len(room.posts())  # no post beyond the caps (a long turn may take two)
    # the next person's message opens a new activity at round 0 (the transcript it is given
    # still quotes @critic, so critic is admitted to round 1 again)
    await room.say("thanks, and tomorrow?")
    assert room.speakers()[4:] == [*SHOWN, "critic"]


async def test_the_rooms_own_posts_coming_back_do_not_trigger_it_again(room: RoomDriver) -> None:
    await room.start()
    await room.echo_own_posts()
    await room.say("status, please")
    await room.echo_own_posts()
    assert await room.quiet() == 3
    own = room.own_items()  # what of the echoes the adapter handed on: nothing, or all as the bot's own
    assert len(own) == (0 if room.drops_own_posts else 3)
    assert all(room.adapter.is_self(item.sender.user_id) for item in own)
    await asyncio.sleep(ECHO_GRACE_S)
    assert room.post_calls() == 3  # still nothing new


async def test_a_stand_up_kickoff_posts_once_per_agent(room: RoomDriver) -> None:
    await room.start()
    await room.kickoff()
    await room.quiet()
    posts = room.posts()
    assert room.speakers() == list(SHOWN)
    assert all(KICKOFF in p.words for p in posts)  # every agent was given the kickoff
    assert room.post_calls() == 3  # the kickoff itself is not posted
    assert not any(p.is_reply for p in posts)


async def test_a_long_agent_turn_arrives_in_full_under_its_name(room: RoomDriver) -> None:
    await room.start(room.config(model=Verbose.register()))
    await room.kickoff()
    await room.quiet()
    assert room.refused_posts() == []
    assert room.authors() == list(SHOWN)  # every piece within the limit, each turn's pieces under its name
    assert len(room.posts()) > 3  # the turns continued in further posts
    words = " ".join(p.words for p in room.posts()).split()
    assert words.count("word") == 3 * 999 and words.count("end.") == 3  # every turn, in full
