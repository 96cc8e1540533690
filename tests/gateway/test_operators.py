"""Operating from a client: approvals resolved from the gateway end the waiting turn (a web
turn's own, and a Telegram owner's from a token bound to the owner), pairing requests answered
by the owner's token, and a room on the Telegram emulator watched live, each turn under its
agent's identity."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botweave.gateway import Client, GatewayError

from tests import approvaldemo
from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until
from tests.gateway.support import TOKEN_CONFIG, client, collect, has

ANN_ON_TELEGRAM = TelegramEmulator.user(1, "Ann", "ann")  # the owner; ann's token is bound to telegram:1
CAROL = TelegramEmulator.user(7, "Carol", "carol")
SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"
CALL = "call transfer " + json.dumps({"amount": 5, "to": "Bob", "api_key": SECRET})


@pytest.fixture(autouse=True)
def no_transfers():
    approvaldemo.TRANSFERS.clear()
    yield
    approvaldemo.TRANSFERS.clear()


def bot_config(*, approver: str = "requester", telegram: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    entry = {"python": "tests.approvaldemo:transfer", "approval": "required", "approver": approver}
    config: dict[str, Any] = {
        "agents": {"assistant": {"model": "offline/echo", "tools": [entry]}},
        "gateway": {"listen": "127.0.0.1:0", "tokens": TOKEN_CONFIG},
        **more,
    }
    if telegram is not None:
        config["platforms"] = {"telegram": telegram}
    return config


async def test_a_web_turn_waits_for_its_approval_and_the_client_resolves_it(start_app) -> None:
    app = await start_app(bot_config())
    async with client(app, "ann") as ann, client(app, "bob") as bob:
        session = await ann.create_session()
        message_id = await ann.send(session, CALL)
        events = await collect(ann, lambda seen: has(seen, "approval.requested"))
        requested = events[-1]
        assert requested.conversation == f"web:{session}" and requested.seq is not None
        approval = requested.data
        assert approval["tool"] == "transfer" and approval["approver"] == {"platform": "web", "user_id": "ann", "name": "ann"}
        assert approval["arguments"] == {"amount": 5, "to": "Bob", "api_key": "***"}
        assert has(events, "tool", name="transfer", status="awaiting_approval")
        shown = [e.data for e in events if e.event == "message" and e.data["buttons"]]
        assert [b["label"] for b in shown[-1]["buttons"]] == ["Approve", "Deny"]
        shown_by_bot = [e.data for e in events if e.data.get("author", {}).get("kind") != "user"]
        assert SECRET not in json.dumps(shown_by_bot), "what ann typed is hers; nothing the bot shows repeats it"
        assert [a["id"] for a in (await ann.call("approvals.list"))["approvals"]] == [approval["id"]]
        assert (await bob.call("approvals.list"))["approvals"] == [], "not bob's to answer"
        with pytest.raises(GatewayError) as refused:
            await bob.call("approvals.resolve", {"id": approval["id"], "decision": "approve"})
        assert refused.value.code == "forbidden"
        assert approvaldemo.TRANSFERS == []

        assert await ann.call("approvals.resolve", {"id": approval["id"], "decision": "approve"}) == {"outcome": "approved"}
        events = await collect(ann, lambda seen: has(seen, "final", message_id=message_id))
        assert has(events, "approval.resolved", id=approval["id"], outcome="approved")
        assert has(events, "tool", name="transfer", status="done")
        assert "sent 5 to Bob" in events[-1].data["text"]
        assert approvaldemo.TRANSFERS == [{"amount": 5, "to": "Bob"}]
        edited = [e.data for e in events if e.event == "message" and "Approved by ann" in e.data["text"]]
        assert edited and edited[-1]["buttons"] == []
        with pytest.raises(GatewayError) as again:
            await ann.call("approvals.resolve", {"id": approval["id"], "decision": "deny"})
        assert again.value.code == "conflict" and "Already approved" in again.value.message


async def test_a_denial_from_the_client_is_what_the_model_is_told(start_app) -> None:
    app = await start_app(bot_config())
    async with client(app, "ann") as ann:
        session = await ann.create_session()
        message_id = await ann.send(session, CALL)
        requested = (await collect(ann, lambda seen: has(seen, "approval.requested")))[-1]
        await ann.call("approvals.resolve", {"id": requested.data["id"], "decision": "deny"})
        final = (await collect(ann, lambda seen: has(seen, "final", message_id=message_id)))[-1]
    assert '{"error": "denied by ann"}' in final.data["text"]
    assert approvaldemo.TRANSFERS == []


async def test_the_telegram_owner_resolves_an_owner_approval_from_a_bound_token(start_app, telegram_emulator) -> None:
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "allow", "owner_user_id": "1", **adapter_config(emu)}
    app = await start_app(bot_config(approver="owner", telegram=telegram))
    async with client(app, "ann") as ann, client(app, "root") as root:
        emu.push_message(emu.private_chat(CAROL), CAROL, CALL)
        notice = await ann.next_event(where=lambda e: e.event == "approval.requested")
        assert notice.seq is None and notice.data["conversation"] == "telegram:dm:7", "a notice: not a followed conversation"
        assert notice.data["approver"]["platform"] == "telegram" and notice.data["approver"]["user_id"] == "1"
        owner_dm = emu.private_chat(ANN_ON_TELEGRAM)["id"]
        await wait_until(lambda: any(m.get("reply_markup") for m in emu.sent(owner_dm)), 20, "the request in the owner's DM")
        await root.next_event(where=lambda e: e.event == "approval.requested")  # an admin is told too
        await ann.call("approvals.resolve", {"id": notice.data["id"], "decision": "approve"})
        resolved = await ann.next_event(where=lambda e: e.event == "approval.resolved")
        assert resolved.data["outcome"] == "approved"
    await wait_until(lambda: any("sent 5 to Bob" in t for t in emu.sent_texts(CAROL["id"])), 20, "Carol's answer")
    request = next(m for m in emu.sent(owner_dm) if m.get("reply_markup"))
    assert "Approved by the owner" in emu.current(owner_dm, request["message_id"])["text"]
    assert approvaldemo.TRANSFERS == [{"amount": 5, "to": "Bob"}]


async def test_the_owner_answers_pairing_requests_from_the_gateway(start_app, telegram_emulator) -> None:
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "pair", "owner_user_id": "1", **adapter_config(emu)}
    app = await start_app(bot_config(telegram=telegram))
    async with client(app, "ann") as ann, client(app, "bob") as bob:
        emu.push_message(emu.private_chat(CAROL), CAROL, "hello?")
        requested = await ann.next_event(where=lambda e: e.event == "pairing.requested")
        assert requested.data | {"conversation": None} == {
            "platform": "telegram", "user_id": "7", "name": "Carol", "chat_id": "7", "owner": "1", "conversation": None,
        }
        listed = (await ann.call("pairing.list"))["requests"]
        assert [(r["platform"], r["user_id"], r["name"]) for r in listed] == [("telegram", "7", "Carol")]
        assert "code_hash" not in listed[0]
        with pytest.raises(GatewayError) as refused:
            await bob.call("pairing.list")
        assert refused.value.code == "forbidden"  # bob has no pairing scope
        assert await ann.call("pairing.approve", {"platform": "telegram", "user_id": "7"}) == {"user_id": "7", "name": "Carol"}
        resolved = await ann.next_event(where=lambda e: e.event == "pairing.resolved")
        assert resolved.data["outcome"] == "approved" and resolved.data["by"] == "ann"
        with pytest.raises(GatewayError) as gone:
            await ann.call("pairing.approve", {"platform": "telegram", "user_id": "7"})
        assert gone.value.code == "not_found"
    await wait_until(lambda: "You're approved. Say hello!" in emu.sent_texts(CAROL["id"]), 10, "the welcome")
    emu.push_message(emu.private_chat(CAROL), CAROL, "now?")
    await wait_until(lambda: any("heard: now?" in t for t in emu.sent_texts(CAROL["id"])), 20, "Carol answered")


async def test_a_telegram_dm_is_one_conversation_from_pairing_to_approvals(start_app, telegram_emulator) -> None:
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "pair", "owner_user_id": "1", **adapter_config(emu)}
    app = await start_app(bot_config(telegram=telegram))
    async with client(app, "root") as root:
        emu.push_message(emu.private_chat(CAROL), CAROL, "hello?")
        await root.next_event(where=lambda e: e.event == "pairing.requested")
        await root.call("pairing.approve", {"platform": "telegram", "user_id": "7"})
        await wait_until(lambda: "You're approved. Say hello!" in emu.sent_texts(CAROL["id"]), 10, "the welcome")
        emu.push_message(emu.private_chat(CAROL), CAROL, CALL)
        requested = await root.next_event(where=lambda e: e.event == "approval.requested")
        await root.call("approvals.resolve", {"id": requested.data["id"], "decision": "approve"})
        await wait_until(lambda: any("sent 5 to Bob" in t for t in emu.sent_texts(CAROL["id"])), 20, "Carol's answer")
        assert (await app.send_to("telegram:7", "A note for Carol")).ok  # her chat, named by its id
        listed = [c["conversation"] for c in (await root.call("conversations.list", {"platform": "telegram"}))["conversations"]]
        history = (await root.call("chat.history", {"conversation": "telegram:dm:7"}))["messages"]
    assert sorted(listed) == ["telegram:dm:1", "telegram:dm:7"], "Carol's chat once, and the owner's where the request was told"
    texts = [m["text"] for m in history]
    assert texts[0].startswith("Hi! I don't know you yet.") and texts[1] == "You're approved. Say hello!"
    assert texts[2] == CALL
    request = next(m for m in history if m["text"].startswith("Approval needed"))
    assert "Approved by root" in request["text"] and request["buttons"] == [], "the decision shows on the request itself"
    assert "sent 5 to Bob" in texts[-2] and texts[-1] == "A note for Carol"


async def test_a_platform_owner_is_needed_to_answer_its_pairing(start_app, telegram_emulator) -> None:
    emu = telegram_emulator
    telegram = {"unknown_user_policy": "pair", "owner_user_id": "99", **adapter_config(emu)}  # someone else
    app = await start_app(bot_config(telegram=telegram))
    async with client(app, "ann") as ann, client(app, "root") as root:
        emu.push_message(emu.private_chat(CAROL), CAROL, "hello?")
        await root.next_event(where=lambda e: e.event == "pairing.requested")
        assert (await ann.call("pairing.list"))["requests"] == []
        with pytest.raises(GatewayError) as refused:
            await ann.call("pairing.deny", {"platform": "telegram", "user_id": "7"})
        assert refused.value.code == "forbidden"
        assert await root.call("pairing.deny", {"platform": "telegram", "user_id": "7"}) == {"user_id": "7"}


async def test_a_room_on_telegram_is_watched_live_with_each_agents_identity(start_app, telegram_emulator) -> None:
    emu = telegram_emulator
    group = emu.group(-100500, "Stand-up")
    config = {
        "agents": {
            "planner": {"model": "offline/echo", "display_name": "Planner"},
            "critic": {"model": "offline/echo", "display_name": "Critic"},
        },
        "platforms": {"telegram": {"unknown_user_policy": "allow", "group_policy": "respond_all", **adapter_config(emu)}},
        "rooms": {"standup": {"roster": ["planner", "critic"], "max_rounds": 1, "target": "telegram:-100500"}},
        "routes": [{"match": {"chat_id": "-100500"}, "room": "standup"}],
        "gateway": {"listen": "127.0.0.1:0", "tokens": TOKEN_CONFIG},
    }
    app = await start_app(config)
    async with client(app, "eve") as eve:  # read scope is all watching needs
        rooms = (await eve.call("rooms.list"))["rooms"]
        assert rooms == [{"name": "standup", "members": [
            {"id": "planner", "name": "Planner", "avatar_url": None, "icon_emoji": None},
            {"id": "critic", "name": "Critic", "avatar_url": None, "icon_emoji": None},
        ], "conversations": ["telegram:-100500"]}]
        await eve.subscribe("telegram:-100500")
        emu.push_message(group, CAROL, "what is the plan today?")
        events = await collect(eve, lambda seen: sum(e.event == "message" for e in seen) >= 3)
        listed = {c["conversation"] for c in (await eve.call("conversations.list"))["conversations"]}
    messages = [e.data for e in events if e.event == "message"]
    assert [(m["author"]["kind"], m["author"]["name"]) for m in messages[:3]] == [
        ("user", "Carol"), ("agent", "Planner"), ("agent", "Critic"),
    ]
    assert messages[0]["text"] == "what is the plan today?"
    assert messages[1]["agent"]["name"] == "Planner" and messages[2]["agent"]["name"] == "Critic"
    assert all(e.conversation == "telegram:-100500" for e in events if e.event == "message")
    posted = emu.sent_texts(-100500)
    assert any(m["text"] in t for m in messages[1:3] for t in posted), "what was watched is what the group shows"
    assert "telegram:-100500" in listed


async def test_a_share_follows_an_approval_without_learning_who_answers_it(start_app) -> None:
    app = await start_app(bot_config())
    async with client(app, "ann") as ann:
        session = await ann.create_session()
        share = await ann.call("shares.create", {"session": session, "expires_seconds": 600})
        async with Client(app.gateway.url, share["token"], reconnect=False) as reader:
            await reader.subscribe(f"web:{session}")
            await ann.send(session, CALL)
            seen_by_owner = (await collect(ann, lambda seen: has(seen, "approval.requested")))[-1].data
            assert seen_by_owner["approver"] == {"platform": "web", "user_id": "ann", "name": "ann"}
            requested = await reader.next_event(where=lambda e: e.event == "approval.requested")
            assert requested.data["id"] == seen_by_owner["id"] and requested.data["tool"] == "transfer"
            assert "approver" not in requested.data, requested.data
            await ann.call("approvals.resolve", {"id": seen_by_owner["id"], "decision": "approve"})
            resolved = await reader.next_event(where=lambda e: e.event == "approval.resolved")
            assert resolved.data["outcome"] == "approved" and "by" not in resolved.data, resolved.data
        owner_saw = await ann.next_event(where=lambda e: e.event == "approval.resolved")
        assert owner_saw.data["by"], "the owner is told who answered"
