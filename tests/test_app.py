"""The pipeline end to end through the runtime, with the offline model and a recording adapter."""

import asyncio
import time

import pytest
from botweave import App, PlatformEvent, QuotedRef
from botweave.runtime.turns import APOLOGY, MISCONFIGURED_APOLOGY

from tests.support import RecordingAdapter, config, message


async def make_app(adapter: RecordingAdapter | None = None, **bot) -> tuple[App, RecordingAdapter]:
    app = App.from_config(config(**bot))
    adapter = adapter or RecordingAdapter()
    app.add_adapter(adapter)
    await app.start(platforms=[])
    return app, adapter


async def test_dm_gets_an_answer_that_shows_what_the_agent_heard():
    app, adapter = await make_app()
    outcome = await app.handle(message("hello there", message_id="7"))
    assert outcome.status == "replied"
    assert adapter.texts() == ["assistant (offline echo) heard: hello there"]
    assert adapter.sent[0].reply_to == "7"
    assert outcome.message_ids == [adapter.sent[0].message_id]


async def test_quoted_context_reaches_the_agent_as_prompt_text():
    app, adapter = await make_app()
    await app.handle(message("and this?", quoted=QuotedRef("3", "the  earlier\nanswer", "bot")))
    assert adapter.texts() == ['assistant (offline echo) heard: [In reply to: "the earlier answer"]\nand this?']


async def test_group_turns_are_attributed_and_history_is_kept():
    app, adapter = await make_app(group_policy="respond_all")
    await app.handle(message("first", channel_type="group", name="Ann"))
    await app.handle(message("second", channel_type="group", name="Bob", user_id="u2"))
    assert adapter.texts()[-1] == "assistant (offline echo) heard: [Bob] second"
    history = await app.history.load("test:c1", 50)
    assert [h["content"] for h in history if h["role"] == "user"] == ["[Ann] first", "[Bob] second"]


async def test_the_same_event_twice_produces_one_turn():
    app, adapter = await make_app()
    first = message("hi", message_id="dup-1")
    again = message("hi", message_id="dup-1")
    outcomes = await asyncio.gather(app.handle(first), app.handle(again))
    assert sorted(o.status for o in outcomes) == ["duplicate", "replied"]
    assert len(adapter.sent) == 1
    event = PlatformEvent("reaction_added", "test", "c1", "u1", message_id="1", emoji="👍", event_id="e1")
    seen = []
    app.hooks.register("reaction_received", lambda e: seen.append(e.payload["emoji"]))
    await app.handle(event)
    await app.handle(event)
    assert seen == ["👍"]


async def _timed_turns(app: App, adapter: RecordingAdapter, messages) -> dict[str, tuple[float, float]]:
    spans: dict[str, tuple[float, float]] = {}
    starts: dict[str, float] = {}
    app.hooks.register("message_received", lambda e: starts.__setitem__(e.message.message_id, time.monotonic()))
    app.hooks.register(
        "message_sent", lambda e: spans.__setitem__(e.message.message_id, (starts[e.message.message_id], time.monotonic()))
    )
    for msg in messages:
        await app.submit(msg)
    await app.drain()
    return spans


async def test_two_messages_of_one_conversation_never_overlap_and_keep_order():
    app, adapter = await make_app(RecordingAdapter(send_delay=0.1))
    spans = await _timed_turns(app, adapter, [message("one", message_id="a"), message("two", message_id="b")])
    assert spans["a"][1] <= spans["b"][0]  # b started only after a's reply was sent
    assert [s.text.rsplit(" ", 1)[-1] for s in adapter.sent] == ["one", "two"]


async def test_two_conversations_run_concurrently():
    app, adapter = await make_app(RecordingAdapter(send_delay=0.2))
    spans = await _timed_turns(
        app, adapter, [message("one", message_id="a", chat_id="c1", user_id="u1"), message("two", message_id="b", chat_id="c2", user_id="u2")]
    )
    (a_start, a_end), (b_start, b_end) = spans["a"], spans["b"]
    assert b_start < a_end and a_start < b_end  # the intervals overlap


async def test_many_messages_in_one_conversation_are_answered_in_arrival_order():
    app, adapter = await make_app(RecordingAdapter(send_delay=0.001))
    for i in range(30):
        await app.submit(message(f"n{i}", message_id=f"id{i}"))
    await app.drain()
    assert [t.rsplit(" ", 1)[-1] for t in adapter.texts()] == [f"n{i}" for i in range(30)]


async def test_new_resets_the_conversation_and_status_reports():
    app, adapter = await make_app()
    await app.handle(message("remember me"))
    assert await app.history.load("test:dm:u1", 50)
    outcome = await app.handle(message("/new"))
    assert outcome.status == "command"
    assert await app.history.load("test:dm:u1", 50) == []
    await app.handle(message("/status"))
    status = "\n".join(adapter.texts()[-2:])  # the recording platform's messages hold 100 characters
    assert "agent: assistant\nmodel: offline/echo\nplatform: test\nuptime:" in status
    assert "\ncontext: " in status and "tokens (not summarised)" in status
    help_reply = await app.handle(message("/help"))
    assert "/new — start a new conversation" in help_reply.delivery.text


async def test_start_answers_like_help_and_unknown_commands_say_so():
    app, adapter = await make_app()
    start = await app.handle(message("/start"))
    assert start.status == "command" and start.delivery.text == (await app.handle(message("/help"))).delivery.text
    unknown = await app.handle(message("/frobnicate now"))
    assert unknown.status == "command"
    assert adapter.texts()[-1] == "Unknown command /frobnicate. Send /help to see what I understand."
    assert await app.history.load("test:dm:u1", 50) == []  # never handed to the model as text


async def test_in_groups_an_unknown_command_answers_only_when_meant_for_us():
    app, adapter = await make_app(group_policy="respond_all")
    bare = await app.handle(message("/othercommand", channel_type="group"))
    assert bare.status == "ignored" and adapter.texts() == []  # maybe another bot's command
    addressed = await app.handle(message("/othercommand@testbot", channel_type="group"))
    assert addressed.status == "command" and adapter.texts()[-1].startswith("Unknown command /othercommand.")


async def test_commands_from_non_control_content_are_not_executed():
    app, adapter = await make_app()
    await app.handle(message("remember me"))
    outcome = await app.handle(message("/new", allow_control=False))
    assert outcome.status == "replied"  # the agent saw it as text
    assert len(await app.history.load("test:dm:u1", 50)) == 4


async def test_command_addressed_to_another_bot_is_ignored():
    app, adapter = await make_app()
    assert (await app.handle(message("/status@otherbot"))).status == "dropped_other_bot_command"
    assert (await app.handle(message("/status@TestBot"))).status == "command"


async def test_own_and_bot_messages_are_dropped_before_any_agent_runs():
    app, adapter = await make_app()
    assert (await app.handle(message("echo", user_id="bot-1", is_bot=True))).status == "dropped_self"
    assert (await app.handle(message("hi", user_id="other-bot", is_bot=True))).status == "dropped_bot"
    assert adapter.sent == []


async def test_access_allowlist_and_deny_policy():
    app, adapter = await make_app(unknown_user_policy="deny", allowed_users=["u-friend"])
    assert (await app.handle(message("hi", user_id="stranger"))).status == "denied"
    assert (await app.handle(message("hi", user_id="u-friend"))).status == "replied"
    assert len(adapter.sent) == 1


async def test_allowed_chats_admit_everyone_in_them_and_silence_other_groups():
    app, adapter = await make_app(unknown_user_policy="deny", allowed_chats=["team"], group_policy="respond_all")
    assert (await app.handle(message("hi", chat_id="team", channel_type="group"))).status == "replied"
    assert (await app.handle(message("hi", chat_id="other", channel_type="group"))).status == "denied"


@pytest.mark.parametrize(
    ("policy", "metadata", "text", "status"),
    [
        ("mention_only", {}, "hello all", "ignored"),
        ("mention_only", {"mentions_bot": True}, "hey bot", "replied"),
        ("mention_only", {"reply_to_bot": True}, "re: that", "replied"),
        ("mention_only", {}, "/help", "command"),
        ("command_only", {"mentions_bot": True}, "hey bot", "ignored"),
        ("command_only", {}, "/help", "command"),
        ("respond_all", {}, "anything", "replied"),
        ("observe", {"mentions_bot": True}, "noted", "observed"),
    ],
)
async def test_group_gating(policy, metadata, text, status):
    app, adapter = await make_app(group_policy=policy)
    outcome = await app.handle(message(text, channel_type="group", metadata=metadata))
    assert outcome.status == status
    assert bool(adapter.sent) is (status in ("replied", "command"))


async def test_observe_records_without_replying():
    app, adapter = await make_app(group_policy="observe")
    await app.handle(message("for the record", channel_type="group"))
    assert adapter.sent == []
    assert await app.history.load("test:c1", 50) == [{"role": "user", "content": "[Ann] for the record"}]


async def test_hooks_can_drop_and_rewrite_inbound_and_outbound():
    app, adapter = await make_app()

    def drop_secret(event):
        return "secret" not in event.message.text

    def sign(event):
        event.text = event.text + " -- bot"

    app.hooks.register("message_received", drop_secret)
    app.hooks.register("message_sending", sign)
    assert (await app.handle(message("a secret"))).status == "hook_denied"
    await app.handle(message("public"))
    assert adapter.texts() == ["assistant (offline echo) heard: public -- bot"]
    app.hooks.register("message_sending", lambda e: False, priority=1)
    assert (await app.handle(message("cancel me"))).status == "cancelled"
    assert len(adapter.sent) == 1


async def test_long_replies_are_chunked_and_every_id_kept():
    app, adapter = await make_app()
    outcome = await app.handle(message("word " * 60, message_id="long"))
    assert len(adapter.sent) > 1 and all(len(t) <= 100 for t in adapter.texts())
    assert outcome.message_ids == [s.message_id for s in adapter.sent]
    assert adapter.sent[0].reply_to == "long" and all(s.reply_to is None for s in adapter.sent[1:])


async def test_footer_goes_on_the_final_reply_only():
    app, adapter = await make_app(footer=True)
    await app.handle(message("hi"))
    text = adapter.texts()[0]
    assert text.startswith("assistant (offline echo) heard: hi\n\n— offline/echo · ")
    assert text.endswith("s")


async def test_streaming_edits_one_message_into_the_final_reply():
    app, adapter = await make_app(streaming=True, stream_edit_interval_ms=0)
    outcome = await app.handle(message("stream this please"))
    assert len(adapter.sent) == 1
    assert adapter.edits, "a streamed reply is edited in place"
    assert adapter.edits[-1][1] == "assistant (offline echo) heard: stream this please"
    assert outcome.message_ids == [adapter.sent[0].message_id]


async def test_silence_token_sends_nothing(monkeypatch):
    app, adapter = await make_app(allow_silence=True, streaming=True, stream_edit_interval_ms=0)

    async def silent_stream(history, turn, tools=None, **_):
        for part in ("NO_", "REPLY"):
            yield part

    monkeypatch.setattr(app.agents["assistant"], "stream", silent_stream)
    outcome = await app.handle(message("anything"))
    assert outcome.status == "silent"
    assert adapter.sent == [] and adapter.edits == []


async def test_llm_failure_becomes_an_apology_and_the_bot_keeps_working(caplog):
    app = App.from_config(
        {
            "bot": {"unknown_user_policy": "allow"},
            "agents": {"broken": {"model": "openai/gpt-4o", "api_base": "http://127.0.0.1:9/v1", "api_key": "sk-test-secret", "timeout_seconds": 5}},
        }
    )
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    outcome = await app.handle(message("hi"))
    assert outcome.status == "agent_error"
    assert adapter.texts() == [APOLOGY]
    assert "agent broken (openai/gpt-4o) failed" in caplog.text
    assert "sk-test-secret" not in caplog.text


@pytest.mark.parametrize("model", ["openai/gpt-emu", "anthropic/claude-3-5-haiku-latest"])
async def test_a_model_without_its_api_key_says_the_bot_is_misconfigured(caplog, monkeypatch, model):
    """No key (botweave's own OpenAI client, and litellm for another provider): trying again
    will never help, so the person is told the bot is misconfigured and the log names the
    missing key."""
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    app = App.from_config({"bot": {"unknown_user_policy": "allow"}, "agents": {"a": {"model": model}}})
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    outcome = await app.handle(message("hi"))
    assert outcome.status == "agent_error"
    assert "".join(adapter.texts()) == MISCONFIGURED_APOLOGY
    assert "try again" not in MISCONFIGURED_APOLOGY and "misconfigured" in MISCONFIGURED_APOLOGY
    assert f"agent a ({model}) failed: AuthenticationError" in caplog.text
    assert "API_KEY" in caplog.text or "API Key" in caplog.text


async def test_a_refused_key_says_the_bot_is_misconfigured(caplog, openai_emulator):
    openai_emulator.queue_error(401, "Incorrect API key provided")
    app = App.from_config({
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"a": {"model": "openai/gpt-emu", "api_base": openai_emulator.base_url, "api_key": "sk-wrong-one"}},
    })
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    await app.handle(message("hi"))
    assert "".join(adapter.texts()) == MISCONFIGURED_APOLOGY
    assert "Incorrect API key provided" in caplog.text and "sk-wrong-one" not in caplog.text


async def test_typing_is_shown_while_a_turn_runs():
    app, adapter = await make_app(RecordingAdapter(send_delay=0.12), typing={"mode": "instant"})
    await app.handle(message("hi"))
    assert adapter.typings >= 2


async def test_targets_resolve_and_unknown_ones_report_no_route():
    app, adapter = await make_app()
    result = await app.send_to("test:c9:t1", "hello")
    assert result.ok and adapter.sent[-1].chat_id == "c9" and adapter.sent[-1].thread_id == "t1"
    assert (await app.send_to("nowhere:c1", "x")).status == "no_route"
    assert (await app.send_to("test", "x")).status == "no_route"  # no home chat configured



PLUGGED: list[App] = []


def _plugin(app: App) -> None:
    PLUGGED.append(app)


def test_from_config_makes_the_class_it_is_called_on_and_its_plugins_get_that_app():
    """The builder makes the App from the class `from_config` was called on, so a program's
    subclass is what it gets back, and what a plugin's setup is handed."""

    class MyApp(App):
        pass

    PLUGGED.clear()
    app = MyApp.from_config({**config(), "plugins": ["tests.test_app:_plugin"]})
    assert type(app) is MyApp
    assert PLUGGED == [app]
    assert app.plugins[-1] == "plugins.0 (tests.test_app:_plugin)"  # after any installed ones
