"""Watchdogs: a bot process that wedges exits, so that its supervisor starts it again.

Two ways a process can be alive and useless: it never finishes starting (an import that
hangs, an SDK's connect blocked on DNS), or its event loop stops turning (a plugin calling
`time.sleep`, a CPU-bound loop in a tool). Neither can be seen from the event loop itself,
so both are watched from threads.

- `LoopWatch` measures the loop: the loop runs a small callback every `interval` seconds
  and a thread looks at when it last ran. Past `ops.loop_stall_seconds` the stall is logged,
  counted (`botweave_loop_stalls_total`, `botweave_loop_stall_seconds`) and `/healthz`
  answers 503 (the ops endpoint answers from a thread of its own, runtime/ops.py). Every App
  that serves the ops endpoint measures its loop.
- `Watchdogs` are what the bot's own process adds (`botweave run` and `web`, or a program
  that hands them to `App.serve`): a start-up deadline (`ops.startup_timeout_seconds`), and,
  for a stalled loop, every thread's stack on stderr at the first threshold and the exit at
  twice it. Writing to stderr from faulthandler and ending the process are decisions for
  the program that owns the process, so an App embedded in another program does neither
  unless that program asks.

Exit codes: 4 (did not start serving in time) and 5 (the event loop stalled), beside 0
(clean stop), 1 (a platform), 2 (configuration) and 3 (the store) of runtime/process.py.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

from botweave.metrics import LOOP_STALL_SECONDS, LOOP_STALLS, STARTUP_SECONDS
from botweave.runtime.config import OpsConfig

log = logging.getLogger(__name__)

#: Exit codes of the watchdogs (see the module docstring).
EXIT_STARTUP, EXIT_STALLED = 4, 5
#: How often the start-up deadline is looked at.
DEADLINE_TICK_S = 0.25


class LoopWatch:
    """How far behind the event loop is, measured from a thread (see the module docstring).

    `on_stall` is called (in the watch thread) once per stall when it passes `stall_seconds`,
    `on_overdue` once when it passes twice that; the process's `Watchdogs` set them."""

    def __init__(self, stall_seconds: float) -> None:
        self.stall_seconds = stall_seconds
        self.on_stall: Callable[[float], None] | None = None
        self.on_overdue: Callable[[float], None] | None = None
        self._last = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported = self._overdue = False

    @property
    def interval(self) -> float:
        """How often the loop's callback runs, and the thread looks."""
        return min(1.0, self.stall_seconds / 4) if self.stall_seconds > 0 else 1.0

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._thread is not None:
            return
        self._loop = loop
        self._stop.clear()
        self._beat()
        self._thread = threading.Thread(target=self._watch, name="botweave loop watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        LOOP_STALL_SECONDS.set(0)

    def set_threshold(self, seconds: float) -> None:
        """A reload changed `ops.loop_stall_seconds`."""
        self.stall_seconds = seconds

    def behind(self) -> float:
        """Seconds the loop's callback is overdue right now (0 while the loop keeps up)."""
        return max(0.0, time.monotonic() - self._last - self.interval)

    def stalled(self) -> float | None:
        """How long the loop has been stalled, when that is past the threshold; else None."""
        behind = self.behind()
        return behind if self.running and self.stall_seconds > 0 and behind >= self.stall_seconds else None

    def _beat(self) -> None:
        self._last = time.monotonic()
        if self._loop is not None and not self._stop.is_set():
            self._handle = self._loop.call_later(self.interval, self._beat)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            behind = self.behind()
            LOOP_STALL_SECONDS.set(behind)
            limit = self.stall_seconds
            if limit <= 0:
                continue
            if behind < limit:
                if self._reported:
                    log.warning("the event loop runs again after a stall")
                self._reported = self._overdue = False
                continue
            if not self._reported:
                self._reported = True
                LOOP_STALLS.inc()
                log.error(
                    "the event loop has not run a callback for %.0fs (ops.loop_stall_seconds: %g); /healthz answers 503",
                    behind, limit,
                )
                if self.on_stall is not None:
                    self.on_stall(behind)
            if behind >= 2 * limit and not self._overdue:
                self._overdue = True
                if self.on_overdue is not None:
                    self.on_overdue(behind)


class Watchdogs:
    """The watchdogs of the bot's own process (see the module docstring). Made as early as
    the process starts (the deadline counts from then: loading the configuration and the
    plugins' imports are part of starting), told the configured settings once they are read
    (`configure`), and told when the bot serves (`serving`)."""

    def __init__(self, ops: OpsConfig | None = None, *, began: float | None = None) -> None:
        self.began = time.monotonic() if began is None else began
        self._timeout = (ops or OpsConfig()).startup_timeout_seconds
        self._served = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self) -> Watchdogs:
        """Start the start-up deadline (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._deadline, name="botweave start-up deadline", daemon=True)
            self._thread.start()
        return self

    def configure(self, ops: OpsConfig) -> None:
        """The configured deadline, counted from `began`."""
        self._timeout = ops.startup_timeout_seconds

    def serving(self, watch: LoopWatch, loop: asyncio.AbstractEventLoop) -> None:
        """The bot serves: the deadline is off; from now on the loop's stalls write stacks
        and end the process (a stall while starting is the deadline's)."""
        self._served.set()
        STARTUP_SECONDS.set(time.monotonic() - self.began)
        watch.on_stall = self._stalled
        watch.on_overdue = self._overdue
        watch.start(loop)

    def close(self) -> None:
        self._served.set()

    def _deadline(self) -> None:
        while not self._served.wait(DEADLINE_TICK_S):
            timeout = self._timeout
            if timeout > 0 and time.monotonic() - self.began >= timeout:
                log.error(
                    "not serving %gs after the start (ops.startup_timeout_seconds); every thread's stack follows; "
                    "exiting with code %d so that a supervisor starts the bot again", timeout, EXIT_STARTUP,
                )
                dump_stacks()
                _exit(EXIT_STARTUP)

    def _stalled(self, behind: float) -> None:
        log.error("every thread's stack follows (the event loop is stalled)")
        dump_stacks()

    def _overdue(self, behind: float) -> None:
        log.error(
            "the event loop has been stalled for %.0fs, twice ops.loop_stall_seconds; exiting with code %d so that "
            "a supervisor starts the bot again", behind, EXIT_STALLED,
        )
        _exit(EXIT_STALLED)


def dump_stacks() -> None:
    """Every thread's stack on stderr: faulthandler's, which needs no lock and works while
    the thread that holds one is stuck, or Python's own when stderr is not a real file."""
    sys.stderr.flush()
    try:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, OSError):  # no file descriptor behind stderr
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            print(f"Thread {names.get(ident, ident)}:", file=sys.stderr)
            traceback.print_stack(frame, file=sys.stderr)
    sys.stderr.flush()


def _exit(code: int) -> None:
    """End the process now, from a watchdog thread: the event loop is not there to stop it."""
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # boundary: leaving the process; no handler's flush may stop the exit
            pass
    sys.stderr.flush()
    os._exit(code)
