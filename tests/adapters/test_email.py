"""End to end: IMAP + SMTP emulators ⇄ imap-tools / aiosmtplib ⇄ EmailAdapter ⇄ App ⇄ a model
on the OpenAI emulator, which records every request, so "no model call" is counted, not assumed.

A thread of mail is one conversation: a follow-up sees the thread's history, a new thread from
the same person does not. Every mail taken is flagged on the server, so no restart answers it
twice, and mail that arrived while the bot was down is answered once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from botweave import App
from botweave.adapters.email.adapter import EmailAdapter
from botweave.adapters.email.config import EmailConfig
from botweave.config import ConfigError

from tests.emulators.mail import MailEmulator, text_of
from tests.emulators.openai import OpenAIEmulator
from tests.emulators.telegram import wait_until

ANN = "ann@example.com"
BOB = "bob@example.org"

Runner = Callable[..., Any]


@pytest_asyncio.fixture
async def mail() -> AsyncIterator[MailEmulator]:
    emu = MailEmulator()
    await emu.start()
    try:
        yield emu
    finally:
        await emu.stop()


@pytest_asyncio.fixture
async def run_app(mail: MailEmulator, llm: OpenAIEmulator, start_app: Any, tmp_path: Any) -> Runner:
    """Start an App whose only platform is email; its state in one SQLite file, so a second
    App started by the same test is the bot after a restart."""

    async def start(gateway: dict[str, Any] | None = None, **section: Any) -> App:
        config: dict[str, Any] = {
            "agents": {"assistant": {"model": "openai/test-model", "api_base": llm.base_url, "api_key": "k"}},
            "platforms": {"email": {"allowed_senders": [ANN, "@example.org"], **mail.config(), **section}},
            "store": {"url": f"sqlite:///{tmp_path}/state.db"},
        }
        if gateway is not None:
            config["gateway"] = gateway
        app = await start_app(config)
        assert isinstance(app.adapters["email"], EmailAdapter)
        return app

    return start


async def replies(mail: MailEmulator, to: str, count: int) -> list[Any]:
    await wait_until(lambda: len(mail.replies_to(to)) >= count, timeout=20, what=f"{count} replies to {to}")
    return mail.replies_to(to)


def user_texts(llm: OpenAIEmulator, index: int = -1) -> list[str]:
    return [str(m.get("content")) for m in llm.messages(index) if m.get("role") == "user"]


async def test_a_reply_threads_under_the_mail_and_a_follow_up_sees_the_thread(run_app, mail, llm):
    await run_app()
    _, first = mail.person_writes(ANN, "What is the capital of Peru?", subject="Geography", name="Ann")
    (reply,) = await replies(mail, ANN, 1)
    assert reply["Subject"] == "Re: Geography"
    assert str(reply["In-Reply-To"]).strip("<>") == first
    assert first in str(reply["References"])
    assert str(reply["From"]) == "botweave <bot@example.test>"
    assert text_of(reply) == llm.reply
    bot_id = str(reply["Message-ID"]).strip().strip("<>")

    mail.person_writes(ANN, "And of Chile?\n\nOn Monday, botweave wrote:\n> " + llm.reply, subject="Re: Geography",
                       in_reply_to=bot_id, references=(first, bot_id))
    second = (await replies(mail, ANN, 2))[1]
    assert second["Subject"] == "Re: Geography"
    assert str(second["In-Reply-To"]).strip().strip("<>") != bot_id  # it answers Ann's mail, not its own
    assert [first, bot_id] == [r.strip("<>") for r in str(second["References"]).split()][:2]
    assert user_texts(llm) == ["What is the capital of Peru?", "And of Chile?"]  # quoted lines dropped

    mail.person_writes(ANN, "A new question", subject="Cooking")
    third = (await replies(mail, ANN, 3))[2]
    assert third["Subject"] == "Re: Cooking" and "References" in third
    assert user_texts(llm) == ["A new question"]  # a new thread starts afresh
    assert len(llm.requests) == 3


async def test_no_mail_is_answered_twice_across_restarts_and_mail_sent_while_down_is_answered_once(
    run_app, mail, llm, start_app
):
    backlog_uid, _ = mail.person_writes(ANN, "written before the bot ever started")
    app = await run_app()
    mail.person_writes(ANN, "first")
    await replies(mail, ANN, 1)
    await asyncio.wait_for(app.stop(), 15)

    mail.person_writes(ANN, "while you were down", subject="Later")
    await run_app()
    later = (await replies(mail, ANN, 2))[1]
    assert later["Subject"] == "Re: Later"
    await asyncio.sleep(1.0)  # several searches of the folder later
    assert len(mail.replies_to(ANN)) == 2 and len(llm.requests) == 2
    assert [user_texts(llm, i)[-1] for i in range(2)] == ["first", "while you were down"]
    assert "$Botweave" not in mail.imap.flags_of(backlog_uid)  # the backlog is left alone
    assert all("$Botweave" in m.flags for m in mail.imap.inbox.messages[1:])


async def test_strangers_forged_senders_and_automatic_mail_get_nothing(run_app, mail, llm):
    await run_app()
    stranger, _ = mail.person_writes("eve@evil.test", "answer me")
    forged, _ = mail.person_writes(ANN, "I am Ann, honest", auth="dmarc=fail spf=fail smtp.mailfrom=evil.test")
    unsigned, _ = mail.person_writes(ANN, "no results header", auth=None)
    misaligned, _ = mail.person_writes(ANN, "spf for another domain", auth="spf=pass smtp.mailfrom=evil.test")
    auto, _ = mail.person_writes(BOB, "I am on vacation", headers={"Auto-Submitted": "auto-replied"})
    own, _ = mail.person_writes(mail.address, "talking to myself")
    for uid in (stranger, forged, unsigned, misaligned, auto, own):
        await wait_until(lambda uid=uid: "$Botweave" in mail.imap.flags_of(uid), what=f"uid {uid} taken")
    mail.person_writes(BOB, "a real question", auth="dkim=pass header.d=example.org; spf=fail")
    (answer,) = await replies(mail, BOB, 1)
    assert text_of(answer) == llm.reply
    assert [user_texts(llm, i)[-1] for i in range(len(llm.requests))] == ["a real question"]
    assert len(mail.smtp.sent) == 1  # nobody else heard a word, not even a refusal


async def test_authentication_can_be_switched_off_and_then_the_allowlist_alone_decides(run_app, mail, llm):
    await run_app(require_authentication=False)
    mail.person_writes(ANN, "no results header here", auth=None)
    await replies(mail, ANN, 1)
    assert user_texts(llm) == ["no results header here"]


async def test_an_html_only_mail_is_read_as_text(run_app, mail, llm):
    await run_app()
    html = ("<html><head><style>p{color:red}</style><title>x</title></head><body><p>Price: 5 &euro; &amp; "
            "<b>tax</b></p><script>alert(1)</script><ul><li>one</li><li>two</li></ul></body></html>")
    mail.person_writes(ANN, html=html)
    await replies(mail, ANN, 1)
    (text,) = user_texts(llm)
    assert text == "Price: 5 € & tax\n\none\n\ntwo"


async def test_an_attachment_reaches_the_agent_and_a_file_goes_out_with_the_reply(run_app, mail, llm):
    app = await run_app()
    mail.person_writes(ANN, "see the notes", files=((b"Quarterly revenue: 42\n", "notes.txt", "text/plain"),))
    await replies(mail, ANN, 1)
    (text,) = [m for m in user_texts(llm)]
    assert "Quarterly revenue: 42" in text and "see the notes" in text
    assert mail.imap.part_fetches  # fetched alone, by its IMAP section
    from botweave.types import OutboundFile

    sent = await app.adapters["email"].send_file(ANN, OutboundFile(b"%PDF-1.4 x", "report.pdf", "application/pdf"),
                                                 caption="here it is")
    assert sent.ok
    last = mail.replies_to(ANN)[-1]
    (attachment,) = list(last.iter_attachments())
    assert attachment.get_filename() == "report.pdf" and attachment.get_content() == b"%PDF-1.4 x"
    assert text_of(last) == "here it is"


async def test_without_idle_the_folder_is_polled(run_app, llm):
    emu = MailEmulator(idle=False)
    await emu.start()
    try:
        await run_app(**emu.config())
        emu.person_writes(ANN, "polled")
        await replies(emu, ANN, 1)
        assert user_texts(llm) == ["polled"]
    finally:
        await emu.stop()


async def test_a_dropped_connection_is_reopened_and_nothing_is_lost(run_app, mail, llm):
    app = await run_app()
    mail.imap.drop_connections()
    mail.person_writes(ANN, "after the blip")
    await replies(mail, ANN, 1)
    assert user_texts(llm) == ["after the blip"]
    assert mail.imap.logins >= 2
    assert await app.adapters["email"].readiness() is None


async def test_a_rebuilt_folder_keeps_the_taken_mail_taken(run_app, mail, llm, start_app):
    app = await run_app()
    mail.person_writes(ANN, "before the rebuild")
    await replies(mail, ANN, 1)
    await asyncio.wait_for(app.stop(), 15)
    mail.imap.rebuild()  # new UIDVALIDITY: every UID renumbered, flags kept
    mail.person_writes(ANN, "after the rebuild")
    await run_app()
    await replies(mail, ANN, 2)
    await asyncio.sleep(0.5)
    assert len(mail.replies_to(ANN)) == 2
    assert [user_texts(llm, i)[-1] for i in range(2)] == ["before the rebuild", "after the rebuild"]


async def test_doctor_names_the_setting_when_a_login_is_refused(mail):
    good = await EmailAdapter(EmailConfig.model_validate(mail.config())).diagnose()
    assert [c.ok for c in good] == [True, True]
    bad_imap = mail.config()
    bad_imap["imap"] = {**bad_imap["imap"], "password": "wrong"}
    bad_smtp = mail.config()
    bad_smtp["smtp"] = {**bad_smtp["smtp"], "password": "wrong"}
    imap_checks = await EmailAdapter(EmailConfig.model_validate(bad_imap)).diagnose()
    smtp_checks = await EmailAdapter(EmailConfig.model_validate(bad_smtp)).diagnose()
    assert not imap_checks[0].ok and "imap.password" in imap_checks[0].fix
    assert not smtp_checks[1].ok and "smtp.password" in smtp_checks[1].fix
    assert all("wrong" not in c.detail + c.fix for c in imap_checks + smtp_checks)


async def test_a_refused_login_stops_the_platform_with_the_setting_named(mail):
    config = mail.config()
    config["imap"] = {**config["imap"], "password": "wrong"}
    adapter = EmailAdapter(EmailConfig.model_validate(config))
    with pytest.raises(Exception, match="imap.user and password"):
        await adapter.start()
    assert adapter.reader is None


def test_a_broken_section_names_the_field_and_the_fix():
    from botweave.runtime.config import load_config

    with pytest.raises(ConfigError) as error:
        load_config({"agents": {"a": {"model": "offline/echo"}},
                     "platforms": {"email": {"address": "bot@example.test", "processed_flag": "has space",
                                             "imap": {"host": "h", "port": 99999}}}})
    text = str(error.value)
    assert "platforms.email.processed_flag" in text and "IMAP keyword" in text
    assert "platforms.email.imap.port" in text


async def test_a_mail_thread_is_watched_in_the_browser_as_one_conversation(run_app, mail, llm):
    from tests.gateway.support import TOKEN_CONFIG, client

    app = await run_app(gateway={"listen": "127.0.0.1:0", "tokens": TOKEN_CONFIG})
    _, first = mail.person_writes(ANN, "Is the report ready?", subject="Report")
    await replies(mail, ANN, 1)
    async with client(app, "root") as root:
        listed = [c["conversation"] for c in (await root.call("conversations.list", {"platform": "email"}))["conversations"]]
        assert listed == [f"email:{ANN}:{first}"]
        history = (await root.call("chat.history", {"conversation": listed[0]}))["messages"]
    assert [m["text"] for m in history] == ["Is the report ready?", llm.reply]


async def test_botweave_run_answers_mail_and_a_restart_answers_only_what_is_new(mail, tmp_path):
    """Through the real CLI, with its default SQLite state: stopped by SIGTERM and started
    again, the bot answers the mail that came in between and nothing twice."""
    import os
    import signal
    import sys
    from pathlib import Path

    imap, smtp = mail.config()["imap"], mail.config()["smtp"]
    config = tmp_path / "bot.yaml"
    config.write_text(
        "agents: {assistant: {model: offline/echo}}\n"
        "platforms:\n"
        "  email:\n"
        f"    address: {mail.address}\n"
        f"    imap: {{host: 127.0.0.1, port: {imap['port']}, user: {imap['user']}, password: '${{IMAP_PW}}', ssl: false}}\n"
        f"    smtp: {{host: 127.0.0.1, port: {smtp['port']}, user: {smtp['user']}, password: '${{SMTP_PW}}', starttls: false}}\n"
        f"    allowed_senders: ['{ANN}']\n"
        "    poll_seconds: 0.3\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "IMAP_PW": imap["password"], "SMTP_PW": smtp["password"]}
    root = Path(__file__).resolve().parents[2]

    async def run(until: int, *, then: Callable[[], Any] | None = None) -> str:
        searched = mail.imap.searches
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "botweave", "run", str(config), cwd=str(root), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            await wait_until(lambda: mail.imap.searches > searched, timeout=60, what="the folder searched")
            if then is not None:
                then()
            await wait_until(lambda: len(mail.replies_to(ANN)) >= until, timeout=60, what=f"{until} replies")
            await asyncio.sleep(1.0)  # searches later, nothing more is answered
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, stderr.decode()[-2000:]
        return stderr.decode()

    mail.person_writes(ANN, "written before the bot first started")
    first = await run(1, then=lambda: mail.person_writes(ANN, "hello bot", subject="Hi"))
    assert "email: connected" in first
    assert imap["password"] not in first and smtp["password"] not in first
    mail.person_writes(ANN, "while you were down", subject="Later")
    await run(2)
    answers = mail.replies_to(ANN)
    assert [(a["Subject"], text_of(a)) for a in answers] == [
        ("Re: Hi", "assistant (offline echo) heard: hello bot"),
        ("Re: Later", "assistant (offline echo) heard: while you were down"),
    ]
