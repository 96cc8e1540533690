"""The Discord emulator's delivery, media, component and interaction features, checked through
discord.py itself: if the real client accepts what the emulator answers and the emulator records
what the real client sends, tests of the product built on them exercise the wire format.

The client here is a bare discord.Client whose HTTPClient (and webhook adapter, which carries
interaction answers) is pointed at the emulator, so nothing depends on the product's code.
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import discord
import pytest
import yarl
from discord.http import HTTPClient, Route
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from tests.emulators.discord import (
    ALICE_ID,
    BOT_ID,
    CHANNEL_ID,
    CHANNEL_MESSAGE,
    DEFERRED_CHANNEL_MESSAGE,
    DEFERRED_UPDATE,
    DM_CHANNEL_ID,
    FORUM_ID,
    TOKEN,
    UPDATE_MESSAGE,
    DiscordEmulator,
)

WAIT = 5.0


class _RebasedHTTP(HTTPClient):
    """discord.py's HTTPClient with REST calls and the gateway moved to the emulator."""

    api_base: str = ""
    gateway: str = ""

    async def request(self, route: Route, **kwargs: Any) -> Any:
        if route.url.startswith(Route.BASE):
            route.url = self.api_base + route.url[len(Route.BASE) :]
        return await super().request(route, **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> Any:
        query = yarl.URL(url).query  # keep discord.py's v / encoding / compress
        return await super().ws_connect(str(yarl.URL(self.gateway).with_query(query)), compress=compress)


class _RebasedWebhooks(AsyncWebhookAdapter):
    """discord.py's webhook adapter (interaction answers, follow-ups) sent to the emulator."""

    def __init__(self, api_base: str) -> None:
        super().__init__()
        self.api_base = api_base

    async def request(self, route: Route, session: Any, **kwargs: Any) -> Any:
        if route.url.startswith(Route.BASE):
            route.url = self.api_base + route.url[len(Route.BASE) :]
        return await super().request(route, session, **kwargs)


Responder = Callable[[discord.Interaction], Awaitable[None]]


class Client(discord.Client):
    """A discord.py client that keeps what the gateway brought and answers interactions with
    whatever `responder` the test sets."""

    def __init__(self, emulator: DiscordEmulator) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents, guild_ready_timeout=0.05)  # one guild: no need to wait for more
        self.http.__class__ = _RebasedHTTP
        self.http.api_base = emulator.api_base  # type: ignore[attr-defined]
        self.http.gateway = emulator.gateway_url  # type: ignore[attr-defined]
        self.messages: list[discord.Message] = []
        self.edits: list[discord.RawMessageUpdateEvent] = []
        self.deletes: list[discord.RawMessageDeleteEvent] = []
        self.threads_seen: list[discord.Thread] = []
        self.responder: Responder | None = None
        self.responder_errors: list[BaseException] = []

    async def on_message(self, message: discord.Message) -> None:
        self.messages.append(message)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        self.edits.append(payload)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self.deletes.append(payload)

    async def on_thread_create(self, thread: discord.Thread) -> None:
        self.threads_seen.append(thread)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        if self.responder is not None:
            try:
                await self.responder(interaction)
            except Exception as exc:  # kept for the test to look at
                self.responder_errors.append(exc)

    def channel(self, channel_id: str = CHANNEL_ID) -> Any:
        found = self.get_channel(int(channel_id))
        assert found is not None
        return found


async def eventually(condition: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %.1fs" % timeout)
        await asyncio.sleep(0.01)
    return value


@pytest.fixture
async def emulator() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


@pytest.fixture
async def client(emulator: DiscordEmulator) -> AsyncIterator[Client]:
    bot = Client(emulator)
    # Interaction answers go through the webhook adapter in a context variable; the gateway task
    # (and so every event handler it starts) runs in a context where it points at the emulator.
    context = contextvars.copy_context()
    context.run(async_context.set, _RebasedWebhooks(emulator.api_base))
    await bot.login(TOKEN)
    runner = asyncio.create_task(bot.connect(reconnect=False), context=context)
    await emulator.wait_ready()
    await asyncio.wait_for(bot.wait_until_ready(), WAIT)
    yield bot
    await bot.close()
    await asyncio.wait_for(runner, WAIT)


async def _raw(emulator: DiscordEmulator, method: str, path: str, body: Any, *, auth: bool = True) -> tuple[int, Any]:
    """One REST call without discord.py's client-side checks (to see the emulator refuse)."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bot {TOKEN}"} if auth else {})}
    async with aiohttp.ClientSession() as session:
        async with session.request(method, emulator.api_base + path, data=json.dumps(body), headers=headers) as resp:
            text = await resp.text()
            return resp.status, json.loads(text) if text else None


# --- idempotent sends --------------------------------------------------------------------------


async def test_a_repeated_nonce_returns_the_first_message_and_creates_nothing(
    client: Client, emulator: DiscordEmulator
) -> None:
    channel = client.channel()
    first = await channel.send("chunk one", nonce=424242)
    again = await channel.send("chunk one", nonce=424242)
    other = await channel.send("chunk two")  # discord.py picks a random nonce itself

    assert again.id == first.id and other.id != first.id
    assert [m["content"] for m in emulator.bot_messages(CHANNEL_ID)] == ["chunk one", "chunk two"]
    assert [s.duplicate for s in emulator.sends] == [False, True, False]
    assert all(s.enforce_nonce for s in emulator.sends)  # discord.py always asks for it
    assert emulator.duplicate_sends()[0].message_id == str(first.id)
    assert emulator.sends[0].nonce == "424242"


async def test_an_expired_nonce_creates_a_new_message(client: Client, emulator: DiscordEmulator) -> None:
    emulator.nonce_window_seconds = 0.0
    first = await client.channel().send("hello", nonce=7)
    await asyncio.sleep(0.01)
    second = await client.channel().send("hello", nonce=7)
    assert second.id != first.id and not emulator.duplicate_sends()


async def test_a_send_whose_answer_is_lost_is_not_repeated_by_its_nonce(
    client: Client, emulator: DiscordEmulator
) -> None:
    emulator.drop_next("POST", r"/channels/\d+/messages")
    with pytest.raises((aiohttp.ClientError, OSError)):
        await client.channel().send("maybe delivered", nonce=99)
    assert len(emulator.bot_messages(CHANNEL_ID)) == 1  # it was delivered; the client cannot know

    resent = await client.channel().send("maybe delivered", nonce=99)

    assert [m["id"] for m in emulator.bot_messages(CHANNEL_ID)] == [str(resent.id)]
    assert len(emulator.duplicate_sends()) == 1


# --- files -------------------------------------------------------------------------------------


async def test_uploads_are_recorded_and_served_back_by_the_cdn(client: Client, emulator: DiscordEmulator) -> None:
    pdf = b"%PDF-1.4\r\n" + bytes(range(256)) * 40
    notes = "Grüße\n".encode()
    sent = await client.channel().send(
        "two files",
        files=[discord.File(io.BytesIO(pdf), filename="report.pdf"), discord.File(io.BytesIO(notes), filename="n.txt")],
    )

    assert [(u.filename, u.data, u.content_type) for u in emulator.uploads] == [
        ("report.pdf", pdf, "application/octet-stream"),  # what discord.py puts on each part
        ("n.txt", notes, "application/octet-stream"),
    ]
    attachments = sent.attachments
    assert [(a.filename, a.content_type, a.size) for a in attachments] == [
        ("report.pdf", "application/pdf", len(pdf)),
        ("n.txt", "text/plain; charset=utf-8", len(notes)),
    ]
    assert await attachments[0].read() == pdf
    assert emulator.messages[str(sent.id)]["attachments"][1]["id"] == str(attachments[1].id)


async def test_an_inbound_attachment_is_fetched_from_the_cdn_with_its_declared_size(
    client: Client, emulator: DiscordEmulator
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    picture = emulator.attachment("cat.png", data=png, size=25_000_000)  # claims more than it is
    await emulator.dispatch("MESSAGE_CREATE", emulator.message("look", attachments=[picture]))
    message = await eventually(lambda: client.messages and client.messages[-1])

    attachment = message.attachments[0]
    assert (attachment.filename, attachment.content_type, attachment.size) == ("cat.png", "image/png", 25_000_000)
    assert await attachment.read() == png
    assert emulator.cdn_fetches == [(attachment.url.split("?")[0].removeprefix(emulator.cdn_base), 200)]

    emulator.cdn.clear()  # an expired or removed file
    with pytest.raises(discord.NotFound):
        await attachment.read()


async def test_an_edit_can_replace_the_files(client: Client, emulator: DiscordEmulator) -> None:
    sent = await client.channel().send("v1", file=discord.File(io.BytesIO(b"one"), filename="a.txt"))
    edited = await sent.edit(content="v2", attachments=[discord.File(io.BytesIO(b"two"), filename="b.txt")])
    assert [a.filename for a in edited.attachments] == ["b.txt"]
    assert [u.data for u in emulator.uploads] == [b"one", b"two"]
    kept = await edited.edit(content="v3")  # no attachments named: they stay
    assert [a.filename for a in kept.attachments] == ["b.txt"]


async def test_oversized_uploads_and_empty_messages_are_refused(client: Client, emulator: DiscordEmulator) -> None:
    emulator.upload_limit = 10
    with pytest.raises(discord.HTTPException) as too_big:
        await client.channel().send(file=discord.File(io.BytesIO(b"x" * 11), filename="big.bin"))
    assert too_big.value.status == 413 and too_big.value.code == 40005
    with pytest.raises(discord.HTTPException) as empty:
        await client.channel().send("   ")
    assert empty.value.code == 50006
    assert emulator.bot_messages() == []


# --- components and interactions ---------------------------------------------------------------


def _approval_view() -> discord.ui.View:
    view = discord.ui.View(timeout=None)
    view.add_item(discord.ui.Button(label="Approve", custom_id="approve:1", style=discord.ButtonStyle.success))
    view.add_item(discord.ui.Button(label="Deny", custom_id="deny:1", style=discord.ButtonStyle.danger))
    return view


async def test_buttons_are_stored_on_sends_and_edits(client: Client, emulator: DiscordEmulator) -> None:
    sent = await client.channel().send("Run `rm -rf build`?", view=_approval_view())
    assert [(b["label"], b["custom_id"], b["style"]) for b in emulator.buttons(str(sent.id))] == [
        ("Approve", "approve:1", 3),
        ("Deny", "deny:1", 4),
    ]
    assert [c.label for row in sent.components for c in row.children] == ["Approve", "Deny"]  # type: ignore[union-attr]

    await sent.edit(content="Approved by alice", view=None)
    assert emulator.buttons(str(sent.id)) == [] and emulator.messages[str(sent.id)]["content"] == "Approved by alice"


async def test_components_over_discords_limits_are_refused(emulator: DiscordEmulator) -> None:
    button = {"type": 2, "style": 1, "label": "x", "custom_id": "a" * 101}
    status, body = await _raw(
        emulator,
        "POST",
        f"/channels/{CHANNEL_ID}/messages",
        {"content": "?", "components": [{"type": 1, "components": [button]}]},
    )
    assert status == 400 and body["code"] == 50035
    six = [{"type": 2, "style": 1, "label": str(i), "custom_id": str(i)} for i in range(6)]
    status, _ = await _raw(
        emulator,
        "POST",
        f"/channels/{CHANNEL_ID}/messages",
        {"content": "?", "components": [{"type": 1, "components": six}]},
    )
    assert status == 400 and emulator.bot_messages() == []


async def test_an_ephemeral_answer_to_a_press_is_recorded_with_its_delay(
    client: Client, emulator: DiscordEmulator
) -> None:
    sent = await client.channel().send("Approve?", view=_approval_view())
    pressed: list[discord.Interaction] = []

    async def answer(interaction: discord.Interaction) -> None:
        pressed.append(interaction)
        await interaction.response.send_message("Only the requester can decide.", ephemeral=True)

    client.responder = answer
    interaction = await emulator.press(str(sent.id), "deny:1", by=emulator.bob)
    callback = await emulator.wait_response(interaction)

    assert pressed[0].data == {"custom_id": "deny:1", "component_type": 2}
    assert pressed[0].user.id == int(emulator.bob["id"]) and pressed[0].message.id == sent.id  # type: ignore[union-attr]
    assert callback.type == CHANNEL_MESSAGE and callback.ephemeral and callback.status == 200
    assert 0 <= callback.delay < 3
    assert callback.data["content"] == "Only the requester can decide."
    (ephemeral_id,) = interaction.ephemeral_ids
    assert emulator.ephemeral_messages[ephemeral_id]["content"] == "Only the requester can decide."
    assert [m["id"] for m in emulator.bot_messages()] == [str(sent.id)]  # nothing public was posted


async def test_update_message_answer_edits_the_pressed_message(client: Client, emulator: DiscordEmulator) -> None:
    sent = await client.channel().send("Approve?", view=_approval_view())

    async def answer(interaction: discord.Interaction) -> None:
        await interaction.response.edit_message(content="Approved by alice", view=None)

    client.responder = answer
    interaction = await emulator.press(str(sent.id), "approve:1")
    callback = await emulator.wait_response(interaction)

    assert callback.type == UPDATE_MESSAGE and callback.status == 200
    stored = emulator.messages[str(sent.id)]
    assert stored["content"] == "Approved by alice" and emulator.buttons(str(sent.id)) == []
    edit = await eventually(lambda: client.edits and client.edits[-1])  # echoed as MESSAGE_UPDATE
    assert edit.message_id == sent.id

    # a second answer to the same interaction is refused as on Discord
    path = f"/interactions/{interaction.id}/{interaction.token}/callback"
    status, body = await _raw(emulator, "POST", path, {"type": 6}, auth=False)
    assert (status, body["code"]) == (400, 40060)
    assert not interaction.callbacks[1].status < 300


async def test_deferred_update_then_edit_original(client: Client, emulator: DiscordEmulator) -> None:
    sent = await client.channel().send("Approve?", view=_approval_view())

    async def answer(interaction: discord.Interaction) -> None:
        await interaction.response.defer()  # type 6 for a component
        await interaction.edit_original_response(content="Approved (deferred)", view=None)

    client.responder = answer
    interaction = await emulator.press(str(sent.id), "approve:1")
    await eventually(lambda: interaction.followups)
    assert interaction.callbacks[0].type == DEFERRED_UPDATE
    await eventually(lambda: emulator.messages[str(sent.id)]["content"] == "Approved (deferred)")
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in interaction.followups] == [("PATCH", "@original")]
    assert client.responder_errors == []


async def test_deferred_message_is_filled_by_the_first_followup(client: Client, emulator: DiscordEmulator) -> None:
    sent = await client.channel().send("Approve?", view=_approval_view())

    async def answer(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True)  # type 5: a loading message appears
        await interaction.followup.send("Done thinking.")
        await interaction.followup.send("And one more.")

    client.responder = answer
    interaction = await emulator.press(str(sent.id), "approve:1")
    await eventually(lambda: len(interaction.followups) == 2)
    assert interaction.callbacks[0].type == DEFERRED_CHANNEL_MESSAGE
    posted = [m for m in emulator.bot_messages() if m["id"] != str(sent.id)]
    assert [m["content"] for m in posted] == ["Done thinking.", "And one more."]
    assert posted[0]["id"] == interaction.original_id and posted[0]["flags"] == 0
    assert posted[0]["interaction_metadata"]["interacted_message_id"] == str(sent.id)
    assert client.responder_errors == []


async def test_an_answer_after_the_deadline_is_unknown_interaction(client: Client, emulator: DiscordEmulator) -> None:
    emulator.interaction_deadline = 0.1
    sent = await client.channel().send("Approve?", view=_approval_view())

    async def slow(interaction: discord.Interaction) -> None:
        await asyncio.sleep(0.2)
        await interaction.response.defer()

    client.responder = slow
    interaction = await emulator.press(str(sent.id), "approve:1")
    callback = await emulator.wait_response(interaction)
    assert callback.status == 404 and callback.delay >= 0.1 and not interaction.responded
    await eventually(lambda: client.responder_errors)
    assert isinstance(client.responder_errors[0], discord.NotFound)


async def test_a_press_in_a_dm_carries_the_user(client: Client, emulator: DiscordEmulator) -> None:
    dm = emulator.message("hi", channel_id=DM_CHANNEL_ID)
    payload = emulator.button_press(dm, "approve:1")
    assert "member" not in payload and payload["user"]["id"] == ALICE_ID and "guild_id" not in payload
    seen: list[discord.Interaction] = []

    async def answer(interaction: discord.Interaction) -> None:
        seen.append(interaction)
        await interaction.response.send_message("ok")

    client.responder = answer
    await emulator.dispatch("INTERACTION_CREATE", payload)
    callback = await emulator.wait_response(emulator.interactions[payload["id"]])
    assert callback.status == 200 and seen[0].user.id == int(ALICE_ID) and seen[0].guild_id is None
    assert emulator.bot_messages(DM_CHANNEL_ID)[0]["content"] == "ok"


# --- user edits and deletes, history, reactions, threads ---------------------------------------


async def test_user_edits_and_deletes_reach_the_client(client: Client, emulator: DiscordEmulator) -> None:
    original = emulator.message("teh question")
    await emulator.dispatch("MESSAGE_CREATE", original)
    await eventually(lambda: client.messages)

    await emulator.dispatch("MESSAGE_UPDATE", emulator.user_edit(original, "the question"))
    edit = await eventually(lambda: client.edits and client.edits[-1])
    assert edit.message.content == "the question" and edit.message.edited_at is not None
    assert emulator.messages[original["id"]]["content"] == "the question"

    await emulator.dispatch("MESSAGE_DELETE", emulator.user_delete(original["id"]))
    deleted = await eventually(lambda: client.deletes and client.deletes[-1])
    assert deleted.message_id == int(original["id"]) and original["id"] not in emulator.messages


async def test_history_pages_newest_first(client: Client, emulator: DiscordEmulator) -> None:
    ids = [emulator.message(f"m{i}")["id"] for i in range(5)]
    channel = client.channel()
    latest = [m.content async for m in channel.history(limit=3)]
    assert latest == ["m4", "m3", "m2"]
    everything = [m.content async for m in channel.history(limit=None, oldest_first=True)]
    assert everything == [f"m{i}" for i in range(5)]
    after = [m.content async for m in channel.history(after=discord.Object(int(ids[1])), oldest_first=True)]
    assert after == ["m2", "m3", "m4"]
    before = [m.content async for m in channel.history(before=discord.Object(int(ids[3])), limit=2)]
    assert before == ["m2", "m1"]


async def test_reactions_and_edit_rules(client: Client, emulator: DiscordEmulator) -> None:
    theirs = emulator.message("hello")
    message = await client.channel().fetch_message(int(theirs["id"]))
    await message.add_reaction("👀")
    assert emulator.messages[theirs["id"]]["bot_reactions"] == ["👀"]
    await message.remove_reaction("👀", client.user)  # type: ignore[arg-type]
    assert emulator.messages[theirs["id"]]["bot_reactions"] == []
    with pytest.raises(discord.Forbidden):
        await message.edit(content="not mine")
    assert emulator.calls("DELETE", r"/channels/\d+/messages/\d+/reactions/.+/@me")


async def test_threads_from_a_channel_a_message_and_a_forum(client: Client, emulator: DiscordEmulator) -> None:
    channel = client.channel()
    loose = await channel.create_thread(name="side chat", type=discord.ChannelType.public_thread)
    starter = await channel.send("let's discuss")
    from_message = await starter.create_thread(name="discussion")
    forum = client.channel(FORUM_ID)
    post = await forum.create_thread(name="Feature: export", content="Please add CSV export.")

    assert from_message.id == starter.id and emulator.messages[str(starter.id)]["flags"] & 32
    assert [t["name"] for t in emulator.bot_threads()] == ["side chat", "discussion", "Feature: export"]
    assert post.thread.parent_id == int(FORUM_ID) and post.message.content == "Please add CSV export."
    assert post.message.id == post.thread.id
    await eventually(lambda: len(client.threads_seen) == 3)  # THREAD_CREATE echoed

    reply = await loose.send("in the thread")
    assert emulator.messages[str(reply.id)]["channel_id"] == str(loose.id)
    with pytest.raises(discord.HTTPException) as twice:
        await starter.create_thread(name="again")
    assert twice.value.code == 160004
    assert str(BOT_ID) == emulator.threads[str(loose.id)]["owner_id"]
