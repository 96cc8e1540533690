"""Each built-in message tool on each platform, through the real SDKs against the platform
emulators, driven by a model (the loopback OpenAI emulator) that reads every tool result and
uses the ids it learns: post elsewhere, react to the person's message, open a thread, edit
and then delete its own post, post into the new thread, and fail to delete the person's
message (an agent may only delete what the bot posted)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App
from botweave.adapters.console.adapter import ConsoleAdapter

from tests.emulators.discord import BOT_ID, CHANNEL_ID, THREAD_ID, DiscordEmulator
from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.emulators.slack import BOT_USER_ID, EventDelivery, SlackEmulator, event_callback, slack_section, wait_for
from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)
from tests.support import StartApp

MESSAGE_TOOLS = ["send_message", "react", "edit_message", "delete_message", "create_thread"]


def agents(llm: OpenAIEmulator) -> dict[str, Any]:
    return {
        "remote": {
            "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback", "tools": MESSAGE_TOOLS,
        }
    }


class Script:
    """The model's side: what it calls in each round, from what earlier rounds returned."""

    def __init__(self, elsewhere: str, emoji: str = "👍") -> None:
        self.elsewhere = elsewhere
        self.emoji = emoji
        self.results: dict[str, list[dict[str, Any]]] = {}
        self.person_message: str | None = None

    def __call__(self, body: dict[str, Any]) -> Any:
        messages = body["messages"]
        names: dict[str, str] = {}
        results: dict[str, list[dict[str, Any]]] = {}
        for m in messages:
            for call in m.get("tool_calls") or []:
                names[call["id"]] = call["function"]["name"]
            if m["role"] == "tool":
                results.setdefault(names[m["tool_call_id"]], []).append(json.loads(m["content"]))
        self.results = results
        rounds = sum(1 for m in messages if m.get("tool_calls"))
        if rounds == 0:
            return [
                tool_call("send_message", {"target": self.elsewhere, "text": "Hello **there**"}),
                tool_call("react", {"emoji": self.emoji}),
                tool_call("create_thread", {"name": "Plans"}),
            ]
        posted = results["send_message"][0]["message_ids"][0]
        if rounds == 1:
            return [
                tool_call("edit_message", {"message_id": posted, "text": "Hello again", "target": self.elsewhere}),
                tool_call("send_message", {"target": results["create_thread"][0]["target"], "text": "In the thread"}),
            ]
        if rounds == 2:
            assert self.person_message is not None
            return [
                tool_call("delete_message", {"message_id": posted, "target": self.elsewhere}),
                tool_call("delete_message", {"message_id": self.person_message}),
            ]
        return "All done."

    def check(self) -> None:
        """Every action worked, except deleting the person's message."""
        for name in ("send_message", "react", "create_thread", "edit_message"):
            assert all(r["status"] == "ok" for r in self.results[name]), (name, self.results[name])
        ours, theirs = self.results["delete_message"]
        assert ours["status"] == "ok", ours
        assert theirs == {
            "status": "failed", "target": theirs["target"], "message_ids": [],
            "detail": "only messages this bot posted can be deleted",
        }


# --- Telegram ---------------------------------------------------------------------------------

ANN = TelegramEmulator.user(1, "Ann", "ann")


async def test_telegram(llm, telegram_emulator: TelegramEmulator, start_app: StartApp) -> None:
    emu = telegram_emulator
    forum = emu.group(-1001, "Team", forum=True)
    emu.group(-1002, "News")
    script = Script("telegram:-1002")
    llm.on_request = script
    section = {"unknown_user_policy": "allow", **adapter_config(emu)}
    app = await start_app({"agents": agents(llm), "platforms": {"telegram": section}})

    question = emu.push_message(forum, ANN, "@ThisBot please organise this")
    script.person_message = str(question["message_id"])
    await wait_until(lambda: "All done." in emu.sent_texts(-1001), timeout=15, what="the final answer")
    await app.drain()
    script.check()
    llm.assert_tool_protocol()

    news = [c for c in emu.calls_to("sendMessage") if c.params["chat_id"] == -1002]
    assert [c.params["text"] for c in news] == ["Hello there"], "sent, rendered from Markdown"
    posted_id = news[0].result["message_id"]
    assert [c.params["text"] for c in emu.calls_to("editMessageText")] == ["Hello again"]
    assert emu.deleted == [(-1002, posted_id)], "its own post deleted; the person's message kept"
    assert emu.current(-1001, question["message_id"]) is not None
    assert emu.reactions[(-1001, question["message_id"])] == [{"type": "emoji", "emoji": "👍"}]
    (topic,) = emu.calls_to("createForumTopic")
    thread_id = topic.result["message_thread_id"]
    assert topic.params["name"] == "Plans" and script.results["create_thread"][0]["target"] == f"telegram:-1001:{thread_id}"
    in_thread = [c.params for c in emu.calls_to("sendMessage") if c.params.get("message_thread_id") == thread_id]
    assert [p["text"] for p in in_thread] == ["In the thread"]


# --- Discord ----------------------------------------------------------------------------------


@pytest.fixture
async def discord_emulator() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


async def test_discord(llm, discord_emulator: DiscordEmulator, start_app: StartApp) -> None:
    emu = discord_emulator
    elsewhere = f"discord:{CHANNEL_ID}:{THREAD_ID}"
    script = Script(elsewhere, emoji="🎉")
    llm.on_request = script
    section = {"token": emu.token, "api_base_url": emu.api_base, "gateway_url": emu.gateway_url, "unknown_user_policy": "allow"}
    app = await start_app({"agents": agents(llm), "platforms": {"discord": section}})
    await emu.wait_ready()

    question = emu.message(f"<@{BOT_ID}> please organise this", channel_id=CHANNEL_ID)
    script.person_message = question["id"]
    await emu.dispatch("MESSAGE_CREATE", question)
    await wait_for(lambda: any(m["content"] == "All done." for m in emu.bot_messages(CHANNEL_ID)), 15)
    await app.drain()
    script.check()
    llm.assert_tool_protocol()

    assert emu.messages[question["id"]]["bot_reactions"] == ["🎉"]
    assert question["id"] in emu.messages, "the person's message was not deleted"
    sends_elsewhere = [s for s in emu.sends if s.channel_id == THREAD_ID]
    assert [s.payload["content"] for s in sends_elsewhere] == ["Hello **there**"]
    assert emu.bot_messages(THREAD_ID) == [], "the post was edited, then deleted"
    edits = emu.calls("PATCH", rf".*/channels/{THREAD_ID}/messages/\d+")
    assert edits and edits[0].json["content"] == "Hello again"
    (thread,) = emu.bot_threads()
    assert thread["name"] == "Plans" and thread["id"] == question["id"], "a thread on the prompting message"
    assert [m["content"] for m in emu.bot_messages(thread["id"])] == ["In the thread"]


# --- Slack ------------------------------------------------------------------------------------

CHANNEL, NEWS, ALICE = "C0GENERAL", "C0NEWS", "U0ALICE"


@pytest.fixture
async def slack_emulator() -> AsyncIterator[SlackEmulator]:
    emu = SlackEmulator()
    await emu.start()
    emu.add_user(ALICE, "Alice")
    emu.add_channel(CHANNEL, "channel")
    emu.add_channel(NEWS, "channel")
    yield emu
    await emu.stop()


async def test_slack(llm, slack_emulator: SlackEmulator, start_app: StartApp) -> None:
    emu = slack_emulator
    script = Script(f"slack:{NEWS}")
    llm.on_request = script
    app = await start_app({"agents": agents(llm), "platforms": {"slack": slack_section(emu, "socket")}})
    delivery = EventDelivery(emu, app.adapters["slack"], "socket")

    question = emu.post_as_user(CHANNEL, ALICE, f"<@{BOT_USER_ID}> please organise this")
    script.person_message = question["ts"]
    await delivery.deliver_all(event_callback(question))
    await wait_for(lambda: any(p["text"] == "All done." for p in emu.posted()), 15)
    await app.drain()
    script.check()
    llm.assert_tool_protocol()

    assert emu.find(CHANNEL, question["ts"])["reactions"] == {"thumbsup": [BOT_USER_ID]}
    news_posts = [p for p in emu.posted() if p["channel"] == NEWS]
    assert [p["text"] for p in news_posts] == ["Hello *there*"], "sent as mrkdwn"
    assert [c.params["text"] for c in emu.calls_to("chat.update")] == ["Hello again"]
    assert emu.messages[NEWS] == [], "edited, then deleted"
    assert [c.params["channel"] for c in emu.calls_to("chat.delete")] == [NEWS], "never the person's message"
    root = script.results["create_thread"][0]
    assert root["target"] == f"slack:{CHANNEL}:{root['thread_id']}"
    assert emu.find(CHANNEL, root["thread_id"])["text"] == "🧵 *Plans*"
    (reply,) = [p for p in emu.posted() if p.get("thread_ts") == root["thread_id"]]
    assert reply["text"] == "In the thread"


# --- console ----------------------------------------------------------------------------------


async def test_console(llm) -> None:
    script = Script("console:console")
    llm.on_request = script
    app = App.from_config({"bot": {"unknown_user_policy": "allow"}, "agents": agents(llm)})
    out = io.StringIO()
    console = ConsoleAdapter(stdin=io.StringIO("please organise this\n"), stdout=out)
    app.add_adapter(console)
    script.person_message = console.inbound.id_of(1)  # the first line typed
    await app.start(platforms=[])
    await asyncio.wait_for(console.finished.wait(), 10)
    await app.drain()
    script.check()
    llm.assert_tool_protocol()
    thread = script.results["create_thread"][0]["thread_id"]
    assert out.getvalue().splitlines() == [
        "Hello **there**",
        "(reacted 👍 to 1)",
        f"── {thread}: Plans ──",
        "Hello again",
        f"[{thread}] In the thread",
        f"(deleted {script.results['send_message'][0]['message_ids'][0]})",
        "All done.",
    ]
    await app.stop()


# --- delivery's hooks see what tools post -------------------------------------------------------


async def test_message_sending_hooks_rewrite_and_cancel_what_tools_post(llm) -> None:
    from botweave.hooks import HookEvent

    from tests.support import RecordingAdapter, message

    app = App.from_config({"bot": {"unknown_user_policy": "allow"}, "agents": agents(llm)})
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    seen: list[dict[str, Any]] = []

    def redact(event: HookEvent) -> bool:
        seen.append(event.payload)
        if event.text and "forbidden" in event.text:
            return False
        event.text = (event.text or "").replace("secret", "[redacted]")
        return True

    app.hooks.register("message_sending", redact)
    llm.queue_tool_calls(
        tool_call("send_message", {"target": "test:c2", "text": "the secret plan"}),
        tool_call("send_message", {"target": "test:c3", "text": "forbidden words"}),
    )
    llm.on_request = lambda body: (
        [tool_call("edit_message", {"message_id": json.loads(body["messages"][-2]["content"])["message_ids"][0],
                                    "text": "a secret edit", "target": "test:c2"})]
        if len(body["messages"]) == 5 else "ok"
    )
    await app.handle(message("go", chat_id="c1"))
    llm.assert_tool_protocol()
    assert [(s.chat_id, s.text) for s in adapter.sent] == [("c2", "the [redacted] plan"), ("c1", "ok")]
    assert [text for _, text in adapter.edits] == ["a [redacted] edit"]
    refused = llm.tool_output(llm.issued_calls[1].id)
    assert refused["status"] == "failed" and refused["detail"] == "cancelled by a message_sending hook"
    assert [p["chat_id"] for p in seen] == ["c2", "c3", "c2", "c1"]
