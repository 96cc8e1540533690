"""Rooms bound to real channels: the runtime hands people's messages in, posts go out under
each agent's own identity, and stand-ups kick off on schedule.

A room's conversation is its target string (`platform:chat[:thread]`), so a stored
transcript names where it lives and a scheduled kickoff and a person's message in the same
channel continue one activity.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

from botweave.agents import Agent, Briefing
from botweave.files import message_text
from botweave.methods import Caller, MethodRegistry, NoParams
from botweave.pipeline import Handler, Inbound, TurnOutcome, TurnStatus
from botweave.rooms.config import RoomConfig
from botweave.rooms.planner import RoomEvent
from botweave.rooms.runtime import PostFailed, Room
from botweave.rooms.schedule import RoomScheduler
from botweave.store import Store
from botweave.tooling import Asks
from botweave.types import AgentIdentity, BotMessage, MessageActionResult

log = logging.getLogger(__name__)

PostAs = Callable[[str, AgentIdentity, str], Awaitable[MessageActionResult]]
"""`post_as(target, identity, text)`: deliver one agent turn to a target."""
Posted = Callable[[str, str, str], Awaitable[None]]
"""`posted(room_name, speaker, text)`: told after each post (push triggers)."""
Missed = Callable[[str, str], Awaitable[None]]
"""`missed(room_name, detail)`: a stand-up that was missed or failed."""


def room_conversation(msg: BotMessage) -> str:
    base = f"{msg.platform}:{msg.channel.channel_id}"
    return f"{base}:{msg.thread_id}" if msg.thread_id else base


def identity_of(agent: Agent) -> AgentIdentity:
    cfg = agent.config
    return AgentIdentity(cfg.display_name or agent.name, cfg.avatar_url, cfg.icon_emoji)


class RoomHub:
    def __init__(
        self,
        configs: Mapping[str, RoomConfig],
        agents: Mapping[str, Agent],
        store: Store,
        post_as: PostAs,
        resolve_target: Callable[[str], str | None],
        *,
        posted: Posted | None = None,
        missed: Missed | None = None,
        asks: Asks | None = None,
        briefing: Briefing | None = None,
    ) -> None:
        self._agents = agents
        self._post_as = post_as
        self._resolve_target = resolve_target
        self._posted = posted
        self._missed = missed
        self.configs = dict(configs)
        # Posts tried and failed per (room, conversation), so a kickoff that reached nobody
        # counts as a failed stand-up even though the room itself only logs failed posts.
        self._posts: dict[tuple[str, str], int] = {}
        self._failed: dict[tuple[str, str], int] = {}
        self.rooms = {
            name: Room(
                cfg, {m: agents[m] for m in cfg.roster if m in agents}, store, self._poster(name),
                asks=asks, briefing=briefing,
            )
            for name, cfg in self.configs.items()
        }
        self.scheduler = RoomScheduler(list(self.configs.values()), self._fire, store, on_missed=self._on_missed)

    def _poster(self, room_name: str) -> Callable[[str, str, str], Awaitable[None]]:
        async def post(conversation: str, speaker: str, text: str) -> None:
            agent = self._agents.get(speaker)
            identity = identity_of(agent) if agent is not None else AgentIdentity(speaker)
            result = await self._post_as(conversation, identity, text)
            self._posts[(room_name, conversation)] = self._posts.get((room_name, conversation), 0) + 1
            if not result.ok:
                self._failed[(room_name, conversation)] = self._failed.get((room_name, conversation), 0) + 1
                raise PostFailed(f"room {room_name}: posting as {speaker} failed: {result.status} {result.detail}")
            if self._posted is not None:
                await self._posted(room_name, speaker, text)

        return post

    async def handle(self, room_name: str, msg: BotMessage) -> list[RoomEvent]:
        """A person's message opens (or continues) an activity in the room."""
        return await self.rooms[room_name].handle_human(room_conversation(msg), msg.sender.name, message_text(msg), msg)

    async def step(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        """The pipeline step: messages in a channel routed to a room go to the room; only
        people open room activities (agents answer inside them)."""
        target = inbound.target
        if target is None or target.kind != "room" or target.name not in self.rooms or inbound.observe_only:
            return await call_next(inbound)
        if inbound.message.sender.is_bot:
            return TurnOutcome(TurnStatus.IGNORED, detail="only people open room activities")
        events = await self.handle(target.name, inbound.message)
        return TurnOutcome(TurnStatus.ROOM, detail=f"{len(events)} room events")

    async def reset(self, room_name: str, msg: BotMessage) -> None:
        """`/new` in a room's channel: the next message opens a fresh activity."""
        await self.rooms[room_name].reset(room_conversation(msg))

    async def _fire(self, room_name: str, target: str, kickoff: str) -> None:
        try:
            conversation = self._resolve_target(target)
            if conversation is None:
                raise RuntimeError(f"target {target!r} does not resolve to a chat")
            key = (room_name, conversation)
            self._posts[key] = self._failed[key] = 0
            await self.rooms[room_name].kickoff(conversation, kickoff)
            posts, failed = self._posts.pop(key), self._failed.pop(key)
            if posts and failed == posts:
                raise RuntimeError(f"none of the {posts} posts into {target} could be delivered")
        except Exception as exc:
            if self._missed is not None:
                await self._missed(room_name, f"the stand-up failed: {exc}")
            raise

    async def _on_missed(self, room_name: str, when: datetime) -> None:
        if self._missed is not None:
            await self._missed(room_name, f"the stand-up due at {when.isoformat()} was missed")

    def register_methods(self, registry: MethodRegistry) -> None:
        """`rooms.list` for the gateway's clients: each room, who is in it (with the identity
        each agent posts under) and the conversations it ran in, to subscribe to."""
        registry.register("rooms.list", self._list_method, scope="read", help="the rooms and where they run")

    async def _list_method(self, caller: Caller, params: NoParams) -> dict[str, Any]:
        rooms = []
        for name, room in self.rooms.items():
            members = []
            for member in room.roster:
                agent = self._agents.get(member)
                identity = identity_of(agent) if agent is not None else AgentIdentity(member)
                members.append({"id": member, "name": identity.name, "avatar_url": identity.avatar_url,
                                "icon_emoji": identity.icon_emoji})
            prefix = room.transcript_key("")
            conversations = sorted(key.removeprefix(prefix) for key in await room.store.keys(prefix))
            target = self.configs[name].target
            canonical = self._resolve_target(target) if target else None
            if canonical and canonical not in conversations:
                conversations.append(canonical)
            rooms.append({"name": name, "members": members, "conversations": conversations})
        return {"rooms": rooms}

    async def start(self, previous: RoomHub | None = None) -> None:
        """Start the stand-ups' schedule; `previous` is the hub this one replaces (a reload),
        whose scheduler must be halted already."""
        if any(cfg.schedule for cfg in self.configs.values()):
            await self.scheduler.start(previous.scheduler if previous is not None else None)

    async def stop(self) -> None:
        await self.scheduler.stop()
