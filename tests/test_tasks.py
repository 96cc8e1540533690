"""Background tasks have an owner: a failure is logged once, in one line, without secrets."""

from __future__ import annotations

import asyncio
import logging

from botweave.tasks import ONE_LINE_FAILURES, TaskOwner, failure_line, redact, register_secret, spawn


async def test_a_failing_task_is_logged_once_in_one_line_with_where(caplog):
    owner = TaskOwner("worker")

    async def broken() -> None:
        raise ValueError("the answer\nwas not\t42")

    owner.spawn(broken(), name="compute")
    await owner.drain()
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    line = record.getMessage()
    assert "\n" not in line and record.exc_info is None
    assert line.startswith("worker: compute failed: ValueError: the answer was not 42 (at ")
    assert "test_tasks.py" in line and "in broken)" in line


async def test_secrets_are_masked_in_failure_lines(caplog):
    register_secret("xoxb-very-secret-token-1234")
    owner = TaskOwner("slack")

    async def leaky() -> None:
        raise RuntimeError("call with xoxb-very-secret-token-1234 and 123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefgh failed "
                           "on redis://:hunter2@db:6379/0")

    owner.spawn(leaky(), name="call")
    await owner.drain()
    text = caplog.text
    assert "very-secret" not in text and "ABCDEFGH" not in text and "hunter2" not in text
    assert text.count("***") == 3


async def test_cancellation_is_not_a_failure_and_close_stops_what_is_left(caplog):
    owner = TaskOwner("room")
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    task = owner.spawn(forever(), name="wait")
    await started.wait()
    assert len(owner) == 1
    await owner.close(timeout=0.01)
    assert task.cancelled() and not owner
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_reporter_of_its_own_replaces_the_default_line(caplog):
    seen: list[BaseException] = []
    owner = TaskOwner("gateway")

    async def refused() -> None:
        raise PermissionError("token rejected")

    owner.spawn(refused(), name="connect", on_failure=seen.append)
    await owner.drain()
    assert [str(e) for e in seen] == ["token rejected"]
    assert "token rejected" not in caplog.text


async def test_a_loose_task_is_held_until_it_ends():
    result = await spawn(asyncio.sleep(0, result="done"), name="tick")
    assert result == "done"


def test_library_tracebacks_become_one_line():
    logger = logging.getLogger("test.one-line")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger.addHandler(Keep())
    logger.addFilter(ONE_LINE_FAILURES)
    try:
        raise KeyError("actions")
    except KeyError:
        logger.exception("Failed to run listener")
    (record,) = records
    assert record.exc_info is None and record.getMessage().startswith("Failed to run listener (KeyError: 'actions' (at ")


def test_failure_lines_are_short():
    assert len(failure_line(ValueError("x" * 10_000))) < 400
    assert redact("nothing secret here") == "nothing secret here"
