"""Teams end to end: Bot Connector emulator -> signed activity -> App -> agent -> connector API.

Each scenario is what a Teams user (or an attacker at the endpoint) would notice: which
requests were refused, which messages the bot posted, where (chat, channel thread), with what
text, how a streamed answer grew, and what a card shows after its button was pressed.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import AsyncIterator
from datetime import timezone
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from apscheduler.triggers.cron import CronTrigger
from botweave import App
from botweave.adapter import FileUnavailable
from botweave.adapters.teams.adapter import TeamsAdapter
from botweave.adapters.teams.auth import OpenIdKeys, RequestVerifier, Unauthorized
from botweave.adapters.teams.config import TeamsConfig
from botweave.cron import Job
from botweave.types import Button, PlatformEvent, PressAnswer

from tests import approvaldemo
from tests.emulators.teams import (
    ALICE,
    APP_ID,
    BOB,
    CHANNEL,
    GROUP_CHAT,
    PERSONAL,
    TeamsEmulator,
    card_of,
    card_text,
    rsa_key,
    text_shown,
)
from tests.emulators.telegram import wait_until

ECHO = "assistant (offline echo) heard: "


@pytest.fixture
async def emulator() -> AsyncIterator[TeamsEmulator]:
    emu = await TeamsEmulator().start()
    yield emu
    await emu.stop()


class Bot:
    """A running App with the Teams adapter, and how the Bot Connector reaches it."""

    def __init__(self, app: App, emulator: TeamsEmulator) -> None:
        self.app = app
        self.emu = emulator
        adapter = app.adapters["teams"]
        assert isinstance(adapter, TeamsAdapter) and adapter.port
        self.adapter = adapter
        self.url = f"http://127.0.0.1:{adapter.port}/api/messages"

    async def deliver(self, activity: dict[str, Any], *, drain: bool = True, **kwargs: Any) -> int:
        status = await self.emu.deliver(activity, url=self.url, **kwargs)
        if drain:  # not while a turn waits for a person (an approval)
            await self.app.drain()
        return status

    async def posts(self, conversation: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        await wait_until(lambda: len(self.emu.bot_posts(conversation)) >= count, timeout, f"{count} post(s)")
        await self.app.drain()
        return self.emu.bot_posts(conversation)


async def start_bot(
    emulator: TeamsEmulator,
    bot: dict[str, Any] | None = None,
    *,
    agent: dict[str, Any] | None = None,
    top: dict[str, Any] | None = None,
    **teams: Any,
) -> Bot:
    app = App.from_config(
        {
            "bot": {"unknown_user_policy": "allow", **(bot or {})},
            "agents": {"assistant": {"model": "offline/echo", **(agent or {})}},
            "platforms": {"teams": emulator.config(**teams)},
            **(top or {}),
        }
    )
    await app.start()
    assert "teams" in app.adapters, "the Teams adapter did not start"
    return Bot(app, emulator)


@pytest.fixture
async def bot(emulator: TeamsEmulator) -> AsyncIterator[Bot]:
    running = await start_bot(emulator)
    yield running
    await running.app.stop()


# --- who may talk to the bot -------------------------------------------------------------


async def test_every_forged_or_misdirected_token_is_refused_and_a_valid_request_is_then_answered(
    bot: Bot, emulator: TeamsEmulator
) -> None:
    stranger = rsa_key()
    now = int(time.time())
    forged = {
        "unsigned": None,
        "not a jwt": "not-a-jwt",
        "alg none": emulator.sign(algorithm="none"),
        "wrong audience": emulator.sign(aud="00000000-0000-0000-0000-000000000000"),
        "wrong issuer": emulator.sign(iss="https://sts.windows.net/attacker/"),
        "expired": emulator.sign(exp=now - 400, nbf=now - 4000),
        "foreign key, listed key id": emulator.sign(key=stranger),
        "foreign key, own key id": emulator.sign(key=stranger, headers={"kid": "attacker-key"}),
        "no key id": emulator.sign(headers={"kid": None}),
        "another service url": emulator.sign(service_url="https://attacker.example/amer/"),
        "no service url": emulator.sign(serviceurl=None),
    }
    for reason, token in forged.items():
        status = await bot.deliver(emulator.message(f"forged: {reason}"), token=token)
        assert status == 401, reason
    # a key endorsed for Teams, used for another channel
    other_channel = emulator.message("from another channel") | {"channelId": "webchat"}
    assert await bot.deliver(other_channel) == 401
    assert bot.adapter.inbound_stats["received"] == 0  # nothing refused reached the inbound part
    assert emulator.bot_posts(PERSONAL) == []

    assert await bot.deliver(emulator.message("a real one")) == 200
    [reply] = await bot.posts(PERSONAL, 1)
    assert text_shown(reply) == ECHO + "a real one"


async def test_a_valid_token_with_a_body_that_is_not_an_activity_is_a_400(bot: Bot, emulator: TeamsEmulator) -> None:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {emulator.sign()}", "Content-Type": "application/json"}
        async with session.post(bot.url, data=b"[1, 2", headers=headers) as response:
            assert response.status == 400
        async with session.post(bot.url, data=json.dumps({"type": 5, "from": "x"}), headers=headers) as response:
            assert response.status == 400
    assert await bot.deliver(emulator.message("still fine")) == 200
    await bot.posts(PERSONAL, 1)


async def test_a_redelivered_activity_is_answered_once(bot: Bot, emulator: TeamsEmulator) -> None:
    activity = emulator.message("only once please")
    assert await bot.deliver(activity) == 200
    assert await bot.deliver(activity) == 200  # the Bot Connector retried
    await bot.posts(PERSONAL, 1)
    await asyncio.sleep(0.2)
    await bot.app.drain()
    assert len(emulator.bot_posts(PERSONAL)) == 1


# --- conversations -----------------------------------------------------------------------


async def test_channel_posts_are_answered_only_when_the_bot_is_mentioned_and_in_the_thread(
    bot: Bot, emulator: TeamsEmulator
) -> None:
    assert await bot.deliver(emulator.message("just people talking", conversation=CHANNEL)) == 200
    await asyncio.sleep(0.2)
    await bot.app.drain()
    assert emulator.bot_posts(CHANNEL) == []

    post = emulator.message("what is the plan?", conversation=CHANNEL, mention_bot=True)
    assert await bot.deliver(post) == 200
    [reply] = await bot.posts(CHANNEL, 1)
    # into the post's own thread, never the channel's top level; the bot's <at> mention is gone
    assert reply["conversation"]["id"] == f"{CHANNEL};messageid={post['id']}"
    assert text_shown(reply) == ECHO + "[Alice Archer] what is the plan?"
    assert reply.get("replyToId") == post["id"]
    assert emulator.posts_in_thread(CHANNEL, post["id"]) == [reply]


async def test_a_mention_in_a_thread_is_answered_in_that_thread(bot: Bot, emulator: TeamsEmulator) -> None:
    root = emulator.message("release notes", conversation=CHANNEL)
    assert await bot.deliver(root) == 200
    reply_in_thread = emulator.message("can you summarise?", conversation=CHANNEL, thread=root["id"], mention_bot=True)
    assert await bot.deliver(reply_in_thread) == 200
    [answer] = await bot.posts(CHANNEL, 1)
    assert answer["conversation"]["id"] == f"{CHANNEL};messageid={root['id']}"
    assert answer.get("replyToId") == reply_in_thread["id"]  # a reply to the message that asked
    # the thread is the bot's now: a follow-up there without a mention is addressed to it
    follow_up = emulator.message("and the risks?", conversation=CHANNEL, thread=root["id"])
    assert await bot.deliver(follow_up) == 200
    answers = await bot.posts(CHANNEL, 2)
    assert all(a["conversation"]["id"] == f"{CHANNEL};messageid={root['id']}" for a in answers)


async def test_group_chats_need_a_mention_and_personal_chats_do_not(bot: Bot, emulator: TeamsEmulator) -> None:
    assert await bot.deliver(emulator.message("lunch?", conversation=GROUP_CHAT)) == 200
    await asyncio.sleep(0.2)
    await bot.app.drain()
    assert emulator.bot_posts(GROUP_CHAT) == []
    assert await bot.deliver(emulator.message("status please", conversation=GROUP_CHAT, mention_bot=True)) == 200
    [reply] = await bot.posts(GROUP_CHAT, 1)
    assert reply["conversation"]["id"] == GROUP_CHAT
    assert text_shown(reply) == ECHO + "[Alice Archer] status please"

    assert await bot.deliver(emulator.message("hello")) == 200
    [personal] = await bot.posts(PERSONAL, 1)
    assert text_shown(personal) == ECHO + "hello"


async def test_a_mention_of_someone_else_is_kept_as_their_name(bot: Bot, emulator: TeamsEmulator) -> None:
    bob_mention = {"type": "mention", "text": "<at>Bob Baker</at>", "mentioned": {"id": "29:1bob-0000", "name": "Bob Baker"}}
    post = emulator.message("ask <at>Bob Baker</at> too", conversation=GROUP_CHAT, mention_bot=True, entities=[bob_mention])
    assert await bot.deliver(post) == 200
    [reply] = await bot.posts(GROUP_CHAT, 1)
    assert text_shown(reply) == ECHO + "[Alice Archer] ask @Bob Baker too"


# --- streaming ---------------------------------------------------------------------------


@pytest.fixture
def slow_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline model streams word by word 150 ms apart, like a real model would."""
    from botweave.model_calls import ModelOutput
    from botweave.offline_model import OfflineCalls

    original = OfflineCalls.stream

    async def paced(self: OfflineCalls, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        async for piece in original(self, request):
            await asyncio.sleep(0.15)
            yield piece

    monkeypatch.setattr(OfflineCalls, "stream", paced)


@pytest.mark.usefixtures("slow_stream")
async def test_a_streamed_answer_is_one_post_updated_in_place_at_most_every_1_5_s(emulator: TeamsEmulator) -> None:
    bot = await start_bot(emulator, bot={"streaming": True, "stream_edit_interval_ms": 0})
    try:
        text = "please stream me a somewhat longer answer made of quite a few separate words"
        assert await bot.deliver(emulator.message(text)) == 200
        await wait_until(lambda: any(text_shown(p) == ECHO + text for p in emulator.bot_posts(PERSONAL)), 20, "the end")
        await bot.app.drain()
        posts, updates = emulator.connector("POST"), emulator.connector("PUT")
        writes = sorted(posts + updates, key=lambda c: c.at)
        assert len([p for p in posts if p.body.get("type") == "message"]) == 1  # one message, never a second
        assert len(updates) >= 2  # ~3.5 s of ~23 words: it grew in place
        gaps = [b.at - a.at for a, b in zip(writes, writes[1:]) if b.method == "PUT"]
        assert all(gap >= 1.45 for gap in gaps), gaps  # Teams' 1.5 s floor beats the 0 ms setting
        assert updates[-1].body["text"] == ECHO + text  # the last update holds the whole text
        [shown] = emulator.bot_posts(PERSONAL)
        assert text_shown(shown) == ECHO + text
    finally:
        await bot.app.stop()


# --- buttons and approvals ---------------------------------------------------------------


@pytest.fixture
def no_transfers() -> Any:
    approvaldemo.TRANSFERS.clear()
    yield
    approvaldemo.TRANSFERS.clear()


CALL = "call transfer " + json.dumps({"amount": 3, "to": "Bob", "api_key": "sk-teams-1234-abcd"})


@pytest.mark.usefixtures("no_transfers")
async def test_an_approval_is_an_adaptive_card_whose_press_decides_and_updates_the_card(emulator: TeamsEmulator) -> None:
    tool = {"python": "tests.approvaldemo:transfer", "approval": "required"}
    bot = await start_bot(emulator, agent={"tools": [tool]})
    try:
        assert await bot.deliver(emulator.message(CALL), drain=False) == 200
        await wait_until(lambda: any(card_of(p) for p in emulator.bot_posts(PERSONAL)), 30, "the approval card")
        request = copy.deepcopy(next(p for p in emulator.bot_posts(PERSONAL) if card_of(p)))
        card = card_of(request)
        assert card is not None and card["type"] == "AdaptiveCard"
        assert [(a["type"], a["title"], a.get("style")) for a in card["actions"]] == [
            ("Action.Submit", "Approve", "positive"),
            ("Action.Submit", "Deny", "destructive"),
        ]
        assert "sk-teams-1234-abcd" not in json.dumps(request)

        assert await bot.deliver(emulator.press(request, "Approve"), drain=False) == 200
        await wait_until(lambda: approvaldemo.TRANSFERS, 10, "the transfer")
        await wait_until(lambda: any("transfer returned" in text_shown(p) for p in emulator.bot_posts(PERSONAL)), 10)
        shown = card_of(emulator.shown(PERSONAL, request["id"]) or {})
        assert shown is not None and "Approved by Alice" in card_text(shown) and "actions" not in shown
        assert emulator.connector("PUT")[-1].path.endswith(f"/activities/{request['id']}")

        again = emulator.press(request, "Approve")  # a stale card in another client
        assert await bot.deliver(again) == 200
        await asyncio.sleep(0.3)
        assert approvaldemo.TRANSFERS == [{"amount": 3, "to": "Bob"}]
    finally:
        await bot.app.stop()


@pytest.mark.usefixtures("no_transfers")
async def test_deny_on_the_card_reaches_the_model(emulator: TeamsEmulator) -> None:
    tool = {"python": "tests.approvaldemo:transfer", "approval": "required"}
    bot = await start_bot(emulator, agent={"tools": [tool]})
    try:
        assert await bot.deliver(emulator.message(CALL), drain=False) == 200
        await wait_until(lambda: any(card_of(p) for p in emulator.bot_posts(PERSONAL)), 30, "the approval card")
        request = next(p for p in emulator.bot_posts(PERSONAL) if card_of(p))
        assert await bot.deliver(emulator.press(request, "Deny"), drain=False) == 200
        await wait_until(lambda: any("denied by Alice" in text_shown(p) for p in emulator.bot_posts(PERSONAL)), 10)
        assert "Denied by Alice" in card_text(card_of(emulator.shown(PERSONAL, request["id"]) or {}) or {})
        assert approvaldemo.TRANSFERS == []
    finally:
        await bot.app.stop()


# --- proactive sends ---------------------------------------------------------------------


async def test_a_proactive_send_after_a_restart_uses_the_stored_conversation_reference(
    emulator: TeamsEmulator, tmp_path: Path
) -> None:
    store = {"store": {"url": f"sqlite:///{tmp_path / 'state.db'}"}}
    first = await start_bot(emulator, top=store)
    try:
        assert await first.deliver(emulator.installed(CHANNEL)) == 200  # the app added to the team
        assert await first.deliver(emulator.installed(PERSONAL)) == 200
    finally:
        await first.app.stop()

    second = await start_bot(emulator, top=store)  # a new process: nothing in memory
    try:
        adapter = second.adapter
        posted = await adapter.send(CHANNEL, "the weekly digest is ready")
        assert posted.ok and posted.message_id
        [digest] = emulator.bot_posts(CHANNEL)
        assert text_shown(digest) == "the weekly digest is ready"
        # a channel post with no thread starts one of its own
        assert digest["conversation"]["id"] == f"{CHANNEL};messageid={digest['id']}"
        threaded = await adapter.send(CHANNEL, "and a follow-up", thread_id=posted.message_id)
        assert threaded.ok and emulator.posts_in_thread(CHANNEL, posted.message_id)[0]["id"] == threaded.message_id

        dm = await adapter.send_direct(ALICE["id"], "your report is due")
        assert dm.ok and dm.target == PERSONAL
        assert [text_shown(p) for p in emulator.bot_posts(PERSONAL)] == ["your report is due"]
    finally:
        await second.app.stop()


async def test_a_send_to_a_conversation_teams_never_announced_is_no_route(bot: Bot, emulator: TeamsEmulator) -> None:
    result = await bot.adapter.send("19:never-seen@thread.tacv2", "hello?")
    assert result.status == "no_route" and "added to it" in result.detail
    assert emulator.connector() == []


async def test_a_direct_message_to_someone_seen_only_in_a_channel_opens_a_personal_chat(
    bot: Bot, emulator: TeamsEmulator
) -> None:
    bob = {"id": "29:1bob-0000", "name": "Bob Baker", "aadObjectId": "aad-bob"}
    assert await bot.deliver(emulator.message("hi all", conversation=CHANNEL, sender=bob)) == 200
    sent = await bot.adapter.send_direct(bob["id"], "a word in private")
    assert sent.ok and sent.target.startswith("a:")
    [created] = [c for c in emulator.calls if c.path == "v3/conversations"]
    assert created.body["members"] == [{"id": bob["id"]}] and created.body["tenantId"]
    assert [text_shown(p) for p in emulator.bot_posts(sent.target)] == ["a word in private"]
    assert await bot.adapter.whose_direct_chat(sent.target) == bob["id"]


async def test_throttled_posts_wait_for_retry_after_and_go_out_once(bot: Bot, emulator: TeamsEmulator) -> None:
    assert await bot.deliver(emulator.installed(PERSONAL)) == 200
    emulator.fail_next.append((429, {"Retry-After": "1"}))
    started = time.monotonic()
    sent = await bot.adapter.send(PERSONAL, "after the pause")
    assert sent.ok and time.monotonic() - started >= 0.95
    assert [c.status for c in emulator.connector("POST")] == [429, 201]
    assert [text_shown(p) for p in emulator.bot_posts(PERSONAL)] == ["after the pause"]


async def test_a_wrong_password_fails_the_start_with_the_setting_to_fix(emulator: TeamsEmulator) -> None:
    adapter = TeamsAdapter(TeamsConfig(**emulator.config(app_password="wrong")))
    with pytest.raises(Exception) as failed:
        await adapter.start()
    assert "app_password" in str(failed.value) and "wrong" not in str(failed.value)
    assert await adapter.readiness() == "not started"



async def test_a_schedule_posts_into_a_channel_teams_announced_before_a_restart(
    emulator: TeamsEmulator, tmp_path: Path
) -> None:
    store = {"store": {"url": f"sqlite:///{tmp_path / 'state.db'}"}}
    first = await start_bot(emulator, top=store)
    try:
        assert await first.deliver(emulator.installed(CHANNEL)) == 200
    finally:
        await first.app.stop()

    schedule = {"cron": "0 8 * * *", "agent": "assistant", "prompt": "Post the digest.", "target": f"teams:{CHANNEL}"}
    app = App.from_config({
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"teams": emulator.config()},
        "schedules": {"digest": schedule},
        **store,
    })
    assert app.schedules is not None
    app.schedules.jobs["digest"] = Job("digest", CronTrigger(second="*", timezone=timezone.utc), 300)
    await app.start()
    try:
        await wait_until(lambda: emulator.bot_posts(CHANNEL), 45, "the scheduled post")
        await app.schedules.stop()
    finally:
        await app.stop()
    post = emulator.bot_posts(CHANNEL)[0]
    assert text_shown(post) == ECHO + "[schedule digest] Post the digest."
    assert post["conversation"]["id"] == f"{CHANNEL};messageid={post['id']}"  # a new channel post


def test_targets_name_teams_conversations_and_threads_whose_ids_hold_colons() -> None:
    adapter = TeamsAdapter(TeamsConfig(app_id=APP_ID))
    assert adapter.split_target(CHANNEL) == (CHANNEL, None)
    assert adapter.split_target(f"{CHANNEL}:1700000000123") == (CHANNEL, "1700000000123")
    assert adapter.split_target(f"{CHANNEL};messageid=1700000000123") == (CHANNEL, "1700000000123")
    assert adapter.split_target(PERSONAL) == (PERSONAL, None)
    assert adapter.split_target(GROUP_CHAT) == (GROUP_CHAT, None)



async def test_a_press_on_a_card_in_a_channel_thread_is_read_and_a_refusal_is_posted_to_the_card(
    emulator: TeamsEmulator,
) -> None:
    """The press as the adapter reads it (no runtime): who pressed which button on which card
    in which thread; an answer the presser must not miss is a reply to the card, in its thread."""
    received: list[Any] = []

    async def sink(item: Any) -> None:
        received.append(item)

    async def presses(event: PlatformEvent) -> tuple[PlatformEvent, PressAnswer]:
        if event.user_id == BOB["id"]:
            return event, PressAnswer("This approval is not yours to answer.", alert=True)
        return event, PressAnswer("Approved.")  # shown by the card's update, not posted

    adapter = TeamsAdapter(TeamsConfig(**emulator.config()))
    adapter.bind(sink, presses)
    await adapter.start()
    try:
        url = f"http://127.0.0.1:{adapter.port}/api/messages"
        root = emulator.message("deploy?", conversation=CHANNEL, mention_bot=True)
        assert await emulator.deliver(root, url=url) == 200
        buttons = [Button("Approve", "ap:1", style="primary"), Button("Deny", "dn:1", style="danger")]
        sent = await adapter.send(CHANNEL, "Approval needed: deploy", thread_id=root["id"], buttons=buttons)
        assert sent.ok and sent.message_id
        card = copy.deepcopy(emulator.shown(CHANNEL, sent.message_id))
        assert card is not None and card["conversation"]["id"] == f"{CHANNEL};messageid={root['id']}"

        assert await emulator.deliver(emulator.press(card, "Approve", sender=BOB), url=url) == 200
        assert await emulator.deliver(emulator.press(card, "Deny"), url=url) == 200
        pressed = [i for i in received if isinstance(i, PlatformEvent)]
        assert [(e.kind, e.user_id, e.action_id, e.message_id, e.thread_id) for e in pressed] == [
            ("button_pressed", BOB["id"], "ap:1", sent.message_id, root["id"]),
            ("button_pressed", ALICE["id"], "dn:1", sent.message_id, root["id"]),
        ]
        replies = [p for p in emulator.posts_in_thread(CHANNEL, root["id"])
                   if p["from"]["id"] == adapter.bot_id and p["id"] != sent.message_id]
        assert [(text_shown(p), p["replyToId"]) for p in replies] == [
            ("This approval is not yours to answer.", sent.message_id)
        ]
        decided = await adapter.edit(CHANNEL, sent.message_id, "Approval needed: deploy\n\nDenied by Alice", buttons=())
        assert decided.ok
        shown = card_of(emulator.shown(CHANNEL, sent.message_id) or {})
        assert shown is not None and "Denied by Alice" in card_text(shown) and "actions" not in shown
    finally:
        await adapter.stop()


async def test_a_pasted_picture_is_fetched_with_the_bots_token_and_only_from_the_connector(
    emulator: TeamsEmulator,
) -> None:
    received: list[Any] = []

    async def sink(item: Any) -> None:
        received.append(item)

    adapter = TeamsAdapter(TeamsConfig(**emulator.config()))
    adapter.bind(sink)
    await adapter.start()
    try:
        url = f"http://127.0.0.1:{adapter.port}/api/messages"
        picture = b"\x89PNG\r\n\x1a\n" + b"pixels" * 20
        elsewhere = {"contentType": "image/png", "contentUrl": "https://attacker.example/v3/attachments/x/views/original"}
        message = emulator.message("look", attachments=[emulator.inline_image(picture), elsewhere])
        assert await emulator.deliver(message, url=url) == 200
        await wait_until(lambda: received, 5, "the message")
        ours, foreign = received[0].attachments
        assert await adapter.download(ours, max_bytes=10_000) == picture
        with pytest.raises(FileUnavailable) as refused:
            await adapter.download(foreign, max_bytes=10_000)
        assert "not sent there" in str(refused.value)
    finally:
        await adapter.stop()


async def test_edits_deletions_reactions_and_arrivals_are_events_each_handed_on_once(emulator: TeamsEmulator) -> None:
    received: list[Any] = []

    async def sink(item: Any) -> None:
        received.append(item)

    adapter = TeamsAdapter(TeamsConfig(**emulator.config()))
    adapter.bind(sink)
    await adapter.start()
    try:
        url = f"http://127.0.0.1:{adapter.port}/api/messages"
        original = emulator.message("teh plan")
        joined = emulator.installed(GROUP_CHAT) | {"membersAdded": [{"id": BOB["id"]}, {"id": emulator.installed()["recipient"]["id"]}]}
        for activity in (
            original,
            emulator.edited(original, "the plan"),
            emulator.edited(original, "the plan"),  # the Bot Connector retried
            emulator.edited(original, "the plan, v2"),
            emulator.reacted(original["id"], "like"),
            emulator.reacted(original["id"], "heart", removed=True),
            emulator.deletion(original),
            joined,
        ):
            assert await emulator.deliver(activity, url=url) == 200
        events = [(e.kind, e.user_id, e.message_id, e.new_text, e.emoji) for e in received if isinstance(e, PlatformEvent)]
        assert events == [
            ("message_edited", ALICE["id"], original["id"], "the plan", None),
            ("message_edited", ALICE["id"], original["id"], "the plan, v2", None),
            ("reaction_added", ALICE["id"], original["id"], None, "👍"),
            ("reaction_removed", ALICE["id"], original["id"], None, "❤️"),
            ("message_deleted", ALICE["id"], original["id"], None, None),
            ("member_joined", BOB["id"], None, None, None),  # the bot's own arrival is not an event
        ]
    finally:
        await adapter.stop()


async def test_a_rotated_signing_key_is_taken_up_and_forged_key_ids_do_not_hammer_the_metadata(
    emulator: TeamsEmulator,
) -> None:
    now = [1000.0]
    async with aiohttp.ClientSession() as session:
        keys = OpenIdKeys(session, emulator.metadata_url, clock=lambda: now[0])
        verifier = RequestVerifier(keys, APP_ID)
        assert (await verifier.verify(f"Bearer {emulator.sign()}")).claims["aud"] == APP_ID
        assert emulator.key_fetches == 1
        stranger = rsa_key()
        for n in range(5):  # forged key ids, one after the other
            with pytest.raises(Unauthorized):
                await verifier.verify(f"Bearer {emulator.sign(key=stranger, headers={'kid': f'forged-{n}'})}")
        assert emulator.key_fetches == 1  # within a minute of the last fetch: not asked again

        emulator.rotate_key("emulator-key-2")
        now[0] += 61
        assert (await verifier.verify(f"Bearer {emulator.sign()}")).claims["aud"] == APP_ID
        assert emulator.key_fetches == 2
