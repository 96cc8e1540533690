"""Agents' message tools obey the access rules replies obey: through each platform's real SDK
against its emulator, a model (the loopback OpenAI emulator) tries to post, react and open
threads in chats the bot does not talk in and into strangers' DMs; those calls are refused as
tool errors and nothing reaches the platform, while the conversation being answered, the
chats and people the bot admits, and what `message_tools.allow_targets` names still work."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App, ConfigError
from botweave.config import BotConfig
from botweave.policies.access import chat_admitted

from tests.emulators.discord import ALICE_ID, BOB_ID, BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, DiscordEmulator
from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.emulators.slack import BOT_USER_ID, EventDelivery, SlackEmulator, event_callback, slack_section, wait_for
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.support import StartApp

TOOLS = ["send_message", "react", "create_thread", "send_file", "edit_message", "delete_message"]
REFUSED = "is not a chat this bot talks in (its allowlists, unknown-user policy and pairing); " \
          "to let agent remote post there, add it to agents.remote.message_tools.allow_targets"


def agents(llm: OpenAIEmulator, allow_targets: list[str] | None = None) -> dict[str, Any]:
    remote: dict[str, Any] = {
        "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback", "tools": TOOLS,
    }
    if allow_targets is not None:
        remote["message_tools"] = {"allow_targets": allow_targets}
    return {"remote": remote}


def outputs(llm: OpenAIEmulator) -> list[Any]:
    return [llm.tool_output(call.id) for call in llm.issued_calls]


def refused(where: str) -> dict[str, str]:
    return {"error": f"{where} {REFUSED}"}


# --- Telegram ---------------------------------------------------------------------------------

ANN = TelegramEmulator.user(1, "Ann", "ann")
PAIRED = TelegramEmulator.user(77, "Pat", "pat")
FILE = base64.b64encode(b"a file").decode()


async def test_telegram_tools_stay_where_the_bot_talks(llm, telegram_emulator: TelegramEmulator, start_app: StartApp):
    emu = telegram_emulator
    team = emu.group(-1001, "Team")
    emu.group(-1002, "News")
    emu.group(-1003, "Announcements")
    emu.private_chat(ANN)
    emu.private_chat(PAIRED)
    section = {**adapter_config(emu), "allowed_chats": ["-1001"], "allowed_users": ["1"]}
    app = await start_app({"agents": agents(llm, ["telegram:-1003"]), "platforms": {"telegram": section}})
    pairing = app.access.pairing
    code = (await pairing.request("telegram", "77", "Pat", "77")).code
    assert code is not None and (await pairing.approve("telegram", code)).status == "approved"

    llm.queue_tool_calls(
        tool_call("send_message", {"target": "telegram:-1002", "text": "into a group nobody allowed"}),
        tool_call("send_message", {"target": "telegram:555", "text": "into a stranger's DM"}),
        tool_call("react", {"emoji": "👍", "message_id": "1", "target": "telegram:-1002"}),
        tool_call("create_thread", {"name": "Plans", "target": "telegram:-1002"}),
        tool_call("send_file", {"target": "telegram:555", "data_base64": FILE, "filename": "a.txt"}),
        tool_call("delete_message", {"message_id": "1", "target": "telegram:-1002"}),
        tool_call("send_message", {"target": "telegram:1", "text": "to Ann, who is allowlisted"}),
        tool_call("send_message", {"target": "telegram:77", "text": "to Pat, who paired"}),
        tool_call("send_message", {"target": "telegram:-1003", "text": "where the agent is allowed"}),
        tool_call("send_message", {"target": "origin", "text": "right here"}),
        tool_call("send_message", {"target": "telegram:-1001", "text": "here again, by id"}),
    )
    llm.queue_text("Done.")
    emu.push_message(team, ANN, "@ThisBot tell everyone")
    await wait_until(lambda: "Done." in emu.sent_texts(-1001), timeout=60, what="the answer")
    await app.drain()

    results = outputs(llm)
    assert results[:6] == [
        refused("telegram:-1002"), refused("telegram:555"), refused("telegram:-1002"),
        refused("telegram:-1002"), refused("telegram:555"), refused("telegram:-1002"),
    ]
    assert [r["status"] for r in results[6:]] == ["ok"] * 5
    posted = {(c.params["chat_id"], c.params["text"]) for c in emu.calls_to("sendMessage")}
    assert posted == {
        (1, "to Ann, who is allowlisted"), (77, "to Pat, who paired"), (-1003, "where the agent is allowed"),
        (-1001, "right here"), (-1001, "here again, by id"), (-1001, "Done."),
    }
    assert emu.calls_to("sendDocument") == [] and emu.calls_to("setMessageReaction") == []
    assert emu.calls_to("createForumTopic") == [] and emu.calls_to("deleteMessage") == []


async def test_with_unknown_users_let_in_anyone_may_be_written_to(llm, telegram_emulator, start_app):
    emu = telegram_emulator
    team = emu.group(-1001, "Team")
    emu.private_chat(TelegramEmulator.user(555, "Sam"))
    section = {**adapter_config(emu), "unknown_user_policy": "allow"}
    app = await start_app({"agents": agents(llm), "platforms": {"telegram": section}})
    llm.queue_tool_calls(tool_call("send_message", {"target": "telegram:555", "text": "hello Sam"}))
    llm.queue_text("Done.")
    emu.push_message(team, ANN, "@ThisBot greet Sam")
    await wait_until(lambda: "Done." in emu.sent_texts(-1001), timeout=15, what="the answer")
    await app.drain()
    assert outputs(llm)[0]["status"] == "ok" and emu.sent_texts(555) == ["hello Sam"]


# --- Slack ------------------------------------------------------------------------------------

GENERAL, NEWS, ALICE, BOB = "C0GENERAL", "C0NEWS", "U0ALICE", "U0BOB"


@pytest.fixture
async def slack_emulator() -> AsyncIterator[SlackEmulator]:
    emu = SlackEmulator()
    await emu.start()
    emu.add_user(ALICE, "Alice")
    emu.add_user(BOB, "Bob")
    emu.add_channel(GENERAL, "channel")
    emu.add_channel(NEWS, "channel")
    emu.add_channel("D0ALICE", "im")
    emu.add_channel("D0BOB", "im")
    yield emu
    await emu.stop()


async def test_slack_tools_stay_where_the_bot_talks(llm, slack_emulator: SlackEmulator, start_app: StartApp):
    emu = slack_emulator
    section = {**slack_section(emu, "socket"), "allowed_chats": [GENERAL], "allowed_users": [ALICE],
               "unknown_user_policy": "pair"}
    app = await start_app({"agents": agents(llm), "platforms": {"slack": section}})
    delivery = EventDelivery(emu, app.adapters["slack"], "socket")
    llm.queue_tool_calls(
        tool_call("send_message", {"target": f"slack:{NEWS}", "text": "into a channel nobody allowed"}),
        tool_call("send_message", {"target": "slack:D0BOB", "text": "into Bob's DM"}),
        tool_call("send_message", {"target": "slack:D0ALICE", "text": "into Alice's DM"}),
    )
    llm.queue_text("Done.")
    await delivery.deliver_all(event_callback(emu.post_as_user(GENERAL, ALICE, f"<@{BOT_USER_ID}> spread the word")))
    await wait_for(lambda: any(p["text"] == "Done." for p in emu.posted()), 15)
    await app.drain()
    results = outputs(llm)
    assert results[:2] == [refused(f"slack:{NEWS}"), refused("slack:D0BOB")]
    assert results[2]["status"] == "ok"
    assert [(p["channel"], p["text"]) for p in emu.posted()] == [("D0ALICE", "into Alice's DM"), (GENERAL, "Done.")]


# --- Discord ----------------------------------------------------------------------------------


@pytest.fixture
async def discord_emulator() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


@pytest.mark.parametrize(("allowed", "dm_ok"), [(ALICE_ID, True), (BOB_ID, False)])
async def test_discord_dms_go_only_to_people_the_bot_admits(llm, discord_emulator, start_app, allowed, dm_ok):
    emu = discord_emulator
    section = {"token": emu.token, "api_base_url": emu.api_base, "gateway_url": emu.gateway_url,
               "allowed_chats": [CHANNEL_ID], "allowed_users": [allowed]}
    app = await start_app({"agents": agents(llm), "platforms": {"discord": section}})
    await emu.wait_ready()
    llm.queue_tool_calls(
        tool_call("send_message", {"target": f"discord:{DM_CHANNEL_ID}", "text": "a word in private"}),
        tool_call("send_message", {"target": "discord:4242", "text": "into a channel nobody allowed"}),
    )
    llm.queue_text("Done.")
    await emu.dispatch("MESSAGE_CREATE", emu.message(f"<@{BOT_ID}> tell Alice", channel_id=CHANNEL_ID))
    await wait_for(lambda: any(m["content"] == "Done." for m in emu.bot_messages(CHANNEL_ID)), 15)
    await app.drain()
    private, elsewhere = outputs(llm)
    assert elsewhere == refused("discord:4242")
    if dm_ok:
        assert private["status"] == "ok"
        assert [m["content"] for m in emu.bot_messages(DM_CHANNEL_ID)] == ["a word in private"]
    else:
        assert private == refused(f"discord:{DM_CHANNEL_ID}")
        assert emu.bot_messages(DM_CHANNEL_ID) == []


# --- the rules --------------------------------------------------------------------------------


def test_a_chat_is_judged_as_a_message_in_it_would_be():
    closed = BotConfig(allowed_chats=["-1001"], allowed_users=["1"], owner_user_id="9")
    assert chat_admitted("-1001", closed)
    assert not chat_admitted("-1002", closed)  # a group: by the chat, never by who might write there
    assert chat_admitted("1", closed, direct_with="1") and chat_admitted("9", closed, direct_with="9")
    assert chat_admitted("77", closed, direct_with="77", known_user=True)
    assert not chat_admitted("555", closed, direct_with="555")
    open_dms = BotConfig(allowed_chats=["-1001"], unknown_user_policy="allow")
    assert chat_admitted("555", open_dms, direct_with="555") and not chat_admitted("-1002", open_dms)
    everyone = BotConfig(unknown_user_policy="allow")
    assert chat_admitted("-1002", everyone) and chat_admitted("555", everyone, direct_with="555")
    assert not chat_admitted("-1002", BotConfig(unknown_user_policy="pair"))


async def test_allow_targets_speak_the_target_grammar():
    from botweave.delivery import Destination
    from botweave.policies.targets import named_in

    from tests.support import RecordingAdapter

    adapter = RecordingAdapter()
    here, there = Destination(adapter, "c1"), Destination(adapter, "c1", "t7")
    assert named_in(["test:c1"], here) and named_in(["test:c1"], there)
    assert named_in(["test:c1:t7"], there) and not named_in(["test:c1:t7"], here)
    assert named_in(["test:*"], Destination(adapter, "anything"))
    assert not named_in(["other:*", "test:c2"], here)


def test_allow_targets_must_be_targets():
    base = {"model": "offline/echo", "message_tools": {"allow_targets": ["telegram:-1001", "not a target"]}}
    with pytest.raises(ConfigError) as caught:
        App.from_config({"agents": {"a": base}})
    assert "agents.a.message_tools.allow_targets.1" in str(caught.value)
    assert "'not a target' is not a target" in str(caught.value)
