"""What every platform adapter provides to the runtime.

An adapter owns one platform connection. Inbound, it turns SDK events into `BotMessage` /
`PlatformEvent` and hands them to the sink the runtime bound to it; the sink returns quickly
(turns run in the background), so platforms that need a fast acknowledgement get one.
Outbound, it sends, edits, deletes and reacts, reporting every outcome as a
`MessageActionResult` instead of raising, so one failed action never stops a turn.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from botweave.config import PlatformConfig
from botweave.types import AgentIdentity, BotMessage, BotUser, MessageActionResult, PlatformCapabilities, PlatformEvent

InboundSink = Callable[[BotMessage | PlatformEvent], Awaitable[None]]

#: How a send whose outcome is unknown (the process died, or the answer never came back) is
#: settled without showing the message twice:
#:   "key"    - the platform drops a repeat that carries the same key (`send_keyed`);
#:   "lookup" - a post carries its key and can be found in the conversation (`find_sent`);
#:   "none"   - neither: the only way not to lose it is to send it again.
Idempotency = Literal["none", "key", "lookup"]

log = logging.getLogger(__name__)


def name_prefix(identity: AgentIdentity) -> str:
    """How a post shows its author where the platform cannot post under another name."""
    return f"**{identity.name}:** "


class Adapter(ABC):
    platform: ClassVar[str]
    capabilities: ClassVar[PlatformCapabilities]
    #: The PlatformEvent kinds this adapter can deliver; a kind not listed is never emitted.
    emits: ClassVar[frozenset[str]] = frozenset()
    #: How often the runtime renews the typing indicator while a turn runs.
    typing_interval_s: ClassVar[float] = 4.0
    #: What the platform offers to settle a send of unknown outcome (see `Idempotency`).
    idempotency: ClassVar[Idempotency] = "none"

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self.self_user: BotUser | None = None  # known once start() has logged in
        self._sink: InboundSink | None = None

    def bind(self, sink: InboundSink) -> None:
        self._sink = sink

    async def dispatch(self, item: BotMessage | PlatformEvent) -> bool:
        """Hand an inbound item to the runtime; a failure there never kills the connection.
        False when the runtime did not take it, so a platform that can redeliver (a webhook
        answered with an error) is not told the item arrived."""
        if self._sink is None:
            log.warning("%s: inbound item dropped, adapter not bound to a runtime", self.platform)
            return False
        try:
            await self._sink(item)
        except Exception:
            log.exception("%s: runtime failed to accept an inbound item", self.platform)
            return False
        return True

    @abstractmethod
    async def start(self, *, inbound: bool = True) -> None:
        """Log in and get ready to send; with `inbound`, also start receiving. A worker that
        only answers items from the shared stream starts with `inbound=False`."""

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        reply_to: str | None = None,
    ) -> MessageActionResult:
        """Post one message (already within the length limit); `message_id` is set on ok."""

    async def send_keyed(
        self,
        chat_id: str,
        text: str,
        *,
        key: str,
        thread_id: str | None = None,
        reply_to: str | None = None,
    ) -> MessageActionResult:
        """`send`, tagged with `key`: the same chunk of the same reply carries the same key in
        every attempt, in every process. A platform that can use it (`idempotency` "key" or
        "lookup") overrides this; the rest send as usual."""
        return await self.send(chat_id, text, thread_id=thread_id, reply_to=reply_to)

    async def find_sent(self, chat_id: str, key: str, *, thread_id: str | None = None, since: float) -> str | None:
        """The id of the message posted earlier under `key` (by `send_keyed`, no earlier than
        `since`, a Unix time), or None when the conversation has no such message. Raises when
        the platform cannot be asked; only "lookup" platforms implement it."""
        return None

    async def send_as(
        self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        """Post under an agent's own name (rooms). Platforms that cannot change the author
        per message show the name as a bold prefix instead."""
        return await self.send(chat_id, name_prefix(identity) + text, thread_id=thread_id)

    async def send_direct(self, user_id: str, text: str) -> MessageActionResult:
        """A direct message to a user (pairing requests, notifications). Platforms whose DM
        channel id differs from the user id override this."""
        return await self.send(user_id, text)

    async def edit(
        self, chat_id: str, message_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        return MessageActionResult("unsupported", chat_id, f"{self.platform} cannot edit messages")

    async def delete(self, chat_id: str, message_id: str) -> MessageActionResult:
        return MessageActionResult("unsupported", chat_id, f"{self.platform} cannot delete messages")

    async def react(self, chat_id: str, message_id: str, emoji: str) -> MessageActionResult:
        return MessageActionResult("unsupported", chat_id, f"{self.platform} cannot react")

    async def end_reply(self, chat_id: str, message_ids: list[str]) -> None:
        """A reply is complete (its streamed edits included); the console ends its line here."""

    async def typing(self, chat_id: str, *, thread_id: str | None = None) -> None:
        """Show the typing indicator once; the runtime renews it every `typing_interval_s`."""

    def home_chat(self) -> str | None:
        """The chat that the `<platform>` target resolves to, if configured."""
        return getattr(self.config, "home_chat", None) or None


@dataclass(frozen=True, slots=True)
class PlatformSpec:
    """What a platform package hands the runtime: its name, the model of its bot.yaml section
    and how to build its adapter. Packages announce themselves under the `botweave.platforms`
    entry point, so the kernel never lists platforms and a third-party one plugs in the same way."""

    name: str
    config: type[PlatformConfig]
    create: Callable[[Any], Adapter]
