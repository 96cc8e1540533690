"""Who may talk to the bot: allowlists, then the unknown-user policy; and, by the same rules,
which chats the bot talks in at all (where agents' message tools may post).

Pure decisions so they are the same on every platform and testable without I/O. Pairing (the
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


def chat_admitted(chat_id: str, config: BotConfig, *, direct_with: str | None = None, known_user: bool = False) -> bool:
    """Whether the bot talks in `chat_id`, judged as `decide_access` judges a message there.

    A private chat (`direct_with` names its person) is judged by that person: the owner, an
    allowlisted or `known_user` (paired) one, or anyone when unknown users are let in. A group
    is judged by the chat itself, never by who might write in it: allowlisted, or, with no
    chat allowlist, open to everyone (`unknown_user_policy: allow`).
    """
    if chat_id in config.allowed_chats:
        return True
    if direct_with is not None:
        if known_user or direct_with == config.owner_user_id or direct_with in config.allowed_users:
            return True
        return _unknown(config) == "admit"
    return not config.allowed_chats and _unknown(config) == "admit"
