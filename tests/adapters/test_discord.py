"""The Discord adapter end to end: App + discord.py's real REST and gateway clients + emulator.

Every scenario drives discord.py through `tests/emulators/discord.py` on 127.0.0.1 and asserts
what a Discord user would see: which messages the bot posted where, what it edited, what it
ignored, and which hooks fired.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import discord
import pytest
from botweave import App
from botweave.hooks import HookEvent
from botweave.types import BotMessage, PlatformEvent

from tests.emulators.discord import (
    BOT_ID,
    BOT_ROLE_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    FORUM_ID,
    FORUM_POST_ID,
    GUILD_ID,
    ROLE_ID,
    THREAD_ID,
    TOKEN,
    DiscordEmulator,
    thread,
    user,
)
from tests.support import StartApp

if TYPE_CHECKING:
    from botweave.adapters.discord.adapter import DiscordAdapter

MENTION = f"<@{BOT_ID}>"
WAIT = 5.0


async def eventually(condition: Callable[[], Any], timeout: float = WAIT) -> Any:
    """Poll until `condition()` is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met within %.1fs" % timeout)
        await asyncio.sleep(0.01)


class Harness:
    """A running App with the Discord adapter, the emulator, and a tap on the adapter's output."""

    def __init__(self, emulator: DiscordEmulator, app: App) -> None:
        self.emu = emulator
        self.app = app
        self.adapter: DiscordAdapter = app.adapters["discord"]  # type: ignore[assignment]
        self.items: list[BotMessage | PlatformEvent] = []
        self.hooks: list[HookEvent] = []
        submit = app.submit

        async def tap(item: BotMessage | PlatformEvent) -> None:
            self.items.append(item)
            await submit(item)

        self.adapter.bind(tap)

    def record_hooks(self, *names: str) -> None:
        for name in names:
            self.app.hooks.register(name, self.hooks.append)

    async def deliver(self, event: str, data: dict[str, Any]) -> BotMessage | PlatformEvent | None:
        """Send a dispatch and wait until the adapter handed it on and its turn finished."""
        before = len(self.items)
        await self.emu.dispatch(event, data)
        await eventually(lambda: len(self.items) > before)
        await self.app.drain()
        return self.items[before]

    async def say(self, content: str, **kwargs: Any) -> BotMessage:
        item = await self.deliver("MESSAGE_CREATE", self.emu.message(content, **kwargs))
        assert isinstance(item, BotMessage)
        return item

    async def settle(self) -> None:
        """Barrier: a DM round trip; everything dispatched before it has been handled after it."""
        await self.say("ping", channel_id=DM_CHANNEL_ID)

    def replies(self, channel_id: str = CHANNEL_ID) -> list[dict[str, Any]]:
        return self.emu.bot_messages(channel_id)


def make_config(emulator: DiscordEmulator, **discord_overrides: Any) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {
            "discord": {
                "token": TOKEN,
                "api_base_url": emulator.api_base,
                "gateway_url": emulator.gateway_url,
                **discord_overrides,
            }
        },
    }


@pytest.fixture
async def emulator() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


@pytest.fixture
async def start(emulator: DiscordEmulator, start_app: StartApp) -> Callable[..., Awaitable[Harness]]:
    async def run(**overrides: Any) -> Harness:
        return await started(emulator, start_app, make_config(emulator, **overrides))

    return run


async def started(
    emulator: DiscordEmulator, start_app: StartApp, config: dict[str, Any], harness: type[Harness] = Harness
) -> Harness:
    """An App connected to the emulator, wrapped in `harness` (Harness by default)."""
    app = await start_app(config)
    assert "discord" in app.adapters, "the Discord adapter did not start"
    await emulator.wait_ready()
    return harness(emulator, app)


@pytest.fixture
async def bot(start: Callable[..., Awaitable[Harness]]) -> Harness:
    return await start()


# --- connecting --------------------------------------------------------------------------------


async def test_connects_with_intents_and_leaves_discord_py_globals_alone(bot: Harness) -> None:
    intents = discord.Intents._from_value(bot.emu.identify["intents"])  # type: ignore[index]
    assert intents.guilds and intents.guild_messages and intents.dm_messages
    assert intents.message_content and intents.guild_reactions and intents.dm_reactions
    assert not intents.members  # privileged: only with member_events
    assert bot.adapter.self_user is not None and bot.adapter.self_user.username == "weaver"
    assert discord.http.Route.BASE == "https://discord.com/api/v10"
    assert str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == "wss://gateway.discord.gg/"
    assert "member_joined" not in bot.adapter.emits


async def test_api_base_url_alone_finds_the_gateway_through_gateway_bot(emulator: DiscordEmulator) -> None:
    config = make_config(emulator)
    del config["platforms"]["discord"]["gateway_url"]
    app = App.from_config(config)
    await app.start()
    try:
        await emulator.wait_ready()
        assert emulator.calls("GET", "/gateway/bot")
        bot = Harness(emulator, app)
        await bot.say("hello", channel_id=DM_CHANNEL_ID)
        assert len(bot.replies(DM_CHANNEL_ID)) == 1
    finally:
        await app.stop()


async def test_bad_token_is_one_clear_line(emulator: DiscordEmulator, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(emulator)
    config["platforms"]["discord"]["token"] = "wrong-token"
    app = App.from_config(config)
    with caplog.at_level(logging.ERROR):
        await app.start()
    await app.stop()
    assert "discord" not in app.adapters
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "discord: login failed: the bot token was rejected" in errors[0]
    assert "wrong-token" not in errors[0]


async def test_missing_privileged_intent_is_one_clear_line(
    emulator: DiscordEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.allow_privileged = False
    app = App.from_config(make_config(emulator, member_events=True))
    with caplog.at_level(logging.ERROR):
        await asyncio.wait_for(app.start(), 15)
    await app.stop()
    assert "discord" not in app.adapters
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "Server Members intent" in errors[0]


# --- messages in channels, threads, DMs ------------------------------------------------------


async def test_channel_message_with_mention_is_answered_as_a_reply(start: Callable[..., Awaitable[Harness]]) -> None:
    bot = await start(typing={"mode": "instant"})  # typing even for a quick answer
    msg = await bot.say(f"{MENTION} what is up?", mentions=[bot.emu.bot])
    assert msg.text == "what is up?"
    assert msg.metadata["mentions_bot"] is True
    assert msg.channel.channel_type == "channel" and msg.channel.channel_id == CHANNEL_ID
    [reply] = bot.replies()
    assert reply["content"] == "assistant (offline echo) heard: [Alice] what is up?"
    sent = reply["sent_with"]
    assert sent["message_reference"]["message_id"] == msg.message_id
    assert sent["allowed_mentions"]["parse"] == ["users"]  # never @everyone or roles
    assert bot.emu.calls("POST", rf"/channels/{CHANNEL_ID}/typing")


async def test_channel_message_without_mention_is_not_answered(bot: Harness) -> None:
    msg = await bot.say("just chatting among humans")
    assert msg.metadata["mentions_bot"] is False
    await bot.settle()
    assert bot.replies() == []


async def test_mention_of_the_bots_role_addresses_it_and_other_mentions_read_as_names(bot: Harness) -> None:
    content = f"<@&{BOT_ROLE_ID}> ask <@{bot.emu.bob['id']}> and <@&{ROLE_ID}> in <#{THREAD_ID}>"
    msg = await bot.say(content, mentions=[bot.emu.bob], mention_roles=[BOT_ROLE_ID, ROLE_ID])
    assert msg.metadata["mentions_bot"] is True
    assert msg.text == "ask @bob and @mods in #planning"


async def test_own_mention_removal_keeps_the_rest_of_the_text_intact(bot: Harness) -> None:
    code = "```py\ndef f():\n    return  1\n```"
    msg = await bot.say(f"hey {MENTION} look:\n{code}", mentions=[bot.emu.bot])
    assert msg.text == f"hey look:\n{code}"
    assert len(bot.replies()) == 1


async def test_reply_to_the_bot_with_the_referenced_message_included(bot: Harness) -> None:
    await bot.say(f"{MENTION} first question", mentions=[bot.emu.bot])
    [answer] = bot.replies()
    msg = await bot.say("and a follow-up", reply_to=answer["id"])
    assert msg.reply_to == answer["id"]
    assert msg.metadata["reply_to_bot"] is True and msg.metadata["mentions_bot"] is False
    assert msg.quoted is not None and msg.quoted.author == "bot"
    assert bot.emu.calls("GET", r"/channels/\d+/messages/\d+") == []  # nothing fetched
    follow_up = bot.replies()[-1]
    assert follow_up["content"].endswith(
        f'heard: [Alice] [In reply to: "{answer["content"]}"]\nand a follow-up'
    )


async def test_reply_with_the_referenced_message_absent_fetches_it_once(bot: Harness) -> None:
    original = bot.emu.message("the bot said this earlier", author=bot.emu.bot)
    first = await bot.say("what did you mean?", reply_to=original["id"], include_referenced=False)
    second = await bot.say("still wondering", reply_to=original["id"], include_referenced=False)
    assert first.quoted is not None and first.quoted.text == "the bot said this earlier"
    assert first.quoted.author == "bot" and first.metadata["reply_to_bot"] is True
    assert second.quoted == first.quoted
    assert len(bot.emu.calls("GET", rf"/channels/{CHANNEL_ID}/messages/{original['id']}")) == 1
    assert len(bot.replies()) == 3  # the original plus two answers


async def test_reply_to_a_human_is_context_but_not_addressing(bot: Harness) -> None:
    human = bot.emu.message("humans talking", author=bot.emu.bob)
    msg = await bot.say("agreed", reply_to=human["id"])
    assert msg.quoted is not None and msg.quoted.author == "user"
    assert msg.metadata["reply_to_bot"] is False
    await bot.settle()
    assert bot.replies() == []


async def test_thread_message_is_answered_in_the_thread(bot: Harness) -> None:
    msg = await bot.say(f"{MENTION} in the thread", channel_id=THREAD_ID, mentions=[bot.emu.bot])
    assert msg.channel.channel_id == CHANNEL_ID and msg.thread_id == THREAD_ID
    assert msg.channel.channel_type == "thread"
    assert bot.replies(CHANNEL_ID) == []
    [reply] = bot.replies(THREAD_ID)
    assert reply["sent_with"]["message_reference"]["message_id"] == msg.message_id


async def test_forum_post_is_answered_in_the_post(bot: Harness) -> None:
    msg = await bot.say(f"{MENTION} thoughts?", channel_id=FORUM_POST_ID, mentions=[bot.emu.bot])
    assert msg.channel.channel_id == FORUM_ID and msg.thread_id == FORUM_POST_ID
    assert msg.metadata["forum_post"] is True
    assert len(bot.replies(FORUM_POST_ID)) == 1


async def test_dm_is_always_answered(bot: Harness) -> None:
    msg = await bot.say("hi there", channel_id=DM_CHANNEL_ID)
    assert msg.channel.channel_type == "dm" and msg.thread_id is None
    [reply] = bot.replies(DM_CHANNEL_ID)
    assert reply["content"] == "assistant (offline echo) heard: hi there"


async def test_attachments_are_normalised(bot: Harness) -> None:
    picture = bot.emu.attachment("cat.png", "image/png", size=2048)
    msg = await bot.say("", channel_id=DM_CHANNEL_ID, attachments=[picture])
    assert msg.message_type.value == "image"
    assert msg.attachments == [
        {"url": picture["url"], "mime": "image/png", "size": 2048, "filename": "cat.png", "file_id": picture["id"]}
    ]


async def test_another_bots_message_is_dropped_when_allow_bots_is_off(bot: Harness) -> None:
    msg = await bot.say(f"{MENTION} hello fellow bot", author=bot.emu.other_bot, mentions=[bot.emu.bot])
    assert msg.sender.is_bot and msg.allow_control is False
    await bot.settle()
    assert bot.replies() == []


async def test_webhook_message_is_bot_authored_and_our_own_echoes_are_dropped(bot: Harness) -> None:
    hook_author = user("6001", "Deploy Hook", bot=True)
    msg = await bot.say("/new deploy finished", author=hook_author, webhook_id="6001")
    assert msg.sender.is_bot and msg.allow_control is False
    await bot.settle()
    # our own reply to the settle ping came back over the gateway and never reached the runtime
    own = {m["id"] for m in bot.emu.bot_messages()}
    assert own and not any(isinstance(i, BotMessage) and i.message_id in own for i in bot.items)
    # a message from a webhook our application owns is ours too
    hook = user("6500", "Weaver Hook", bot=True)
    ours = bot.emu.message("our webhook post", author=hook, webhook_id="6500", application_id=BOT_ID)
    await bot.emu.dispatch("MESSAGE_CREATE", ours)
    await bot.settle()
    assert not any(isinstance(i, BotMessage) and i.message_id == ours["id"] for i in bot.items)


async def test_allow_bots_lets_another_bot_talk_to_ours(start: Callable[..., Awaitable[Harness]]) -> None:
    bot = await start(allow_bots=True)
    await bot.say(f"{MENTION} hello", author=bot.emu.other_bot, mentions=[bot.emu.bot])
    assert len(bot.replies()) == 1


async def test_malformed_dispatch_is_skipped_without_dropping_the_connection(bot: Harness) -> None:
    broken = bot.emu.message("no author here", channel_id=DM_CHANNEL_ID, store=False)
    del broken["author"]
    await bot.emu.dispatch("MESSAGE_CREATE", broken)
    await bot.emu.dispatch("MESSAGE_REACTION_ADD", {"channel_id": CHANNEL_ID})
    await bot.emu.dispatch("MESSAGE_UPDATE", {"id": "55", "channel_id": CHANNEL_ID, "content": "x", "type": 0})
    await bot.say("still there?", channel_id=DM_CHANNEL_ID)
    assert bot.emu.bot_messages(DM_CHANNEL_ID)[-1]["content"].endswith("heard: still there?")
    assert len(bot.emu.calls("GET", "/users/@me")) == 1
    assert bot.emu.connected


# --- outbound -----------------------------------------------------------------------------------


async def test_long_reply_is_chunked_at_2000_characters(bot: Harness) -> None:
    words = " ".join(f"word{i}" for i in range(450))  # ~3800 characters
    msg = await bot.say(words, channel_id=DM_CHANNEL_ID)
    replies = bot.replies(DM_CHANNEL_ID)
    assert len(replies) == 2
    assert all(len(r["content"]) <= 2000 for r in replies)
    assert replies[0]["sent_with"]["message_reference"]["message_id"] == msg.message_id
    assert replies[1]["sent_with"]["message_reference"] is None
    joined = " ".join(r["content"].strip() for r in replies)
    assert joined == f"assistant (offline echo) heard: {words}"


async def test_429_on_send_still_delivers_exactly_once(bot: Harness) -> None:
    bot.emu.fail_next("POST", rf"/channels/{DM_CHANNEL_ID}/messages", retry_after=0.2)
    await bot.say("are you rate limited?", channel_id=DM_CHANNEL_ID)
    posts = bot.emu.calls("POST", rf"/channels/{DM_CHANNEL_ID}/messages")
    assert [p.status for p in posts] == [429, 200]
    assert len(bot.replies(DM_CHANNEL_ID)) == 1


async def test_edit_delete_react_report_results_and_never_raise(bot: Harness) -> None:
    adapter = bot.adapter
    sent = await adapter.send(THREAD_ID, "draft")
    assert sent.ok and sent.message_id
    edited = await adapter.edit(CHANNEL_ID, sent.message_id, "final", thread_id=THREAD_ID)
    assert edited.ok and bot.emu.messages[sent.message_id]["content"] == "final"
    reacted = await adapter.react(CHANNEL_ID, sent.message_id, "👍")  # no thread given: remembered
    assert reacted.ok and bot.emu.messages[sent.message_id]["bot_reactions"] == ["👍"]
    deleted = await adapter.delete(CHANNEL_ID, sent.message_id)
    assert deleted.ok and sent.message_id not in bot.emu.messages
    again = await adapter.delete(CHANNEL_ID, sent.message_id)
    assert again.status == "failed"
    assert (await adapter.edit(CHANNEL_ID, "123", "x")).status == "failed"
    assert (await adapter.send("424242", "nowhere")).status == "no_route"
    assert (await adapter.react(CHANNEL_ID, "not-an-id", "👍")).status == "no_route"


class _SlowEcho:
    """A litellm provider that streams the offline echo word by word, slowly, like a real model."""

    provider = "slowdiscord"

    @classmethod
    def register(cls) -> None:
        from botweave.model_calls import litellm_module
        from botweave.offline_model import echo_reply
        from litellm.types.utils import GenericStreamingChunk

        from tests.echo_provider import OfflineEcho

        class SlowEcho(OfflineEcho):
            async def astreaming(self, model: str, messages: list, *args: Any, **kwargs: Any):  # type: ignore[override]
                words = echo_reply("assistant", messages).split(" ")
                for index, word in enumerate(words):
                    await asyncio.sleep(0.06)
                    last = index == len(words) - 1
                    yield GenericStreamingChunk(
                        text=word if last else word + " ",
                        is_finished=last,
                        finish_reason="stop" if last else "",
                        usage=None,
                        index=0,
                        tool_use=None,
                    )

        litellm = litellm_module()
        if not any(p.get("provider") == cls.provider for p in litellm.custom_provider_map):
            litellm.custom_provider_map.append({"provider": cls.provider, "custom_handler": SlowEcho()})


async def test_streamed_reply_is_bounded_in_edits_and_exact_at_the_end(emulator: DiscordEmulator) -> None:
    _SlowEcho.register()
    config = make_config(emulator, streaming=True, stream_edit_interval_ms=100)  # raised to Discord's 1 s
    config["agents"] = {"assistant": {"model": "slowdiscord/echo"}}
    app = App.from_config(config)
    await app.start()
    try:
        await emulator.wait_ready()
        bot = Harness(emulator, app)
        text = " ".join(f"token{i}" for i in range(32))  # 36 words at 60 ms: about 2.2 s of stream
        started = time.monotonic()
        await bot.say(text, channel_id=DM_CHANNEL_ID)
        duration = time.monotonic() - started
    finally:
        await app.stop()
    [reply] = bot.replies(DM_CHANNEL_ID)
    assert reply["content"] == f"assistant (offline echo) heard: {text}"  # exact at the end
    post = emulator.calls("POST", rf"/channels/{DM_CHANNEL_ID}/messages")[-1]
    patches = emulator.calls("PATCH", rf"/channels/{DM_CHANNEL_ID}/messages/{reply['id']}")
    assert duration > 2.0  # an unbounded driver would have edited ~35 times
    assert 2 <= len(patches) <= int(duration) + 2
    writes = [post.at] + [p.at for p in patches[:-1]]  # the final edit may follow sooner
    assert all(b - a >= 0.95 for a, b in zip(writes, writes[1:]))
    assert patches[-1].json["content"] == reply["content"]


# --- platform events ----------------------------------------------------------------------------


async def test_reactions_reach_the_reaction_hook_and_our_own_are_ignored(bot: Harness) -> None:
    bot.record_hooks("reaction_received")
    target = bot.emu.message("react to me", author=bot.emu.bob)
    await bot.deliver("MESSAGE_REACTION_ADD", bot.emu.reaction(target, bot.emu.alice, "🎉"))
    await bot.deliver("MESSAGE_REACTION_REMOVE", bot.emu.reaction(target, bot.emu.alice, "party_parrot:4242"))
    assert (await bot.adapter.react(CHANNEL_ID, target["id"], "👀")).ok  # echoed back by the gateway
    await bot.settle()
    payloads = [h.payload for h in bot.hooks]
    assert [(p["kind"], p["emoji"]) for p in payloads] == [
        ("reaction_added", "🎉"),
        ("reaction_removed", "<:party_parrot:4242>"),
    ]
    assert payloads[0]["user_id"] == bot.emu.alice["id"] and payloads[0]["message_id"] == target["id"]
    assert payloads[0]["chat_id"] == CHANNEL_ID


async def test_real_edits_reach_the_hook_and_unfurls_do_not(bot: Harness) -> None:
    bot.record_hooks("message_edited")
    original = await bot.say("see https://example.com", mentions=[])
    unfurl = dict(bot.emu.messages[original.message_id])
    unfurl["embeds"] = [{"type": "link", "url": "https://example.com", "title": "Example"}]
    await bot.emu.dispatch("MESSAGE_UPDATE", unfurl)
    edited = dict(bot.emu.messages[original.message_id], content="see https://example.org instead")
    edited["edited_timestamp"] = "2026-11-30T00:00:00+00:00"
    await bot.deliver("MESSAGE_UPDATE", edited)
    await bot.settle()
    [event] = bot.hooks
    assert event.payload["kind"] == "message_edited"
    assert event.payload["new_text"] == "see https://example.org instead"
    assert event.payload["message_id"] == original.message_id


async def test_edit_of_an_uncached_message_needs_an_edit_timestamp(bot: Harness) -> None:
    bot.record_hooks("message_edited")
    old = bot.emu.message("from before the bot started", store=False)
    await bot.emu.dispatch("MESSAGE_UPDATE", dict(old, embeds=[{"type": "link", "url": "https://x.test"}]))
    await bot.deliver("MESSAGE_UPDATE", dict(old, content="fixed typo", edited_timestamp="2026-11-30T00:00:00+00:00"))
    await bot.settle()
    assert [h.payload["new_text"] for h in bot.hooks] == ["fixed typo"]


async def test_deletions_and_bulk_deletions_reach_the_hook(bot: Harness) -> None:
    bot.record_hooks("message_deleted")
    await bot.deliver("MESSAGE_DELETE", {"id": "111", "channel_id": THREAD_ID, "guild_id": GUILD_ID})
    await bot.emu.dispatch("MESSAGE_DELETE_BULK", {"ids": ["222", "333"], "channel_id": CHANNEL_ID, "guild_id": GUILD_ID})
    await eventually(lambda: len(bot.hooks) == 3)
    got = sorted((h.payload["message_id"], h.payload["chat_id"], h.payload["thread_id"]) for h in bot.hooks)
    assert got == [("111", CHANNEL_ID, THREAD_ID), ("222", CHANNEL_ID, None), ("333", CHANNEL_ID, None)]


async def test_member_join_and_leave_reach_their_hooks(start: Callable[..., Awaitable[Harness]]) -> None:
    bot = await start(member_events=True)
    intents = discord.Intents._from_value(bot.emu.identify["intents"])  # type: ignore[index]
    assert intents.members
    bot.record_hooks("member_joined", "member_left")
    carol = user("7003", "carol")
    joined = {"guild_id": GUILD_ID, "user": carol, "roles": [], "joined_at": "2026-11-30T00:00:00+00:00",
              "deaf": False, "mute": False, "flags": 0}
    await bot.deliver("GUILD_MEMBER_ADD", joined)
    await bot.deliver("GUILD_MEMBER_REMOVE", {"guild_id": GUILD_ID, "user": carol})
    assert [(h.name, h.payload["user_id"], h.payload["chat_id"]) for h in bot.hooks] == [
        ("member_joined", "7003", GUILD_ID),
        ("member_left", "7003", GUILD_ID),
    ]


async def test_thread_creation_reaches_the_hook(bot: Harness) -> None:
    bot.record_hooks("thread_created")
    await bot.deliver("THREAD_CREATE", thread("2400", CHANNEL_ID, "release notes", "7002", newly_created=True))
    [event] = bot.hooks
    assert event.payload["thread_id"] == "2400" and event.payload["chat_id"] == CHANNEL_ID
    assert event.payload["user_id"] == "7002"


async def test_deleting_our_own_message_is_not_reported(bot: Harness) -> None:
    bot.record_hooks("message_deleted")
    sent = await bot.adapter.send(CHANNEL_ID, "a message of ours")
    assert sent.ok and sent.message_id
    await eventually(lambda: bot.adapter.client._connection._get_message(int(sent.message_id)))  # echo seen
    # deleted elsewhere (another worker, a moderator): still ours, still not an inbound event
    await bot.emu.dispatch("MESSAGE_DELETE", {"id": sent.message_id, "channel_id": CHANNEL_ID, "guild_id": GUILD_ID})
    await bot.deliver("MESSAGE_DELETE", {"id": "444", "channel_id": CHANNEL_ID, "guild_id": GUILD_ID})
    assert [h.payload["message_id"] for h in bot.hooks] == ["444"]


async def test_send_only_start_makes_no_gateway_connection(emulator: DiscordEmulator) -> None:
    from botweave.adapters.discord.adapter import DiscordAdapter
    from botweave.adapters.discord.config import DiscordConfig

    adapter = DiscordAdapter(DiscordConfig(token=TOKEN, api_base_url=emulator.api_base))
    await adapter.start(inbound=False)
    try:
        assert adapter.self_user is not None and adapter.self_user.user_id == BOT_ID
        result = await adapter.send(THREAD_ID, "from a worker", reply_to="123")
        assert result.ok
        await adapter.typing(CHANNEL_ID, thread_id=THREAD_ID)
    finally:
        await adapter.stop()
    assert emulator.identify is None and not emulator.calls("GET", "/gateway/bot")
    [posted] = emulator.bot_messages(THREAD_ID)
    assert posted["content"] == "from a worker"
    assert emulator.calls("POST", rf"/channels/{THREAD_ID}/typing")


async def test_gateway_frames_orjson_refuses_are_read_and_one_that_is_not_json_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """NaN and a lone surrogate escape are valid to Python's JSON reader but refused by orjson
    (which discord.py decodes with when installed): the adapter's client reads them anyway; a
    frame cut short costs itself, with one line, and the connection stays."""
    import json

    from tests.adapters.platforms import discord_into_a_list

    emu, adapter, received = await discord_into_a_list()
    try:
        def frame(data: dict[str, Any]) -> str:
            return json.dumps({"op": 0, "t": "MESSAGE_CREATE", "s": None, "d": data})

        odd = emu.message("odd numbers", channel_id=DM_CHANNEL_ID, store=False)
        await emu.send_raw(frame(dict(odd, flags=float("nan"), position=float("inf"))))
        await emu.send_raw(frame(emu.message("lone \udc00 surrogate", channel_id=DM_CHANNEL_ID, store=False))[:-1])
        await emu.send_raw(frame(emu.message("lone \udc00 surrogate", channel_id=DM_CHANNEL_ID, store=False)))
        await emu.dispatch("MESSAGE_CREATE", emu.message("after", channel_id=DM_CHANNEL_ID, store=False))
        await eventually(lambda: any(isinstance(i, BotMessage) and i.text == "after" for i in received))
        assert [i.text for i in received if isinstance(i, BotMessage)] == ["odd numbers", "lone \ufffd surrogate", "after"]
        skipped = [r.getMessage() for r in caplog.records if "not JSON" in r.getMessage()]
        assert len(skipped) == 1 and skipped[0].startswith("discord: skipped a gateway frame that is not JSON")
        assert emu.connected and len(emu.calls("GET", "/users/@me")) == 1
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        await adapter.stop()
        await emu.stop()
