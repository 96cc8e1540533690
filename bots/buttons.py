"""Buttons behind short ids: what a button means stays in the store, the wire carries an id.

Platforms limit what a button may carry back (Telegram's `callback_data` is at most 64 bytes,
Discord's `custom_id` 100 characters, Slack's `action_id` 255), and what comes back is typed by
whoever can craft a request. So a button's action and value never travel: `ButtonBook.issue`
keeps them in the store under a random id and hands the adapter buttons whose `action_id` is
that id, and `ButtonBook.read` turns a press back into the action and value it stands for.
Because the record is in the store, a press that reaches another process (the one holding the
platform connection, while a worker posted the button) reads the same meaning.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import replace

from botweave.store import Store
from botweave.types import Button, PlatformEvent

#: How long a button means something when its issuer does not say.
DEFAULT_TTL_S = 7 * 24 * 3600.0
#: Every wire id starts with this, so a press of a button botweave did not issue is told apart.
PREFIX = "bw:"


def _key(wire_id: str) -> str:
    return f"button:{wire_id}"


class ButtonBook:
    """The buttons the bot has posted, by wire id (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def issue(self, buttons: Sequence[Button], *, ttl: float = DEFAULT_TTL_S) -> list[Button]:
        """The buttons as they go on the wire: each under a fresh short id (15 ASCII
        characters, within every platform's limit), its meaning kept for `ttl` seconds."""
        issued = []
        for button in buttons:
            wire_id = PREFIX + secrets.token_urlsafe(9)
            await self._store.set(_key(wire_id), json.dumps(button.to_dict(), ensure_ascii=False), ttl=ttl)
            issued.append(replace(button, action_id=wire_id, value=""))
        return issued

    async def read(self, event: PlatformEvent) -> tuple[PlatformEvent, bool]:
        """The press with the action and value its button was issued with; False when the id
        is not one the book knows (expired, or never issued), and the event is left as it came."""
        wire_id = event.action_id or ""
        if not wire_id.startswith(PREFIX):
            return event, False
        raw = await self._store.get(_key(wire_id))
        if raw is None:
            return event, False
        button = Button.from_dict(json.loads(raw))
        return replace(event, action_id=button.action_id, value=button.value), True
