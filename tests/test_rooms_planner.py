"""The room planner: mentions, rounds, caps, restarts, table-driven."""

import pytest
from botweave.rooms import RoomEvent, RoundRobinRoomPlanner, extract_mentions, next_round

ROSTER = ["planner", "researcher", "critic"]


def E(speaker: str, content: str = "", round: int = 0, passed: bool = False) -> RoomEvent:
    return RoomEvent(speaker, content, round, passed)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("no mentions here", []),
        ("hey @coder and @reviewer, then @coder again", ["coder", "reviewer"]),
        ("@critic first", ["critic"]),
        ("mail me at foo@bar.com", []),  # preceded by a word character
        ("@@double", []),  # preceded by @
        ("ask @critic.", ["critic"]),  # sentence full stop is not part of the name
        ("ask @critic... then", ["critic"]),
        ("@a.b and @a.b.", ["a.b"]),  # inner dots are part of the name
        ("@data-bot, @data_bot", ["data-bot", "data_bot"]),
        ("(@critic) [@planner]", ["critic", "planner"]),
        ("@Critic @critic", ["Critic", "critic"]),  # case preserved, exact de-dup
        ("@... nothing", []),
        ("@r2d2!", ["r2d2"]),
        ("@ critic", []),
    ],
)
def test_extract_mentions(text, expected):
    assert extract_mentions(text) == expected


def test_room_event_round_trips_through_dict():
    event = RoomEvent("critic", "hi @planner", 2, passed=True)
    assert RoomEvent.from_dict(event.to_dict()) == event
    assert RoomEvent.from_dict({"speaker": "Ada", "content": "hi"}) == RoomEvent("Ada", "hi", 0, False)
    with pytest.raises(AttributeError):
        event.speaker = "x"  # frozen


CASES = [
    # (id, roster, transcript, planner kwargs, expected next speaker)
    ("no activity", ROSTER, [], {}, None),
    ("only agents, no opener", ROSTER, [E("planner", "hi")], {}, None),
    ("empty roster", [], [E("Ada", "hi")], {}, None),
    ("round 0 first", ROSTER, [E("Ada", "hi")], {}, "planner"),
    ("round 0 second", ROSTER, [E("Ada", "hi"), E("planner", "x")], {}, "researcher"),
    ("round 0 third", ROSTER, [E("Ada", "hi"), E("planner", "x"), E("researcher", "y")], {}, "critic"),
    (
        "settled without mentions",
        ROSTER,
        [E("Ada", "hi"), E("planner", "x"), E("researcher", "y"), E("critic", "z")],
        {},
        None,
    ),
    (
        "mentions admit in roster order, not mention order",
        ROSTER,
        [E("Ada", "hi"), E("planner", "@critic then @researcher"), E("researcher", "y"), E("critic", "z")],
        {},
        "researcher",
    ),
    (
        "second admitted agent of round 1",
        ROSTER,
        [
            E("Ada", "hi"), E("planner", "@critic then @researcher"), E("researcher", "y"), E("critic", "z"),
            E("researcher", "ok", 1),
        ],
        {},
        "critic",
    ),
    (
        "round 1 settles when nobody mentions",
        ROSTER,
        [
            E("Ada", "hi"), E("planner", "@critic"), E("researcher", "y"), E("critic", "z"),
            E("critic", "done", 1),
        ],
        {},
        None,
    ),
    (
        "self-mention admits itself to the next round",
        ROSTER,
        [E("Ada", "hi"), E("planner", "I, @planner, will follow up"), E("researcher", "y"), E("critic", "z")],
        {},
        "planner",
    ),
    (
        "mention case-insensitive",
        ROSTER,
        [E("Ada", "hi"), E("planner", "@Critic?"), E("researcher", "y"), E("critic", "z")],
        {},
        "critic",
    ),
    (
        "human mentions admit nobody",
        ROSTER,
        [E("Ada", "@critic @planner please"), E("planner", "x"), E("researcher", "y"), E("critic", "z")],
        {},
        None,
    ),
    (
        "mention of a non-member admits nobody",
        ROSTER,
        [E("Ada", "hi"), E("planner", "@nobody"), E("researcher", "y"), E("critic", "z")],
        {},
        None,
    ),
    (
        "a pass counts as speaking",
        ROSTER,
        [E("Ada", "hi"), E("planner", "", passed=True)],
        {},
        "researcher",
    ),
    (
        "a pass's content admits nobody",
        ["a", "b"],
        [E("Ada", "hi"), E("a", "@b", passed=True), E("b", "z")],
        {},
        None,
    ),
    (
        "mention rounds later than round 1",
        ["a", "b"],
        [E("Ada", "hi"), E("a", "@b"), E("b", "@a"), E("b", "@a", 1)],
        {},
        "a",
    ),
    (
        "max_rounds stops mention rounds",
        ["a", "b"],
        [E("Ada", "hi"), E("a", "@b"), E("b", "@a")],
        {"max_rounds": 1},
        None,
    ),
    (
        "max_rounds=2 allows exactly one mention round",
        ["a", "b"],
        [E("Ada", "hi"), E("a", "@b"), E("b", "@a"), E("b", "@a", 1), E("a", "@b", 1)],
        {"max_rounds": 2},
        None,
    ),
    (
        "max_messages counts the human",
        ROSTER,
        [E("Ada", "hi"), E("planner", "x")],
        {"max_messages": 2},
        None,
    ),
    (
        "max_messages counts passes",
        ROSTER,
        [E("Ada", "hi"), E("planner", "", passed=True), E("researcher", "", passed=True)],
        {"max_messages": 3},
        None,
    ),
    (
        "max_messages one below the cap still plans",
        ROSTER,
        [E("Ada", "hi"), E("planner", "", passed=True)],
        {"max_messages": 3},
        "researcher",
    ),
    (
        "a new human message restarts at round 0",
        ["a", "b"],
        [E("Ada", "hi"), E("a", "@b"), E("b", "x"), E("b", "@a", 1), E("a", "y", 2), E("Bo", "again")],
        {},
        "a",
    ),
    (
        "the message cap is per activity",
        ["a", "b"],
        [E("Ada", "hi"), E("a", "x"), E("b", "y"), E("Bo", "again")],
        {"max_messages": 3},
        "a",
    ),
    (
        "stale mentions of an earlier activity do not leak",
        ["a", "b"],
        [E("Ada", "first"), E("a", "@b"), E("b", "x"), E("Ada", "second"), E("a", "quiet"), E("b", "quiet")],
        {},
        None,
    ),
    (
        "a scheduled kickoff opens an activity like a person",
        ["a", "b"],
        [E("schedule", "stand-up time")],
        {},
        "a",
    ),
    (
        "roster ids without agents are still planned (the runtime records their pass)",
        ["a", "ghost", "b"],
        [E("Ada", "hi"), E("a", "x")],
        {},
        "ghost",
    ),
]


@pytest.mark.parametrize(("roster", "transcript", "kwargs", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_plan_next(roster, transcript, kwargs, expected):
    planner = RoundRobinRoomPlanner(**kwargs)
    assert planner.plan_next(roster, transcript) == expected
    # Pure: asking again, or on a copy, gives the same answer.
    assert planner.plan_next(list(roster), list(transcript)) == expected


def simulate(roster, opener, replies, **kwargs):
    """Drive the planner like the runtime does; `replies[name]` is a list of successive replies."""
    planner = RoundRobinRoomPlanner(**kwargs)
    transcript = [E("Ada", opener)]
    spoken = []
    counters = {name: 0 for name in roster}
    while (step := planner.plan(roster, transcript)) is not None:
        name, round_ = step
        assert next_round(roster, transcript, name) == round_
        said = replies.get(name, [""])
        text = said[min(counters[name], len(said) - 1)]
        counters[name] += 1
        transcript.append(E(name, text, round_, passed=not text))
        spoken.append((name, round_))
    return spoken


def test_full_schedule_with_mentions():
    replies = {
        "planner": ["Plan: @critic and @researcher check this", "ok"],
        "researcher": ["found it", "more data"],
        "critic": ["@planner is this safe?", "fine"],
    }
    assert simulate(ROSTER, "build X", replies) == [
        ("planner", 0), ("researcher", 0), ("critic", 0),
        ("planner", 1), ("researcher", 1), ("critic", 1),
    ]


def test_ping_pong_stops_at_max_rounds():
    replies = {"a": ["@b"], "b": ["@a"]}
    assert simulate(["a", "b"], "go", replies, max_rounds=4) == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3)]


def test_ping_pong_stops_at_max_messages():
    replies = {"a": ["@b"], "b": ["@a"]}
    spoken = simulate(["a", "b"], "go", replies, max_rounds=50, max_messages=5)
    assert len(spoken) == 4  # + the human message = 5


def test_next_round_rejects_someone_without_a_turn():
    with pytest.raises(ValueError):
        next_round(ROSTER, [E("Ada", "hi"), E("planner", "x")], "planner")
    with pytest.raises(ValueError):
        next_round(ROSTER, [], "planner")


@pytest.mark.parametrize("kwargs", [{"max_rounds": 0}, {"max_messages": 0}])
def test_planner_caps_must_be_positive(kwargs):
    with pytest.raises(ValueError):
        RoundRobinRoomPlanner(**kwargs)
