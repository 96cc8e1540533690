"""Teams conversations in the browser UI's Watch view: the view lists what `conversations.list`
returns and reads each one with `chat.history`, whatever the platform, so a Teams channel
thread and a personal chat show up there with what people and the bot said, live."""

from __future__ import annotations

from typing import Any

from tests.emulators.teams import CHANNEL, PERSONAL, TeamsEmulator, text_shown
from tests.emulators.telegram import wait_until
from tests.gateway.support import TOKEN_CONFIG, client


async def test_teams_conversations_are_listed_and_read_in_the_watch_view(start_app: Any) -> None:
    emu = await TeamsEmulator().start()
    try:
        app = await start_app({
            "bot": {"unknown_user_policy": "allow"},
            "agents": {"assistant": {"model": "offline/echo"}},
            "gateway": {"listen": "127.0.0.1:0", "tokens": TOKEN_CONFIG},
            "platforms": {"teams": emu.config()},
        })
        url = f"http://127.0.0.1:{app.adapters['teams'].port}/api/messages"
        async with client(app, "root") as root:
            post = emu.message("status of the launch?", conversation=CHANNEL, mention_bot=True)
            assert await emu.deliver(post, url=url) == 200
            assert await emu.deliver(emu.message("hi there"), url=url) == 200
            await wait_until(lambda: emu.bot_posts(CHANNEL) and emu.bot_posts(PERSONAL), 30, "both answers")
            await app.drain()
            listed = (await root.call("conversations.list", {"platform": "teams"}))["conversations"]
            keys = sorted(c["conversation"] for c in listed)
            assert all(c["platform"] == "teams" for c in listed)
            assert len(keys) == 2 and any(CHANNEL in k for k in keys) and any("dm" in k for k in keys), keys
            channel_key = next(k for k in keys if CHANNEL in k)
            history = (await root.call("chat.history", {"conversation": channel_key}))["messages"]
        texts = [m["text"] for m in history]
        assert texts == ["status of the launch?", text_shown(emu.bot_posts(CHANNEL)[0])]
    finally:
        await emu.stop()
