"""The room runtime: real offline agents, serialised drains, persistence."""

import asyncio
import json

import pytest
from botweave.agents import Agent
from botweave.config import AgentConfig
from botweave.rooms import Room, RoomConfig, RoomEvent, RoundRobinRoomPlanner
from botweave.store import MemoryStore

ROSTER = ("planner", "researcher", "critic")


class Posts:
    """The `post` callable: records what would be sent under which identity."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []

    async def __call__(self, conversation: str, speaker: str, text: str) -> None:
        self.sent.append((conversation, speaker, text))

    def speakers(self) -> list[str]:
        return [speaker for _, speaker, _ in self.sent]


class Scripted:
    """A member with canned replies, one per turn (the last one repeats)."""

    def __init__(self, name: str, *replies: str, delay: float = 0.0) -> None:
        self.name = name
        self.replies = list(replies) or [f"{name} here"]
        self.delay = delay
        self.turns: list[str] = []

    async def complete(self, history: list[dict[str, str]], user_turn: str, turn: object = None) -> str:
        self.turns.append(user_turn)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.replies[min(len(self.turns) - 1, len(self.replies) - 1)]


class Failing:
    def __init__(self, name: str) -> None:
        self.name = name

    async def complete(self, history: list[dict[str, str]], user_turn: str, turn: object = None) -> str:
        raise RuntimeError("model unavailable")


def offline_agents(*names: str) -> dict[str, Agent]:
    return {name: Agent(name, AgentConfig(model="offline/echo")) for name in names}


def room_config(roster=ROSTER, **kwargs) -> RoomConfig:
    return RoomConfig(name="team", roster=tuple(roster), **kwargs)


def assert_follows_planner(room: Room, transcript: list[RoomEvent]) -> None:
    """Every agent event is exactly what the planner chose given the events before it."""
    planner = RoundRobinRoomPlanner(room.config.max_rounds, room.config.max_messages)
    members = set(room.roster)
    for index, event in enumerate(transcript):
        if event.speaker in members:
            assert planner.plan(room.roster, transcript[:index]) == (event.speaker, event.round), index
    assert planner.plan_next(room.roster, transcript) is None


async def test_three_offline_agents_answer_in_roster_order(store):
    posts = Posts()
    room = Room(room_config(), offline_agents(*ROSTER), store, posts)
    events = await asyncio.wait_for(room.handle_human("discord:1", "Ada Lovelace", "What should we build?"), 20)
    assert [(e.speaker, e.round, e.passed) for e in events] == [
        ("Ada Lovelace", 0, False), ("planner", 0, False), ("researcher", 0, False), ("critic", 0, False),
    ]
    assert posts.speakers() == ["planner", "researcher", "critic"]
    assert {conversation for conversation, _, _ in posts.sent} == {"discord:1"}
    # The echo shows what each agent was given: the transcript, people by display name.
    planner_text = posts.sent[0][2]
    assert planner_text.startswith("planner (offline echo) heard: ")
    assert "Ada Lovelace: What should we build?" in planner_text
    assert "planner (offline echo) heard:" in posts.sent[1][2]  # researcher saw planner's turn
    transcript = await room.load_transcript("discord:1")
    assert transcript == events
    assert_follows_planner(room, transcript)


async def test_offline_echo_of_a_mention_drives_mention_rounds_until_the_cap(store):
    posts = Posts()
    room = Room(room_config(max_rounds=3), offline_agents(*ROSTER), store, posts)
    await asyncio.wait_for(room.handle_human("c", "Ada", "@critic is this safe?"), 20)
    # Every echo repeats "@critic", so critic is admitted to rounds 1 and 2, then max_rounds holds.
    assert posts.speakers() == ["planner", "researcher", "critic", "critic", "critic"]
    transcript = await room.load_transcript("c")
    assert [e.round for e in transcript] == [0, 0, 0, 0, 1, 2]
    assert_follows_planner(room, transcript)


async def test_mentions_between_agents_follow_the_planner():
    posts = Posts()
    members = {
        "planner": Scripted("planner", "Plan ready. @critic and @researcher, check it.", "Thanks."),
        "researcher": Scripted("researcher", "Sources found.", "Confirmed."),
        "critic": Scripted("critic", "Looks risky.", "@planner one more thing.", "ok"),
    }
    room = Room(room_config(), members, MemoryStore(), posts)
    events = await room.handle_human("c", "Ada", "Plan the launch")
    assert [(e.speaker, e.round) for e in events[1:]] == [
        ("planner", 0), ("researcher", 0), ("critic", 0),
        ("researcher", 1), ("critic", 1),  # roster order, not mention order
        ("planner", 2),
    ]
    assert_follows_planner(room, await room.load_transcript("c"))


async def test_message_cap_counts_the_human_and_passes():
    posts = Posts()
    members = {"a": Scripted("a", "@b"), "b": Scripted("b", "NO_REPLY")}
    room = Room(room_config(("a", "b"), max_rounds=10, max_messages=3), members, MemoryStore(), posts)
    events = await room.handle_human("c", "Ada", "go")
    assert [(e.speaker, e.passed) for e in events] == [("Ada", False), ("a", False), ("b", True)]
    assert posts.speakers() == ["a"]


async def test_passes_missing_and_failing_agents_never_crash(caplog):
    posts = Posts()
    members = {
        "planner": Scripted("planner", "  "),  # blank: a pass
        "critic": Failing("critic"),
        "scribe": Scripted("scribe", "NO_REPLY"),
        "closer": Scripted("closer", "Done."),
    }
    room = Room(room_config(("planner", "ghost", "critic", "scribe", "closer")), members, MemoryStore(), posts)
    events = await room.handle_human("c", "Ada", "go")
    assert [(e.speaker, e.passed) for e in events[1:]] == [
        ("planner", True), ("ghost", True), ("critic", True), ("scribe", True), ("closer", False),
    ]
    assert posts.speakers() == ["closer"]
    assert "ghost has no agent" in caplog.text and "critic failed" in caplog.text


async def test_a_failing_post_is_logged_and_the_room_goes_on(caplog):
    calls: list[str] = []

    async def post(conversation: str, speaker: str, text: str) -> None:
        calls.append(speaker)
        if speaker == "a":
            raise ConnectionError("platform down")

    members = {"a": Scripted("a"), "b": Scripted("b")}
    room = Room(room_config(("a", "b")), members, MemoryStore(), post)
    events = await room.handle_human("c", "Ada", "go")
    assert calls == ["a", "b"] and len(events) == 3
    assert "posting a's turn" in caplog.text


async def test_concurrent_messages_never_interleave_a_drain():
    posts = Posts()
    members = {name: Scripted(name, f"{name} ok", delay=0.01) for name in ROSTER}
    room = Room(room_config(), members, MemoryStore(), posts)
    results = await asyncio.wait_for(
        asyncio.gather(
            room.handle_human("c", "Ada", "first"),
            room.handle_human("c", "Bo", "second"),
            room.handle_human("other", "Cy", "elsewhere"),
        ),
        10,
    )
    transcript = await room.load_transcript("c")
    assert [(e.speaker, e.content) for e in transcript] == [
        ("Ada", "first"), ("planner", "planner ok"), ("researcher", "researcher ok"), ("critic", "critic ok"),
        ("Bo", "second"), ("planner", "planner ok"), ("researcher", "researcher ok"), ("critic", "critic ok"),
    ]
    assert results[0] == transcript[:4] and results[1] == transcript[4:]
    assert [e.speaker for e in results[2]] == ["Cy", *ROSTER]
    # The second drain's agents saw the first activity in full.
    second_turn = next(t for t in members["planner"].turns if "Bo: second" in t)
    assert "Ada: first" in second_turn and "critic: critic ok" in second_turn
    assert [s for c, s, _ in posts.sent if c == "c"] == [*ROSTER, *ROSTER]


async def test_other_conversations_run_concurrently():
    gate = asyncio.Event()

    class Waiting(Scripted):
        async def complete(self, history, user_turn, turn=None):
            if "slow one" in user_turn:
                await gate.wait()
            return "done"

    room = Room(room_config(("a",)), {"a": Waiting("a")}, MemoryStore(), Posts())
    blocked = asyncio.create_task(room.handle_human("c1", "Ada", "slow one"))
    await asyncio.sleep(0.01)
    # Same room, another conversation: not held up by c1's drain.
    assert len(await asyncio.wait_for(room.handle_human("c2", "Bo", "quick"), 2)) == 2
    assert not blocked.done()
    gate.set()
    assert len(await asyncio.wait_for(blocked, 2)) == 2


async def test_restored_room_continues_with_the_same_speaker(store):
    """A drain interrupted mid-way (process killed) resumes exactly where the planner says."""
    gate = asyncio.Event()
    entered = asyncio.Event()

    class Hanging(Scripted):
        async def complete(self, history, user_turn, turn=None):
            entered.set()
            await gate.wait()
            return "never"

    members = {
        "planner": Scripted("planner", "@critic please review"),
        "researcher": Scripted("researcher", "data"),
        "critic": Hanging("critic"),
    }
    first = Room(room_config(), members, store, Posts())
    drain = asyncio.create_task(first.handle_human("slack:C1", "Ada", "go"))
    await asyncio.wait_for(entered.wait(), 5)
    drain.cancel()  # the process dies while critic is thinking
    with pytest.raises(asyncio.CancelledError):
        await drain

    posts = Posts()
    restored_members = {name: Scripted(name, f"{name} back") for name in ROSTER}
    restored = Room(room_config(), restored_members, store, posts)
    transcript = await restored.load_transcript("slack:C1")
    assert [e.speaker for e in transcript] == ["Ada", "planner", "researcher"]
    assert await restored.next_speaker("slack:C1") == "critic"
    assert await restored.next_speaker("slack:C1") == first.planner.plan_next(ROSTER, transcript)

    # A raw JSON list in the store is the whole state: the key and format are stable.
    raw = await store.list_range("room:team:transcript:slack:C1")
    assert json.loads(raw[1]) == {"speaker": "planner", "content": "@critic please review", "round": 0, "passed": False}


async def test_restored_transcript_mid_mention_round(store):
    transcript = [
        RoomEvent("Ada", "go"), RoomEvent("planner", "@critic @researcher"), RoomEvent("researcher", "r"),
        RoomEvent("critic", "c"), RoomEvent("researcher", "r1", 1),
    ]
    await store.list_append("room:team:transcript:t", *(json.dumps(e.to_dict()) for e in transcript))
    posts = Posts()
    room = Room(room_config(), {n: Scripted(n, "fine") for n in ROSTER}, store, posts)
    assert await room.next_speaker("t") == "critic"
    # A new message restarts round 0 on top of the restored history.
    events = await room.handle_human("t", "Ada", "next topic")
    assert [(e.speaker, e.round) for e in events[1:]] == [("planner", 0), ("researcher", 0), ("critic", 0)]


async def test_room_instructions_and_people_named_like_agents():
    members = {"planner": Scripted("planner", "ok")}
    room = Room(room_config(("planner",), instructions="Keep it under 50 words."), members, MemoryStore(), Posts())
    events = await room.handle_human("c", "planner", "hello")
    # A person called "planner" must not be mistaken for the agent (it could never open an activity).
    assert events[0].speaker == "planner (person)"
    turn = members["planner"].turns[0]
    assert turn.startswith("Keep it under 50 words.")
    assert "planner (person): hello" in turn and "You are planner in the room team." in turn


async def test_kickoff_opens_an_activity_without_a_person():
    posts = Posts()
    room = Room(room_config(), {n: Scripted(n) for n in ROSTER}, MemoryStore(), posts)
    events = await room.kickoff("discord:9", "Stand-up: yesterday, today, blockers?")
    assert events[0] == RoomEvent("schedule", "Stand-up: yesterday, today, blockers?", 0)
    assert posts.speakers() == list(ROSTER)


async def test_reset_forgets_the_transcript():
    room = Room(room_config(("a",)), {"a": Scripted("a")}, MemoryStore(), Posts())
    await room.handle_human("c", "Ada", "hi")
    await room.reset("c")
    assert await room.load_transcript("c") == []


async def test_the_rooms_own_post_coming_back_is_dropped():
    posts = Posts()
    room = Room(room_config(("planner", "critic")), {n: Scripted(n, f"{n} says hi") for n in ("planner", "critic")}, MemoryStore(), posts)
    await room.handle_human("c", "Ada", "hello")
    # A platform echo of critic's post (e.g. a webhook message the adapter let through).
    assert await room.handle_human("c", "critic", "critic says hi") == []
    # A person who happens to be called critic, saying something else, is heard.
    events = await room.handle_human("c", "Critic", "I am a person")
    assert events[0].speaker == "Critic (person)" and len(events) == 3
    assert posts.speakers() == ["planner", "critic", "planner", "critic"]
