"""Who speaks next in a room: a pure function of the roster and the transcript.

Nothing here reads a clock, a store or a random source. That is the whole point: the runtime
persists the transcript, and a room restored from it after a restart asks the same question
and gets the same answer, so no agent speaks twice and none is skipped.

Mentions are matched against roster ids case-insensitively (`@Critic` admits `critic`),
because models and people capitalise names freely; the roster's own spelling is what the
planner returns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["RoomEvent", "RoundRobinRoomPlanner", "extract_mentions", "next_round"]

# `@name`: letters, digits, `_`, `-`, `.`; the `@` must not follow a word character or another
# `@`, so `a@b` (an e-mail address) and `@@x` are not mentions.
_MENTION = re.compile(r"(?<![\w@])@([\w.\-]+)")


def extract_mentions(text: str) -> list[str]:
    """The `@name` tokens of `text`, de-duplicated, in first-occurrence order.

    Trailing dots are sentence punctuation, not part of a name: "ask @critic." yields
    "critic" and "@a.b" yields "a.b". A token that is only dots ("@...") is not a mention.
    De-duplication is exact (case preserved), so the caller sees what was written.
    """
    if not text:
        return []
    seen: dict[str, None] = {}
    for match in _MENTION.finditer(text):
        name = match.group(1).rstrip(".")
        if name and name not in seen:
            seen[name] = None
    return list(seen)


@dataclass(frozen=True, slots=True)
class RoomEvent:
    """One entry of a room's transcript.

    `speaker` is a roster id for an agent's turn, anything else (a person's display name, or
    "schedule" for a kickoff) for a message that opens an activity. `round` is the planner
    round the turn belongs to (0 for the opening message). `passed` marks a turn the agent
    declined, failed, or could not take; it still counts as having spoken.
    """

    speaker: str
    content: str
    round: int = 0
    passed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoomEvent:
        """Tolerant of missing optional keys so older persisted transcripts still load."""
        return cls(
            speaker=str(data["speaker"]),
            content=str(data.get("content") or ""),
            round=int(data.get("round") or 0),
            passed=bool(data.get("passed", False)),
        )


def _activity(roster: Sequence[str], transcript: Sequence[RoomEvent]) -> Sequence[RoomEvent] | None:
    """The transcript from the last message by a non-roster speaker on, or None if there is none."""
    members = set(roster)
    for index in range(len(transcript) - 1, -1, -1):
        if transcript[index].speaker not in members:
            return transcript[index:]
    return None


def _admitted(roster: Sequence[str], activity: Sequence[RoomEvent], round_: int) -> list[str]:
    """Roster agents allowed to speak in `round_`, in roster order (never mention order)."""
    if round_ == 0:
        return list(roster)
    members = set(roster)
    by_fold = {name.casefold(): name for name in roster}
    mentioned: set[str] = set()
    for event in activity:
        # Only agents' own words admit: a person's @mention opens round 0 for everyone anyway,
        # and a pass said nothing.
        if event.round != round_ - 1 or event.speaker not in members or event.passed:
            continue
        for name in extract_mentions(event.content):
            agent = by_fold.get(name.casefold())
            if agent is not None:
                mentioned.add(agent)
    return [name for name in roster if name in mentioned]


def _candidates(
    roster: Sequence[str], activity: Sequence[RoomEvent], last_round: int | None
) -> tuple[str, int] | None:
    """The first (speaker, round) from the activity's highest round on, up to `last_round`.

    Rounds beyond `highest + 1` can admit nobody (nobody spoke in the round before them), so
    the scan is short even without a cap.
    """
    highest = max((event.round for event in activity), default=0)
    stop = highest + 2 if last_round is None else min(last_round + 1, highest + 2)
    members = set(roster)
    for round_ in range(highest, stop):
        spoken = {e.speaker for e in activity if e.round == round_ and e.speaker in members}
        for name in _admitted(roster, activity, round_):
            if name not in spoken:
                return name, round_
    return None


def next_round(roster: Sequence[str], transcript: Sequence[RoomEvent], speaker: str) -> int:
    """The round in which `speaker`, chosen by a planner for this transcript, speaks.

    The runtime records it as the new event's `round`. Raises ValueError when `speaker` has
    no open slot (the caller asked about someone the planner would not have chosen).
    """
    activity = _activity(roster, transcript)
    if activity is None or speaker not in roster:
        raise ValueError(f"{speaker!r} cannot speak: no activity or not on the roster")
    highest = max((event.round for event in activity), default=0)
    members = set(roster)
    for round_ in range(highest, highest + 2):
        spoken = {e.speaker for e in activity if e.round == round_ and e.speaker in members}
        if speaker in _admitted(roster, activity, round_) and speaker not in spoken:
            return round_
    raise ValueError(f"{speaker!r} has no open turn in the current activity")


@dataclass(frozen=True)
class RoundRobinRoomPlanner:
    """Round 0: every roster agent once, in roster order; round r: the agents @-mentioned by
    agents in round r-1, again in roster order. Caps bound every activity so two agents
    mentioning each other cannot talk forever.

    `max_messages` counts every event of the activity: the opening message, replies and passes.
    """

    max_rounds: int = 3
    max_messages: int = 20

    def __post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError("max_rounds must be at least 1")
        if self.max_messages < 1:
            raise ValueError("max_messages must be at least 1")

    def plan(self, roster: Sequence[str], transcript: Sequence[RoomEvent]) -> tuple[str, int] | None:
        """The next (speaker, round), or None when the activity is settled."""
        if not roster:
            return None
        activity = _activity(roster, transcript)
        if activity is None or len(activity) >= self.max_messages:
            return None
        return _candidates(roster, activity, self.max_rounds - 1)

    def plan_next(self, roster: Sequence[str], transcript: Sequence[RoomEvent]) -> str | None:
        """The next speaker (a roster id), or None when the activity is settled."""
        step = self.plan(roster, transcript)
        return None if step is None else step[0]
