"""The Matrix driver of the room tests (see rooms.py): an App with a room of agents on the
homeserver emulator."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from tests.adapters.platform_matrix import synced
from tests.adapters.rooms import Post, RoomDriver
from tests.emulators.matrix import ANN, BOB, BOT, MatrixEmulator
from tests.emulators.telegram import wait_until


class MatrixRoom(RoomDriver):
    """A room of Ann, Bob and the bot; Matrix has no per-message author for an account, so
    each turn starts with the agent's name in bold, continuations under the same turn. The
    homeserver shows the bot its own posts in every sync."""

    name = "matrix"

    async def start_emulator(self) -> None:
        self.emu = await MatrixEmulator().start()
        self.chat = self.emu.create_room(ANN, members=(BOT, BOB), name="Standup")

    async def stop_emulator(self) -> None:
        await self.emu.stop()

    def section(self) -> dict[str, Any]:
        return self.emu.section()

    async def _ready(self) -> None:
        await synced(self.emu)

    async def _deliver(self, text: str, **where: Any) -> str:
        return str(self.emu.say(self.chat, ANN, text, **where)["event_id"])

    def posts(self, chat: str | None = None) -> list[Post]:
        posts: list[Post] = []
        for event in self.emu.bot_events(chat or self.chat):
            text = self.emu.text_of(event["event_id"]) or ""
            named = re.match(r"\*\*(.+?):\*\* (.*)", text, re.DOTALL)
            speaker, words = (named.group(1), named.group(2)) if named else (posts[-1].speaker if posts else "", text)
            posts.append(Post(speaker, words, text, "m.relates_to" in event["content"], event))
        return posts

    def post_id(self, post: Post) -> str:
        return str(post.raw["event_id"])

    def post_calls(self) -> int:
        return sum(1 for s in self.emu.sends if s.room_id == self.chat and s.event_type == "m.room.message" and not s.repeat)

    def refused_posts(self) -> list[Any]:
        return []  # a refused send is answered with an error and nothing is stored

    async def _settle(self) -> None:
        """Until the adapter has synced past everything posted so far (its own posts included)."""
        end = len(self.emu.stream)
        await wait_until(
            lambda: any(since is not None and int(since[1:]) >= end for since in self.emu.syncs),
            what="the adapter to read everything posted so far",
        )
        await asyncio.sleep(0.05)
