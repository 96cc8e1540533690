"""Outbound to a named place (SPEC §9): `origin`, `<platform>`, `<platform>:<chat>` or
`<platform>:<chat>:<thread>`, for everything that posts outside a reply: room turns,
pairing welcomes, notifications, scheduled kickoffs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from botweave.replies import chunk_text, measure
from botweave.types import AgentIdentity, BotMessage, MessageActionResult

if TYPE_CHECKING:
    from botweave.adapter import Adapter

Resolved = tuple["Adapter", str, "str | None"]


class Targets:
    def __init__(self, adapters: Mapping[str, Adapter]) -> None:
        self._adapters = adapters  # the runtime's live map: platforms may start later

    def resolve(self, target: str, origin: BotMessage | None = None) -> Resolved | None:
        if target == "origin":
            if origin is None or origin.platform not in self._adapters:
                return None
            return self._adapters[origin.platform], origin.channel.channel_id, origin.thread_id
        platform, _, rest = target.partition(":")
        adapter = self._adapters.get(platform)
        if adapter is None:
            return None
        if not rest:
            home = adapter.home_chat()
            return (adapter, home, None) if home else None
        chat, _, thread = rest.partition(":")
        return adapter, chat, thread or None

    def conversation(self, target: str) -> str | None:
        """The target in its canonical `platform:chat[:thread]` form (a room's conversation)."""
        resolved = self.resolve(target)
        if resolved is None:
            return None
        adapter, chat, thread = resolved
        return f"{adapter.platform}:{chat}:{thread}" if thread else f"{adapter.platform}:{chat}"

    async def send(self, target: str, text: str, *, origin: BotMessage | None = None) -> list[MessageActionResult]:
        """Post text, chunked to the platform's limit; an unresolvable target is `no_route`."""
        resolved = self.resolve(target, origin)
        if resolved is None:
            return [MessageActionResult("no_route", target, "target not resolvable")]
        adapter, chat, thread = resolved
        caps = adapter.capabilities
        results = [
            await adapter.send(chat, chunk, thread_id=thread)
            for chunk in chunk_text(text, caps.max_message_length, caps.length_unit)
        ]
        await adapter.end_reply(chat, [r.message_id for r in results if r.message_id])
        return results

    async def send_as(self, target: str, identity: AgentIdentity, text: str) -> MessageActionResult:
        """Post under an agent's identity; stops at the first chunk the platform refuses."""
        resolved = self.resolve(target)
        if resolved is None:
            return MessageActionResult("no_route", target, "target not resolvable")
        adapter, chat, thread = resolved
        caps = adapter.capabilities
        limit = caps.max_message_length
        if limit is not None:  # room for the name prefix that platforms without identities add
            limit -= measure(f"**{identity.name}:** ", caps.length_unit)
        result = MessageActionResult("ok", target)
        for chunk in chunk_text(text, limit, caps.length_unit):
            result = await adapter.send_as(identity, chat, chunk, thread_id=thread)
            if not result.ok:
                break
        await adapter.end_reply(chat, [])
        return result

    async def send_direct(self, platform: str, user_id: str, text: str) -> MessageActionResult:
        adapter = self._adapters.get(platform)
        if adapter is None:
            return MessageActionResult("no_route", f"{platform}:{user_id}", f"platform {platform} is not running")
        return await adapter.send_direct(user_id, text)
