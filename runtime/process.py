"""The life of a bot process, the one the CLI's `botweave run` and `chat` use: start, answer
until SIGINT/SIGTERM (or the console's input ends, or a platform dies), stop, and say how it
went as an exit code.

With `Watchdogs` (the bot's own process: `botweave run` and `web`), SIGHUP reloads the
configuration (`App.reload`, every process of the bot when they share a store) without
stopping anything, and the start-up deadline and the loop watchdog may end the process
early, with exit codes of their own (runtime/watchdog.py)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from botweave.adapter import Adapter
from botweave.config import ConfigError
from botweave.model_calls import import_litellm
from botweave.runtime.connections import Platforms
from botweave.runtime.exits import EXIT_CONFIG, EXIT_OK, EXIT_PLATFORM, EXIT_STORE
from botweave.runtime.watchdog import EXIT_STALLED, EXIT_STARTUP, LoopWatch, Watchdogs
from botweave.store import StoreUnavailable
from botweave.tasks import TaskOwner, spawn

log = logging.getLogger(__name__)

__all__ = ["EXIT_OK", "EXIT_PLATFORM", "EXIT_CONFIG", "EXIT_STORE", "EXIT_STARTUP", "EXIT_STALLED", "Served", "serve"]


class Served(Protocol):
    """The App, as its serve loop sees it."""

    @property
    def role(self) -> str: ...

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def needs_litellm(self) -> bool: ...

    async def start(self, platforms: Iterable[str] | None = None) -> None: ...

    async def stop(self) -> None: ...

    async def drain(self) -> None: ...

    async def reload(self, *, everywhere: bool = False) -> Any: ...

async def serve(
    app: Served,
    platforms: Platforms,
    loop_watch: LoopWatch,
    requested: Iterable[str] | None,
    on_started: Callable[[], None] | None = None,
    watchdogs: Watchdogs | None = None,
) -> int:
    """Start, answer until told to stop, stop; the exit code. `on_started` runs once
    everything has started (a process botweave owns tunes itself then). `watchdogs` hand the
    process to the bot: SIGHUP reloads it, and the watchdogs may end it; without them no
    SIGHUP handler is installed (a program embedding the bot may have its own)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reloads = _Reloads(app)
    handled: list[signal.Signals] = []
    wanted = [(signal.SIGINT, stop.set), (signal.SIGTERM, stop.set)]
    hangup = getattr(signal, "SIGHUP", None)  # not on Windows
    if watchdogs is not None and hangup is not None:  # the bot's own process: SIGHUP reloads
        wanted.append((hangup, reloads.asked))
    for sig, action in wanted:
        try:
            loop.add_signal_handler(sig, action)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals here: Ctrl-C raises KeyboardInterrupt instead
    if watchdogs is not None:
        watchdogs.arm()
    try:
        return await _serve(app, platforms, loop_watch, requested, stop, on_started, watchdogs, reloads)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await reloads.close()
        if watchdogs is not None:
            watchdogs.close()


class _Reloads:
    """SIGHUP: a reload, once the bot serves (one asked for while it starts waits for that)."""

    def __init__(self, app: Served) -> None:
        self._app = app
        self._tasks = TaskOwner("reload on SIGHUP")
        self._serving = False
        self._pending = False

    def asked(self) -> None:
        if self._serving:
            self._tasks.spawn(self._app.reload(everywhere=True), name="reload")
        elif not self._pending:
            self._pending = True
            log.info("SIGHUP while starting: the configuration is reloaded once the bot serves")

    def serving(self) -> None:
        self._serving = True
        if self._pending:
            self.asked()

    async def close(self) -> None:
        await self._tasks.close(5.0, grace=1.0)


async def _serve(
    app: Served,
    platforms: Platforms,
    loop_watch: LoopWatch,
    requested: Iterable[str] | None,
    stop: asyncio.Event,
    on_started: Callable[[], None] | None,
    watchdogs: Watchdogs | None,
    reloads: _Reloads,
) -> int:
    # litellm takes seconds to import: done off the loop while the platforms connect, so
    # the first turn does not stall every other conversation for it. Only where some agent's
    # calls need it: otherwise the import would compete with the first turns for the
    # interpreter (and freezing the heap waits for it).
    # A stop asked for meanwhile (Ctrl-C, SIGTERM) does not wait for the import.
    needed = app.role != "ingress" and app.needs_litellm
    loading = import_litellm() if needed else None
    if loading is not None:
        loading.add_done_callback(_loaded)
    try:
        await app.start(requested)
        if watchdogs is not None:  # serving now: a stall is the loop watch's from here on
            watchdogs.serving(loop_watch, asyncio.get_running_loop())
        reloads.serving()
    except StoreUnavailable as exc:
        log.error("%s", exc)
        await app.stop()
        return EXIT_STORE
    except OSError as exc:  # the ops endpoint's or the gateway's address is taken or not ours
        log.error("%s", exc)
        await app.stop()
        return EXIT_CONFIG
    except ConfigError as exc:  # settings only the start can judge (a gateway open to all)
        log.error("%s", exc)
        await app.stop()
        return EXIT_CONFIG
    if not app.adapters:
        if not platforms.failed:
            log.error("no platform is running; enable one under `platforms:` in bot.yaml")
        await app.stop()
        return EXIT_PLATFORM
    waiters = [spawn(stop.wait(), name="wait for a signal"), spawn(platforms.death(), name="watch the platforms")]
    # The end of the console's input stops the bot when the console is all it runs, or when
    # it is a terminal: Ctrl-C or Ctrl-D there is the person who started the bot leaving
    # (`botweave web` beside the console). A pipe ending beside other platforms (a service
    # with no input) stops nothing.
    console = app.adapters.get("console")
    if console is not None and (len(app.adapters) == 1 or console.mode == "terminal"):
        waiters.append(spawn(console.finished.wait(), name="wait for end of input"))  # type: ignore[attr-defined]
    if loading is not None:
        await asyncio.wait({loading, *waiters}, return_when=asyncio.FIRST_COMPLETED)
    if on_started is not None and (loading is None or loading.done()):
        on_started()
    done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    died = waiters[1] in done
    if not stop.is_set() and not died:
        await app.drain()  # end of input: answer what was asked, then leave
    await reloads.close()  # a reload under way finishes (or is cut off) before the stop
    await app.stop()
    return EXIT_PLATFORM if platforms.failed or died else EXIT_OK


def _loaded(loading: asyncio.Future[Any]) -> None:
    """The import started at serve has ended: a broken litellm is logged here, and each turn
    that needs it says so again."""
    error = None if loading.cancelled() else loading.exception()
    if error is not None:
        log.error("litellm failed to import; agents on litellm models will not answer", exc_info=error)
