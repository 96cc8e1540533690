"""The Slack emulator's Block Kit, metadata, interactivity and file features, checked through
slack_sdk's AsyncWebClient and slack-bolt's AsyncApp themselves (Socket Mode and signed HTTP):
what the real clients send is what the emulator records, and what it answers they accept.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.respond.async_respond import AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import ActionsBlock, ButtonElement, SectionBlock
from slack_sdk.models.metadata import Metadata
from slack_sdk.web.async_client import AsyncWebClient

from tests.emulators.slack import (
    APP_TOKEN,
    BOT_TOKEN,
    BOT_USER_ID,
    SIGNING_SECRET,
    SlackEmulator,
    event_callback,
    post_signed,
    wait_for,
)

CHANNEL, DM = "C0GENERAL", "D0ALICE"
ALICE, BOB = "U0ALICE", "U0BOB"


@pytest.fixture
async def emulator() -> AsyncIterator[SlackEmulator]:
    emu = SlackEmulator()
    await emu.start()
    emu.add_user(ALICE, "Alice")
    emu.add_user(BOB, "Bob")
    emu.add_channel(CHANNEL, "channel", name="general")
    emu.add_channel(DM, "im")
    yield emu
    await emu.stop()


@pytest.fixture
async def client(emulator: SlackEmulator) -> AsyncIterator[AsyncWebClient]:
    web = AsyncWebClient(token=BOT_TOKEN, base_url=emulator.api_base_url)
    yield web
    if web.session is not None:
        await web.session.close()


def approval_blocks(call: str = "1") -> list[Any]:
    return [
        SectionBlock(text="Run `deploy`?"),
        ActionsBlock(
            block_id=f"approval:{call}",
            elements=[
                ButtonElement(text="Approve", action_id="approve", value=call, style="primary"),
                ButtonElement(text="Deny", action_id="deny", value=call, style="danger"),
            ],
        ),
    ]


# --- blocks and metadata -----------------------------------------------------------------------


async def test_blocks_and_metadata_are_stored_and_metadata_is_shown_only_when_asked(
    client: AsyncWebClient, emulator: SlackEmulator
) -> None:
    chunk = Metadata(event_type="botweave_chunk", event_payload={"key": "turn-7:0"})
    posted = await client.chat_postMessage(
        channel=CHANNEL, text="Run `deploy`?", blocks=approval_blocks(), metadata=chunk
    )
    stored = emulator.find(CHANNEL, posted["ts"])
    assert stored is not None and stored["metadata"] == {
        "event_type": "botweave_chunk",
        "event_payload": {"key": "turn-7:0"},
    }
    section, actions = stored["blocks"]
    assert section["block_id"]  # filled in, as Slack does
    assert [(e["action_id"], e["value"], e["style"]) for e in actions["elements"]] == [
        ("approve", "1", "primary"),
        ("deny", "1", "danger"),
    ]

    plain = await client.conversations_history(channel=CHANNEL)
    assert "metadata" not in plain["messages"][0]
    full = await client.conversations_history(channel=CHANNEL, include_all_metadata=True)
    assert full["messages"][0]["metadata"]["event_payload"]["key"] == "turn-7:0"

    await client.chat_update(channel=CHANNEL, ts=posted["ts"], text="Approved", blocks=[])
    assert emulator.find(CHANNEL, posted["ts"])["blocks"] == []  # type: ignore[index]
    assert emulator.find(CHANNEL, posted["ts"])["metadata"]["event_type"] == "botweave_chunk"  # type: ignore[index]


async def test_blocks_alone_need_no_text_and_bad_blocks_or_metadata_are_refused(
    client: AsyncWebClient, emulator: SlackEmulator
) -> None:
    with pytest.warns(UserWarning, match="text"):  # slack_sdk's advice; Slack itself accepts it
        await client.chat_postMessage(channel=CHANNEL, blocks=approval_blocks())
    too_long = [{"type": "actions", "elements": [{"type": "button", "text": {"type": "plain_text", "text": "x" * 76}}]}]
    with pytest.raises(SlackApiError) as bad_blocks:
        await client.chat_postMessage(channel=CHANNEL, text="?", blocks=too_long)
    assert bad_blocks.value.response["error"] == "invalid_blocks"
    with pytest.raises(SlackApiError) as bad_metadata:
        await client.chat_postMessage(channel=CHANNEL, text="?", metadata={"event_type": "x"})
    assert bad_metadata.value.response["error"] == "invalid_metadata_format"
    assert len(emulator.messages[CHANNEL]) == 1


async def test_history_pages_and_finds_a_chunk_by_its_key(client: AsyncWebClient, emulator: SlackEmulator) -> None:
    root = emulator.post_as_user(CHANNEL, ALICE, "question")
    for i in range(5):
        meta = {"event_type": "botweave_chunk", "event_payload": {"key": f"k{i}"}}
        await client.chat_postMessage(channel=CHANNEL, text=f"part {i}", metadata=meta)
    await client.chat_postMessage(channel=CHANNEL, text="in thread", thread_ts=root["ts"])

    first = await client.conversations_history(channel=CHANNEL, limit=2, include_all_metadata=True)
    assert [m["text"] for m in first["messages"]] == ["part 4", "part 3"] and first["has_more"]
    cursor = first["response_metadata"]["next_cursor"]
    second = await client.conversations_history(channel=CHANNEL, limit=10, cursor=cursor)
    assert [m["text"] for m in second["messages"]] == ["part 2", "part 1", "part 0", "question"]
    assert not second["has_more"] and second["response_metadata"]["next_cursor"] == ""

    keys = {
        m["metadata"]["event_payload"]["key"]: m["ts"]
        for m in (await client.conversations_history(channel=CHANNEL, include_all_metadata=True, limit=100))["messages"]
        if m.get("metadata", {}).get("event_type") == "botweave_chunk"
    }
    assert sorted(keys) == ["k0", "k1", "k2", "k3", "k4"]

    between = await client.conversations_history(channel=CHANNEL, oldest=keys["k1"], latest=keys["k3"])
    assert [m["text"] for m in between["messages"]] == ["part 2"]
    inclusive = await client.conversations_history(
        channel=CHANNEL, oldest=keys["k1"], latest=keys["k3"], inclusive=True
    )
    assert [m["text"] for m in inclusive["messages"]] == ["part 3", "part 2", "part 1"]

    replies = await client.conversations_replies(channel=CHANNEL, ts=root["ts"], include_all_metadata=True)
    assert [m["text"] for m in replies["messages"]] == ["question", "in thread"]


async def test_ephemerals_and_reactions_are_recorded(client: AsyncWebClient, emulator: SlackEmulator) -> None:
    answer = await client.chat_postEphemeral(channel=CHANNEL, user=BOB, text="Not yours to approve.")
    assert answer["message_ts"] and emulator.messages[CHANNEL] == []
    assert emulator.ephemerals[0] | {"ts": ""} == {
        "via": "chat.postEphemeral",
        "channel": CHANNEL,
        "user": BOB,
        "text": "Not yours to approve.",
        "blocks": None,
        "thread_ts": None,
        "ts": "",
    }
    message = emulator.post_as_user(CHANNEL, ALICE, "hello")
    await client.reactions_add(channel=CHANNEL, timestamp=message["ts"], name="eyes")
    history = await client.conversations_history(channel=CHANNEL)
    assert history["messages"][0]["reactions"] == [{"name": "eyes", "users": [BOT_USER_ID], "count": 1}]
    await client.reactions_remove(channel=CHANNEL, timestamp=message["ts"], name="eyes")
    assert emulator.calls_to("reactions.add")[0].params["name"] == "eyes"
    assert "reactions" not in (await client.conversations_history(channel=CHANNEL))["messages"][0]


# --- files ---------------------------------------------------------------------------------------


async def test_file_urls_need_the_bot_token(emulator: SlackEmulator) -> None:
    pdf = b"%PDF-1.4 tiny"
    info = emulator.add_file("report.pdf", pdf, size=30_000_000, user=ALICE)
    event = emulator.post_as_user(CHANNEL, ALICE, "", subtype="file_share", files=[info])
    assert event["files"][0]["size"] == 30_000_000 and info["mimetype"] == "application/pdf"

    async with aiohttp.ClientSession() as session:
        for url in (info["url_private"], info["url_private_download"]):
            async with session.get(url, headers={"Authorization": f"Bearer {BOT_TOKEN}"}) as resp:
                assert resp.status == 200 and await resp.read() == pdf
                assert resp.content_type == "application/pdf"
        async with session.get(info["url_private"]) as resp:  # follows the redirect, as clients do
            assert resp.status == 200 and resp.content_type == "text/html"
            assert "Sign in" in await resp.text() and resp.history[0].status == 302
        emulator.file_auth_failure = "401"
        async with session.get(info["url_private"], headers={"Authorization": "Bearer xoxb-wrong"}) as resp:
            assert resp.status == 401
    assert [(authorised, status) for _, authorised, status in emulator.file_fetches] == [
        (True, 200),
        (True, 200),
        (False, 302),
        (False, 401),
    ]


async def test_files_upload_v2_goes_through_the_external_upload_flow(
    client: AsyncWebClient, emulator: SlackEmulator
) -> None:
    root = emulator.post_as_user(CHANNEL, ALICE, "send me the chart")
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    result = await client.files_upload_v2(
        channel=CHANNEL, file=png, filename="chart.png", title="Chart", initial_comment="Here.", thread_ts=root["ts"]
    )

    (upload,) = emulator.uploads.values()
    assert (upload.filename, upload.length, upload.data, upload.completed) == ("chart.png", len(png), png, True)
    assert (upload.title, upload.initial_comment, upload.channel, upload.thread_ts) == (
        "Chart",
        "Here.",
        CHANNEL,
        root["ts"],
    )
    shared = emulator.find(CHANNEL, upload.message_ts or "")
    assert shared is not None and shared["text"] == "Here." and shared["thread_ts"] == root["ts"]
    assert shared["files"][0]["id"] == upload.file_id == result["file"]["id"]
    assert result["file"]["mimetype"] == "image/png"
    async with aiohttp.ClientSession() as session:
        url = result["file"]["url_private_download"]
        async with session.get(url, headers={"Authorization": f"Bearer {BOT_TOKEN}"}) as resp:
            assert await resp.read() == png


async def test_completing_an_upload_that_sent_no_bytes_fails(client: AsyncWebClient, emulator: SlackEmulator) -> None:
    issued = await client.files_getUploadURLExternal(filename="a.txt", length=3)
    with pytest.raises(SlackApiError) as failed:
        await client.files_completeUploadExternal(files=[{"id": issued["file_id"]}], channel_id=CHANNEL)
    assert failed.value.response["error"] == "file_not_found" and emulator.messages[CHANNEL] == []


# --- bolt: interactivity and message events over Socket Mode and HTTP ----------------------------


class BoltApp:
    """A slack-bolt AsyncApp against the emulator that records what its listeners saw."""

    def __init__(self, emulator: SlackEmulator, client: AsyncWebClient) -> None:
        self.emulator = emulator
        self.app = AsyncApp(client=client, signing_secret=SIGNING_SECRET)
        self.actions: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.reply: dict[str, Any] = {"replace_original": True, "text": "Approved by <@U0ALICE>"}

        @self.app.action("approve")
        async def approve(ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond) -> None:
            await ack()
            self.actions.append(body)
            await respond(**self.reply)

        @self.app.event("message")
        async def message(event: dict[str, Any]) -> None:
            self.events.append(event)


@pytest.fixture(params=["socket", "http"])
async def bolt(
    request: pytest.FixtureRequest, emulator: SlackEmulator, client: AsyncWebClient
) -> AsyncIterator[tuple[BoltApp, str]]:
    bolt = BoltApp(emulator, client)
    if request.param == "socket":
        handler = AsyncSocketModeHandler(bolt.app, app_token=APP_TOKEN, web_client=client)
        await handler.connect_async()
        await emulator.wait_connected()
        yield bolt, ""
        await handler.close_async()
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    runner = aiohttp.web.AppRunner(bolt.app.web_app(path="/slack/events"))
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", port).start()
    yield bolt, f"http://127.0.0.1:{port}/slack/events"
    await runner.cleanup()


async def _deliver(emulator: SlackEmulator, url: str, payload: dict[str, Any]) -> Any:
    return await (emulator.post_interactive(url, payload) if url else emulator.send_interactive(payload))


async def test_a_button_press_reaches_bolt_is_acked_in_time_and_replaces_the_message(
    bolt: tuple[BoltApp, str], client: AsyncWebClient, emulator: SlackEmulator
) -> None:
    app, url = bolt
    posted = await client.chat_postMessage(channel=CHANNEL, text="Run `deploy`?", blocks=approval_blocks("7"))
    payload = emulator.block_actions(CHANNEL, posted["ts"], "approve", user=ALICE)

    delivery = await _deliver(emulator, url, payload)
    assert delivery.mode == ("http" if url else "socket")
    assert delivery.ack_seconds is not None and 0 <= delivery.ack_seconds < 3
    if url:
        assert delivery.status == 200

    await wait_for(lambda: emulator.responses)
    body = app.actions[0]
    action = body["actions"][0]
    assert (action["action_id"], action["value"], action["block_id"], action["style"]) == (
        "approve",
        "7",
        "approval:7",
        "primary",
    )
    assert action["text"]["text"] == "Approve" and body["user"]["id"] == ALICE
    assert body["container"]["message_ts"] == posted["ts"] and body["channel"] == {"id": CHANNEL, "name": "general"}
    assert body["message"]["blocks"][1]["elements"][0]["action_id"] == "approve"
    post = emulator.responses[0]
    assert (post.action_user, post.message_ts, post.body["replace_original"]) == (ALICE, posted["ts"], True)
    replaced = emulator.find(CHANNEL, posted["ts"])
    assert replaced is not None and replaced["text"] == "Approved by <@U0ALICE>" and replaced["blocks"] == []


async def test_response_url_answers_can_be_ephemeral_or_in_channel(
    bolt: tuple[BoltApp, str], client: AsyncWebClient, emulator: SlackEmulator
) -> None:
    app, url = bolt
    posted = await client.chat_postMessage(channel=CHANNEL, text="Run `deploy`?", blocks=approval_blocks())

    app.reply = {"text": "Only the requester can decide.", "response_type": "ephemeral", "replace_original": False}
    await _deliver(emulator, url, emulator.block_actions(CHANNEL, posted["ts"], "approve", user=BOB))
    await wait_for(lambda: emulator.ephemerals)
    assert emulator.ephemerals[0]["user"] == BOB and emulator.ephemerals[0]["via"] == "response_url"

    app.reply = {"text": "Deploying now.", "response_type": "in_channel", "replace_original": False}
    await _deliver(emulator, url, emulator.block_actions(CHANNEL, posted["ts"], "approve", user=ALICE))
    await wait_for(lambda: len(emulator.messages[CHANNEL]) == 2)
    assert emulator.messages[CHANNEL][1]["text"] == "Deploying now."
    assert emulator.find(CHANNEL, posted["ts"])["text"] == "Run `deploy`?"  # type: ignore[index]


async def test_edit_and_delete_events_reach_bolt(bolt: tuple[BoltApp, str], emulator: SlackEmulator) -> None:
    app, url = bolt
    original = emulator.post_as_user(CHANNEL, ALICE, "teh plan")
    changed = emulator.edit_as_user(CHANNEL, original["ts"], "the plan")
    deleted = emulator.delete_as_user(CHANNEL, original["ts"])
    for event in (changed, deleted):
        if url:
            status, _ = await post_signed(url, event_callback(event))
            assert status == 200
        else:
            await emulator.send_envelope(event_callback(event))
    await wait_for(lambda: len(app.events) == 2)

    edit, removal = app.events
    assert edit["subtype"] == "message_changed" and edit["message"]["text"] == "the plan"
    assert edit["message"]["ts"] == original["ts"] and edit["previous_message"]["text"] == "teh plan"
    assert edit["message"]["edited"]["user"] == ALICE
    assert removal["subtype"] == "message_deleted" and removal["deleted_ts"] == original["ts"]
    assert emulator.find(CHANNEL, original["ts"]) is None


async def test_an_ack_that_never_comes_is_reported_as_none(emulator: SlackEmulator) -> None:
    """A Socket Mode client that reads the envelope but never acks: the record says so."""
    headers = {"Authorization": f"Bearer {APP_TOKEN}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(emulator.api_base_url + "apps.connections.open", headers=headers) as opened:
            url = (await opened.json())["url"]
        async with session.ws_connect(url) as ws:
            assert (await ws.receive_json())["type"] == "hello"
            delivery = await emulator.send_interactive({"type": "block_actions", "actions": []}, timeout=0.2)
            envelope = await ws.receive_json()
    assert envelope["type"] == "interactive" and envelope["accepts_response_payload"] is False
    assert delivery.ack_seconds is None and emulator.interactive == [delivery]
