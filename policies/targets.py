"""Where agents' message tools may act: the chats the bot talks in, and what an agent is
allowed beyond them.

An agent can be talked into posting anywhere (`send_message` to any chat id), so its message
tools obey the rules replies obey: a place the bot would not answer in, by the platform's
allowlists, unknown-user policy and pairing (`access.chat_admitted`), is refused, unless the
agent's `message_tools.allow_targets` names it. Always allowed: the conversation being
answered (any thread of its chat), and the platform's home chat, which the operator named.

`allow_targets` entries speak the target grammar: `telegram:-1001` is that chat and its
threads, `telegram:-1001:7` that thread only, `telegram:*` every chat of the platform, and a
bare `telegram` its home chat.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from botweave.config import BotConfig
from botweave.delivery import Destination
from botweave.policies.access import chat_admitted
from botweave.policies.access_control import AccessControl
from botweave.types import BotMessage


def named_in(entries: Sequence[str], to: Destination) -> bool:
    """Whether an `allow_targets` entry names `to` (see the module docstring)."""
    platform = to.adapter.platform
    for entry in entries:
        name, _, rest = entry.partition(":")
        if name != platform:
            continue
        if not rest:
            if to.chat_id == to.adapter.home_chat():
                return True
            continue
        chat, thread = to.adapter.split_target(rest)
        if chat == "*" or (chat == to.chat_id and (not thread or thread == to.thread_id)):
            return True
    return False


class MessageTargetRule:
    """The `TargetRule` the runtime hands agents' message tools."""

    def __init__(
        self,
        access: AccessControl,
        config_for: Callable[[str], BotConfig],
        allow_targets: Mapping[str, Sequence[str]],
    ) -> None:
        self._access = access
        self._config_for = config_for
        self._allow_targets = allow_targets

    async def refusal(self, agent: str, to: Destination, origin: BotMessage | None) -> str | None:
        platform = to.adapter.platform
        if origin is not None and origin.platform == platform and origin.channel.channel_id == to.chat_id:
            return None
        if to.chat_id == to.adapter.home_chat() or named_in(self._allow_targets.get(agent, ()), to):
            return None
        config = self._config_for(platform)
        if chat_admitted(to.chat_id, config):
            return None  # open as any chat: no need to ask the platform whose it is
        person = await to.adapter.whose_direct_chat(to.chat_id)
        if person is not None:
            known = await self._access.known(platform, person)
            if chat_admitted(to.chat_id, config, direct_with=person, known_user=known):
                return None
        where = f"{platform}:{to.chat_id}"
        return (
            f"{where} is not a chat this bot talks in (its allowlists, unknown-user policy and pairing); "
            f"to let agent {agent} post there, add it to agents.{agent}.message_tools.allow_targets"
        )
