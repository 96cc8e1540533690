"""Who may talk to the bot: allowlists, then the unknown-user policy.

A pure decision so it is the same on every platform and testable without I/O. Pairing (the
`pair` policy's code exchange) needs the store and lives with the pipeline that calls this.
"""

from __future__ import annotations

from typing import Literal

from botweave.config import BotConfig
from botweave.types import BotMessage

AccessVerdict = Literal["admit", "deny", "pair"]


def decide_access(msg: BotMessage, config: BotConfig, *, known_user: bool = False) -> AccessVerdict:
    """`known_user` is True for users admitted earlier (paired, or the owner)."""
    user = msg.sender.user_id
    if known_user or user == config.owner_user_id or user in config.allowed_users:
        return "admit"
    if config.allowed_chats:
        if msg.channel.channel_id in config.allowed_chats:
            return "admit"
        if msg.is_group:
            return "deny"  # a group nobody allowlisted: stay silent there
    return _unknown(config)


def _unknown(config: BotConfig) -> AccessVerdict:
    policy = config.unknown_user_policy or "pair"
    if policy == "allow":
        return "admit"
    return "deny" if policy == "deny" else "pair"
