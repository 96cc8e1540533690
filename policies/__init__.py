"""Admission and safety policies: access, group gating, the bot-loop guard."""

from botweave.policies.access import AccessVerdict, decide_access
from botweave.policies.gating import GateVerdict, decide_gate, is_addressed
from botweave.policies.loop_guard import BotLoopGuard, BotLoopPolicy

__all__ = [
    "AccessVerdict",
    "BotLoopGuard",
    "BotLoopPolicy",
    "GateVerdict",
    "decide_access",
    "decide_gate",
    "is_addressed",
]
