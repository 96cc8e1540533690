"""WhatsApp end to end: Meta's signed webhooks (emulator) -> the adapter's webhook server ->
App -> offline agent -> Graph API (emulator).

Each scenario is what a WhatsApp user (or Meta) would notice: what the bot sent, to whom,
in how many messages, which requests were refused, and that nothing was answered twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from botweave import App
from botweave.adapters.whatsapp.adapter import WhatsAppAdapter
from botweave.model_calls import litellm_module

from tests import approvaldemo
from tests.emulators.telegram import png_bytes, wait_until
from tests.emulators.whatsapp import ANN, BOB, CARO, TOKEN, VERIFY_TOKEN, WhatsAppEmulator

ECHO = "assistant (offline echo) heard: "


@pytest.fixture
async def emulator() -> AsyncIterator[WhatsAppEmulator]:
    emu = await WhatsAppEmulator().start()
    yield emu
    await emu.stop()


class Bot:
    def __init__(self, app: App, emulator: WhatsAppEmulator) -> None:
        self.app = app
        self.adapter: WhatsAppAdapter = app.adapters["whatsapp"]  # type: ignore[assignment]
        self.emu = emulator
        assert self.adapter.webhook is not None and self.adapter.webhook.port
        emulator.webhook_url = f"http://127.0.0.1:{self.adapter.webhook.port}/whatsapp"

    async def texts(self, person: Any, count: int, timeout: float = 30.0) -> list[str]:
        await wait_until(lambda: len(self.emu.texts_to(person)) >= count, timeout, f"{count} message(s)")
        await self.app.drain()
        return self.emu.texts_to(person)


async def start_bot(emulator: WhatsAppEmulator, *, agent: dict[str, Any] | None = None, bot: dict[str, Any] | None = None,
                    **section: Any) -> Bot:
    await asyncio.to_thread(litellm_module)  # its import (seconds on a busy machine) is not what turns wait for
    app = App.from_config(
        {
            "bot": {"unknown_user_policy": "allow", **(bot or {})},
            "agents": {"assistant": {"model": "offline/echo", **(agent or {})}},
            "platforms": {"whatsapp": emulator.section(**section)},
        }
    )
    await app.start()
    assert "whatsapp" in app.adapters, "the WhatsApp adapter did not start"
    return Bot(app, emulator)


@pytest.fixture
async def bot(emulator: WhatsAppEmulator) -> AsyncIterator[Bot]:
    running = await start_bot(emulator)
    yield running
    await running.app.stop()


# --- the webhook: verification and signatures -------------------------------------------------


async def test_verification_answers_the_challenge_only_for_the_verify_token(bot: Bot, emulator: WhatsAppEmulator) -> None:
    assert await emulator.verify(VERIFY_TOKEN, "8391") == (200, "8391")
    assert (await emulator.verify("guess", "8391"))[0] == 403
    assert (await emulator.verify(VERIFY_TOKEN, "8391", mode="unsubscribe"))[0] == 403
    assert (await emulator.verify("", "8391"))[0] == 403


async def test_unsigned_and_forged_posts_are_refused_and_a_signed_one_is_answered(
    bot: Bot, emulator: WhatsAppEmulator
) -> None:
    message = emulator.person_message(ANN, text="transfer everything")
    forged = emulator.notification(messages=[message], contacts=[ANN.contact()])
    for signing in ("none", "forged", "tampered"):
        refused = await emulator.deliver(forged, signing=signing)
        assert refused.status in (401, 403), signing
    await asyncio.sleep(0.2)
    assert emulator.sent == [] and bot.adapter.inbound is not None and bot.adapter.inbound.stats["received"] == 0

    await emulator.says(ANN, "hello")
    assert await bot.texts(ANN, 1) == [ECHO + "hello"]


async def test_a_flood_of_forgeries_never_locks_out_metas_own_deliveries(bot: Bot, emulator: WhatsAppEmulator) -> None:
    junk = emulator.notification(messages=[emulator.person_message(ANN, text="junk")], contacts=[ANN.contact()])
    answers = [(await emulator.deliver(junk, signing="forged")).status for _ in range(25)]
    assert answers[:19] == [401] * 19 and answers[-1] == 429  # failing requests get cheaper
    _, delivered = await emulator.says(ANN, "still me")  # Meta's signed request, same address
    assert delivered.status == 200
    assert await bot.texts(ANN, 1) == [ECHO + "still me"]


async def test_a_signed_body_that_is_not_a_notification_is_skipped(bot: Bot, emulator: WhatsAppEmulator) -> None:
    for body in (b"not json", b"[1, 2]", json.dumps({"object": "whatsapp_business_account", "entry": "x"}).encode()):
        assert (await emulator.deliver(body)).status == 200
    weird = emulator.person_message(ANN, "text", content={"body": 42})  # a body of the wrong type
    assert (await emulator.deliver(emulator.notification(messages=[weird, "x"], contacts=[ANN.contact()]))).status == 200
    await emulator.says(ANN, "after the junk")
    texts = await bot.texts(ANN, 1)
    assert texts[-1] == ECHO + "after the junk"


# --- inbound ---------------------------------------------------------------------------------


async def test_statuses_never_start_a_turn(bot: Bot, emulator: WhatsAppEmulator) -> None:
    await emulator.says(ANN, "first")
    [reply] = await bot.texts(ANN, 1)
    sent_id = emulator.sent_to(ANN)[0].id
    statuses = [emulator.status(sent_id, ANN, s) for s in ("sent", "delivered", "read", "failed")]
    assert (await emulator.deliver(emulator.notification(statuses=statuses))).status == 200
    await asyncio.sleep(0.3)
    await bot.app.drain()
    assert emulator.texts_to(ANN) == [reply]
    assert bot.adapter.inbound is not None and bot.adapter.inbound.stats["status"] == 4


async def test_a_message_delivered_again_in_another_envelope_is_answered_once(
    bot: Bot, emulator: WhatsAppEmulator
) -> None:
    message = emulator.person_message(ANN, text="only once please")
    first = emulator.notification(messages=[message], contacts=[ANN.contact()])
    assert (await emulator.deliver(first)).status == 200
    await bot.texts(ANN, 1)
    # Meta re-delivers it batched with a status, and (the 2026 ids) naming Ann by her
    # business-scoped id only: another body, the same message id.
    again = dict(message)
    again.pop("from")
    batch = emulator.notification(
        messages=[again, emulator.person_message(ANN, text="and a new one")],
        contacts=[{"profile": {"name": "Ann"}, "user_id": ANN.user_id}],
        statuses=[emulator.status(emulator.sent_to(ANN)[0].id, ANN, "read")],
    )
    assert (await emulator.deliver(batch)).status == 200
    assert (await emulator.deliver(first)).status == 200  # and the first envelope once more
    texts = await bot.texts(ANN, 2)
    await asyncio.sleep(0.3)
    await bot.app.drain()
    assert emulator.texts_to(ANN) == texts == [ECHO + "only once please", ECHO + "and a new one"]
    assert all(s.to == ANN.wa_id for s in emulator.sent_to(ANN))  # one identity: her number


async def test_the_same_words_in_two_messages_are_two_turns(bot: Bot, emulator: WhatsAppEmulator) -> None:
    await emulator.says(ANN, "ping")
    await bot.texts(ANN, 1)
    await emulator.says(ANN, "ping")
    assert await bot.texts(ANN, 2) == [ECHO + "ping"] * 2


async def test_people_with_and_without_business_scoped_ids_are_answered(bot: Bot, emulator: WhatsAppEmulator) -> None:
    await emulator.says(BOB, "from before the new ids")  # no user_id anywhere
    await emulator.says(CARO, "no number shared")  # the business-scoped id only
    assert await bot.texts(BOB, 1) == [ECHO + "from before the new ids"]
    assert await bot.texts(CARO, 1) == [ECHO + "no number shared"]
    [to_bob] = emulator.sent_to(BOB)
    [to_caro] = emulator.sent_to(CARO)
    assert to_bob.body["to"] == BOB.wa_id and "recipient" not in to_bob.body
    assert to_caro.body["recipient"] == CARO.user_id and "to" not in to_caro.body


async def test_a_reply_shows_the_model_the_quoted_message(bot: Bot, emulator: WhatsAppEmulator) -> None:
    await emulator.says(ANN, "the meeting is at noon")
    [answer] = await bot.texts(ANN, 1)
    answer_id = emulator.sent_to(ANN)[0].id
    await emulator.says(ANN, "is that right?", reply_to=answer_id)  # quoting the bot's answer
    texts = await bot.texts(ANN, 2)
    assert texts[1] == ECHO + f'[In reply to: "{answer}"]\nis that right?'

    own, _ = await emulator.says(ANN, "my own words")
    await bot.texts(ANN, 3)
    await emulator.says(ANN, "see above", reply_to=own["id"])  # quoting her own message
    texts = await bot.texts(ANN, 4)
    assert texts[3] == ECHO + '[In reply to: "my own words"]\nsee above'


async def test_an_image_is_fetched_with_the_bearer_token_which_never_reaches_the_model(
    emulator: WhatsAppEmulator,
) -> None:
    running = await start_bot(emulator, agent={"vision": True})
    try:
        png = png_bytes(4, 3)
        message = emulator.media_message(ANN, "image", png, "image/png", caption="what is this?")
        await emulator.deliver(emulator.notification(messages=[message], contacts=[ANN.contact()]))
        [reply] = await running.texts(ANN, 1)
        assert "what is this?" in reply
        media_id = message["image"]["id"]
        assert emulator.media_fetches == [(media_id, True)] and emulator.unauthorised == []
        assert TOKEN not in reply and "/media/" not in reply
    finally:
        await running.app.stop()


async def test_a_file_over_the_media_limit_is_refused_before_its_bytes_are_fetched(emulator: WhatsAppEmulator) -> None:
    app = App.from_config(
        {
            "bot": {"unknown_user_policy": "allow"},
            "media": {"max_bytes": 1000},
            "agents": {"assistant": {"model": "offline/echo"}},
            "platforms": {"whatsapp": emulator.section()},
        }
    )
    await app.start()
    running = Bot(app, emulator)
    try:
        message = emulator.media_message(ANN, "document", b"x" * 5000, "text/plain", caption="read this",
                                         filename="big.txt")
        await emulator.deliver(emulator.notification(messages=[message], contacts=[ANN.contact()]))
        texts = await running.texts(ANN, 2)
        assert any("too large" in t or "limit" in t for t in texts), texts
        assert any("read this" in t for t in texts)  # the rest of the message is still answered
        assert emulator.media_fetches == []
    finally:
        await app.stop()


async def test_a_reaction_is_an_event_not_a_turn(bot: Bot, emulator: WhatsAppEmulator) -> None:
    seen: list[Any] = []
    bot.app.hooks.register("reaction_received", lambda event: seen.append(event))
    await emulator.says(ANN, "hi")
    await bot.texts(ANN, 1)
    reaction = emulator.person_message(ANN, "reaction", content={"message_id": emulator.sent_to(ANN)[0].id, "emoji": "👍"})
    await emulator.deliver(emulator.notification(messages=[reaction], contacts=[ANN.contact()]))
    await wait_until(lambda: seen, what="the reaction hook")
    await bot.app.drain()
    assert len(emulator.texts_to(ANN)) == 1


async def test_the_message_is_marked_read_and_typing_hangs_on_it(bot: Bot, emulator: WhatsAppEmulator) -> None:
    message, _ = await emulator.says(ANN, "hello")
    await bot.texts(ANN, 1)
    await wait_until(lambda: message["id"] in emulator.read, what="the read receipt")
    await bot.adapter.typing(str(ANN.wa_id))
    assert emulator.typing and set(emulator.typing) == {message["id"]}  # (a slow first turn showed it already)


# --- outbound --------------------------------------------------------------------------------


async def test_a_long_answer_goes_out_in_order_in_messages_of_at_most_4096(bot: Bot, emulator: WhatsAppEmulator) -> None:
    words = " ".join(f"w{i:04d}" for i in range(1300))  # ~7,800 characters
    await emulator.says(ANN, words)
    texts = await bot.texts(ANN, 2)
    assert len(texts) == 2 and all(len(t) <= 4096 for t in texts)
    assert " ".join(texts).split() == (ECHO + words).split()


async def test_a_streaming_agent_sends_its_final_text_once(emulator: WhatsAppEmulator) -> None:
    running = await start_bot(emulator, bot={"streaming": True})
    try:
        await emulator.says(ANN, "stream this")
        assert await running.texts(ANN, 1) == [ECHO + "stream this"]
        await asyncio.sleep(0.3)
        assert len(emulator.sent_to(ANN)) == 1
    finally:
        await running.app.stop()


async def test_markdown_emphasis_is_written_the_whatsapp_way(bot: Bot, emulator: WhatsAppEmulator) -> None:
    await emulator.says(ANN, "hi")
    await bot.texts(ANN, 1)
    sent = await bot.adapter.send(str(ANN.wa_id), "# Plan\n**bold** and ~~gone~~, `**code**` and [docs](https://x.test)")
    assert sent.ok and sent.message_id
    assert emulator.message(sent.message_id).text == (  # type: ignore[union-attr]
        "*Plan*\n*bold* and ~gone~, `**code**` and docs (https://x.test)"
    )


async def test_buttons_are_reply_buttons_up_to_three_and_a_list_beyond(bot: Bot, emulator: WhatsAppEmulator) -> None:
    from botweave.types import Button

    await emulator.says(ANN, "hi")
    await bot.texts(ANN, 1)
    chat = str(ANN.wa_id)
    three = [Button("Yes", "a1"), Button("No", "a2"), Button("A rather long label indeed", "a3")]
    sent = await bot.adapter.send(chat, "Pick one", buttons=three)
    assert sent.ok
    interactive = emulator.message(sent.message_id).body["interactive"]  # type: ignore[arg-type,union-attr]
    assert interactive["type"] == "button"
    assert [b["reply"]["id"] for b in interactive["action"]["buttons"]] == ["a1", "a2", "a3"]
    assert interactive["action"]["buttons"][2]["reply"]["title"] == "A rather long label…"
    five = [Button(f"Option {i}", f"o{i}") for i in range(5)]
    listed = await bot.adapter.send(chat, "Pick", buttons=five)
    assert listed.ok
    menu = emulator.message(listed.message_id).body["interactive"]  # type: ignore[arg-type,union-attr]
    assert menu["type"] == "list" and [r["id"] for r in menu["action"]["sections"][0]["rows"]] == [
        f"o{i}" for i in range(5)
    ]


async def test_an_approval_is_decided_with_reply_buttons(emulator: WhatsAppEmulator) -> None:
    approvaldemo.TRANSFERS.clear()
    running = await start_bot(
        emulator, agent={"tools": [{"python": "tests.approvaldemo:transfer", "approval": "required"}]}
    )
    try:
        call = "call transfer " + json.dumps({"amount": 3, "to": "Bob", "api_key": "sk-live-1234567890"})
        await emulator.says(ANN, call)
        await wait_until(lambda: any(s.type == "interactive" for s in emulator.sent_to(ANN)), 30, "the approval request")
        request = next(s for s in emulator.sent_to(ANN) if s.type == "interactive")
        assert "sk-live-1234567890" not in json.dumps(request.body)
        buttons = request.body["interactive"]["action"]["buttons"]
        assert [b["reply"]["title"] for b in buttons] == ["Approve", "Deny"]
        press = emulator.person_message(
            ANN, "interactive", reply_to=request.id,
            content={"type": "button_reply", "button_reply": {"id": buttons[0]["reply"]["id"], "title": "Approve"}},
        )
        assert (await emulator.deliver(emulator.notification(messages=[press], contacts=[ANN.contact()]))).status == 200
        await wait_until(lambda: approvaldemo.TRANSFERS, 10, "the transfer")
        await wait_until(lambda: any("transfer returned" in t for t in emulator.texts_to(ANN)), 10, "the answer")
        assert approvaldemo.TRANSFERS == [{"amount": 3, "to": "Bob"}]
        texts = emulator.texts_to(ANN)
        assert texts.count("✅ Approved by Ann.") == 1  # the decision, as no edit can show it
        assert "Approved." not in texts  # the press's own answer would only say it twice
        again = emulator.person_message(  # the button pressed again, long after: told, nothing runs
            ANN, "interactive", reply_to=request.id,
            content={"type": "button_reply", "button_reply": {"id": buttons[1]["reply"]["id"], "title": "Deny"}},
        )
        await emulator.deliver(emulator.notification(messages=[again], contacts=[ANN.contact()]))
        await asyncio.sleep(0.5)
        await running.app.drain()
        assert approvaldemo.TRANSFERS == [{"amount": 3, "to": "Bob"}]
    finally:
        approvaldemo.TRANSFERS.clear()
        await running.app.stop()


# --- the 24-hour window ----------------------------------------------------------------------


async def test_outside_the_window_a_send_fails_with_a_clear_error(bot: Bot, emulator: WhatsAppEmulator) -> None:
    await emulator.says(ANN, "hi")
    await bot.texts(ANN, 1)
    emulator.age(ANN, 30)
    await bot.adapter.memory.person_wrote(str(ANN.wa_id), "old", emulator.last_inbound[str(ANN.wa_id)])
    result = await bot.adapter.send(str(ANN.wa_id), "your daily summary")
    assert result.status == "failed"
    assert "24-hour" in result.detail and "platforms.whatsapp.template" in result.detail
    assert emulator.texts_to(ANN) == [ECHO + "hi"]  # nothing else went out
    stranger = await bot.adapter.send(str(BOB.wa_id), "hello?")  # never wrote at all
    assert stranger.status == "failed" and "template" in stranger.detail


async def test_outside_the_window_a_send_uses_the_template(emulator: WhatsAppEmulator) -> None:
    running = await start_bot(emulator, template={"name": "daily_update", "language": "en_GB"})
    try:
        result = await running.adapter.send(str(BOB.wa_id), "Stand-up:\n- planner done\n- critic   pending")
        assert result.ok
        [sent] = emulator.sent_to(BOB)
        assert sent.type == "template"
        template = sent.body["template"]
        assert template["name"] == "daily_update" and template["language"] == {"code": "en_GB"}
        assert template["components"][0]["parameters"] == [
            {"type": "text", "text": "Stand-up: - planner done - critic pending"}
        ]
    finally:
        await running.app.stop()


async def test_metas_own_window_refusal_reads_as_the_window(bot: Bot, emulator: WhatsAppEmulator) -> None:
    await emulator.says(ANN, "hi")
    await bot.texts(ANN, 1)
    emulator.age(ANN, 25)  # Meta's clock says the window closed; ours has not noticed
    result = await bot.adapter.send(str(ANN.wa_id), "late")
    assert result.status == "failed" and "24-hour" in result.detail
    assert emulator.refused and emulator.refused[-1]["error_code"] == 131047


# --- the browser UI's Watch view ---------------------------------------------------------------


async def test_a_whatsapp_chat_is_listed_and_watched_live_from_the_gateway(start_app, emulator: WhatsAppEmulator) -> None:
    from tests.gateway.support import TOKEN_CONFIG, client, collect

    app = await start_app({
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"whatsapp": emulator.section()},
        "gateway": {"listen": "127.0.0.1:0", "tokens": TOKEN_CONFIG},
    })
    running = Bot(app, emulator)
    conversation = f"whatsapp:dm:{ANN.wa_id}"
    await emulator.says(ANN, "first words")
    await running.texts(ANN, 1)
    async with client(app, "eve") as eve:  # read scope is all the Watch view needs
        listed = (await eve.call("conversations.list", {"platform": "whatsapp"}))["conversations"]
        assert [c["conversation"] for c in listed] == [conversation]
        assert listed[0]["platform"] == "whatsapp"
        await eve.subscribe(conversation)
        await emulator.says(ANN, "watched live")
        events = await collect(eve, lambda seen: sum(e.event == "message" for e in seen) >= 2)
    messages = [(e.data["author"]["kind"], e.data["text"]) for e in events if e.event == "message"]
    assert messages[:2] == [("user", "watched live"), ("bot", ECHO + "watched live")]


# --- delivery ----------------------------------------------------------------------------------


async def test_a_send_whose_answer_was_lost_is_found_by_its_status_not_sent_twice(
    bot: Bot, emulator: WhatsAppEmulator
) -> None:
    emulator.report_statuses = True  # Meta reports `sent` with the key the send carried
    emulator.hang_up_sends = 1  # the reply goes out, its answer never comes back
    await emulator.says(ANN, "answer me once")
    await bot.texts(ANN, 1)
    await asyncio.sleep(2.5)  # beyond delivery's resend pauses
    await bot.app.drain()
    assert emulator.texts_to(ANN) == [ECHO + "answer me once"]
    [sent] = emulator.sent_to(ANN)
    assert sent.body["biz_opaque_callback_data"].startswith("out:whatsapp:")


async def test_without_a_status_the_lost_send_is_sent_again_at_least_once(bot: Bot, emulator: WhatsAppEmulator) -> None:
    emulator.hang_up_sends = 1  # and no status comes: nothing tells the bot it went out
    await emulator.says(ANN, "answer me")
    await bot.texts(ANN, 2)
    assert emulator.texts_to(ANN) == [ECHO + "answer me"] * 2  # shown twice, never lost


# --- voice notes and documents, read for a real model ------------------------------------------


async def test_a_voice_note_and_a_document_reach_the_model_as_text(emulator: WhatsAppEmulator, openai_emulator) -> None:
    from tests.emulators.openai import DEFAULT_TRANSCRIPT

    llm = openai_emulator
    model = {"model": "openai/gpt-4o", "api_base": llm.base_url, "api_key": "sk-loopback"}
    app = App.from_config({
        "bot": {"unknown_user_policy": "allow"},
        "media": {"transcription": {"model": "openai/whisper-1", "api_base": llm.base_url, "api_key": "sk-loopback"}},
        "agents": {"assistant": model},
        "platforms": {"whatsapp": emulator.section()},
    })
    await app.start()
    running = Bot(app, emulator)
    try:
        ogg = b"OggS" + bytes(200)
        voice = emulator.media_message(ANN, "audio", ogg, "audio/ogg; codecs=opus", voice=True)
        await emulator.deliver(emulator.notification(messages=[voice], contacts=[ANN.contact()]))
        await running.texts(ANN, 1)
        (sent,) = llm.transcriptions
        assert sent.data == ogg
        assert llm.last_user_text(0) == f"[voice] {DEFAULT_TRANSCRIPT}"

        report = b"Quarterly numbers: revenue grew 42 percent."
        document = emulator.media_message(ANN, "document", report, "text/plain", caption="summarise",
                                          filename="q3.txt")
        await emulator.deliver(emulator.notification(messages=[document], contacts=[ANN.contact()]))
        await running.texts(ANN, 2)
        assert "revenue grew 42 percent" in llm.last_user_text(1) and "summarise" in llm.last_user_text(1)
        assert [authorised for _, authorised in emulator.media_fetches] == [True, True]
        for request in llm.requests:  # neither the token nor the download address reaches the model
            assert TOKEN not in str(request) and "/media/" not in str(request)
    finally:
        await app.stop()


async def test_metas_window_refusal_falls_back_to_the_template(emulator: WhatsAppEmulator) -> None:
    running = await start_bot(emulator, template={"name": "daily_update"})
    try:
        await emulator.says(ANN, "hi")
        await running.texts(ANN, 1)
        emulator.age(ANN, 25)  # Meta's clock says the window closed; ours has not noticed
        result = await running.adapter.send(str(ANN.wa_id), "the update")
        assert result.ok
        assert [s.type for s in emulator.sent_to(ANN)] == ["text", "template"]
        assert emulator.sent_to(ANN)[-1].text == "the update"
    finally:
        await running.app.stop()


async def test_a_slow_answer_shows_the_typing_indicator_on_the_persons_message(emulator: WhatsAppEmulator) -> None:
    from tests.emulators.openai import OpenAIEmulator

    llm = OpenAIEmulator("the considered answer", delay=2.0)
    await llm.start()
    running = await start_bot(emulator, agent={"model": "openai/gpt-4o", "api_base": llm.base_url, "api_key": "sk-x"})
    try:
        message, _ = await emulator.says(ANN, "take your time")
        assert await running.texts(ANN, 1) == ["the considered answer"]
        assert set(emulator.typing) == {message["id"]}  # shown once the turn outlasted typing.delay_ms
        assert message["id"] in emulator.read
    finally:
        await running.app.stop()
        await llm.stop()


async def test_a_notification_for_another_number_of_the_app_is_not_answered(bot: Bot, emulator: WhatsAppEmulator) -> None:
    body = emulator.notification(messages=[emulator.person_message(ANN, text="for the other number")],
                                 contacts=[ANN.contact()])
    body["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = "999999999"
    assert (await emulator.deliver(body)).status == 200
    await emulator.says(ANN, "for this one")
    assert await bot.texts(ANN, 1) == [ECHO + "for this one"]
