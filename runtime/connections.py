"""The platform connections this process holds: the adapters it runs, started with retries,
watched for a death, asked for readiness; with a shared stream, the leaders that hold the
receiving connections for the whole deployment."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Protocol, cast

from botweave.adapter import Adapter, Admits, PlatformRejected
from botweave.config import BotConfig, PlatformConfig
from botweave.events import ConversationEvents
from botweave.runtime.config import Config
from botweave.runtime.platforms import installed_platforms
from botweave.store.base import Store
from botweave.store.carrier import PlatformLeader
from botweave.types import BotMessage, PlatformEvent, PressAnswer

log = logging.getLogger(__name__)

#: Pauses between the tries to start a platform: three tries over about ten seconds.
START_RETRY_PAUSES = (3.0, 7.0)
#: How often `death` looks for a platform that died.
DEATH_WATCH_S = 0.5


class Receiver(Protocol):
    """Where an adapter hands what it receives: the App's `submit` and `answer_press`."""

    async def submit(self, item: BotMessage | PlatformEvent) -> None: ...

    async def answer_press(self, event: PlatformEvent) -> tuple[PlatformEvent, PressAnswer]: ...


class Platforms:
    """The platforms this process runs: their adapters (a dict others hold too, so an adapter
    added later is seen by delivery's targets and the approval desk), each one's effective
    `BotConfig`, the ones that never came up, and, with a shared stream, the leaders holding
    the receiving connections."""

    def __init__(self, config: Config, events: ConversationEvents | None = None, store: Store | None = None) -> None:
        self._config = config
        self._events = events  # handed to every adapter (the web platform shows its messages through them)
        self._store = store  # handed to every adapter, for what a platform keeps beside its API
        #: The access rules, handed to every adapter once the runtime has them (Matrix asks
        #: them before accepting an invitation).
        self.admits: Admits | None = None
        self.adapters: dict[str, Adapter] = {}
        self.configs: dict[str, BotConfig] = {}
        #: Enabled platforms that never came up, with why (the CLI exits 1 for these).
        self.failed: dict[str, str] = {}
        self.leaders: list[PlatformLeader] = []

    def add(self, adapter: Adapter, receiver: Receiver) -> None:
        self.adapters[adapter.platform] = adapter
        self.configs[adapter.platform] = self._config.bot_config_for(adapter.platform)
        adapter.bind(receiver.submit, receiver.answer_press, events=self._events, store=self._store, admits=self.admits)

    def create(self, name: str, section: PlatformConfig, receiver: Receiver) -> Adapter:
        """A fresh adapter of platform `name`, handing what it receives to `receiver`."""
        adapter = installed_platforms()[name].create(section)
        adapter.bind(receiver.submit, receiver.answer_press, events=self._events, store=self._store, admits=self.admits)
        return adapter

    def bot_config(self, platform: str) -> BotConfig:
        return self.configs.get(platform) or self._config.bot_config_for(platform)

    def reconfigure(self, config: Config, reconnecting: Collection[str] = ()) -> None:
        """A reloaded configuration: each running platform's policies (its effective
        `BotConfig`) are the new ones for the next item, while an item under way keeps those
        it started with. No connection is touched here: the new section reaches a running
        adapter only when its connection settings are the same, and the platforms
        `reconnecting` keep theirs until `replace` starts them afresh."""
        self._config = config
        for name, adapter in self.adapters.items():
            section = config.platform(name)
            if section is not None and name not in reconnecting:
                adapter.config = section
            self.configs[name] = config.bot_config_for(name)
        for leader in self.leaders:
            section = config.platform(leader.platform)
            if leader.adapter is not None and section is not None and leader.platform not in reconnecting:
                leader.adapter.config = section

    async def replace(
        self, name: str, section: PlatformConfig | None, receiver: Receiver, receives: Callable[[Adapter], bool]
    ) -> str | None:
        """Stop platform `name` and, unless `section` is None (switched off), start it afresh
        on `section`, with the retries of a start; the failure, when it does not come up."""
        old = self.adapters.pop(name, None)
        self.configs.pop(name, None)
        self.failed.pop(name, None)
        if old is not None:
            await _stop(name, old)
        if section is None:
            log.info("platform %s: stopped (switched off in the configuration)", name)
            return None
        self.add(self.create(name, section, receiver), receiver)
        failure = await self._start(name, section, receiver, inbound=receives(self.adapters[name]))
        if failure is not None:
            self.failed[name] = failure
            self.adapters.pop(name)
            self.configs.pop(name)
        return failure

    def receiving(self, platform: str) -> Adapter | None:
        """The adapter that receives `platform`'s events in this process: the leader's while
        it holds the connection (a shared stream), else the one that was started."""
        leader = next((leader for leader in self.leaders if leader.platform == platform), None)
        if leader is not None:
            return cast("Adapter | None", leader.adapter)
        return self.adapters.get(platform)

    async def start(
        self, sections: Mapping[str, PlatformConfig], receiver: Receiver, receives: Callable[[Adapter], bool]
    ) -> None:
        """Start every adapter; one that never comes up is dropped and named in `failed`."""
        for name in list(self.adapters):
            failure = await self._start(name, sections.get(name), receiver, inbound=receives(self.adapters[name]))
            if failure is not None:
                self.failed[name] = failure
                self.adapters.pop(name)
                self.configs.pop(name)

    async def _start(self, name: str, section: PlatformConfig | None, receiver: Receiver, *, inbound: bool) -> str | None:
        """Start a platform, trying again over ~10 s (a network blip at boot is not an
        outage) unless the platform refused us for good; the failure, in one line, when it
        never came up. Each try gets a fresh adapter: SDK clients do not restart once closed."""
        failure = ""
        for attempt, pause in enumerate((*START_RETRY_PAUSES, None), start=1):
            adapter = self.adapters[name]
            try:
                await adapter.start(inbound=inbound)
                _connected(name, adapter, inbound)
                return None
            except Exception as exc:  # boundary: a platform connection's start, whatever its SDK raises
                failure = f"{exc}" if isinstance(exc, PlatformRejected) else f"{type(exc).__name__}: {exc}"
                await _stop(name, adapter, quiet=True)
                if pause is None or section is None or isinstance(exc, PlatformRejected):
                    break
                log.warning("platform %s did not start (%s); try %d of %d in %.0fs",
                            name, failure, attempt + 1, len(START_RETRY_PAUSES) + 1, pause)
                await asyncio.sleep(pause)
                self.add(installed_platforms()[name].create(section), receiver)
        log.error("platform %s failed to start: %s", name, failure)
        return failure

    async def stop(self) -> None:
        for name, adapter in self.adapters.items():
            await _stop(name, adapter)

    async def death(self) -> None:
        """Returns when a running platform's connection ended for good (its adapter says why)."""
        while True:
            await asyncio.sleep(DEATH_WATCH_S)
            for name, adapter in list(self.adapters.items()):
                if adapter.failure:
                    log.error("platform %s stopped: %s", name, adapter.failure)
                    self.failed[name] = adapter.failure
                    return

    async def readiness(self) -> dict[str, str]:
        """The platforms that cannot serve right now, each with why: every one started (where
        this process holds a platform's receiving connection, that one counts) or that
        failed to start."""
        failing: dict[str, str] = {}
        for name, adapter in list(self.adapters.items()):
            try:
                problem = await (self.receiving(name) or adapter).readiness()
            except Exception as exc:  # boundary: a platform connection's readiness, whatever its SDK raises
                problem = f"{type(exc).__name__}: {exc}"
            if problem:
                failing[name] = problem
        for name, failure in self.failed.items():
            failing.setdefault(name, f"failed to start: {failure}")
        return failing


async def _stop(name: str, adapter: Adapter, *, quiet: bool = False) -> None:
    """Stop one platform's connection: its SDK may fail in any way while closing, and that
    never keeps the others from stopping (`quiet` after a failed start, whose line says why)."""
    try:
        await adapter.stop()
    except Exception:  # boundary: a platform connection's stop, whatever its SDK raises
        if not quiet:
            log.exception("platform %s did not stop cleanly", name)


def _connected(name: str, adapter: Adapter, inbound: bool) -> None:
    me = adapter.self_user
    who = (me.username or me.display_name or me.user_id) if me is not None else "?"
    how = (adapter.mode or "receiving") if inbound else "sending only"
    log.info("%s: connected as %s (%s)", name, who, how, extra={"platform": name, "bot": who, "mode": how})
