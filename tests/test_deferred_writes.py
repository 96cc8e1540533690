"""A turn's bookkeeping writes are queued behind it (`Store.later`) instead of awaited; a crash
can lose the newest of them. These tests take them away as such a crash would, on the SQLite
file `botweave run` uses, through python-telegram-bot against the Bot API emulator, and check
what the person sees after the restart: nothing sent twice, history written once.

Deferred writes reach the file in the order they were queued (one thread, one queue), so a
crash loses a suffix of them: the journal's removal (queued last in a turn) can be lost with
the outbox's confirmation still on disk, or both lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from botweave import App
from botweave.store import Operation, PatientStore, Put, Remove, SQLiteStore

from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until

ANN = TelegramEmulator.user(1, "Ann", "ann")
HEARD = "assistant (offline echo) heard: "


class Crashing(SQLiteStore):
    """The SQLite store, except that the deferred writes `lost` picks never reach the file, as
    if the process died after queuing them."""

    def __init__(self, path: Path, lost: tuple[str, ...]) -> None:
        super().__init__(path)
        self.lost = lost
        self.dropped: list[Operation] = []

    def later(self, *operations: Operation) -> None:
        kept = [op for op in operations if not op.key.startswith(self.lost)]
        self.dropped += [op for op in operations if op.key.startswith(self.lost)]
        super().later(*kept)


def config(emu: TelegramEmulator) -> dict[str, Any]:
    return {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": adapter_config(emu)},
    }


async def answer_once(emu: TelegramEmulator, store: SQLiteStore, text: str) -> App:
    app = App.from_config(config(emu), store=PatientStore(store))
    await app.start()
    emu.push_message(emu.private_chat(ANN), ANN, text)
    await wait_until(lambda: len(emu.sent(1)) >= 1, timeout=20, what="the answer")
    await app.drain()
    return app


async def restart_and_settle(emu: TelegramEmulator, path: Path) -> tuple[App, SQLiteStore]:
    store = SQLiteStore(path)
    app = App.from_config(config(emu), store=PatientStore(store))
    await app.start()  # replays what the journal still holds
    await app.drain()
    return app, store


async def test_a_lost_journal_removal_answers_nothing_twice_after_a_restart(tmp_path, telegram_emulator, caplog):
    emu = telegram_emulator
    path = tmp_path / "bot.db"
    crashing = Crashing(path, lost=("inbox:item:",))
    app = await answer_once(emu, crashing, "hello")
    await app.stop()
    assert [op for op in crashing.dropped if isinstance(op, Remove)], "the journal's removal was deferred"

    app, store = await restart_and_settle(emu, path)
    try:
        assert "answering 1 message(s) a previous run received but did not finish" in caplog.text
        assert await store.keys("inbox:item:") == []  # answered again, and removed this time
        assert [m["text"] for m in emu.sent(1)] == [HEARD + "hello"]  # the outbox's confirmation held
        history = await store.list_range("history:telegram:dm:1")
        assert len(history) == 1 and json.loads(history[0])[0]["content"] == "hello"
    finally:
        await app.stop()


async def test_a_lost_confirmation_and_journal_removal_resend_at_most_the_unconfirmed_chunk(
    tmp_path, telegram_emulator
):
    """Both lost: the chunk has only its intent, which Telegram cannot look up, so it is sent
    again (at least once, as a crash between the send and its confirmation always could);
    the turn is not run again (its marker holds), so the model is not asked twice and history
    keeps one exchange."""
    emu = telegram_emulator
    path = tmp_path / "bot.db"
    crashing = Crashing(path, lost=("inbox:item:", "outbox:"))
    app = await answer_once(emu, crashing, "hello")
    await app.stop()
    assert any(isinstance(op, Put) and op.key.startswith("outbox:") for op in crashing.dropped)

    app, store = await restart_and_settle(emu, path)
    try:
        await wait_until(lambda: len(emu.sent(1)) >= 2, timeout=20, what="the unconfirmed chunk sent again")
        assert [m["text"] for m in emu.sent(1)] == [HEARD + "hello"] * 2
        assert len(await store.list_range("history:telegram:dm:1")) == 1
        assert await store.keys("inbox:item:") == []
    finally:
        await app.stop()
