"""People's control over what the bot keeps of them: `/memory`, `/forget N | all`, `/link`,
`/unlink` in chat, and `memory.list | memory.forget` for a gateway client's signed-in
principal. Each acts on the person who asks, never on anyone named in the arguments."""

from __future__ import annotations

from typing import Any, Optional

from botweave.commands import CommandRegistry
from botweave.memory.keeper import MemoryKeeper, Numbered
from botweave.memory.links import CODE_TTL, Links
from botweave.methods import Caller, MethodError, MethodRegistry, Params
from botweave.pipeline import Inbound

MEMORY_HELP = "list what the bot remembers about you, numbered"
FORGET_HELP = "delete one remembered item for good, or all of them"
FORGET_USAGE = "N|all"
LINK_HELP = "link this account to your account on another platform: one memory for both"
LINK_USAGE = "[CODE]"
UNLINK_HELP = "undo /link: this account is on its own again"
NOTHING_KEPT = "I don't remember anything about you."
PRIVATE_ONLY = "Send /link in a private chat with me: a link code is personal."
MEMORY_PRIVATE = "Send /{command} in a private chat with me: what I keep about you is for you alone."


def _line(entry: Numbered, several_agents: bool) -> str:
    whose = f"[{entry.agent}] " if several_agents else ""
    return f"{entry.number}. {whose}{entry.item.text}"


class MemoryCommands:
    def __init__(self, keeper: MemoryKeeper, links: Links) -> None:
        self.keeper = keeper
        self.links = links

    def register(self, registry: CommandRegistry) -> None:
        registry.register("memory", self.memory, help=MEMORY_HELP)
        registry.register("forget", self.forget, help=FORGET_HELP, args=FORGET_USAGE)
        registry.register("link", self.link, help=LINK_HELP, args=LINK_USAGE)
        registry.register("unlink", self.unlink, help=UNLINK_HELP)

    async def _person(self, inbound: Inbound) -> str:
        return await self.keeper.person_of_message(inbound.message)

    async def memory(self, inbound: Inbound) -> str:
        if inbound.message.is_group:
            return MEMORY_PRIVATE.format(command="memory")
        if not self.keeper.agents:
            return "Memory is off for every agent here: I keep nothing about you between conversations."
        listing = await self.keeper.listing(await self._person(inbound))
        if not listing:
            return NOTHING_KEPT
        several = len(self.keeper.agents) > 1
        lines = [_line(entry, several) for entry in listing]
        return "What I remember about you:\n" + "\n".join(lines) + "\n\n/forget N deletes one, /forget all deletes everything."

    async def forget(self, inbound: Inbound) -> str:
        if inbound.message.is_group:
            return MEMORY_PRIVATE.format(command="forget")
        args = inbound.message.command_args
        if len(args) != 1:
            return f"Usage: /forget {FORGET_USAGE} (the numbers are those /memory shows)."
        person = await self._person(inbound)
        if args[0].lower() == "all":
            gone = await self.keeper.forget_all(person)
            return f"Deleted everything I remembered about you ({gone} items)." if gone else NOTHING_KEPT
        if not args[0].isdigit():
            return f"Usage: /forget {FORGET_USAGE} (the numbers are those /memory shows)."
        number = int(args[0])
        listing = await self.keeper.listing(person)
        chosen = next((entry for entry in listing if entry.number == number), None)
        if chosen is None:
            count = len(listing)
            return f"There is no item {number}: I remember {count} thing{'s' if count != 1 else ''} about you (see /memory)."
        await self.keeper.forget(chosen.agent, person, [chosen.item.id])
        return f"Deleted: {chosen.item.text}"

    async def link(self, inbound: Inbound) -> str:
        msg = inbound.message
        if msg.is_group:
            return PRIVATE_ONLY
        args = msg.command_args
        if not args:
            code = await self.links.issue(msg.platform, msg.sender.user_id)
            minutes = int(CODE_TTL // 60)
            return (
                f"Your link code: {code}\nWithin {minutes} minutes, send /link {code} to me from your other account "
                "(another platform, or the web chat). The two accounts will then share one memory. "
                "The code works once; share it with nobody."
            )
        if len(args) != 1:
            return f"Usage: /link {LINK_USAGE}"
        result = await self.links.redeem(msg.platform, msg.sender.user_id, args[0])
        if result.status == "locked":
            return "Too many wrong link codes were tried; linking is paused for a few minutes."
        if result.status == "wrong_code":
            return "That link code is not valid (codes work once and for 10 minutes). Send /link in a private chat with your other account for a new one."
        if result.status == "same_person":
            return "These accounts are linked already."
        left = await self.keeper.merge(result.was, result.person)
        note = f" {left} of this account's items did not fit and stay with it alone." if left else ""
        return "Linked: both accounts now share one memory. /unlink undoes it." + note

    async def unlink(self, inbound: Inbound) -> str:
        msg = inbound.message
        parted = await self.links.unlink(msg.platform, msg.sender.user_id)
        if not parted:
            return "This account is not linked to another."
        return (
            "Unlinked: this account is on its own again. What was remembered while linked stays with the "
            "account that made the link code."
        )


class ListParams(Params):
    agent: Optional[str] = None
    """Only this agent's memory; unset: every agent's."""


class ForgetParams(Params):
    item_id: Optional[str] = None
    """The item to delete (its id, as memory.list gives it)."""
    all: bool = False
    """Delete every item instead."""
    agent: Optional[str] = None
    """Whose memory the item is in; unset: any agent's."""


class MemoryMethods:
    """`memory.list` and `memory.forget` for the signed-in principal: the person is the
    principal's own web account (as its chats are answered), resolved through its links."""

    def __init__(self, keeper: MemoryKeeper) -> None:
        self.keeper = keeper

    def register(self, registry: MethodRegistry) -> None:
        registry.register("memory.list", self._list, scope="read", params=ListParams, help="what the bot remembers about you")
        registry.register(
            "memory.forget", self._forget, scope="write", params=ForgetParams, help="delete remembered items for good"
        )

    async def _person(self, caller: Caller) -> str:
        if caller.kind == "share" or not caller.speaks_for("web", caller.name):
            raise MethodError("forbidden", "memory belongs to a signed-in person; this connection is not one")
        return await self.keeper.person("web", caller.name)

    def _agents(self, agent: str | None) -> list[str]:
        if agent is None:
            return list(self.keeper.agents)
        if agent not in self.keeper.agents:
            raise MethodError("not_found", f"agent {agent!r} keeps no memory")
        return [agent]

    async def _list(self, caller: Caller, params: ListParams) -> dict[str, Any]:
        person = await self._person(caller)
        agents = set(self._agents(params.agent))
        return {
            "items": [
                {"number": entry.number, "agent": entry.agent, **entry.item.public()}
                for entry in await self.keeper.listing(person)
                if entry.agent in agents
            ]
        }

    async def _forget(self, caller: Caller, params: ForgetParams) -> dict[str, Any]:
        person = await self._person(caller)
        agents = self._agents(params.agent)
        if params.all == (params.item_id is not None):
            raise MethodError("bad_request", "give either item_id or all: true")
        if params.all:
            gone = 0
            for agent in agents:
                gone += await self.keeper.forget(agent, person, [e.item.id for e in await self.keeper.listing(person) if e.agent == agent])
            return {"forgotten": gone}
        for agent in agents:
            if await self.keeper.forget(agent, person, [params.item_id or ""]):
                return {"forgotten": 1, "item_id": params.item_id}
        raise MethodError("not_found", f"no item {params.item_id!r} in your memory")

