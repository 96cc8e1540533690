"""Admission and safety policies: access, group gating, the bot-loop guard."""

from policies.access import AccessVerdict, decide_access
from policies.gating import GateVerdict, decide_gate, is_addressed
from policies.loop_guard import BotLoopGuard, BotLoopPolicy

__all__ = [
    "AccessVerdict",
    "BotLoopGuard",
    "BotLoopPolicy",
    "GateVerdict",
    "decide_access",
    "decide_gate",
    "is_addressed",
]
