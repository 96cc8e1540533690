"""The pure decisions of turn control: whether a turn may (go on to) run, staleness, and
which messages count as new for `interrupt` and `collect`."""

from datetime import datetime, timedelta, timezone

import pytest
from botweave.config import BotConfig
from botweave.runtime.turn_control import Marks, busy_signal, format_age, is_stale, verdict
from botweave.types import META_MENTIONS_BOT, META_RECEIVED_AT, BotChannel, BotMessage, BotUser


def msg(text: str = "hi", *, group: bool = False, bot: bool = False, received: float | None = None, age: float = 0) -> BotMessage:
    sent = datetime.now(timezone.utc) - timedelta(seconds=age)
    metadata = {META_RECEIVED_AT: received if received is not None else datetime.now(timezone.utc).timestamp()}
    return BotMessage(
        "1", text, BotUser("u1", is_bot=bot), BotChannel("c1", "group" if group else "dm"),
        timestamp=sent, metadata=metadata, platform="test",
    )


@pytest.mark.parametrize(
    ("marks", "mode", "starting", "expected"),
    [
        (Marks(), "queue", True, None),
        (Marks(stop_all=10.0), "queue", True, "stopped"),  # received before the /stop
        (Marks(stop_all=10.0), "queue", False, "stopped"),
        (Marks(stop_all=9.0), "queue", False, None),  # the /stop came before it: it runs
        (Marks(stop_own=10.0), "queue", False, "stopped"),
        (Marks(deleted=True, stop_all=1.0), "queue", True, "deleted"),
        (Marks(latest=11.0), "queue", False, None),
        (Marks(latest=11.0), "interrupt", False, "interrupted"),
        (Marks(latest=11.0), "interrupt", True, "interrupted"),
        (Marks(latest=10.0), "interrupt", False, None),  # it is the latest itself
        (Marks(latest=11.0), "collect", True, "collected"),
        (Marks(latest=11.0), "collect", False, None),  # a running turn is never collected
        (Marks(edit_at=5.0, edit_text="x"), "queue", False, "edited"),
        (Marks(edit_at=5.0, edit_text="x"), "queue", True, None),  # a queued turn answers the edit
    ],
)
def test_verdict(marks: Marks, mode: str, starting: bool, expected: str | None) -> None:
    assert verdict(10.0, marks, mode, starting=starting, edit_seen=None) == expected


def test_an_edit_already_answered_does_not_cancel_again() -> None:
    assert verdict(10.0, Marks(edit_at=5.0, edit_text="x"), "queue", starting=False, edit_seen=5.0) is None
    assert verdict(10.0, Marks(edit_at=6.0, edit_text="y"), "queue", starting=False, edit_seen=5.0) == "edited"


def test_staleness_is_the_age_at_receipt() -> None:
    assert is_stale(msg(age=30), 600) is None
    assert is_stale(msg(age=3600), 600) == pytest.approx(3600, abs=2)
    assert is_stale(msg(age=3600), 0) is None  # 0: never stale
    replayed = msg(age=3600, received=(datetime.now(timezone.utc) - timedelta(seconds=3590)).timestamp())
    assert is_stale(replayed, 600) is None  # fresh when it arrived, replayed later: answered


def test_only_messages_addressed_to_the_bot_count_as_new() -> None:
    interrupt = BotConfig(busy_mode="interrupt")
    assert busy_signal(msg(), interrupt)
    assert not busy_signal(msg(), BotConfig())  # queue: nothing to signal
    assert not busy_signal(msg("/help"), interrupt)
    assert not busy_signal(msg(bot=True), interrupt)
    assert not busy_signal(msg(group=True), interrupt)  # group chatter under mention_only
    mentioned = msg(group=True)
    mentioned.metadata[META_MENTIONS_BOT] = True
    assert busy_signal(mentioned, interrupt)
    assert not busy_signal(msg(), BotConfig(busy_mode="collect", allowed_users=["someone-else"]))


def test_ages_read_naturally() -> None:
    assert format_age(3600) == "1 h 0 min" and format_age(600) == "10 min" and format_age(5 * 86400) == "5 days"
