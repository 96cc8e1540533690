"""Access, pairing, rate limits, admission and the loop guard as the pipeline applies them."""

import asyncio

from botweave import App, PlatformCapabilities

from tests.support import RecordingAdapter, message


class WideAdapter(RecordingAdapter):
    capabilities = PlatformCapabilities(max_message_length=1000, typing=True)


def app_with(bot: dict | None = None, **sections) -> tuple[App, WideAdapter]:
    app = App.from_config({"bot": bot or {}, "agents": {"assistant": {"model": "offline/echo"}}, **sections})
    adapter = WideAdapter()
    app.add_adapter(adapter)
    return app, adapter


async def test_unknown_user_is_paired_by_the_owner_in_a_dm():
    app, adapter = app_with({"unknown_user_policy": "pair", "owner_user_id": "owner"})
    first = await app.handle(message("hello?", user_id="stranger", chat_id="dm-stranger", name="Sam"))
    assert first.status == "pairing_offered"
    code_reply, owner_note = adapter.sent
    assert code_reply.chat_id == "dm-stranger" and "Your pairing code is" in code_reply.text
    code = code_reply.text.split("Your pairing code is ")[1][:8]
    assert owner_note.chat_id == "owner" and f"/pair approve {code}" in owner_note.text
    # asking again while pending costs nothing and sends nothing
    assert (await app.handle(message("hello??", user_id="stranger", chat_id="dm-stranger"))).status == "pairing_pending"
    assert len(adapter.sent) == 2
    # a non-owner cannot approve
    await app.handle(message(f"/pair approve {code}", user_id="stranger", chat_id="dm-stranger"))
    assert not await app.access.pairing.is_approved("test", "stranger")
    # the owner approves in a DM; the user is told and is answered from then on
    outcome = await app.handle(message(f"/pair approve {code}", user_id="owner", chat_id="dm-owner"))
    assert outcome.status == "command" and adapter.sent[-2].text == "Approved Sam (id stranger)."
    assert adapter.sent[-1].chat_id == "dm-stranger" and adapter.sent[-1].text == "You're approved. Say hello!"
    reply = await app.handle(message("now?", user_id="stranger", chat_id="dm-stranger"))
    assert reply.status == "replied"


async def test_pair_approval_is_not_taken_from_non_control_content():
    app, adapter = app_with({"unknown_user_policy": "pair", "owner_user_id": "owner"})
    await app.handle(message("hi", user_id="stranger", chat_id="dm-s"))
    code = adapter.sent[0].text.split("Your pairing code is ")[1][:8]
    await app.handle(message(f"/pair approve {code}", user_id="owner", chat_id="dm-o", allow_control=False))
    assert not await app.access.pairing.is_approved("test", "stranger")


async def test_denied_user_gets_no_reply_and_no_llm_call(monkeypatch):
    app, adapter = app_with({"unknown_user_policy": "deny"})
    calls = []
    monkeypatch.setattr(app.agents["assistant"], "complete", lambda *a: calls.append(a))
    assert (await app.handle(message("hi"))).status == "denied"
    assert adapter.sent == [] and calls == []


async def test_unaddressed_group_chatter_from_strangers_gets_no_pairing_code():
    app, adapter = app_with({"unknown_user_policy": "pair"})
    assert (await app.handle(message("chatting", channel_type="group"))).status == "denied"
    assert adapter.sent == []


async def test_bot_conversation_stops_at_the_budget_and_resumes_after_cooldown(monkeypatch):
    app, adapter = app_with(
        {"unknown_user_policy": "allow", "allow_bots": True, "group_policy": "respond_all",
         "bot_loop_protection": {"max_events_per_window": 3, "window_seconds": 60, "cooldown_seconds": 30}}
    )
    now = [1000.0]
    monkeypatch.setattr("time.time", lambda: now[0])
    statuses = []
    for i in range(5):
        now[0] += 1
        outcome = await app.handle(message(f"ping {i}", user_id="other-bot", is_bot=True, channel_type="group"))
        statuses.append(outcome.status)
    assert statuses == ["replied"] * 3 + ["dropped_loop_guard"] * 2
    now[0] += 31
    assert (await app.handle(message("ping again", user_id="other-bot", is_bot=True, channel_type="group"))).status == "replied"
    assert len(adapter.sent) == 4


async def test_user_rate_limit_with_one_notice_per_window(monkeypatch):
    app, adapter = app_with({"unknown_user_policy": "allow", "user_rate_limit": {"messages": 2, "per_seconds": 60}})
    statuses = [(await app.handle(message(f"m{i}"))).status for i in range(5)]
    assert statuses == ["replied", "replied", "rate_limited", "rate_limited", "rate_limited"]
    notices = [t for t in adapter.texts() if "faster than I can answer" in t]
    assert len(notices) == 1


async def test_burst_with_one_slot_and_reject_gets_one_answer_and_one_busy_notice():
    app, adapter = app_with(
        {"unknown_user_policy": "allow", "group_policy": "respond_all"},
        admission={"max_concurrent_turns": 1, "overflow": "reject"},
    )
    adapter.send_delay = 0.2
    # one group chat, several topics: separate conversations that arrive together
    burst = [message(f"q{i}", channel_type="group", chat_id="team", thread_id=f"t{i}") for i in range(4)]
    outcomes = await asyncio.gather(*(app.handle(m) for m in burst))
    assert sorted(o.status for o in outcomes) == ["busy", "busy", "busy", "replied"]
    answers = [t for t in adapter.texts() if "heard" in t]
    notices = [t for t in adapter.texts() if "busy" in t]
    assert len(answers) == 1 and len(notices) == 1


async def test_queue_overflow_answers_everyone_one_at_a_time():
    app, adapter = app_with(
        {"unknown_user_policy": "allow"}, admission={"max_concurrent_turns": 1, "overflow": "queue", "queue_depth": 10}
    )
    adapter.send_delay = 0.02
    outcomes = await asyncio.gather(*(app.handle(message(f"q{i}", user_id=f"u{i}")) for i in range(4)))
    assert [o.status for o in outcomes] == ["replied"] * 4


async def test_owner_approves_from_the_cli_against_the_shared_redis_store(redis_url, tmp_path):
    import uuid

    from tests.test_cli import botweave

    prefix = f"cli-{uuid.uuid4().hex[:8]}:"
    config_path = tmp_path / "bot.yaml"
    config_path.write_text(
        "agents: {assistant: {model: offline/echo}}\n"
        "bot: {unknown_user_policy: pair}\n"
        f"store: {{url: '{redis_url}', prefix: '{prefix}'}}\n"
    )
    app = App.from_config(config_path)
    adapter = WideAdapter()
    app.add_adapter(adapter)
    await app.start(platforms=[])
    try:
        await app.handle(message("hi", user_id="42", chat_id="42", name="Ann"))
        code = adapter.sent[0].text.split("Your pairing code is ")[1][:8]
        listed = await asyncio.to_thread(botweave, "pair", "list", "--config", str(config_path))
        assert "pending  test  42  Ann" in listed.stdout
        wrong = await asyncio.to_thread(botweave, "pair", "approve", "test", "ZZZZZZZZ", "--config", str(config_path))
        assert wrong.returncode == 1 and "no pending request has that code" in wrong.stderr
        approved = await asyncio.to_thread(botweave, "pair", "approve", "test", code, "--config", str(config_path))
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.strip() == "approved Ann (id 42) on test and made them the owner"
        assert (await app.handle(message("and now?", user_id="42", chat_id="42"))).status == "replied"
        revoked = await asyncio.to_thread(botweave, "pair", "revoke", "test", "42", "--config", str(config_path))
        assert revoked.returncode == 0
        # still the owner (first CLI approval), so still admitted
        assert (await app.handle(message("owner still?", user_id="42", chat_id="42"))).status == "replied"
    finally:
        await app.stop()


def test_cli_pairing_refuses_a_memory_store(tmp_path):
    from tests.test_cli import botweave

    config_path = tmp_path / "bot.yaml"
    config_path.write_text("agents: {assistant: {model: offline/echo}}\nstore: {url: 'memory://'}\n")
    result = botweave("pair", "list", "--config", str(config_path))
    assert result.returncode == 2 and "needs a store on disk or on a server" in result.stderr
