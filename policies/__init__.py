"""Admission and safety policies: access, group gating, the bot-loop guard, network egress."""

from botweave.policies.access import AccessVerdict, decide_access
from botweave.policies.egress import EgressPolicy, normalise_host
from botweave.policies.gating import GateVerdict, decide_gate, is_addressed
from botweave.policies.loop_guard import BotLoopGuard, BotLoopPolicy

__all__ = [
    "AccessVerdict",
    "BotLoopGuard",
    "BotLoopPolicy",
    "EgressPolicy",
    "GateVerdict",
    "decide_access",
    "decide_gate",
    "is_addressed",
    "normalise_host",
]
