"""What the bot posts on its own rather than as an answer: to a target a program or a tool
names, a file, a room agent's turn, a direct message to a person. All of it leaves through
`Delivery`, like every reply, so hooks and the outbox see it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from botweave.adapter import Adapter
from botweave.buttons import ButtonBook
from botweave.delivery import Delivery
from botweave.files import FileSource, send_file
from botweave.policies.egress import EgressPolicy
from botweave.runtime.config import Config
from botweave.targets import Targets
from botweave.types import AgentIdentity, BotMessage, Button, MessageActionResult


class Poster:
    def __init__(
        self, config: Config, delivery: Delivery, targets: Targets, buttons: ButtonBook, adapters: Mapping[str, Adapter]
    ) -> None:
        self._config = config
        self._delivery = delivery
        self._targets = targets
        self._buttons = buttons
        self._adapters = adapters

    async def send_to(
        self, target: str, text: str, *, origin: BotMessage | None = None, buttons: Sequence[Button] = ()
    ) -> MessageActionResult:
        to = self._targets.resolve(target, origin)
        if to is None:
            return MessageActionResult("no_route", target, "target not resolvable")
        issued = await self._buttons.issue(buttons) if buttons else []
        return (await self._delivery.post(to, text, origin=origin, buttons=issued)).result(target)

    async def send_file(
        self,
        target: str,
        source: FileSource,
        *,
        caption: str = "",
        origin: BotMessage | None = None,
        agent: str | None = None,
        key: str | None = None,
    ) -> MessageActionResult:
        """Within the media limits and under the network policy of `agent` (the top-level
        ones for no agent)."""
        config = self._config
        egress = config.egress_policy(agent) if agent is not None else EgressPolicy.from_config(config.network)
        return await send_file(
            self._delivery, self._targets, target, source,
            media=config.media_for(agent), origin=origin, caption=caption, egress=egress.refusal, key=key,
        )

    async def post_as(self, target: str, identity: AgentIdentity, text: str) -> MessageActionResult:
        """A room agent's turn, posted as that agent where the platform can."""
        to = self._targets.resolve(target)
        if to is None:
            return MessageActionResult("no_route", target, "target not resolvable")
        return (await self._delivery.post(to, text, identity=identity)).result(target)

    async def send_direct(self, platform: str, user_id: str, text: str) -> MessageActionResult:
        """A direct message to a person (the push transport of chat platforms). On a platform
        of this process's own (the console) the notification lands among the very lines it
        is about, so it says what it is."""
        adapter = self._adapters.get(platform)
        if adapter is None:
            return MessageActionResult("no_route", f"{platform}:{user_id}", f"platform {platform} is not running")
        if adapter.local:
            text = f"(notification: {text}; /notify changes what you are sent)"
        return (await self._delivery.post_direct(adapter, user_id, text)).result(f"{platform}:{user_id}")
