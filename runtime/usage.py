"""What people and operators see of usage: the `/usage` command (a person's own tokens and
cost today and this month; `/usage all` for the owner: today's heaviest users), the gateway
method `usage.get` (the caller's own usage; with `admin`, anyone's), and the models
`botweave check` names because litellm lists no price for them and none is configured."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Optional

from botweave.methods import Caller, MethodError, MethodRegistry, Params
from botweave.model_guard import ModelGuard
from botweave.model_info import price_of
from botweave.pipeline import Inbound
from botweave.runtime.config import Config

USAGE_HELP = "your tokens and cost today and this month (the owner: /usage all, everyone's)"
USAGE_ARGS = "[all]"
#: How many people `/usage all` lists.
TOP = 10

OwnerOf = Callable[[str], Awaitable[Optional[str]]]


class UsageCommand:
    """`/usage` and `/usage all`."""

    def __init__(self, guard: ModelGuard, owner_of: OwnerOf) -> None:
        self._guard = guard
        self._owner_of = owner_of

    async def __call__(self, inbound: Inbound) -> str:
        msg = inbound.message
        if [arg.lower() for arg in msg.command_args] == ["all"]:
            if msg.sender.user_id != await self._owner_of(msg.platform):
                return "Only the bot's owner can see everyone's usage."
            top = await self._guard.top_users(TOP)
            if not top:
                return "Nobody has used any tokens today."
            lines = [f"{n}. {user}: {tokens:,} tokens, {cost:.4f} USD" for n, (user, tokens, cost) in enumerate(top, 1)]
            return "Today's usage, most first:\n" + "\n".join(lines)
        view = await self._guard.usage_of(f"{msg.platform}:{msg.sender.user_id}")
        return view.text()


class UsageParams(Params):
    user: Optional[str] = None
    """Whose usage, as `platform:user_id`; unset: the caller's own. Another's needs `admin`."""


def register_usage_method(registry: MethodRegistry, guard: ModelGuard) -> None:
    async def usage(caller: Caller, params: UsageParams) -> dict[str, Any]:
        own = [f"{platform}:{user_id}" for platform, user_id in caller.identities]
        if params.user is None:
            return {"users": [(await guard.usage_of(user)).to_dict() for user in own]}
        if params.user not in own and not caller.admin:
            raise MethodError("forbidden", "another person's usage needs the admin scope")
        return {"users": [(await guard.usage_of(params.user)).to_dict()]}

    registry.register(
        "usage.get", usage, scope="read", params=UsageParams,
        help="tokens and cost today and this month, against the daily limits (own; admin: anyone's)",
    )


def unpriced_models(config: Config) -> list[str]:
    """The models budgets can count only tokens of: no `price:` and no public price in
    litellm's model map."""
    found: list[str] = []
    for agent in config.agents.values():
        entries = [(agent.model, agent.price), *((fallback.model, fallback.price) for fallback in agent.fallbacks)]
        for model, price in entries:
            if price is None and not model.startswith("offline/") and price_of(model) is None and model not in found:
                found.append(model)
    return found
