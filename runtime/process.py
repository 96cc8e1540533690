"""The life of a bot process, the one the CLI's `botweave run` and `chat` use: start, answer
until SIGINT/SIGTERM (or the console's input ends, or a platform dies), stop, and say how it
went as an exit code."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from botweave.adapter import Adapter
from botweave.config import ConfigError
from botweave.model_calls import litellm_module
from botweave.runtime.connections import Platforms
from botweave.store import StoreUnavailable
from botweave.tasks import spawn

log = logging.getLogger(__name__)

#: Exit codes: a clean stop; an enabled platform that never came up or died; a configuration
#: that cannot run; a store that cannot be reached at start.
EXIT_OK, EXIT_PLATFORM, EXIT_CONFIG, EXIT_STORE = 0, 1, 2, 3


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


async def serve(
    app: Served, platforms: Platforms, requested: Iterable[str] | None, on_started: Callable[[], None] | None = None
) -> int:
    """Start, answer until told to stop, stop; the exit code. `on_started` runs once
    everything has started (a process botweave owns tunes itself then)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread, or no signals here: Ctrl-C raises KeyboardInterrupt instead
    try:
        return await _serve(app, platforms, requested, stop, on_started)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


async def _serve(
    app: Served,
    platforms: Platforms,
    requested: Iterable[str] | None,
    stop: asyncio.Event,
    on_started: Callable[[], None] | None,
) -> int:
    # litellm takes seconds to import: done off the loop while the platforms connect, so
    # the first turn does not stall every other conversation for it. Only where some agent's
    # calls need it: otherwise the import would compete with the first turns for the
    # interpreter (and freezing the heap waits for it).
    needed = app.role != "ingress" and app.needs_litellm
    loading = asyncio.create_task(asyncio.to_thread(litellm_module)) if needed else None
    try:
        await app.start(requested)
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
    finally:
        if loading is not None:
            await _loaded(loading)
    if on_started is not None:
        on_started()
    if not app.adapters:
        if not platforms.failed:
            log.error("no platform is running; enable one under `platforms:` in bot.yaml")
        await app.stop()
        return EXIT_PLATFORM
    waiters = [spawn(stop.wait(), name="wait for a signal"), spawn(platforms.death(), name="watch the platforms")]
    console = app.adapters.get("console")
    if console is not None and len(app.adapters) == 1:
        waiters.append(spawn(console.finished.wait(), name="wait for end of input"))  # type: ignore[attr-defined]
    done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    died = waiters[1] in done
    if not stop.is_set() and not died:
        await app.drain()  # end of input: answer what was asked, then leave
    await app.stop()
    return EXIT_PLATFORM if platforms.failed or died else EXIT_OK


async def _loaded(loading: asyncio.Future[Any]) -> None:
    """Wait for the import started at serve; a broken litellm is logged here, and each turn
    that needs it says so again."""
    try:
        await loading
    except Exception:
        log.exception("litellm failed to import; agents on litellm models will not answer")
