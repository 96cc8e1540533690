"""Matrix end to end: an App on the homeserver emulator, answering through mautrix's ClientAPI,
with the loopback OpenAI-compatible model (so what the model was given can be read).

What a person in a Matrix room would notice: an answer; no second answer after a restart and
one answer to what they wrote while the bot was down; invitations accepted only from people
the access rules admit; a streamed answer as one message edited in place, its last edit holding
the whole text; a reply whose quote reaches the model even without the quoting fallback;
answers in the thread they were asked in; reactions reaching the hooks; files read within the
media limits; one copy of a message whose send lost its answer; one notice in an encrypted
room and no answer there.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from botweave.adapters.matrix.adapter import MatrixAdapter
from botweave.adapters.matrix.config import MatrixConfig
from botweave.adapters.matrix.inbound import ENCRYPTED_NOTICE, strip_reply_fallback
from botweave.adapters.matrix.outbound import keyed_txn_id, text_content
from botweave.config import ConfigError
from botweave.hooks import HookEvent
from botweave.runtime.app import App
from botweave.runtime.config import load_config
from botweave.runtime.doctor import doctor
from botweave.runtime.scaffold import init
from botweave.targets import Targets
from botweave.types import BotMessage

from tests.emulators.matrix import ANN, BOB, BOT, BOT_PASSWORD, BOT_TOKEN, MatrixEmulator
from tests.emulators.openai import OpenAIEmulator, Reply
from tests.emulators.telegram import wait_until
from tests.gateway.support import TOKEN_CONFIG, client, collect


@pytest.fixture
async def emu() -> AsyncIterator[MatrixEmulator]:
    emulator = await MatrixEmulator().start()
    try:
        yield emulator
    finally:
        await emulator.stop()


class Bot:
    """Apps on one emulator, started and stopped as a test needs; all stopped at the end."""

    def __init__(self, emu: MatrixEmulator, llm: OpenAIEmulator) -> None:
        self.emu, self.llm = emu, llm
        self.apps: list[App] = []

    async def start(
        self, *, bot: dict[str, Any] | None = None, store: str | dict[str, str] | None = None, **matrix: Any
    ) -> App:
        config: dict[str, Any] = {
            "bot": {"unknown_user_policy": "allow"} if bot is None else bot,
            "agents": {"assistant": {"model": "openai/gpt-emulated", "api_base": self.llm.base_url, "api_key": "sk-x"}},
            "platforms": {"matrix": self.emu.section(**matrix)},
        }
        if store is not None:
            config["store"] = {"url": store} if isinstance(store, str) else store
        syncs = len(self.emu.syncs)
        app = App.from_config(config)
        await app.start()
        self.apps.append(app)
        assert "matrix" in app.adapters, app.failed_platforms
        # the first sync answered and the next long poll is waiting: what is said now is new
        await wait_until(lambda: len(self.emu.syncs) >= syncs + 2, what="the adapter's first sync")
        return app

    async def stop(self, app: App) -> None:
        await app.stop()
        self.apps.remove(app)

    async def answers(self, room: str, count: int, timeout: float = 30.0) -> list[str]:
        await wait_until(lambda: len(self.emu.bot_texts(room)) >= count, timeout, what=f"{count} answer(s)")
        for app in self.apps:
            await app.drain()
        return self.emu.bot_texts(room)


@pytest.fixture
async def bot(emu: MatrixEmulator, llm: OpenAIEmulator) -> AsyncIterator[Bot]:
    running = Bot(emu, llm)
    try:
        yield running
    finally:
        for app in list(running.apps):
            await app.stop()


async def quiet(bot: Bot, seconds: float = 0.6) -> None:
    """Long enough for anything the bot would still do to have happened."""
    await asyncio.sleep(seconds)
    for app in bot.apps:
        await app.drain()


# --- answers, restarts ----------------------------------------------------------------------


async def test_a_person_in_a_direct_room_is_answered(bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator) -> None:
    llm.reply = "hello Ann"
    await bot.start()
    room = emu.create_room(ANN)
    emu.say(room, ANN, "hi bot")
    assert await bot.answers(room, 1) == ["hello Ann"]
    assert "hi bot" in llm.last_user_text()
    (answer,) = emu.bot_events(room)
    assert answer["content"]["msgtype"] == "m.text"


async def test_the_first_start_skips_the_backlog(bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator) -> None:
    room = emu.create_room(ANN)
    emu.say(room, ANN, "said last week, before the bot ran")
    await bot.start()
    emu.say(room, ANN, "said now")
    await bot.answers(room, 1)
    await quiet(bot)
    assert len(emu.bot_texts(room)) == 1 and len(llm.requests) == 1
    assert "said now" in llm.last_user_text()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_a_restart_answers_nothing_twice_and_what_came_while_down_once(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """On the embedded store and on Redis (where the receiving connection is held by a leader
    and turns run from the shared stream), the sync position survives the restart."""
    if backend == "redis":
        store: str | dict[str, str] = {"url": request.getfixturevalue("redis_url"), "prefix": f"test:{uuid.uuid4().hex}:"}
    else:
        store = f"sqlite:///{tmp_path / 'bot.db'}"
    room = emu.create_room(ANN)
    first = await bot.start(store=store)
    emu.say(room, ANN, "before the restart")
    await bot.answers(room, 1)
    await bot.stop(first)

    emu.say(room, ANN, "while the bot was down")
    emu.say(room, ANN, "also while down")
    await bot.start(store=store)
    await bot.answers(room, 3)
    await quiet(bot)
    assert len(emu.bot_texts(room)) == 3
    asked = [llm.last_user_text(i) for i in range(len(llm.requests))]
    assert len(asked) == 3 and sum("before the restart" in text for text in asked) == 1
    assert sum("while the bot was down" in text for text in asked) == 1
    assert emu.syncs.count(None) == 1  # the second start went on from the stored position


# --- invitations --------------------------------------------------------------------------


async def test_invitations_are_accepted_only_from_people_the_access_rules_admit(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator
) -> None:
    await bot.start(bot={"unknown_user_policy": "deny", "allowed_users": [ANN]})
    strangers = emu.create_room(BOB, members=())
    emu.invite_bot(strangers, BOB)
    anns = emu.create_room(ANN, members=())
    emu.invite_bot(anns, ANN, direct=True)
    await wait_until(lambda: emu.rooms[anns].members.get(BOT) == "join", what="the bot to join Ann's room")
    await quiet(bot)
    assert emu.rooms[strangers].members[BOT] == "invite" and strangers not in emu.joins
    emu.say(anns, ANN, "thanks for joining")
    await bot.answers(anns, 1)
    assert len(llm.requests) == 1


async def test_an_invitation_that_came_before_the_first_start_is_accepted(bot: Bot, emu: MatrixEmulator) -> None:
    """Pending invitations are not backlog: the first start skips old messages, not people
    waiting for the bot to join."""
    room = emu.create_room(ANN, members=())
    emu.invite_bot(room, ANN, direct=True)
    await bot.start(bot={"unknown_user_policy": "deny", "allowed_users": [ANN]})
    await wait_until(lambda: emu.rooms[room].members.get(BOT) == "join", what="the bot to join")
    emu.say(room, ANN, "glad you made it")
    assert len(await bot.answers(room, 1)) == 1


async def test_with_pairing_a_strangers_invitation_is_not_accepted(bot: Bot, emu: MatrixEmulator) -> None:
    await bot.start(bot={"unknown_user_policy": "pair"})
    room = emu.create_room(BOB, members=())
    emu.invite_bot(room, BOB, direct=True)
    await quiet(bot, 1.0)
    assert emu.joins == [] and emu.rooms[room].members[BOT] == "invite"


# --- streaming -------------------------------------------------------------------------------


async def test_a_streamed_answer_is_one_message_edited_at_the_floor(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator
) -> None:
    whole = " ".join(f"word{i}" for i in range(40))
    llm.queue(Reply(text=whole, chunks=20, chunk_delay=0.2))  # four seconds of words
    await bot.start(bot={"unknown_user_policy": "allow", "streaming": True, "stream_edit_interval_ms": 100})
    room = emu.create_room(ANN)
    emu.say(room, ANN, "tell me a long story")
    await wait_until(lambda: emu.text_of(emu.bot_events(room)[0]["event_id"]) == whole if emu.bot_events(room) else False,
                     10, what="the whole text")
    await quiet(bot)
    (message,) = emu.bot_events(room)
    edits = emu.edits_of(message["event_id"])
    assert 2 <= len(edits) <= 4, len(edits)  # 4 s at one edit per 1.5 s, the final one included
    assert edits[-1]["content"]["m.new_content"]["body"] == whole
    times = [message["origin_server_ts"]] + [e["origin_server_ts"] for e in edits]
    assert all(later - earlier >= 1400 for earlier, later in zip(times, times[1:])), times


# --- replies, threads, reactions, files -------------------------------------------------------


async def test_a_reply_without_its_fallback_still_shows_the_model_the_quoted_message(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator
) -> None:
    room = emu.create_room(ANN)
    quoted = emu.say(room, ANN, "the secret word is plum")
    for i in range(12):  # pushed out of the slice the first sync hands over
        emu.say(room, ANN, f"filler {i}")
    await bot.start()
    emu.say(room, ANN, "what was the word?", reply_to=quoted["event_id"], fallback=False)
    await bot.answers(room, 1)
    assert quoted["event_id"] in emu.event_fetches
    assert '[In reply to: "the secret word is plum"]' in llm.last_user_text()
    assert llm.last_user_text().rstrip().endswith("what was the word?")


async def test_a_reply_with_the_fallback_is_read_without_it(bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator) -> None:
    await bot.start()
    room = emu.create_room(ANN)
    quoted = emu.say(room, ANN, "first line\nsecond line")
    await bot.answers(room, 1)
    emu.say(room, ANN, "and this", reply_to=quoted["event_id"])
    await bot.answers(room, 2)
    text = llm.last_user_text()
    assert '[In reply to: "first line second line"]' in text and "> <" not in text


def test_the_reply_fallback_is_cut_off() -> None:
    assert strip_reply_fallback("> <@ann:x> quoted\n> more\n\nthe answer") == "the answer"
    assert strip_reply_fallback("no quote here") == "no quote here"
    assert strip_reply_fallback(">not a fallback") == ">not a fallback"


async def test_a_message_in_a_thread_is_answered_in_that_thread(bot: Bot, emu: MatrixEmulator) -> None:
    await bot.start()
    room = emu.create_room(ANN)
    root = emu.say(room, ANN, "a topic of its own")
    await bot.answers(room, 1)
    emu.say(room, ANN, "more on it", thread=root["event_id"])
    await bot.answers(room, 2)
    relates = emu.bot_events(room)[-1]["content"]["m.relates_to"]
    assert relates["rel_type"] == "m.thread" and relates["event_id"] == root["event_id"]


async def test_a_reaction_reaches_the_hooks(bot: Bot, emu: MatrixEmulator) -> None:
    app = await bot.start()
    seen: list[dict[str, Any]] = []

    def on_reaction(event: HookEvent) -> None:
        seen.append(event.payload)

    app.hooks.register("reaction_received", on_reaction)
    room = emu.create_room(ANN)
    emu.say(room, ANN, "hi")
    await bot.answers(room, 1)
    answer = emu.bot_events(room)[0]["event_id"]
    emu.react(room, ANN, answer, "👍")
    await wait_until(lambda: seen, what="the reaction hook")
    assert seen[0]["emoji"] == "👍" and seen[0]["message_id"] == answer and seen[0]["user_id"] == ANN


async def test_a_file_reaches_the_model_and_one_over_the_limit_does_not(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator
) -> None:
    llm.reply = "read it"
    await bot.start()
    room = emu.create_room(ANN)
    emu.send_file(room, ANN, b"Quarterly numbers\nrevenue: 42\n", "report.txt", "text/plain", caption="see attached")
    await bot.answers(room, 1)
    assert "revenue: 42" in str(llm.messages()) and emu.fetches == 1
    emu.send_file(room, ANN, b"x" * 30_000_000, "huge.txt", "text/plain", caption="and this")
    await bot.answers(room, 3)  # a notice about the file, and the answer to the caption
    assert emu.fetches == 1  # the declared size was over the limit: never fetched
    assert any("huge.txt" in text or "too large" in text.lower() for text in emu.bot_texts(room))


# --- idempotent sends -------------------------------------------------------------------------


def test_a_transaction_id_belongs_to_one_content() -> None:
    text = {"msgtype": "m.text", "body": "hello"}
    same = keyed_txn_id("reply:1:0", "!r:x", "m.room.message", dict(text))
    assert keyed_txn_id("reply:1:0", "!r:x", "m.room.message", text) == same
    assert keyed_txn_id("reply:1:0", "!r:x", "m.room.message", {**text, "body": "hello!"}) != same
    assert keyed_txn_id("reply:1:1", "!r:x", "m.room.message", text) != same
    assert keyed_txn_id("reply:1:0", "!other:x", "m.room.message", text) != same


async def test_a_send_whose_answer_was_lost_is_kept_once(bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator) -> None:
    """The homeserver stores the answer and the connection drops before it says so, twice
    (aiohttp itself repeats a dropped PUT once; the second drop reaches the adapter, which
    sends the same transaction again): the room holds one copy."""
    llm.reply = "only once"
    await bot.start()
    room = emu.create_room(ANN)
    emu.fail_sends = 2
    emu.say(room, ANN, "hi")
    await bot.answers(room, 1)
    await quiet(bot, 2.0)
    assert emu.bot_texts(room) == ["only once"]
    answers = [s for s in emu.sends if s.room_id == room and s.event_type == "m.room.message"]
    assert len(answers) >= 3 and [s.dropped for s in answers] == [True, True, *[False] * (len(answers) - 2)]
    assert [s.repeat for s in answers] == [False, *[True] * (len(answers) - 1)]
    assert len({s.txn_id for s in answers}) == 1 and len({s.event_id for s in answers}) == 1


# --- encrypted rooms -------------------------------------------------------------------------


async def test_an_encrypted_room_gets_one_notice_and_no_answer(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    await bot.start()
    caplog.set_level(logging.WARNING, logger="botweave.adapters.matrix")
    room = emu.create_room(ANN, encrypted=True)
    for _ in range(2):
        emu.post(room, ANN, "m.room.encrypted", {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgA..."})
    await wait_until(lambda: emu.bot_events(room), what="the notice")
    await quiet(bot)
    (notice,) = emu.bot_events(room)
    assert notice["content"] == {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE}
    assert llm.requests == []
    lines = [r.getMessage() for r in caplog.records if "end-to-end encrypted" in r.getMessage()]
    assert len(lines) == 1 and room in lines[0]


# --- logging in, init, doctor -----------------------------------------------------------------


async def test_a_password_logs_in_on_the_configured_device(bot: Bot, emu: MatrixEmulator) -> None:
    app = await bot.start(access_token=None, password=BOT_PASSWORD, device_id="FIXEDDEVICE")
    assert [login.get("device_id") for login in emu.logins] == ["FIXEDDEVICE"]
    room = emu.create_room(ANN)
    emu.say(room, ANN, "hi")
    await bot.answers(room, 1)
    assert {s.device for s in emu.sends} == {"FIXEDDEVICE"}
    assert BOT_PASSWORD not in repr(app.config.platform("matrix"))


async def test_doctor_checks_the_token_with_whoami(emu: MatrixEmulator, tmp_path: Path) -> None:
    def config(token: str) -> Path:
        path = tmp_path / f"{token}.yaml"
        path.write_text(
            "agents: {helper: {model: offline/echo}}\n"
            f"platforms: {{matrix: {{homeserver: '{emu.url}', user_id: '{BOT}', access_token: '{token}'}}}}\n"
            "store: {url: 'memory://'}\n"
        )
        return path

    out = io.StringIO()
    assert await doctor(str(config(BOT_TOKEN)), model=False, out=out) == 0
    assert f"ok   matrix: whoami: {BOT}" in out.getvalue()
    out = io.StringIO()
    assert await doctor(str(config("syt_wrong")), model=False, out=out) == 1
    (failed,) = [line for line in out.getvalue().splitlines() if line.startswith("FAIL matrix")]
    assert "access token" in failed and "fix:" in failed and "syt_wrong" not in failed


def test_init_writes_a_matrix_section_that_waits_for_its_variables(tmp_path: Path) -> None:
    path = tmp_path / "bot.yaml"
    out = io.StringIO()
    assert init(str(path), ["matrix"], "offline/echo", out=out, err=io.StringIO(), interactive=False) == 0
    assert "next: export MATRIX_HOMESERVER, MATRIX_USER_ID, MATRIX_ACCESS_TOKEN" in out.getvalue()
    assert load_config(path, env={}).enabled_platforms() == {}
    env = {"MATRIX_HOMESERVER": "https://hs.example", "MATRIX_USER_ID": BOT, "MATRIX_ACCESS_TOKEN": "syt_x"}
    section = load_config(path, env=env).enabled_platforms()["matrix"]
    assert isinstance(section, MatrixConfig) and section.homeserver == "https://hs.example"
    assert section.device_id == "botweave"


# --- `botweave run` ---------------------------------------------------------------------------


async def test_botweave_run_answers_and_a_restarted_process_answers_what_came_while_down_once(
    emu: MatrixEmulator, tmp_path: Path
) -> None:
    """The real CLI in its own process, twice, on one SQLite file: what was answered before
    the restart is not answered again, what came in between is answered once."""
    config = tmp_path / "bot.yaml"
    config.write_text(
        "bot: {unknown_user_policy: allow}\n"
        "agents: {assistant: {model: offline/echo}}\n"
        "platforms:\n"
        f"  matrix: {{homeserver: '{emu.url}', user_id: '{BOT}', access_token: '${{MATRIX_ACCESS_TOKEN}}',"
        " device_id: BOTDEVICE, sync_timeout_seconds: 2}\n"
        "store: {url: 'sqlite:///bot.db'}\n"
    )
    env = {**os.environ, "MATRIX_ACCESS_TOKEN": BOT_TOKEN, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    room = emu.create_room(ANN)

    async def run_until_answered(count: int) -> str:
        syncs = len(emu.syncs)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "botweave", "run", str(config), env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            await wait_until(lambda: len(emu.syncs) >= syncs + 2, 60, what="the process's first sync")
            if count == 1:
                emu.say(room, ANN, "hello from a person")
            await wait_until(lambda: len(emu.bot_texts(room)) >= count, 30, what=f"{count} answer(s)")
            await asyncio.sleep(1.0)  # time for anything that would come twice
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, stderr.decode()
        return stderr.decode()

    first_log = await run_until_answered(1)
    emu.say(room, ANN, "said while the bot was down")
    second_log = await run_until_answered(2)
    texts = emu.bot_texts(room)
    assert len(texts) == 2, texts
    assert "hello from a person" in texts[0] and "said while the bot was down" in texts[1]
    assert BOT_TOKEN not in first_log + second_log


async def test_more_than_one_sync_holds_is_paged_back_and_answered_once(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator, tmp_path: Path
) -> None:
    """While the bot was down more came than one sync gives (the timeline is `limited`): the
    rest is paged back from the homeserver, and each message is answered once, in order."""
    store = f"sqlite:///{tmp_path / 'bot.db'}"
    room = emu.create_room(ANN)
    first = await bot.start(store=store)
    emu.say(room, ANN, "before")
    await bot.answers(room, 1)
    await bot.stop(first)
    for i in range(14):
        emu.say(room, ANN, f"missed {i}")
    await bot.start(store=store)
    await bot.answers(room, 15, timeout=40)
    await quiet(bot)
    assert len(emu.bot_texts(room)) == 15 and emu.pages
    asked = [llm.last_user_text(i) for i in range(len(llm.requests))]
    assert [next(w for w in text.splitlines() if w.startswith(("before", "missed"))) for text in asked] == [
        "before", *(f"missed {i}" for i in range(14))
    ]


def test_a_target_names_a_room_whose_id_holds_colons_and_a_thread_under_it() -> None:
    """Room ids are `!id:server` (a server may carry a port): the target grammar's colon after
    the chat is where an event id (`$…`) begins, not the first colon."""
    targets = Targets({"matrix": MatrixAdapter(MatrixConfig())})
    room = targets.resolve("matrix:!abc:example.org")
    thread = targets.resolve("matrix:!abc:example.org:8448:$root")
    assert room is not None and (room.chat_id, room.thread_id) == ("!abc:example.org", None)
    assert thread is not None and (thread.chat_id, thread.thread_id) == ("!abc:example.org:8448", "$root")
    assert room.target == "matrix:!abc:example.org" and thread.target == "matrix:!abc:example.org:8448:$root"


async def test_a_matrix_room_is_watched_from_the_gateway(emu: MatrixEmulator, start_app: Any) -> None:
    """The browser UI's conversations view is the gateway's `conversations.list` and
    `subscribe`: a Matrix room is listed and its messages, a person's and the bot's, arrive live."""
    app = await start_app({
        "bot": {"unknown_user_policy": "allow", "group_policy": "respond_all"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"matrix": emu.section()},
        "gateway": {"listen": "127.0.0.1:0", "tokens": TOKEN_CONFIG},
    })
    await wait_until(lambda: len(emu.syncs) >= 2, 30, what="the first sync")
    room = emu.create_room(ANN, members=(BOT, BOB), name="Team")
    conversation = f"matrix:{room}"
    async with client(app, "root") as root:
        await root.subscribe(conversation)
        emu.say(room, ANN, "what is the plan?")
        events = await collect(root, lambda seen: sum(e.event == "message" for e in seen) >= 2)
        listed = (await root.call("conversations.list", {"platform": "matrix"}))["conversations"]
    messages = [e.data for e in events if e.event == "message"]
    assert [m["author"]["kind"] for m in messages[:2]] == ["user", "bot"]
    assert messages[0]["text"] == "what is the plan?" and "what is the plan?" in messages[1]["text"]
    assert [(c["conversation"], c["title"]) for c in listed] == [(conversation, "Team")]


async def test_in_a_group_room_the_bot_answers_when_addressed(bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator) -> None:
    await bot.start()
    room = emu.create_room(ANN, members=(BOT, BOB))
    emu.say(room, ANN, "morning everyone")
    emu.say(room, ANN, "Bot: what is on today?")
    await bot.answers(room, 1)
    emu.say(room, BOB, "and you?", mentions=(BOT,))
    await bot.answers(room, 2)
    earlier = emu.bot_events(room)[0]["event_id"]
    emu.say(room, ANN, "thanks", reply_to=earlier, fallback=False)
    await bot.answers(room, 3)
    emu.post(room, BOB, "m.room.message", {"msgtype": "m.notice", "body": "Bot: a notice from another bot"})
    await quiet(bot)
    asked = [llm.last_user_text(i) for i in range(len(llm.requests))]
    assert len(asked) == 3 and not any("morning everyone" in a.splitlines()[-1] for a in asked)
    assert [a.splitlines()[-1].split("] ")[-1] for a in asked] == ["Bot: what is on today?", "and you?", "thanks"]


async def test_a_batch_read_again_after_a_crash_is_not_answered_twice(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator, tmp_path: Path
) -> None:
    """The position is stored after the batch was recorded: a process that died in between
    (here: the position put back to before the batch) reads the batch again, and the runtime,
    which recorded its events, answers none of them twice."""
    store = f"sqlite:///{tmp_path / 'bot.db'}"
    room = emu.create_room(ANN)
    first = await bot.start(store=store)
    before = emu.syncs[-1]
    assert before is not None
    emu.say(room, ANN, "answer me once")
    await bot.answers(room, 1)
    await first.adapters["matrix"].stop()  # no more syncs: the position stays where we put it
    await first.store.set(f"matrix:sync:{BOT}", before)
    await bot.stop(first)
    syncs = len(emu.syncs)
    await bot.start(store=store)
    assert emu.syncs[syncs] == before  # the batch with the answered message was read again
    emu.say(room, ANN, "and now this")
    await bot.answers(room, 2)
    await quiet(bot)
    assert len(emu.bot_texts(room)) == 2 and len(llm.requests) == 2


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("just words", None),
        ("**bold** and `code`", "<p><strong>bold</strong> and <code>code</code></p>"),
        ("line one\nline two", "<p>line one<br />\nline two</p>"),
        ("a <script>alert(1)</script> & **b**", "<p>a &lt;script&gt;alert(1)&lt;/script&gt; &amp; <strong>b</strong></p>"),
    ],
)
def test_markdown_goes_out_as_html_beside_the_text_as_written(text: str, html: str | None) -> None:
    content = text_content(text)
    assert content["body"] == text and content.get("formatted_body") == html
    assert ("format" in content) == (html is not None)


async def test_a_reply_to_a_streamed_answer_quotes_its_final_text(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator
) -> None:
    llm.queue(Reply(text="the final answer is forty-two", chunks=4, chunk_delay=0.6))
    await bot.start(bot={"unknown_user_policy": "allow", "streaming": True})
    room = emu.create_room(ANN)
    emu.say(room, ANN, "what is the answer?")
    await wait_until(lambda: bool(emu.bot_events(room)) and emu.edits_of(emu.bot_events(room)[0]["event_id"]), 20,
                     what="a streamed answer")
    await quiet(bot, 1.0)
    answer = emu.bot_events(room)[0]["event_id"]
    assert emu.text_of(answer) == "the final answer is forty-two"
    emu.say(room, ANN, "are you sure?", reply_to=answer, fallback=False)
    await bot.answers(room, 2)
    assert '[In reply to: "the final answer is forty-two"]' in llm.last_user_text()
    assert answer not in emu.event_fetches  # the bot knew its own message's newest text


async def test_after_a_restart_a_quoted_edited_message_is_read_in_its_newest_form(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator
) -> None:
    room = emu.create_room(ANN)
    first = emu.say(room, ANN, "meet at 10")
    emu.post(room, ANN, "m.room.message", {
        "msgtype": "m.text", "body": "* meet at 11",
        "m.new_content": {"msgtype": "m.text", "body": "meet at 11"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": first["event_id"]},
    })
    for i in range(12):
        emu.say(room, ANN, f"filler {i}")
    await bot.start()
    emu.say(room, ANN, "when again?", reply_to=first["event_id"], fallback=False)
    await bot.answers(room, 1)
    assert first["event_id"] in emu.event_fetches
    assert '[In reply to: "meet at 11"]' in llm.last_user_text()


async def test_editing_a_message_reruns_it_and_the_answer_is_edited_in_place(bot: Bot, emu: MatrixEmulator) -> None:
    bot.llm.on_request = lambda body: f"you said: {body['messages'][-1]['content']}"
    await bot.start()
    room = emu.create_room(ANN)
    said = emu.say(room, ANN, "my colour is red")
    await bot.answers(room, 1)
    emu.post(room, ANN, "m.room.message", {
        "msgtype": "m.text", "body": "* my colour is blue",
        "m.new_content": {"msgtype": "m.text", "body": "my colour is blue"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": said["event_id"]},
    })
    answer = emu.bot_events(room)[0]["event_id"]
    await wait_until(lambda: "blue" in (emu.text_of(answer) or ""), 30, what="the answer edited in place")
    await quiet(bot)
    assert len(emu.bot_events(room)) == 1 and "my colour is blue" in (emu.text_of(answer) or "")


async def test_a_slow_answer_shows_typing_and_a_removed_reaction_reaches_the_hooks(
    bot: Bot, emu: MatrixEmulator, llm: OpenAIEmulator
) -> None:
    llm.delay = 1.6  # past typing's one-second delay
    app = await bot.start()
    removed: list[dict[str, Any]] = []
    app.hooks.register("reaction_received", lambda event: removed.append(event.payload))
    room = emu.create_room(ANN)
    emu.say(room, ANN, "take your time")
    await bot.answers(room, 1)
    assert room in emu.typing
    answer = emu.bot_events(room)[0]["event_id"]
    reaction = emu.react(room, ANN, answer, "🎉")
    await wait_until(lambda: removed, what="the reaction")
    emu.redact(reaction["event_id"], by=ANN)
    await wait_until(lambda: len(removed) >= 2, what="its removal")
    assert [(p["kind"], p["emoji"]) for p in removed] == [("reaction_added", "🎉"), ("reaction_removed", "🎉")]


def test_a_user_id_that_is_not_a_full_matrix_id_is_a_clear_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "bot.yaml"
    path.write_text("agents: {a: {model: offline/echo}}\nplatforms: {matrix: {homeserver: 'https://hs', user_id: assistant}}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    (problem,) = refused.value.problems
    assert problem.startswith("platforms.matrix.user_id") and "@name:server" in problem


async def test_a_failure_while_handling_a_batch_reads_it_again_and_the_sync_goes_on(emu: MatrixEmulator) -> None:
    """The access rules fail once (a store outage, say) while an invitation is read: the
    batch is read again, the invitation accepted, and syncing never stopped."""
    answers = iter([RuntimeError("the store is away"), True])

    async def admits(message: BotMessage) -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    received: list[Any] = []

    async def sink(item: Any) -> None:
        received.append(item)

    adapter = MatrixAdapter(MatrixConfig(**emu.section()))
    adapter.bind(sink, admits=admits)
    await adapter.start()
    try:
        await wait_until(lambda: any(since is not None for since in emu.syncs), what="the first sync")
        room = emu.create_room(ANN, members=())
        emu.invite_bot(room, ANN)
        await wait_until(lambda: emu.rooms[room].members.get(BOT) == "join", 10, what="the bot to join")
        assert adapter.failure is None and await adapter.readiness() is None
    finally:
        await adapter.stop()
