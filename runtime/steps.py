"""The runtime's own pipeline steps: `message_received` hooks, commands, recording what a
group says when the bot only observes, and (with the gateway) showing people's messages to
whoever watches their conversation. Policies' steps live in policies/, the room step in
rooms/; runtime/pipeline.py puts them all in order.
"""

from __future__ import annotations

from collections.abc import Mapping

from botweave.agents import Agent, History
from botweave.commands import CommandRegistry
from botweave.delivery import Delivery, ReplyChannel
from botweave.events import ConversationEvents
from botweave.hooks import HookEvent, HookRegistry
from botweave.pipeline import Handler, Inbound, TurnOutcome, TurnStatus
from botweave.router import Router
from botweave.runtime.turns import turn_marker, user_entry
from botweave.store import Store
from botweave.types import META_MENTIONS_BOT, META_REPLY_TO_BOT, META_REVISION, revision_suffix


class MessageHooks:
    """`message_received` hooks may drop a message or rewrite it; a rewritten message is
    routed afresh, since it may now belong to another agent or room."""

    def __init__(self, hooks: HookRegistry, router: Router, delivery: Delivery) -> None:
        self._hooks = hooks
        self._router = router
        self._delivery = delivery

    async def __call__(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        if not self._hooks.has("message_received"):
            return await call_next(inbound)
        msg = inbound.message
        event = await self._hooks.run(HookEvent("message_received", {"message": msg.to_dict()}, message=msg))
        if event.denied or event.message is None:
            return TurnOutcome(TurnStatus.HOOK_DENIED)
        if event.message is not msg:
            inbound.message = event.message
            inbound.target = self._router.resolve(event.message)
            inbound.reply = ReplyChannel(self._delivery, inbound.adapter, event.message, inbound.config)
        return await call_next(inbound)


class Commands:
    """A person's `/command` runs its handler from the registry; an observing bot records
    commands like any message and runs none.

    An unknown command is answered with a pointer to /help rather than handed to the model
    as text. In a group, where several bots may share one command namespace, that answer is
    given only when the command was clearly meant for us (`/cmd@ourbot`, a mention or a
    reply); otherwise the command is left for whichever bot knows it."""

    def __init__(self, registry: CommandRegistry) -> None:
        self._registry = registry

    async def __call__(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        msg = inbound.message
        if not msg.is_command or not msg.allow_control or inbound.observe_only:
            return await call_next(inbound)
        command = self._registry.get(msg.command)
        if command is None:
            if msg.is_group and not (msg.command_target or msg.metadata.get(META_MENTIONS_BOT) or msg.metadata.get(META_REPLY_TO_BOT)):
                return TurnOutcome(TurnStatus.IGNORED, detail=f"unknown command /{msg.command}")
            text = f"Unknown command /{msg.command}. Send /help to see what I understand."
            return TurnOutcome(TurnStatus.COMMAND, await inbound.reply.send_text(text, purpose="command"), detail="unknown")
        answer = await command.handler(inbound)
        delivered = await inbound.reply.send_text(answer, purpose="command") if answer is not None else None
        return TurnOutcome(TurnStatus.COMMAND, delivered, detail=command.name)


def agent_of(inbound: Inbound, agents: Mapping[str, Agent]) -> Agent | None:
    target = inbound.target
    if target is None or target.kind != "agent":
        return None
    return agents.get(target.name)


class Observe:
    """`group_policy: observe`: the message joins the agent's history, and nothing answers."""

    def __init__(self, agents: Mapping[str, Agent], history: History, store: Store, ttl: float) -> None:
        self._agents = agents
        self._history = history
        self._store = store
        self._ttl = ttl

    async def __call__(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        if not inbound.observe_only:
            return await call_next(inbound)
        agent = agent_of(inbound, self._agents)
        if agent is None:
            return TurnOutcome(TurnStatus.UNROUTABLE)
        # keyed by the message, like a turn: recorded once however often the item runs
        entry = self._history.append_op(inbound.conversation, agent.config.max_history, user_entry(inbound.message))
        await self._store.commit(turn_marker(inbound.message), [entry], ttl=self._ttl)
        return TurnOutcome(TurnStatus.OBSERVED)


class Watch:
    """A person's message, as soon as the bot admits it, is published in its conversation for
    the gateway's watchers (once: a message that runs again after a restart, or an edit's
    re-run, is the same message, its record replaced). Platforms that show their messages
    through the events themselves (the web) published it already."""

    def __init__(self, events: ConversationEvents) -> None:
        self._events = events

    async def __call__(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        if not inbound.adapter.events_native:
            msg = inbound.message
            record = {
                "id": msg.message_id,
                "author": {"kind": "bot" if msg.sender.is_bot else "user", "id": msg.sender.user_id, "name": msg.sender.name},
                "text": msg.text,
                "at": msg.timestamp.timestamp(),
                "reply_to": msg.reply_to,
                "attachments": [
                    {"file_id": None, "filename": a.get("filename"), "mime": a.get("mime"), "size": a.get("size")}
                    for a in msg.attachments
                ],
                "buttons": [],
                "reactions": [],
                "edited": bool(msg.metadata.get(META_REVISION)),
                "deleted": False,
            }
            unique = f"evonce:in:{msg.platform}:{msg.channel.channel_id}:{msg.message_id}{revision_suffix(msg)}"
            await self._events.post(inbound.conversation, record, title=msg.channel.title, unique=unique)
        return await call_next(inbound)
