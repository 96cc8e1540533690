"""A room at run time: take one opening message, then let the agents take turns.

Decisions made here, and why:
- The transcript lives in the store (`room:<name>:transcript:<conversation>`, one JSON event
  per list entry) and is re-read at the start of every turn, so a restarted process, or a
  room object rebuilt from config, continues exactly where the planner says.
- Each agent turn is appended to the store *before* it is posted. If posting fails or the
  process dies in between, the turn is not re-run (no duplicate post); the planner moves on.
- A member is asked with an empty chat history and one user turn holding, in order, the room's
  shared instructions, a line saying who it is and who else is in the room, the rendered
  transcript (people by display name, agents by roster id), and how to pass. The member's own
  `instructions` stay its system prompt. One self-contained turn works with every provider
  (no consecutive same-role messages) and shows the offline echo model exactly what it got.
- Turns of one room and conversation are serialised by a lock taken before the first await,
  so messages are handled in arrival order and a drain is never interleaved with another.
- A reply that is empty or exactly `NO_REPLY`, a failing agent, and a roster id with no agent
  all record a pass: the planner counts it as speaking, nothing is posted, nothing crashes.
- Openers are recorded under a name that is never a roster id (a person called "critic" becomes
  "critic (person)"), since the planner tells agents from openers by roster membership alone.
- A member answering an activity a person opened gets that person's message as its tools'
  origin, so `ask_user` asks them; the members speak one at a time, so the others wait for the
  answer. An activity a schedule opened has nobody to ask.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from botweave.agents import Briefing, ToolTurn
from botweave.conversations import ConversationLocks
from botweave.rooms.config import RoomConfig
from botweave.rooms.planner import RoomEvent, RoundRobinRoomPlanner
from botweave.store import Store, store_failures
from botweave.tooling import Asks, ToolContext
from botweave.types import BotMessage

__all__ = ["PASS_TOKEN", "Post", "PostFailed", "Room", "RoomMember", "render_transcript"]

log = logging.getLogger(__name__)

PASS_TOKEN = "NO_REPLY"
KICKOFF_SPEAKER = "schedule"
Post = Callable[[str, str, str], Awaitable[None]]
"""`post(conversation_key, speaker, text)`: publish one turn under the speaker's identity;
`PostFailed` when the platform did not take it."""


class PostFailed(RuntimeError):
    """A turn the platform did not take (its result says why); the room goes on without it."""


@runtime_checkable
class RoomMember(Protocol):
    """What a room needs from an agent; `bots.agents.Agent` satisfies it."""

    name: str

    async def complete(self, history: list[dict[str, Any]], user_turn: str, turn: ToolTurn | None = None) -> str: ...


def render_transcript(events: Sequence[RoomEvent], max_chars_per_event: int = 4000) -> str:
    """One line per event, `speaker: text`; passes shown so agents know who stayed quiet.

    Long events are cut so one verbose reply cannot crowd everything else out of the prompt.
    """
    lines = []
    for event in events:
        if event.passed:
            lines.append(f"({event.speaker} passed)")
            continue
        text = event.content
        if len(text) > max_chars_per_event:
            text = text[:max_chars_per_event] + " […]"
        lines.append(f"{event.speaker}: {text}")
    return "\n".join(lines)


class Room:
    """One configured room bound to its agents, a store and a way to post.

    `context_events` bounds how much of the persisted transcript an agent sees (the current
    activity is always included in full, it is capped by `max_messages`); `max_transcript`
    bounds what is kept in the store per conversation.
    """

    def __init__(
        self,
        config: RoomConfig,
        agents: Mapping[str, RoomMember],
        store: Store,
        post: Post,
        *,
        context_events: int = 40,
        max_transcript: int = 1000,
        asks: Asks | None = None,
        briefing: Briefing | None = None,
    ) -> None:
        self.briefing = briefing
        self.config = config
        self.asks = asks
        self.agents = dict(agents)
        self.store = store
        self.post = post
        self.planner = RoundRobinRoomPlanner(config.max_rounds, config.max_messages)
        self.context_events = context_events
        self.max_transcript = max(max_transcript, config.max_messages + 1)
        self._locks = ConversationLocks()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def roster(self) -> tuple[str, ...]:
        return self.config.roster

    def transcript_key(self, conversation: str) -> str:
        return f"room:{self.name}:transcript:{conversation}"

    async def load_transcript(self, conversation: str) -> list[RoomEvent]:
        """The persisted transcript of `conversation`, oldest first."""
        raw = await self.store.list_range(self.transcript_key(conversation), -self.max_transcript, -1)
        events = []
        for item in raw:
            try:
                events.append(RoomEvent.from_dict(json.loads(item)))
            except (ValueError, KeyError, TypeError):
                log.warning("room %s: skipping an unreadable transcript entry in %s", self.name, conversation)
        return events

    async def reset(self, conversation: str) -> None:
        """Forget a conversation's transcript (e.g. a `/reset` in the room's channel)."""
        async with self._locks.hold(conversation):
            await self.store.delete(self.transcript_key(conversation))

    async def next_speaker(self, conversation: str) -> str | None:
        """Who the planner would let speak next, from the persisted transcript alone."""
        return self.planner.plan_next(self.roster, await self.load_transcript(conversation))

    def opener_name(self, speaker: str) -> str:
        """The name a non-agent speaker is recorded under.

        A person whose display name equals a roster id (or is blank) would otherwise be taken
        for that agent and could never open an activity, so such names get a suffix.
        """
        name = " ".join(speaker.split()) or "someone"
        if name.casefold() in {member.casefold() for member in self.roster}:
            name = f"{name} (person)"
        return name

    async def handle_human(
        self, conversation: str, speaker_display_name: str, text: str, origin: BotMessage | None = None
    ) -> list[RoomEvent]:
        """Record a person's message and let the agents answer until the planner settles.
        `origin` is that message: the agents' turns answer its author, whose memory (each
        agent its own) they are given and whom they may ask (`ask_user`).

        Returns the events this call added, the person's message first; an empty list when
        the message is recognisably the room's own post coming back (see `_is_echo`).
        """
        return await self._open(
            conversation, self.opener_name(speaker_display_name), text, speaker_display_name, origin
        )

    async def kickoff(self, conversation: str, text: str, speaker: str = KICKOFF_SPEAKER) -> list[RoomEvent]:
        """Open an activity without a person, e.g. a scheduled stand-up."""
        return await self._open(conversation, self.opener_name(speaker), text)

    async def _open(
        self, conversation: str, speaker: str, text: str, author: str | None = None, origin: BotMessage | None = None
    ) -> list[RoomEvent]:
        async with self._locks.hold(conversation):
            if author is not None and await self._is_echo(conversation, author, text):
                log.info("room %s: dropping %s's own post coming back in %s", self.name, author, conversation)
                return []
            opening = RoomEvent(speaker, text, 0)
            await self._append(conversation, opening)
            transcript = await self.load_transcript(conversation)
            return [opening, *await self._drain(conversation, transcript, origin)]

    async def _is_echo(self, conversation: str, author: str, text: str) -> bool:
        """A message under an agent's name repeating that agent's recent turn is our own post.

        Adapters should drop the room's posts before they get here (webhook ids, bot flags);
        this is the last line of defence against a room answering itself forever. A person
        who merely shares an agent's name is not affected unless they repeat its words.
        """
        agent = {m.casefold(): m for m in self.roster}.get(" ".join(author.split()).casefold())
        if agent is None:
            return False
        recent = await self.store.list_range(self.transcript_key(conversation), -self.config.max_messages, -1)
        for item in recent:
            try:
                event = RoomEvent.from_dict(json.loads(item))
            except (ValueError, KeyError, TypeError):
                continue
            if event.speaker == agent and not event.passed and event.content.strip() == text.strip():
                return True
        return False

    async def _append(self, conversation: str, event: RoomEvent) -> None:
        await self.store.list_append(
            self.transcript_key(conversation),
            json.dumps(event.to_dict(), ensure_ascii=False),
            max_len=self.max_transcript,
        )

    async def _drain(
        self, conversation: str, transcript: list[RoomEvent], origin: BotMessage | None = None
    ) -> list[RoomEvent]:
        added: list[RoomEvent] = []
        # Every turn appends one event and the planner caps an activity at max_messages,
        # so this loop ends; the explicit bound guards against a planner bug.
        for _ in range(self.config.max_messages):
            step = self.planner.plan(self.roster, transcript)
            if step is None:
                break
            speaker, round_ = step
            text = await self._ask(speaker, round_, transcript, conversation, origin)
            passed = text is None
            event = RoomEvent(speaker, text or "", round_, passed)
            transcript.append(event)
            added.append(event)
            await self._append(conversation, event)
            if not passed:
                try:
                    await self.post(conversation, speaker, event.content)
                except store_failures(PostFailed):  # the platform or the store; the room goes on
                    log.exception("room %s: posting %s's turn in %s failed", self.name, speaker, conversation)
        return added

    async def _ask(
        self, speaker: str, round_: int, transcript: list[RoomEvent], conversation: str = "",
        origin: BotMessage | None = None,
    ) -> str | None:
        """The member's reply, or None for a pass. A turn a person's message opened answers
        that person: its tools act for them and it is told what it remembers of them."""
        member = self.agents.get(speaker)
        if member is None:
            log.warning("room %s: roster id %s has no agent; recording a pass", self.name, speaker)
            return None
        prompt = self.user_turn(speaker, round_, transcript)
        try:
            # A stand-up nobody opened still runs in the room's conversation: its calls count
            # against the agent's budget and the room's channel.
            turn = ToolTurn(ToolContext(member.name, origin, conversation, asks=self.asks))
            if origin is not None and self.briefing is not None:
                turn.instructions = await self.briefing(member.name, origin)
            reply = await member.complete([], prompt, turn)
        except Exception as exc:  # boundary: a room member's turn (its model, its briefing); it passes, the room goes on
            log.warning("room %s: %s failed, recording a pass: %s", self.name, speaker, exc)
            return None
        reply = (reply or "").strip()
        if not reply or reply == PASS_TOKEN:
            return None
        return reply

    def user_turn(self, speaker: str, round_: int, transcript: Sequence[RoomEvent]) -> str:
        """The prompt for `speaker`'s turn (see the module docstring for its layout)."""
        members = set(self.roster)
        start = len(transcript)
        for index in range(len(transcript) - 1, -1, -1):
            if transcript[index].speaker not in members:
                start = index
                break
        start = min(start, max(0, len(transcript) - self.context_events))
        others = [m for m in self.roster if m != speaker]
        parts = []
        if self.config.instructions:
            parts.append(self.config.instructions.strip())
        parts.append(
            f"You are {speaker} in the room {self.name}"
            + (f" with {', '.join(others)}." if others else ".")
            + f" This is round {round_ + 1}."
        )
        parts.append("Transcript:\n" + render_transcript(transcript[start:]))
        parts.append(
            f"Reply as {speaker}. To ask another member to follow up, mention them with @ and their name. "
            f"Reply {PASS_TOKEN} if you have nothing to add."
        )
        return "\n\n".join(parts)
