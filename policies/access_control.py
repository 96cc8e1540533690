"""Access with memory: allowlists and policy (pure, `access.py`) plus who paired or owns.

This is the part of SPEC §6 that talks: it tells a stranger their pairing code, tells the
owner someone is waiting, and answers the owner's `/pair approve <code>`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from botweave.config import BotConfig
from botweave.policies.access import AccessVerdict, decide_access
from botweave.policies.pairing import Pairing
from botweave.store import Store
from botweave.types import BotMessage

log = logging.getLogger(__name__)

SendFn = Callable[[str], Awaitable[object]]


def pairing_hint(platform: str) -> str:
    return f"botweave pair approve {platform} <code>"


class AccessControl:
    def __init__(self, store: Store) -> None:
        self.pairing = Pairing(store)

    async def owner(self, platform: str, config: BotConfig) -> str | None:
        return config.owner_user_id or await self.pairing.owner(platform)

    async def verdict(self, msg: BotMessage, config: BotConfig) -> AccessVerdict:
        verdict = decide_access(msg, config)
        if verdict == "admit":
            return verdict
        user = msg.sender.user_id
        if await self.pairing.is_approved(msg.platform, user) or user == await self.pairing.owner(msg.platform):
            return "admit"
        return verdict

    async def offer_pairing(self, msg: BotMessage, config: BotConfig, reply: SendFn, tell_owner: Callable[[str, str], Awaitable[object]]) -> str:
        """Give an unknown user a code (once while it is pending) and let the owner know."""
        result = await self.pairing.request(msg.platform, msg.sender.user_id, msg.sender.name, msg.channel.channel_id)
        if result.status == "too_many_pending":
            log.warning("%s: pairing request from %s refused: 3 requests already pending", msg.platform, msg.sender.user_id)
            return "pairing_full"
        if result.status == "already_pending":
            return "pairing_pending"
        code = result.code or ""
        await reply(
            f"Hi! I don't know you yet. Your pairing code is {code} (valid for 1 hour). "
            "Ask the owner of this bot to approve it."
        )
        owner = await self.owner(msg.platform, config)
        if owner:
            await tell_owner(
                owner,
                f"Pairing request on {msg.platform} from {msg.sender.name} (id {msg.sender.user_id}). "
                f"Approve with /pair approve {code} here, or `{pairing_hint(msg.platform)}`.",
            )
        log.warning(
            "%s: %s (id %s) asked to pair; approve with `%s`",
            msg.platform, msg.sender.name, msg.sender.user_id, pairing_hint(msg.platform),
        )
        return "pairing_offered"

    async def pair_command(self, msg: BotMessage, config: BotConfig) -> tuple[str, tuple[str, str] | None]:
        """The owner's `/pair approve|deny <code>` in a DM. Returns the answer for the owner
        and, on approval, (chat_id, text) to tell the approved user."""
        args = msg.command_args
        owner = await self.owner(msg.platform, config)
        if msg.is_group or owner is None or msg.sender.user_id != owner:
            return "Only the owner can approve pairing requests, in a direct message.", None
        if len(args) != 2 or args[0] not in ("approve", "deny"):
            return "Usage: /pair approve <code> or /pair deny <code>", None
        action, code = args
        if action == "deny":
            denied = await self.pairing.deny(msg.platform, code)
            return ("Request denied." if denied else "No pending request has that code."), None
        result = await self.pairing.approve(msg.platform, code)
        if result.status == "locked":
            return "Too many wrong codes; approval is locked for a few minutes.", None
        if result.status == "wrong_code" or result.request is None:
            return "No pending request has that code.", None
        request = result.request
        welcome = (request.chat_id, "You're approved. Say hello!")
        return f"Approved {request.name} (id {request.user_id}).", welcome
