"""The inbound pipeline for one message (SPEC §2), after dedup and under its conversation's
turn: author screen and loop guard → access and pairing → group gating → hooks → commands
→ routing to a room or an agent → admission → the agent's turn.

Every early exit returns a `TurnOutcome` saying why, so a dropped message is explainable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botweave.agents import Agent, History
from botweave.config import BotConfig
from botweave.delivery import Delivery, Outbox, ReplyChannel
from botweave.hooks import HookEvent, HookRegistry
from botweave.policies import BotLoopGuard, decide_gate
from botweave.policies.access_control import AccessControl
from botweave.policies.admission import Admission
from botweave.push import NotificationCategory, Notifier
from botweave.push.preferences import PreferenceStore, PushConfig
from botweave.rooms.hub import RoomHub, room_conversation
from botweave.router import Router, conversation_key
from botweave.runtime.commands import BUILTIN_COMMANDS, CommandContext, run_command
from botweave.runtime.config import Config
from botweave.runtime.targets import Targets
from botweave.runtime.turns import TurnOutcome, agent_turn, user_entry
from botweave.store import Store
from botweave.types import META_SCOPE, BotMessage

if TYPE_CHECKING:
    from botweave.adapter import Adapter

log = logging.getLogger(__name__)

RATE_LIMIT_NOTICE = "You're sending messages faster than I can answer; please wait a moment."


@dataclass
class Platform:
    """A running platform: its adapter, its effective settings and its loop guard."""

    adapter: Adapter
    config: BotConfig
    loop_guard: BotLoopGuard


@dataclass(frozen=True)
class Services:
    """What the pipeline works with; the runtime builds it once."""

    config: Config
    store: Store
    hooks: HookRegistry
    agents: Mapping[str, Agent]
    router: Router
    history: History
    outbox: Outbox
    access: AccessControl
    admission: Admission
    preferences: PreferenceStore
    notifier: Notifier
    push: PushConfig
    targets: Targets
    rooms: RoomHub | None
    uptime: Callable[[], float]


class Pipeline:
    def __init__(self, services: Services, platforms: Mapping[str, Platform]) -> None:
        self.s = services
        self._platforms = platforms
        self._loop_drop_logged: dict[frozenset[str], float] = {}

    async def message(self, msg: BotMessage) -> TurnOutcome:
        s = self.s
        platform = self._platforms.get(msg.platform)
        if platform is None:
            log.warning("message from platform %r that has no adapter; dropped", msg.platform)
            return TurnOutcome("dropped_unknown_platform")
        dropped = await self._screen_author(msg, platform)
        if dropped:
            return TurnOutcome(dropped)

        cfg = platform.config
        verdict = await s.access.verdict(msg, cfg)
        target = s.router.resolve(msg)
        gate = decide_gate(msg, cfg.group_policy)
        if gate == "ignore" and target is not None and target.kind == "room" and s.rooms is not None:
            gate = "reply"  # a channel bound to a room hears every person, mentioned or not
        if verdict == "pair" and msg.sender.is_bot:
            verdict = "deny"  # a bot cannot ask its owner to approve a code
        if verdict == "deny" or (verdict == "pair" and gate == "ignore"):
            log.info("%s: message from unadmitted user %s dropped", msg.platform, msg.sender.user_id)
            return TurnOutcome("denied", detail=verdict)
        reply = ReplyChannel(platform.adapter, msg, cfg, s.hooks, s.outbox)
        if verdict == "pair":
            if msg.allow_control and msg.command == "pair":  # the owner, not yet known by id
                return await self._pair_command(msg, platform, reply)
            status = await s.access.offer_pairing(msg, cfg, reply.send_text, platform.adapter.send_direct)
            return TurnOutcome(status)
        if gate == "ignore":
            return TurnOutcome("ignored")

        if s.hooks.has("message_received"):
            event = await s.hooks.run(HookEvent("message_received", {"message": msg.to_dict()}, message=msg))
            if event.denied or event.message is None:
                return TurnOutcome("hook_denied")
            msg = event.message  # hooks may rewrite it, so it may belong elsewhere now
            reply = ReplyChannel(platform.adapter, msg, cfg, s.hooks, s.outbox)
            target = s.router.resolve(msg)

        if msg.allow_control and msg.command == "notify":
            return TurnOutcome("command", await reply.send_text(await self._notify_command(msg)))
        if target is not None and target.kind == "room" and s.rooms is not None and gate != "observe":
            return await self._room_turn(s.rooms, target.name, msg, reply)
        if target is None or target.kind != "agent" or target.name not in s.agents:
            log.warning("%s: no route for chat %s; message dropped", msg.platform, msg.channel.channel_id)
            return TurnOutcome("unroutable")
        agent = s.agents[target.name]
        conversation = conversation_key(msg)

        if gate == "observe":
            await s.history.append(conversation, agent.config.max_history, user_entry(msg))
            return TurnOutcome("observed")
        if msg.allow_control and msg.command == "pair":
            return await self._pair_command(msg, platform, reply)
        if msg.allow_control and msg.command in BUILTIN_COMMANDS:
            ctx = CommandContext(msg, agent, conversation, s.history, s.uptime())
            return TurnOutcome("command", await reply.send_text(await run_command(ctx)))
        if await self._rate_limited(msg, cfg, reply):
            return TurnOutcome("rate_limited")
        scope = str(msg.metadata.get(META_SCOPE) or f"{msg.platform}:{msg.channel.channel_id}")
        async with s.admission.slot(scope) as admitted:
            if not admitted:
                await self._busy_notice(msg, reply)
                return TurnOutcome("busy")
            return await agent_turn(msg, agent, conversation, reply, s.history, self._finished)

    # --- who wrote it --------------------------------------------------------------------

    async def _screen_author(self, msg: BotMessage, platform: Platform) -> str | None:
        """Our own echoes, bots when not allowed, bot loops, commands for other bots."""
        me = platform.adapter.self_user
        if me is not None and msg.sender.user_id == me.user_id:
            return "dropped_self"
        if msg.sender.is_bot:
            if not platform.config.allow_bots:
                return "dropped_bot"
            self_id = me.user_id if me else msg.platform
            now = time.time()
            if not await platform.loop_guard.observe(self_id, msg.sender.user_id, now):
                await self._log_loop_drop(platform, self_id, msg.sender.user_id, now)
                return "dropped_loop_guard"
        target = msg.command_target
        if target and me is not None and me.username and target.lower() != me.username.lower():
            return "dropped_other_bot_command"
        return None

    async def _log_loop_drop(self, platform: Platform, self_id: str, other: str, now: float) -> None:
        """Once per cooldown, not once per dropped message."""
        pair = frozenset((self_id, other))
        if self._loop_drop_logged.get(pair, 0.0) <= now:
            left = await platform.loop_guard.cooldown_left(self_id, other, now)
            log.warning("bot loop guard: dropping messages between %s and %s for %.0fs", self_id, other, left)
            self._loop_drop_logged[pair] = now + left

    # --- commands and rooms --------------------------------------------------------------

    async def _pair_command(self, msg: BotMessage, platform: Platform, reply: ReplyChannel) -> TurnOutcome:
        answer, welcome = await self.s.access.pair_command(msg, platform.config)
        delivery = await reply.send_text(answer)
        if welcome is not None:
            await self.s.targets.send(f"{msg.platform}:{welcome[0]}", welcome[1])
        return TurnOutcome("command", delivery)

    async def _notify_command(self, msg: BotMessage) -> str:
        if msg.is_group:
            return "Notification settings are personal: send /notify to me in a direct message."
        result = await self.s.preferences.apply_command(msg.platform, msg.sender.user_id, " ".join(msg.command_args))
        return result.reply

    async def _room_turn(self, rooms: RoomHub, room: str, msg: BotMessage, reply: ReplyChannel) -> TurnOutcome:
        if msg.sender.is_bot:
            return TurnOutcome("ignored", detail="only people open room activities")
        if msg.allow_control and msg.command == "new":
            await rooms.rooms[room].reset(room_conversation(msg))
            return TurnOutcome("command", await reply.send_text(f"Room {room} starts afresh."))
        events = await rooms.handle(room, msg)
        return TurnOutcome("room", detail=f"{len(events)} room events")

    # --- budgets -------------------------------------------------------------------------

    async def _rate_limited(self, msg: BotMessage, cfg: BotConfig, reply: ReplyChannel) -> bool:
        """Per-user message budget; the first message over it gets one notice per window."""
        limit = cfg.user_rate_limit
        if limit is None:
            return False
        key = f"rate:{msg.platform}:{msg.sender.user_id}"
        if await self.s.store.window_add(key, time.time(), limit.per_seconds) <= limit.messages:
            return False
        if await self.s.store.set_if_absent(key + ":notice", "1", ttl=limit.per_seconds):
            await reply.send_text(RATE_LIMIT_NOTICE, purpose="notice")
        return True

    async def _busy_notice(self, msg: BotMessage, reply: ReplyChannel) -> None:
        """At most one "busy" reply per chat per minute, however large the burst."""
        if await self.s.store.set_if_absent(f"busy:{msg.platform}:{msg.channel.channel_id}", "1", ttl=60):
            await reply.send_text(self.s.config.admission.busy_message, purpose="notice")

    async def _finished(self, msg: BotMessage, agent: Agent, delivery: Delivery, seconds: float) -> None:
        """A long turn tells the person who asked (`agent_finished`, if they opted in)."""
        if seconds >= self.s.push.agent_finished_after_seconds:
            await self.s.notifier.notify(
                NotificationCategory.AGENT_FINISHED, [f"{msg.platform}:{msg.sender.user_id}"], delivery.text, identity=agent.name
            )
