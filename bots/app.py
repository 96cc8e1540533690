"""The runtime: wires adapters, the inbound pipeline, agents and delivery together (SPEC §2).

Adapters hand items to `submit`, which returns at once (platforms want a fast ack) and runs
`handle` in a task. `handle` takes the conversation's lock *before* its first await, so the
arrival order of a conversation's messages is the order of its turns, while other
conversations run concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from bots.agents import Agent, AgentError, History, litellm_module
from bots.commands import BUILTIN_COMMANDS, CommandContext, run_command
from bots.config import BotConfig, Config, load_config
from bots.conversations import ConversationLocks
from bots.durable import InboundStream, PlatformLeader, dedup_key
from bots.redis_store import RedisStore
from bots.delivery import Delivery, Outbox, ReplyChannel
from bots.hooks import HookEvent, HookRegistry
from bots.replies import chunk_text, measure
from bots.router import Router, conversation_key
from bots.store import Store, open_store
from bots.types import META_SCOPE, AgentIdentity, BotMessage, MessageActionResult, PlatformEvent
from policies import BotLoopGuard, BotLoopPolicy, decide_gate
from policies.access_control import AccessControl, pairing_hint
from policies.admission import Admission, AdmissionLimits
from push import NotificationCategory, NotificationOutcome, Notifier, Recipient
from push.notifier import mention_triggers
from rooms.hub import RoomHub, room_conversation

if TYPE_CHECKING:  # adapters import bots types; import them back only for typing
    from adapters.base import Adapter

log = logging.getLogger(__name__)

ADAPTER_CLASSES = {
    "console": "adapters.console:ConsoleAdapter",
    "telegram": "adapters.telegram:TelegramAdapter",
    "discord": "adapters.discord:DiscordAdapter",
    "slack": "adapters.slack:SlackAdapter",
}
Role = Literal["all", "worker", "ingress"]
DIGEST_FLUSH_SECONDS = 30.0
APOLOGY = "Sorry, I couldn't answer that just now. Please try again in a moment."
RATE_LIMIT_NOTICE = "You're sending messages faster than I can answer; please wait a moment."


@dataclass
class TurnOutcome:
    """What the pipeline did with one inbound item; tests and benchmarks read it."""

    status: str  # replied, silent, cancelled, command, observed, duplicate, dropped_*, denied, ...
    delivery: Delivery | None = None
    detail: str = ""

    @property
    def message_ids(self) -> list[str]:
        return self.delivery.message_ids if self.delivery else []


@dataclass
class _Platform:
    adapter: Adapter
    config: BotConfig
    loop_guard: BotLoopGuard


def load_adapter_class(platform: str) -> type[Adapter]:
    module_name, _, class_name = ADAPTER_CLASSES[platform].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


class App:
    def __init__(self, config: Config, *, store: Store | None = None, role: Role = "all") -> None:
        self.config = config
        self.role = role
        self.stream: InboundStream | None = None
        self._stopping = asyncio.Event()
        self._background: list[asyncio.Task[Any]] = []
        self.store = store or open_store(config.store.url, config.store.prefix)
        self.hooks = HookRegistry()
        self.agents = {name: Agent(name, cfg) for name, cfg in config.agents.items()}
        self.router = Router(config.routes, default_agent=next(iter(self.agents)))
        self.history = History(self.store)
        self.adapters: dict[str, Adapter] = {}
        self._platforms: dict[str, _Platform] = {}
        self._locks = ConversationLocks()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started_at = time.monotonic()
        self._dropped_logged: dict[frozenset[str], float] = {}
        self.access = AccessControl(self.store)
        self.outbox = Outbox(self.store, config.store.dedup_ttl_seconds)
        self.push = config.push_config()
        self.preferences = self.push.preference_store(self.store)
        self.notifier = Notifier(
            self.preferences, self.push.transports(self._send_direct), self.store, directory=self.push.recipients
        )
        rooms = config.room_configs()
        self.rooms = (
            RoomHub(
                rooms, self.agents, self.store, self._post_as, self._room_conversation,
                posted=self._room_posted, missed=self._room_missed,
            )
            if rooms
            else None
        )
        limits = config.admission
        self.admission = Admission(
            AdmissionLimits(
                limits.max_concurrent_turns, limits.max_concurrent_turns_per_scope, limits.overflow, limits.queue_depth
            )
        )

    @classmethod
    def from_config(
        cls, source: str | os.PathLike[str] | Mapping[str, Any] | Config, *, store: Store | None = None, role: Role = "all"
    ) -> App:
        config = source if isinstance(source, Config) else load_config(source)
        return cls(config, store=store, role=role)

    # --- lifecycle ------------------------------------------------------------------------

    def add_adapter(self, adapter: Adapter) -> None:
        """Attach an adapter (the registry does this in `start`; tests attach their own)."""
        name = adapter.platform
        policy = self.config.bot_config_for(name)
        guard = BotLoopGuard(BotLoopPolicy.from_dict(policy.bot_loop_protection), self.store)
        self.adapters[name] = adapter
        self._platforms[name] = _Platform(adapter, policy, guard)
        adapter.bind(self.submit)

    async def start(self, platforms: Iterable[str] | None = None, *, receive: bool = True) -> None:
        """Connect the store and start every enabled platform (or just `platforms`).

        With the in-memory store everything runs in this process. With Redis, inbound items
        go through the shared stream: `ingress` holds the platform connections (one process
        per platform, by leader lock), `worker` answers from the stream, `all` does both.
        """
        await self.store.connect()
        sections = self.config.enabled_platforms(platforms)
        for name, section in sections.items():
            if name not in self.adapters:
                self.add_adapter(load_adapter_class(name)(section))
        durable = isinstance(self.store, RedisStore)
        inbound = receive and not durable
        if durable:
            cfg = self.config.store
            self.stream = InboundStream(self.store, lease=cfg.stream_lease_seconds, lock_ttl=cfg.lock_ttl_seconds)  # type: ignore[arg-type]
            await self.stream.ensure_group()
        for name, adapter in list(self.adapters.items()):
            self._explain_access(name)
            try:
                await adapter.start(inbound=inbound)
            except Exception as exc:
                log.error("platform %s failed to start: %s", name, exc)
                self.adapters.pop(name)
                self._platforms.pop(name)
        if self.stream is not None and receive:
            if self.role in ("all", "worker"):
                # litellm takes seconds to import; doing it now, off the loop, keeps the first
                # turn from stalling the lock and stream heartbeats.
                await asyncio.to_thread(litellm_module)
                self._background.append(asyncio.create_task(self.stream.run(self._from_stream, self._stopping)))
            if self.role in ("all", "ingress"):
                for name in self.adapters:
                    if name in sections:
                        leader = PlatformLeader(name, lambda n=name: self._inbound_adapter(n, sections[n]), self.store, self.config.store.lock_ttl_seconds)  # type: ignore[arg-type]
                        self._background.append(asyncio.create_task(leader.run(self._stopping)))
        if self.rooms is not None and receive and self.role in ("all", "worker"):
            await self.rooms.start()
        if self.push.recipients:
            self._background.append(asyncio.create_task(self._flush_digests()))
        self._started_at = time.monotonic()

    def _inbound_adapter(self, name: str, section: Any) -> Adapter:
        """A second adapter instance that receives; the first one only sends."""
        adapter = load_adapter_class(name)(section)
        adapter.bind(self.submit)
        return adapter

    def _explain_access(self, platform: str) -> None:
        policy = self._platforms[platform].config.unknown_user_policy
        if policy == "pair":
            log.warning(
                "%s: unknown users get a pairing code; let them in with `%s` or list them in allowed_users",
                platform, pairing_hint(platform),
            )
        elif policy == "deny":
            log.warning("%s: unknown users are ignored; add their ids to allowed_users to let them in", platform)

    async def stop(self, timeout: float = 5.0) -> None:
        """Let in-flight turns finish for up to `timeout` seconds, then cancel, then disconnect."""
        self._stopping.set()
        if self.rooms is not None:
            await self.rooms.stop()
        if self._background:
            _, pending = await asyncio.wait(self._background, timeout=timeout)
            for task in pending:
                task.cancel()
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        for name, adapter in self.adapters.items():
            try:
                await adapter.stop()
            except Exception:
                log.exception("platform %s did not stop cleanly", name)
        await self.store.close()

    async def drain(self) -> None:
        """Wait until every submitted item has been handled (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*set(self._tasks), return_exceptions=True)

    @property
    def uptime(self) -> float:
        return time.monotonic() - self._started_at

    # --- inbound --------------------------------------------------------------------------

    async def submit(self, item: BotMessage | PlatformEvent) -> None:
        """Accept an item and return at once; the turn runs in the background (or, with
        Redis, the item is in the shared stream when this returns)."""
        if self.stream is not None:
            await self.stream.publish(item, dedup_key(item), self.config.store.dedup_ttl_seconds)
            return
        task = asyncio.create_task(self.handle(item))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("turn crashed", exc_info=task.exception())

    async def handle(self, item: BotMessage | PlatformEvent, *, deduplicated: bool = False) -> TurnOutcome:
        """Run the pipeline for one item. `deduplicated` items (from the shared stream) were
        checked when they were appended, so a worker re-running a crashed turn is not
        mistaken for a platform retry."""
        if not deduplicated and not await self.store.set_if_absent(
            dedup_key(item), "1", ttl=self.config.store.dedup_ttl_seconds
        ):
            return TurnOutcome("duplicate")
        if isinstance(item, PlatformEvent):
            return await self._handle_event(item)
        async with self._locks.hold(conversation_key(item)):
            return await self._handle_message(item)

    async def _from_stream(self, item: BotMessage | PlatformEvent) -> TurnOutcome:
        return await self.handle(item, deduplicated=True)

    async def _handle_event(self, event: PlatformEvent) -> TurnOutcome:
        await self.hooks.run(HookEvent(event.hook_event, event.hook_payload()))
        return TurnOutcome("event")

    async def _handle_message(self, msg: BotMessage) -> TurnOutcome:
        platform = self._platforms.get(msg.platform)
        if platform is None:
            log.warning("message from platform %r that has no adapter; dropped", msg.platform)
            return TurnOutcome("dropped_unknown_platform")
        dropped = await self._screen_author(msg, platform)
        if dropped:
            return TurnOutcome(dropped)

        cfg = platform.config
        verdict = await self.access.verdict(msg, cfg)
        gate = decide_gate(msg, cfg.group_policy)
        if gate == "ignore" and self._routes_to_room(msg):
            gate = "reply"  # a channel bound to a room hears every person, mentioned or not
        if verdict == "pair" and msg.sender.is_bot:
            verdict = "deny"  # a bot cannot ask its owner to approve a code
        if verdict == "deny" or (verdict == "pair" and gate == "ignore"):
            log.info("%s: message from unadmitted user %s dropped", msg.platform, msg.sender.user_id)
            return TurnOutcome("denied", detail=verdict)
        reply = ReplyChannel(platform.adapter, msg, cfg, self.hooks, self.outbox)
        if verdict == "pair":
            if msg.allow_control and msg.command == "pair":  # the owner, not yet known by id
                return await self._pair_command(msg, platform, reply)
            status = await self.access.offer_pairing(msg, cfg, reply.send_text, self._tell_user(platform))
            return TurnOutcome(status)
        if gate == "ignore":
            return TurnOutcome("ignored")

        if self.hooks.has("message_received"):
            event = await self.hooks.run(HookEvent("message_received", {"message": msg.to_dict()}, message=msg))
            if event.denied or event.message is None:
                return TurnOutcome("hook_denied")
            msg = event.message
            reply = ReplyChannel(platform.adapter, msg, cfg, self.hooks, self.outbox)

        if msg.allow_control and msg.command == "notify":
            return TurnOutcome("command", await reply.send_text(await self._notify_command(msg)))
        target = self.router.resolve(msg)
        if target is not None and target.kind == "room" and self.rooms is not None and gate != "observe":
            return await self._room_turn(target.name, msg, reply)
        if target is None or target.kind != "agent" or target.name not in self.agents:
            log.warning("%s: no route for chat %s; message dropped", msg.platform, msg.channel.channel_id)
            return TurnOutcome("unroutable")
        agent = self.agents[target.name]
        conversation = conversation_key(msg)

        if gate == "observe":
            await self.history.append(conversation, agent.config.max_history, self._user_entry(msg))
            return TurnOutcome("observed")

        if msg.allow_control and msg.command == "pair":
            return await self._pair_command(msg, platform, reply)
        if msg.allow_control and msg.command in BUILTIN_COMMANDS:
            ctx = CommandContext(msg, agent, conversation, self.history, self.uptime)
            return TurnOutcome("command", await reply.send_text(await run_command(ctx)))
        if await self._rate_limited(msg, cfg, reply):
            return TurnOutcome("rate_limited")
        scope = str(msg.metadata.get(META_SCOPE) or f"{msg.platform}:{msg.channel.channel_id}")
        async with self.admission.slot(scope) as admitted:
            if not admitted:
                await self._busy_notice(msg, reply)
                return TurnOutcome("busy")
            return await self._agent_turn(msg, agent, conversation, reply)

    async def _room_turn(self, room: str, msg: BotMessage, reply: ReplyChannel) -> TurnOutcome:
        assert self.rooms is not None
        if msg.sender.is_bot:
            return TurnOutcome("ignored", detail="only people open room activities")
        if msg.allow_control and msg.command == "new":
            await self.rooms.rooms[room].reset(room_conversation(msg))
            return TurnOutcome("command", await reply.send_text(f"Room {room} starts afresh."))
        events = await self.rooms.handle(room, msg)
        return TurnOutcome("room", detail=f"{len(events)} room events")

    def _routes_to_room(self, msg: BotMessage) -> bool:
        if self.rooms is None:
            return False
        target = self.router.resolve(msg)
        return target is not None and target.kind == "room"

    async def _notify_command(self, msg: BotMessage) -> str:
        if msg.is_group:
            return "Notification settings are personal: send /notify to me in a direct message."
        args = " ".join(msg.command_args)
        result = await self.preferences.apply_command(msg.platform, msg.sender.user_id, args)
        return result.reply

    async def notify(
        self,
        category: NotificationCategory | str,
        recipients: Iterable[Recipient | str],
        content: str,
        identity: str | None = None,
        urgent: bool = False,
    ) -> list[NotificationOutcome]:
        """Tell people something needs them (approvals, questions; SPEC §11), honouring each
        person's categories, quiet hours and detail level."""
        return await self.notifier.notify(NotificationCategory(category), list(recipients), content, identity, urgent)

    async def _send_direct(self, platform: str, user_id: str, text: str) -> MessageActionResult:
        adapter = self.adapters.get(platform)
        if adapter is None:
            return MessageActionResult("no_route", f"{platform}:{user_id}", f"platform {platform} is not running")
        return await adapter.send_direct(user_id, text)

    async def _post_as(self, target: str, identity: AgentIdentity, text: str) -> MessageActionResult:
        resolved = self.resolve_target(target)
        if resolved is None:
            return MessageActionResult("no_route", target, "target not resolvable")
        adapter, chat, thread = resolved
        caps = adapter.capabilities
        result = MessageActionResult("ok", target)
        limit = caps.max_message_length
        if limit is not None:  # room for the name prefix that platforms without identities add
            limit -= measure(f"**{identity.name}:** ", caps.length_unit)
        for chunk in chunk_text(text, limit, caps.length_unit):
            result = await adapter.send_as(identity, chat, chunk, thread_id=thread)
            if not result.ok:
                break
        await adapter.end_reply(chat, [])
        return result

    def _room_conversation(self, target: str) -> str | None:
        resolved = self.resolve_target(target)
        if resolved is None:
            return None
        adapter, chat, thread = resolved
        return f"{adapter.platform}:{chat}:{thread}" if thread else f"{adapter.platform}:{chat}"

    async def _room_posted(self, room: str, speaker: str, text: str) -> None:
        for recipient, category in mention_triggers(text, self.push.known_people()):
            await self.notifier.notify(category, [recipient], text, identity=f"room {room} ({speaker})")

    async def _room_missed(self, room: str, detail: str) -> None:
        owner = self.rooms.configs[room].owner if self.rooms is not None else None
        log.warning("room %s: %s", room, detail)
        if owner:
            await self.notifier.notify(
                NotificationCategory.SCHEDULED_TASK_FAILED, [owner], f"Room {room}: {detail}", identity=f"room {room}"
            )

    async def _flush_digests(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=DIGEST_FLUSH_SECONDS)
            try:
                await self.notifier.flush_digests()
            except Exception:
                log.exception("delivering notification digests failed; will retry")

    async def _pair_command(self, msg: BotMessage, platform: _Platform, reply: ReplyChannel) -> TurnOutcome:
        answer, welcome = await self.access.pair_command(msg, platform.config)
        delivery = await reply.send_text(answer)
        if welcome is not None:
            await self.send_to(f"{msg.platform}:{welcome[0]}", welcome[1])
        return TurnOutcome("command", delivery)

    def _tell_user(self, platform: _Platform) -> Callable[[str, str], Awaitable[MessageActionResult]]:
        return lambda user_id, text: platform.adapter.send_direct(user_id, text)

    async def _rate_limited(self, msg: BotMessage, cfg: BotConfig, reply: ReplyChannel) -> bool:
        """Per-user message budget; the first message over it gets one notice per window."""
        limit = cfg.user_rate_limit
        if limit is None:
            return False
        key = f"rate:{msg.platform}:{msg.sender.user_id}"
        if await self.store.window_add(key, time.time(), limit.per_seconds) <= limit.messages:
            return False
        if await self.store.set_if_absent(key + ":notice", "1", ttl=limit.per_seconds):
            await reply.send_text(RATE_LIMIT_NOTICE, purpose="notice")
        return True

    async def _busy_notice(self, msg: BotMessage, reply: ReplyChannel) -> None:
        """At most one "busy" reply per chat per minute, however large the burst."""
        if await self.store.set_if_absent(f"busy:{msg.platform}:{msg.channel.channel_id}", "1", ttl=60):
            await reply.send_text(self.config.admission.busy_message, purpose="notice")

    async def _screen_author(self, msg: BotMessage, platform: _Platform) -> str | None:
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

    async def _log_loop_drop(self, platform: _Platform, self_id: str, other: str, now: float) -> None:
        pair = frozenset((self_id, other))
        left = await platform.loop_guard.cooldown_left(self_id, other, now)
        if self._dropped_logged.get(pair, 0.0) <= now:
            log.warning("bot loop guard: dropping messages between %s and %s for %.0fs", self_id, other, left)
            self._dropped_logged[pair] = now + left

    @staticmethod
    def _user_entry(msg: BotMessage) -> dict[str, str]:
        turn = msg.prompt_text
        if msg.is_group:
            turn = f"[{msg.sender.name}] {turn}"
        return {"role": "user", "content": turn}

    async def _agent_turn(self, msg: BotMessage, agent: Agent, conversation: str, reply: ReplyChannel) -> TurnOutcome:
        started = time.monotonic()
        history = await self.history.load(conversation, agent.config.max_history)
        user_entry = self._user_entry(msg)
        typing = asyncio.create_task(self._keep_typing(reply))
        try:
            if reply.can_stream():
                delivery = await reply.stream_text(
                    agent.stream(history, user_entry["content"]),
                    model=agent.model,
                    elapsed=lambda: time.monotonic() - started,
                )
            else:
                text = await agent.complete(history, user_entry["content"])
                delivery = await reply.send_text(text, model=agent.model, seconds=time.monotonic() - started)
        except AgentError as exc:
            log.error("%s", exc)
            return TurnOutcome("agent_error", await reply.send_text(APOLOGY, purpose="apology"), detail=str(exc))
        finally:
            typing.cancel()
        if delivery.silent:
            status = "silent"
        elif delivery.cancelled:
            status = "cancelled"
        else:
            status = "replied"
        if not delivery.cancelled:
            answer = {"role": "assistant", "content": delivery.text if not delivery.silent else ""}
            await self.history.append(conversation, agent.config.max_history, user_entry, answer)
        if status == "replied" and time.monotonic() - started >= self.push.agent_finished_after_seconds:
            await self.notifier.notify(
                NotificationCategory.AGENT_FINISHED, [f"{msg.platform}:{msg.sender.user_id}"], delivery.text, identity=agent.name
            )
        return TurnOutcome(status, delivery)

    async def _keep_typing(self, reply: ReplyChannel) -> None:
        adapter = reply.adapter
        if not adapter.capabilities.typing:
            return
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                try:
                    await adapter.typing(reply.chat_id, thread_id=reply.origin.thread_id)
                except Exception:
                    log.debug("typing indicator failed", exc_info=True)
                await asyncio.sleep(adapter.typing_interval_s)

    # --- outbound to a target (SPEC §9) ------------------------------------------------------

    def resolve_target(self, target: str, origin: BotMessage | None = None) -> tuple[Adapter, str, str | None] | None:
        """`origin`, `<platform>`, `<platform>:<chat>` or `<platform>:<chat>:<thread>`."""
        if target == "origin":
            if origin is None or origin.platform not in self.adapters:
                return None
            return self.adapters[origin.platform], origin.channel.channel_id, origin.thread_id
        platform, _, rest = target.partition(":")
        adapter = self.adapters.get(platform)
        if adapter is None:
            return None
        if not rest:
            home = adapter.home_chat()
            return (adapter, home, None) if home else None
        chat, _, thread = rest.partition(":")
        return adapter, chat, thread or None

    async def send_to(self, target: str, text: str, *, origin: BotMessage | None = None) -> list[MessageActionResult]:
        """Post text to a target, chunked; an unresolvable target is a `no_route` result."""
        resolved = self.resolve_target(target, origin)
        if resolved is None:
            return [MessageActionResult("no_route", target, "target not resolvable")]
        adapter, chat, thread = resolved
        caps = adapter.capabilities
        results = [
            await adapter.send(chat, chunk, thread_id=thread)
            for chunk in chunk_text(text, caps.max_message_length, caps.length_unit)
        ]
        await adapter.end_reply(chat, [r.message_id for r in results if r.message_id])
        return results


def find_config(explicit: str | None) -> Path | None:
    """`botweave run` looks for ./bot.yaml, then ./bot.yaml.example; None means built-in."""
    if explicit:
        return Path(explicit)
    for candidate in ("bot.yaml", "bot.yaml.example"):
        if Path(candidate).is_file():
            return Path(candidate)
    return None


BUILTIN_CONFIG: dict[str, Any] = {
    "agents": {"assistant": {"model": "offline/echo", "instructions": "You are a helpful assistant."}},
    "platforms": {"console": {}},
}
