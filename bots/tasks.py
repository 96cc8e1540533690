"""Background tasks with an owner: nothing fails unseen, nothing fails twice in the logs.

asyncio keeps only a weak reference to a task, and an exception nobody retrieves surfaces at
garbage collection through the loop's default handler ("Task exception was never retrieved",
a traceback at some random later moment, possibly carrying a token in its message). So every
task the product starts is started through a `TaskOwner`: it holds the task until it ends and
then retrieves its outcome, logging a failure exactly once, as one line that names the owner,
the task, the exception and where it was raised, with known secrets masked. Owners also stop
what they started (`close`), so a component's shutdown cannot leave orphans behind.

`register_secret` is how credentials become known here: `Adapter.secret` registers every
credential it hands out, so a token in an exception message is masked in these lines.
"""

from __future__ import annotations

import asyncio
import logging
import re
import traceback
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

FailureReporter = Callable[[BaseException], None]

MAX_LINE = 300  # characters of an exception message kept in a failure line

_secrets: set[str] = set()
# Token shapes worth masking even when nobody registered them: Slack tokens, Telegram bot
# tokens, and the password of a URL (redis://:pw@host).
_TOKEN_SHAPES = re.compile(
    r"xox[a-z]-[A-Za-z0-9-]{6,}|xapp-[A-Za-z0-9-]{6,}|\b\d{5,}:[A-Za-z0-9_-]{30,}\b|(?<=://)[^/\s:@]*:[^/\s@]+(?=@)"
)


def register_secret(value: str) -> None:
    """Mask `value` in every failure line from now on (short values would mask ordinary words)."""
    if len(value) >= 6:
        _secrets.add(value)


def redact(text: str) -> str:
    """`text` with registered secrets and token-shaped strings replaced by `***`."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return _TOKEN_SHAPES.sub("***", text)


def failure_line(exc: BaseException) -> str:
    """One line for a failure: type, message (masked, shortened) and the innermost frame."""
    message = " ".join(str(exc).split())
    if len(message) > MAX_LINE:
        message = message[: MAX_LINE - 1] + "…"
    where = ""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if frames:
        last = frames[-1]
        where = f" (at {_short_path(last.filename)}:{last.lineno} in {last.name})"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return redact(text + where)


def _short_path(path: str) -> str:
    """A source path from the package or site-packages on, not the machine's layout."""
    for marker in ("/site-packages/", "/botweave/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


class OneLineFailures(logging.Filter):
    """For a library logger that logs failures with their traceback (slack-bolt's error
    handlers): the record keeps its message and gets the failure line instead, so every
    failure the product logs reads the same, in one line, with secrets masked."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.getMessage()} ({failure_line(record.exc_info[1])})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


ONE_LINE_FAILURES = OneLineFailures()


class TaskOwner:
    """Starts, holds and (on `close`) stops a component's background tasks.

    A task that raises is reported once, by the owner's reporter: by default one ERROR line
    `<owner>: <task> failed: <failure_line>`; a component that has something better to say (or
    someone to tell) passes its own reporter to `spawn`. Cancellation is not a failure.
    """

    def __init__(self, owner: str, *, logger: logging.Logger | None = None) -> None:
        self.owner = owner
        self._log = logger or log
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reporters: dict[asyncio.Task[Any], FailureReporter] = {}

    def spawn(
        self, coro: Coroutine[Any, Any, T], *, name: str, on_failure: FailureReporter | None = None
    ) -> asyncio.Task[T]:
        """Run `coro` in a task this owner holds until it ends."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.owner}:{name}")
        self._tasks.add(task)
        if on_failure is not None:
            self._reporters[task] = on_failure
        task.add_done_callback(self._settle)
        return task

    def _settle(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        reporter = self._reporters.pop(task, None)
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here, so asyncio never reports it at collection
        if exc is None:
            return
        if reporter is not None:
            try:
                reporter(exc)
                return
            except Exception as failed:  # boundary: the task owner's reporter must not hide the failure it was given
                self._log.error("%s: reporting a failure failed: %s", self.owner, failure_line(failed))
        name = task.get_name().removeprefix(f"{self.owner}:")
        self._log.error("%s: %s failed: %s", self.owner, name, failure_line(exc))

    def __len__(self) -> int:
        return len(self._tasks)

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(set(self._tasks))

    async def wait(self, timeout: float | None = None) -> set[asyncio.Task[Any]]:
        """Wait up to `timeout` for the tasks running now; the ones still running."""
        if not self._tasks:
            return set()
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        return pending

    async def drain(self) -> None:
        """Wait until no task is left, including tasks started while waiting."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self, timeout: float = 0.0, *, grace: float = 1.0) -> None:
        """Give running tasks `timeout` to finish, cancel the rest, and wait `grace` for them."""
        pending = await self.wait(timeout) if timeout > 0 else set(self._tasks)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=grace)


_loose = TaskOwner("botweave")


def spawn(coro: Coroutine[Any, Any, T], *, name: str, on_failure: FailureReporter | None = None) -> asyncio.Task[T]:
    """A task held by the process-wide owner, for code that awaits or cancels the task itself
    (a waiter in `asyncio.wait`) yet must never leave its failure unretrieved."""
    return _loose.spawn(coro, name=name, on_failure=on_failure)
