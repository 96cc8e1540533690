"""Group gating: whether a group message is addressed to the bot.

Decided once here from what the adapter reported (mention, reply to the bot, command), so
every platform behaves the same.
"""

from __future__ import annotations

from typing import Literal

from botweave.pipeline import Handler, Inbound, TurnOutcome, TurnStatus
from botweave.types import META_MENTIONS_BOT, META_REPLY_TO_BOT, BotMessage

GateVerdict = Literal["reply", "observe", "ignore"]


def is_addressed(msg: BotMessage) -> bool:
    return bool(
        msg.metadata.get(META_MENTIONS_BOT) or msg.metadata.get(META_REPLY_TO_BOT) or msg.is_command
    )


def decide_gate(msg: BotMessage, group_policy: str) -> GateVerdict:
    """DMs are always answered; in groups the policy decides, `observe` only records."""
    if msg.channel.channel_type == "dm":
        return "reply"
    if group_policy == "respond_all":
        return "reply"
    if group_policy == "observe":
        return "observe"
    if group_policy == "command_only":
        return "reply" if msg.is_command else "ignore"
    return "reply" if is_addressed(msg) else "ignore"


async def group_gate(inbound: Inbound, call_next: Handler) -> TurnOutcome:
    """The pipeline step: unaddressed group messages stop here, `observe` only records. A
    channel routed to a room hears every person, mentioned or not."""
    verdict = decide_gate(inbound.message, inbound.config.group_policy)
    if verdict == "ignore" and inbound.target is not None and inbound.target.hears_everyone:
        verdict = "reply"
    if verdict == "ignore":
        return TurnOutcome(TurnStatus.IGNORED)
    inbound.observe_only = verdict == "observe"
    return await call_next(inbound)
