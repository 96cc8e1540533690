"""Access with memory: allowlists and policy (pure, `access.py`) plus who paired or owns.

This is the part of access that talks: it tells a stranger their pairing code, tells the
owner someone is waiting, and answers the owner's `/pair approve <code>`. Its pipeline step
runs right after the author screen, so nothing past it sees a stranger's message.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from botweave.adapter import Adapter
from botweave.config import BotConfig
from botweave.conversations import direct_conversation
from botweave.delivery import Delivery, Destination
from botweave.events import ConversationEvents
from botweave.methods import Caller, MethodError, MethodRegistry, Params
from botweave.pipeline import Handler, Inbound, TurnOutcome, TurnStatus
from botweave.policies.access import AccessVerdict, decide_access
from botweave.policies.gating import decide_gate
from botweave.policies.pairing import MAX_PENDING, Pairing, PendingRequest
from botweave.store import Store
from botweave.types import BotMessage

log = logging.getLogger(__name__)

PAIR_USAGE = "approve|deny CODE"
PAIR_HELP = "let a waiting user in, or turn them away (the owner, in a direct message)"
#: What a stranger hears when too many pairing requests wait already (once per window).
TRY_LATER = "I can't take new pairing requests right now. Please try again later."


#: Where a pairing request stands when the command line cannot reach the store and no owner is known.
NOBODY_CAN_APPROVE = (
    "nobody can approve it: no owner is set, and `botweave pair` cannot reach this bot's state (kept "
    "in memory, or in a store no configuration file names); set owner_user_id, then /pair approve "
    "<code> in a direct message, or start the bot from a bot.yaml without --ephemeral or memory://"
)


WELCOME = "You're approved. Say hello!"


class PairingListParams(Params):
    platform: Optional[str] = None


class PairingDecision(Params):
    platform: str
    user_id: Optional[str] = None
    code: Optional[str] = None


def shown(request: PendingRequest) -> dict[str, Any]:
    """A pending request as the gateway's clients see it (never the code's hash)."""
    return {k: v for k, v in asdict(request).items() if k not in ("code_hash", "conversation")}


class AccessControl:
    """`cli_config` is the configuration file through which `botweave pair` reaches this
    bot's store from another process, or None when it cannot (state in this process's memory,
    or a store the program handed over): then no message points at that command."""

    def __init__(
        self,
        store: Store,
        delivery: Delivery,
        config_for: Callable[[str], BotConfig],
        *,
        cli_config: Path | None = None,
        events: ConversationEvents | None = None,
    ) -> None:
        self.pairing = Pairing(store)
        self._delivery = delivery
        self._config_for = config_for
        self.cli_config = cli_config
        self._events = events

    def cli_command(self, platform: str, code: str = "<code>") -> str | None:
        """The `botweave pair approve` line that works from any shell here, or None."""
        if self.cli_config is None:
            return None
        return f"botweave pair approve {platform} {code} --config {shlex.quote(str(self.cli_config))}"

    def approval_hint(self, platform: str, owner: str | None) -> str:
        """How an operator lets a waiting stranger in, naming only ways that can work."""
        command = self.cli_command(platform)
        if command is not None:
            return f"approve with `{command}`" + (" or /pair approve <code> from the owner" if owner else "")
        if owner:
            return "the owner approves with /pair approve <code> in a direct message to the bot"
        return NOBODY_CAN_APPROVE

    def explain(self, platform: str) -> None:
        """Tell the operator at start what strangers on `platform` meet, and how to let them in."""
        config = self._config_for(platform)
        if config.unknown_user_policy == "pair":
            log.warning(
                "%s: unknown users get a pairing code; %s, or list them in allowed_users",
                platform, self.approval_hint(platform, config.owner_user_id),
            )
        elif config.unknown_user_policy == "deny":
            log.warning("%s: unknown users are ignored; add their ids to allowed_users to let them in", platform)

    async def owner(self, platform: str, config: BotConfig) -> str | None:
        return config.owner_user_id or await self.pairing.owner(platform)

    async def owner_of(self, platform: str) -> str | None:
        """The owner of `platform`'s bot: the configured one, else whoever paired as owner."""
        return await self.owner(platform, self._config_for(platform))

    async def admits(self, msg: BotMessage, config: BotConfig) -> bool:
        """Whether the bot answers `msg`'s sender (only they may steer a running turn)."""
        return await self.verdict(msg, config) == "admit"

    async def known(self, platform: str, user_id: str) -> bool:
        """Whether the user was let in earlier: approved by pairing, or the owner it made."""
        return await self.pairing.is_approved(platform, user_id) or user_id == await self.pairing.owner(platform)

    async def verdict(self, msg: BotMessage, config: BotConfig) -> AccessVerdict:
        verdict = decide_access(msg, config)
        if verdict == "admit":
            return verdict
        if await self.known(msg.platform, msg.sender.user_id):
            return "admit"
        return verdict

    async def step(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        """The pipeline step: admitted people pass; strangers are dropped or offered a code."""
        msg = inbound.message
        verdict = await self.verdict(msg, inbound.config)
        if verdict == "admit":
            return await call_next(inbound)
        if verdict == "pair" and msg.sender.is_bot:
            verdict = "deny"  # a bot cannot ask its owner to approve a code
        unaddressed = decide_gate(msg, inbound.config.group_policy) == "ignore"
        if verdict == "deny" or unaddressed:
            log.info("%s: message from unadmitted user %s dropped", msg.platform, msg.sender.user_id)
            return TurnOutcome(TurnStatus.DENIED, detail=verdict)
        if msg.allow_control and msg.command == "pair":  # the owner, not yet known by id
            await self.pair_command(inbound)
            return TurnOutcome(TurnStatus.COMMAND, detail="pair")
        return await self.offer_pairing(inbound)

    async def offer_pairing(self, inbound: Inbound) -> TurnOutcome:
        """Give an unknown user a code (once while it is pending) and let the owner know."""
        msg = inbound.message
        result = await self.pairing.request(
            msg.platform, msg.sender.user_id, msg.sender.name, msg.channel.channel_id, inbound.conversation
        )
        if result.status == "too_many_pending":
            if not await self.pairing.first_refusal(msg.platform, msg.sender.user_id):
                return TurnOutcome(TurnStatus.PAIRING_FULL)  # told already, within the window
            log.warning("%s: pairing request from %s refused: %d requests already pending",
                        msg.platform, msg.sender.user_id, MAX_PENDING)
            delivered = await inbound.reply.send_text(TRY_LATER, purpose="pairing")
            return TurnOutcome(TurnStatus.PAIRING_FULL, delivered)
        if result.status == "already_pending":
            return TurnOutcome(TurnStatus.PAIRING_PENDING)
        code = result.code or ""
        delivered = await inbound.reply.send_text(
            f"Hi! I don't know you yet. Your pairing code is {code} (valid for 1 hour). "
            "Ask the owner of this bot to approve it.",
            purpose="pairing",
        )
        owner = await self.owner(msg.platform, inbound.config)
        if self._events is not None:
            request = {"platform": msg.platform, "user_id": msg.sender.user_id, "name": msg.sender.name,
                       "chat_id": msg.channel.channel_id, "owner": owner}
            # the person's direct conversation, where a request and its answer are both found
            await self._events.publish(direct_conversation(msg.platform, msg.sender.user_id), "pairing.requested", request)
        if owner:
            command = self.cli_command(msg.platform, code)
            await self._delivery.post_direct(
                inbound.adapter,
                owner,
                f"Pairing request on {msg.platform} from {msg.sender.name} (id {msg.sender.user_id}). "
                f"Approve with /pair approve {code} here" + (f", or `{command}`." if command else "."),
            )
        log.warning(
            "%s: %s (id %s) asked to pair; %s",
            msg.platform, msg.sender.name, msg.sender.user_id, self.approval_hint(msg.platform, owner),
        )
        return TurnOutcome(TurnStatus.PAIRING_OFFERED, delivered)

    async def pair_command(self, inbound: Inbound) -> None:
        """The owner's `/pair approve|deny <code>` in a DM; an approved user is welcomed."""
        answer, welcome = await self._pair(inbound)
        await inbound.reply.send_text(answer, purpose="command")
        if welcome is not None:
            await self.welcome(inbound.adapter, welcome)

    async def welcome(self, adapter: Adapter, request: PendingRequest) -> None:
        """Welcome an approved person where they asked, in that conversation's events too."""
        await self._delivery.post(Destination(adapter, request.chat_id, conversation=request.conversation or None), WELCOME)

    async def _pair(self, inbound: Inbound) -> tuple[str, PendingRequest | None]:
        """The answer for the owner and, on approval, the request of the person to welcome."""
        msg = inbound.message
        args = msg.command_args
        owner = await self.owner(msg.platform, inbound.config)
        if msg.is_group or owner is None or msg.sender.user_id != owner:
            return "Only the owner can approve pairing requests, in a direct message.", None
        if len(args) != 2 or args[0] not in ("approve", "deny"):
            return "Usage: /pair approve <code> or /pair deny <code>", None
        action, code = args
        if action == "deny":
            denied = await self.pairing.deny(msg.platform, code)
            if denied is not None:
                await self._resolved(denied, "denied", msg.sender.name, owner)
            return ("Request denied." if denied else "No pending request has that code."), None
        result = await self.pairing.approve(msg.platform, code)
        if result.status == "locked":
            return "Too many wrong codes; approval is locked for a few minutes.", None
        if result.status == "wrong_code" or result.request is None:
            return "No pending request has that code.", None
        request = result.request
        await self._resolved(request, "approved", msg.sender.name, owner)
        return f"Approved {request.name} (id {request.user_id}).", request

    async def _resolved(self, request: PendingRequest, outcome: str, by: str, owner: str | None) -> None:
        if self._events is not None:
            data = {"platform": request.platform, "user_id": request.user_id, "outcome": outcome, "by": by, "owner": owner}
            await self._events.publish(direct_conversation(request.platform, request.user_id), "pairing.resolved", data)

    # --- the gateway ------------------------------------------------------------------------

    def register_methods(self, registry: MethodRegistry, adapters: Mapping[str, Adapter]) -> None:
        """`pairing.list`, `pairing.approve` and `pairing.deny` for the gateway's clients: a
        platform's owner (a token bound to the owner's identity there) answers pairing
        requests from a browser as with `/pair` in a direct message."""

        async def may(caller: Caller, platform: str) -> bool:
            if caller.admin:
                return True
            owner = await self.owner_of(platform)
            return owner is not None and caller.speaks_for(platform, owner)

        async def listed(caller: Caller, params: PairingListParams) -> dict[str, Any]:
            requests = await self.pairing.pending(params.platform)
            return {"requests": [shown(r) for r in requests if await may(caller, r.platform)]}

        async def decide(caller: Caller, params: PairingDecision, approve: bool) -> PendingRequest:
            if not await may(caller, params.platform):
                raise MethodError("forbidden", f"only the owner of the bot on {params.platform} (or an admin) answers its pairing requests")
            if (params.user_id is None) == (params.code is None):
                raise MethodError("bad_request", "give exactly one of user_id and code")
            if params.user_id is not None:
                take = self.pairing.approve_user if approve else self.pairing.deny_user
                request = await take(params.platform, params.user_id)
            elif approve:
                result = await self.pairing.approve(params.platform, params.code or "")
                if result.status == "locked":
                    raise MethodError("too_many_failures", "too many wrong codes; approval is locked for a few minutes",
                                      retryable=True, retry_after_ms=300_000)
                request = result.request
            else:
                request = await self.pairing.deny(params.platform, params.code or "")
            if request is None:
                raise MethodError("not_found", f"no pending pairing request on {params.platform} for that")
            owner = await self.owner_of(params.platform)
            await self._resolved(request, "approved" if approve else "denied", caller.name, owner)
            return request

        async def approve(caller: Caller, params: PairingDecision) -> dict[str, Any]:
            request = await decide(caller, params, True)
            adapter = adapters.get(request.platform)
            if adapter is not None:
                await self.welcome(adapter, request)
            return {"user_id": request.user_id, "name": request.name}

        async def deny(caller: Caller, params: PairingDecision) -> dict[str, Any]:
            return {"user_id": (await decide(caller, params, False)).user_id}

        registry.register("pairing.list", listed, scope="pairing", params=PairingListParams)
        registry.register("pairing.approve", approve, scope="pairing", params=PairingDecision)
        registry.register("pairing.deny", deny, scope="pairing", params=PairingDecision)
