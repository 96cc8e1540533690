"""The Matrix driver of the adapter contract (see platforms.py): mautrix's ClientAPI against
the homeserver emulator, in a room Ann and the bot share."""

from __future__ import annotations

import re
from typing import Any

from botweave.adapter import Adapter
from botweave.adapters.matrix.adapter import MatrixAdapter
from botweave.adapters.matrix.config import MatrixConfig
from botweave.types import BotMessage

from tests.adapters.platforms import Item, PlatformDriver, PostedFile
from tests.emulators.matrix import ANN, BOT, MatrixEmulator
from tests.emulators.telegram import wait_until

MEDIA = ("m.image", "m.audio", "m.video", "m.file")


async def synced(emu: MatrixEmulator) -> None:
    """The adapter made its first sync and is long-polling for what comes next: from now on
    what people say is new to it (the first start skips what came before)."""
    await wait_until(lambda: any(since is not None for since in emu.syncs), what="the adapter's first sync")


class MatrixDriver(PlatformDriver):
    name = "matrix"
    drops_own_posts = True
    unknown_id = "$00000000unknown"

    async def start(self) -> None:
        self.emu = await MatrixEmulator().start()
        self.chat = self.emu.create_room(ANN, members=(BOT,))
        self.person = ANN
        await super().start()
        await synced(self.emu)

    async def stop(self) -> None:
        await super().stop()
        await self.emu.stop()

    def make_adapter(self) -> Adapter:
        return MatrixAdapter(MatrixConfig(**self.emu.section()))

    def text_of(self, message_id: str) -> str | None:
        return self.emu.text_of(message_id) if message_id in self.emu.events else None

    def reactions_on(self, message_id: str) -> list[str]:
        return self.emu.reactions_on(message_id)

    def said(self, message_id: str) -> tuple[str, str]:
        text = self.emu.text_of(message_id) or ""
        match = re.match(r"\*\*(.+?):\*\* (.*)", text, re.DOTALL)
        return (match.group(1), match.group(2)) if match else (self.emu.users[BOT], text)

    def direct_messages(self, user_id: str) -> list[str]:
        return [text for room in self.emu.direct_rooms(user_id) for text in self.emu.bot_texts(room)]

    def sent_so_far(self) -> object:
        return [(s.event_type, s.txn_id) for s in self.emu.sends], len(self.emu.uploads)

    async def person_says(self, text: str) -> BotMessage:
        before = len(self.received)
        self.emu.say(self.chat, ANN, text)
        return await self._next_message(before)

    async def own_post_comes_back(self, text: str) -> list[Item]:
        own = self.emu.say(self.chat, BOT, text)
        await self.person_says("a barrier: everything posted before it has been read")
        return [i for i in self.received if isinstance(i, BotMessage) and i.message_id == own["event_id"]]

    def files_posted(self) -> list[PostedFile]:
        posted = []
        for event in self.emu.bot_events(self.chat):
            content: dict[str, Any] = event["content"]
            if content.get("msgtype") not in MEDIA:
                continue
            media = self.emu.media[content["url"].rsplit("/", 1)[1]]
            filename = content.get("filename") or content["body"]
            caption = content["body"] if content["body"] != filename else ""
            posted.append(PostedFile("attachment", filename, media.data, caption, event["event_id"]))
        return posted

    async def person_sends_file(
        self, data: bytes, filename: str, mime: str, *, declared_size: int | None = None, caption: str = ""
    ) -> BotMessage:
        before = len(self.received)
        self.emu.send_file(self.chat, ANN, data, filename, mime, declared_size=declared_size, caption=caption)
        return await self._next_message(before)

    def file_fetches(self) -> int:
        return self.emu.fetches

    async def person_replies(self, text: str, to: BotMessage) -> BotMessage:
        before = len(self.received)
        self.emu.say(self.chat, ANN, text, reply_to=to.message_id)
        return await self._next_message(before)

