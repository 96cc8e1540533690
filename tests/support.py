"""Test doubles at the seam we own: an in-process adapter that records what it was asked to do.

This is our own `Adapter` interface, not a platform SDK; the SDK adapters are tested against
the platform emulators.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from botweave.adapter import Adapter, Outbound, Outcome
from botweave.types import BotChannel, BotMessage, BotUser, PlatformCapabilities

_ids = itertools.count(1)


@dataclass
class Sent:
    chat_id: str
    text: str
    thread_id: str | None
    reply_to: str | None
    message_id: str
    at: float = field(default_factory=time.monotonic)


class RecordingAdapter(Adapter):
    """Pretends to be a platform called `test`; keeps every outbound call in order.

    Ready from construction (no start needed), so runtime tests can use it on its own.
    """

    platform = "test"
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(max_message_length=100, typing=True)
    typing_interval_s = 0.05

    def __init__(self, config: Any = None, *, send_delay: float = 0.0) -> None:
        super().__init__(config)
        self.self_user = BotUser("bot-1", "testbot", "Test Bot", is_bot=True)
        self.sent: list[Sent] = []
        self.edits: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.typings = 0
        self.send_delay = send_delay
        self.outbound = _Recorder(self)

    async def start(self, *, inbound: bool = True) -> None: ...

    async def stop(self) -> None: ...

    def texts(self) -> list[str]:
        return [s.text for s in self.sent]


class _Recorder(Outbound):
    """RecordingAdapter's outbound part: every call lands in the adapter's lists."""

    def __init__(self, adapter: RecordingAdapter) -> None:
        self.adapter = adapter

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str:
        if self.adapter.send_delay:
            await asyncio.sleep(self.adapter.send_delay)
        message_id = f"m{next(_ids)}"
        self.adapter.sent.append(Sent(chat_id, text, thread_id, reply_to, message_id))
        return message_id

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        self.adapter.edits.append((message_id, text))

    async def delete(self, chat_id: str, message_id: str) -> None:
        self.adapter.deleted.append(message_id)

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        self.adapter.typings += 1

    def classify(self, exc: Exception, action: str) -> Outcome:
        return "failed", f"{action}: {exc}"


def message(
    text: str,
    *,
    message_id: str | None = None,
    chat_id: str = "c1",
    user_id: str = "u1",
    name: str = "Ann",
    channel_type: str = "dm",
    is_bot: bool = False,
    platform: str = "test",
    thread_id: str | None = None,
    **kwargs: Any,
) -> BotMessage:
    return BotMessage(
        message_id=message_id or str(next(_ids)),
        content=text,
        sender=BotUser(user_id, name.lower(), name, is_bot=is_bot),
        channel=BotChannel(chat_id, channel_type),  # type: ignore[arg-type]
        platform=platform,
        thread_id=thread_id,
        **kwargs,
    )


def config(**bot: Any) -> dict[str, Any]:
    """A minimal config mapping with one offline agent; `bot` goes into the `bot:` block."""
    return {
        "bot": {"unknown_user_policy": "allow", **bot},
        "agents": {"assistant": {"model": "offline/echo"}},
    }


def alive(pid: int) -> bool:
    """Whether process `pid` is still running (a server the bot started, say)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


#: The shared `start_app` fixture (tests/conftest.py): start an App from a config.
StartApp = Callable[[Any], Awaitable[Any]]
