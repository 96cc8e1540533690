"""Outbound Bot API calls through python-telegram-bot against the emulator: formatting,
replies and topics, error mapping, 429 handling, and never sending a message twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from botweave.adapters.telegram.adapter import TelegramAdapter
from botweave.adapters.telegram.pacing import Pacer
from botweave.adapters.telegram.transport import PoolTimeout
from telegram.error import TelegramError, TimedOut

from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
)

ANN = TelegramEmulator.user(1, "Ann", "ann")


@pytest_asyncio.fixture
async def tg(telegram_emulator: TelegramEmulator) -> AsyncIterator[tuple[TelegramEmulator, TelegramAdapter]]:
    adapter = TelegramAdapter(adapter_config(telegram_emulator))
    await adapter.start()
    telegram_emulator.private_chat(ANN)
    try:
        yield telegram_emulator, adapter
    finally:
        await adapter.stop()


def test_capabilities_declare_telegram_limits():
    caps = TelegramAdapter.capabilities
    assert (caps.max_message_length, caps.length_unit, caps.markdown) == (4096, "utf16", "telegram")
    assert caps.edit_floor_for("dm") == 1100 and caps.edit_floor_for("group") == 3100
    assert caps.can_edit and caps.can_delete and caps.can_react and caps.threads and caps.typing
    assert TelegramAdapter.typing_interval_s == 4.0


async def test_markdown_is_sent_as_text_plus_entities(tg):
    emu, adapter = tg
    result = await adapter.send("1", "**Done**: see `x = 1` and [docs](https://example.org)")
    assert result.ok and result.message_id == str(emu.sent(1)[0]["message_id"])
    (call,) = emu.calls_to("sendMessage")
    assert "parse_mode" not in call.params
    assert call.params["text"] == "Done: see x = 1 and docs"
    kinds = {e["type"] for e in call.params["entities"]}
    assert kinds == {"bold", "code", "text_link"}


@pytest.mark.parametrize(
    "written",
    [
        "use <br> or &nbsp; in HTML",
        "AT&T and R&D, &amp; &lt;tag&gt; &copy; &#169;",
        r"regex \d+\.\d+, path C:\Users\ann, a lone \ and \\server\share",
        r"LaTeX \(x^2\) and \[\frac{1}{2}\] stay as written",
        "prices $5 and $x$, a || b || c, <https://example.org> <b>not bold</b>",
        "a line ending in a backslash \\\nand the next line",
    ],
)
async def test_text_outside_markdown_syntax_arrives_as_written(tg, written):
    emu, adapter = tg
    assert (await adapter.send("1", written)).ok
    (call,) = emu.calls_to("sendMessage")
    assert call.params["text"] == written
    assert emu.sent(1)[-1]["text"] == written


async def test_markdown_around_literal_text_still_renders(tg):
    emu, adapter = tg
    written = "**Use** `<br>` or &nbsp; in *HTML*:\n\n```html\n<p>a &amp; b</p>\n```\n\\*not italic\\*"
    assert (await adapter.send("1", written)).ok
    (call,) = emu.calls_to("sendMessage")
    assert call.params["text"] == "Use <br> or &nbsp; in HTML:\n\n<p>a &amp; b</p>\n*not italic*"
    kinds = [e["type"] for e in call.params["entities"]]
    assert kinds == ["bold", "code", "italic", "pre"]


async def test_rejected_formatting_falls_back_to_plain_text(tg):
    emu, adapter = tg
    emu.fail("sendMessage", description="Bad Request: can't parse entities: unsupported start tag")
    result = await adapter.send("1", "**bold** words")
    assert result.ok
    assert emu.sent_texts(1) == ["**bold** words"]
    assert "entities" not in emu.calls_to("sendMessage")[-1].params


async def test_reply_and_topic_are_set_on_the_message(tg):
    emu, adapter = tg
    forum = emu.group(-1003, "Forum", forum=True)
    topic = emu.topic(forum, ANN, "Ideas")
    question = emu.message(forum, ANN, "q?", thread_id=topic["message_id"])
    result = await adapter.send("-1003", "answer", thread_id=str(topic["message_id"]), reply_to=str(question["message_id"]))
    assert result.ok
    sent = emu.sent(-1003)[0]
    assert sent["message_thread_id"] == topic["message_id"]
    assert sent["reply_to_message"]["message_id"] == question["message_id"]


async def test_a_reply_to_a_vanished_message_is_still_delivered(tg):
    emu, adapter = tg
    result = await adapter.send("1", "answer", reply_to="999")
    assert result.ok and emu.sent_texts(1) == ["answer"]
    assert emu.calls_to("sendMessage")[0].params["reply_parameters"]["allow_sending_without_reply"] is True


async def test_full_4096_utf16_units_fit_one_message(tg):
    emu, adapter = tg
    text = "😀" * 2048  # 2048 characters, 4096 UTF-16 units
    assert (await adapter.send("1", text)).ok
    assert emu.sent_texts(1) == [text]


@pytest.mark.parametrize(
    ("code", "description", "status", "retryable"),
    [
        (403, "Forbidden: bot was blocked by the user", "failed", False),
        (400, "Bad Request: chat not found", "no_route", False),
        (400, "Bad Request: message thread not found", "no_route", False),
        (500, "Internal Server Error", "failed", True),
    ],
)
async def test_send_errors_become_results_not_exceptions(tg, code, description, status, retryable):
    emu, adapter = tg
    emu.fail("sendMessage", code=code, description=description)
    result = await adapter.send("1", "hi")
    assert result.status == status and result.message_id is None
    assert result.retryable is retryable  # only a failure on Telegram's side is worth another try
    assert len(emu.calls_to("sendMessage")) == 1  # none of these is retried
    assert emu.sent_texts(1) == []


async def test_a_send_that_may_have_been_delivered_is_not_repeated(tg):
    emu, adapter = tg
    emu.drop_after_delivery("sendMessage")
    result = await adapter.send("1", "only once")
    assert result.status == "failed" and result.retryable  # delivery decides; the adapter never repeats
    assert len(emu.calls_to("sendMessage")) == 1
    assert [m.get("text") for (chat, _), m in emu.messages.items() if chat == 1] == ["only once"]


async def test_edits_are_idempotent_so_a_dropped_edit_is_retried(tg):
    emu, adapter = tg
    sent = await adapter.send("1", "draft")
    emu.drop_after_delivery("editMessageText")
    result = await adapter.edit("1", sent.message_id, "final")
    assert result.ok  # the retry finds the text already there: "not modified" is success
    assert emu.current(1, int(sent.message_id))["text"] == "final"


async def test_edit_results(tg):
    emu, adapter = tg
    sent = await adapter.send("1", "draft")
    assert (await adapter.edit("1", sent.message_id, "**final**")).ok
    assert emu.current(1, int(sent.message_id))["text"] == "final"
    same = await adapter.edit("1", sent.message_id, "**final**")
    assert same.ok and "not modified" in same.detail
    assert (await adapter.edit("1", "999", "x")).status == "no_route"
    human = emu.message(emu.chats[1].data, ANN, "mine")
    assert (await adapter.edit("1", str(human["message_id"]), "x")).status == "failed"
    assert (await adapter.edit("1", "not-a-number", "x")).status == "no_route"


async def test_edit_falls_back_to_plain_text_too(tg):
    emu, adapter = tg
    sent = await adapter.send("1", "draft")
    emu.fail("editMessageText", description="Bad Request: can't parse entities: bad offset")
    assert (await adapter.edit("1", sent.message_id, "**now**")).ok
    assert emu.current(1, int(sent.message_id))["text"] == "**now**"


async def test_delete_results(tg):
    emu, adapter = tg
    sent = await adapter.send("1", "oops")
    assert (await adapter.delete("1", sent.message_id)).ok
    assert emu.deleted == [(1, int(sent.message_id))]
    again = await adapter.delete("1", sent.message_id)
    assert again.status == "no_route" and "not found" in again.detail


async def test_reactions(tg):
    emu, adapter = tg
    target = emu.message(emu.chats[1].data, ANN, "nice")
    key = (1, target["message_id"])
    assert (await adapter.react("1", str(target["message_id"]), "👍")).ok
    assert emu.reactions[key] == [{"type": "emoji", "emoji": "👍"}]
    assert (await adapter.react("1", str(target["message_id"]), "❤️")).ok  # variation selector tolerated
    assert emu.reactions[key] == [{"type": "emoji", "emoji": "❤"}]
    assert (await adapter.react("1", str(target["message_id"]), "custom:538")).ok
    assert emu.reactions[key] == [{"type": "custom_emoji", "custom_emoji_id": "538"}]
    calls = len(emu.calls_to("setMessageReaction"))
    parrot = await adapter.react("1", str(target["message_id"]), "🦜")
    assert parrot.status == "unsupported" and len(emu.calls_to("setMessageReaction")) == calls
    assert (await adapter.react("1", "999", "👍")).status == "no_route"


async def test_typing_goes_to_the_topic_and_never_raises(tg):
    emu, adapter = tg
    await adapter.typing("-1003", thread_id="7")
    (call,) = emu.calls_to("sendChatAction")
    assert call.params == {"chat_id": -1003, "action": "typing", "message_thread_id": 7}
    emu.fail("sendChatAction", code=403, description="Forbidden: bot was kicked from the supergroup chat")
    await adapter.typing("-1003")


async def test_429_is_honoured_and_the_message_delivered_once(tg):
    emu, adapter = tg
    emu.rate_limit("sendMessage", retry_after=1)
    started = time.monotonic()
    result = await adapter.send("1", "patience")
    assert result.ok
    assert time.monotonic() - started >= 1.0
    assert emu.sent_texts(1) == ["patience"]
    first, second = emu.calls_to("sendMessage")
    assert first.status == 429 and second.at - first.at >= 1.0


async def test_429_keeps_the_chat_in_order_and_other_chats_moving(tg):
    emu, adapter = tg
    emu.rate_limit("sendMessage", retry_after=1, chat_id=1)
    first = asyncio.create_task(adapter.send("1", "one"))
    await asyncio.sleep(0.05)  # "one" has been rate limited and is waiting
    second = asyncio.create_task(adapter.send("1", "two"))
    other = await adapter.send("2", "elsewhere")
    assert other.ok and not first.done()  # chat 2 did not wait for chat 1's cool-down
    assert all(r.ok for r in await asyncio.gather(first, second))
    assert emu.sent_texts(1) == ["one", "two"]
    typing_before = len(emu.calls_to("sendChatAction"))
    emu.rate_limit("sendMessage", retry_after=1, chat_id=1)
    pending = asyncio.create_task(adapter.send("1", "three"))
    await asyncio.sleep(0.05)
    await adapter.typing("1")  # no typing spam into a chat that is cooling down
    assert len(emu.calls_to("sendChatAction")) == typing_before
    assert (await pending).ok


async def test_a_migrated_group_is_followed(tg):
    emu, adapter = tg
    emu.fail("sendMessage", description="Bad Request: group chat was upgraded to a supergroup chat",
             parameters={"migrate_to_chat_id": -1009}, chat_id=-5)
    result = await adapter.send("-5", "hello")
    assert result.ok and emu.sent_texts(-1009) == ["hello"]
    assert (await adapter.send("-5", "again")).ok
    assert emu.sent_texts(-1009) == ["hello", "again"]


async def test_actions_before_start_report_no_route():
    adapter = TelegramAdapter({"token": "1:x"})
    assert (await adapter.send("1", "x")).status == "no_route"
    assert (await adapter.edit("1", "2", "x")).status == "no_route"
    assert (await adapter.delete("1", "2")).status == "no_route"
    assert (await adapter.react("1", "2", "👍")).status == "no_route"
    await adapter.typing("1")


async def test_group_sends_are_paced_to_the_group_budget_while_dms_are_not(tg):
    emu, adapter = tg
    adapter.outbound.pacer = Pacer(group_limit=(3, 0.6))  # Telegram's is 20 a minute; scaled down
    emu.group(-1001)
    started = time.monotonic()
    for n in range(5):
        assert (await adapter.send("-1001", f"g{n}")).ok
    group_calls = [c.at - started for c in emu.calls_to("sendMessage")]
    assert group_calls[2] < 0.15  # a burst of 3 goes out at once
    assert group_calls[3] >= 0.18 and group_calls[4] >= 0.38  # then one per 0.2 s
    before = time.monotonic()
    for n in range(5):
        assert (await adapter.send("1", f"d{n}")).ok
    assert time.monotonic() - before < 0.3
    assert emu.sent_texts(-1001) == [f"g{n}" for n in range(5)]


async def test_the_global_budget_spans_all_chats(tg):
    emu, adapter = tg
    adapter.outbound.pacer = Pacer(global_limit=(4, 0.4))
    started = time.monotonic()
    results = await asyncio.gather(*(adapter.send(str(100 + n), "hi") for n in range(8)))
    assert all(r.ok for r in results)
    assert time.monotonic() - started >= 0.35  # 4 at once, then one per 0.1 s


async def test_a_send_only_instance_never_polls(telegram_emulator):
    emu = telegram_emulator
    adapter = TelegramAdapter(adapter_config(emu, mode="webhook"))  # no webhook_url needed to send
    await adapter.start(inbound=False)
    try:
        assert adapter.self_user is not None and adapter.running
        assert (await adapter.send("1", "from a worker")).ok
        assert (await adapter.send_direct("1", "a direct message")).ok
        await asyncio.sleep(0.1)
        assert [c.method for c in emu.calls] == ["getMe", "sendMessage", "sendMessage"]
    finally:
        await adapter.stop()
    assert not adapter.running


def _raised_from(cause: Exception, error: TelegramError) -> TelegramError:
    """A PTB error chained to the transport's failure behind it, as AiohttpRequest raises them."""
    try:
        try:
            raise cause
        except Exception as inner:
            raise error from inner
    except TelegramError as chained:
        return chained


async def test_only_provably_unsent_sends_are_retried():
    unsent = _raised_from(PoolTimeout("no connection free"), TimedOut("no connection free"))
    read_timeout = _raised_from(asyncio.TimeoutError(), TimedOut())
    pacer = Pacer()
    attempts: list[str] = []

    async def flaky(error: TelegramError) -> str:
        attempts.append("try")
        if len(attempts) == 1:
            raise error
        return "sent"

    assert await pacer.call("1", lambda: flaky(unsent), idempotent=False) == "sent"
    assert len(attempts) == 2  # never reached Telegram: safe to send again
    attempts.clear()
    with pytest.raises(TimedOut):
        await pacer.call("1", lambda: flaky(read_timeout), idempotent=False)
    assert len(attempts) == 1  # Telegram may have it: a second send could duplicate
    attempts.clear()
    assert await pacer.call("1", lambda: flaky(read_timeout), idempotent=True) == "sent"
