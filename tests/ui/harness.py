"""What the browser tests stand on: a real `botweave web` process with the gateway, the
Telegram and OpenAI emulators in the test's loop, a TCP relay between the page and the
gateway that the test can cut, and Debian's chromium driven by Playwright.

The relay exists because Chromium, told to go offline, holds an open WebSocket's frames and
delivers them later instead of closing it: to test a reconnect the socket must really close.
The page is loaded through the relay (so its origin is the relay's and its WebSocket goes
through it too); `cut()` aborts every connection and `hold()` refuses new ones until
`release()`, while the gateway goes on publishing.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LINK = re.compile(r"(http://\S+)/#code=(\S+)")


def chromium() -> str | None:
    return shutil.which("chromium")


class Relay:
    """A TCP relay from a port of its own to the gateway's."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.opened = 0
        self.held = False
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> Relay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def stop(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self) -> None:
        """Abort every relayed connection (both sides see a reset, as when a network drops)."""
        for client, upstream in list(self._pairs):
            for writer in (client, upstream):
                writer.transport.abort()
        self._pairs.clear()

    def hold(self) -> None:
        """Cut, and refuse new connections until `release`."""
        self.held = True
        self.cut()

    def release(self) -> None:
        self.held = False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.held:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self.opened += 1
        pair = (writer, up_writer)
        self._pairs.add(pair)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(source, sink, pair))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, pair: Any) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._pairs.discard(pair)
            sink.close()


class Bot:
    """`botweave web CONFIG` in a process of its own, its output collected."""

    def __init__(self, config: dict[str, Any], workdir: Path) -> None:
        self.port = free_port()
        self.config = {**config, "gateway": {**config.get("gateway", {}), "listen": f"127.0.0.1:{self.port}"}}
        self.workdir = workdir
        self.path = workdir / "bot.yaml"
        self.out = workdir / "bot.out"
        self.err = workdir / "bot.err"
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self, timeout: float = 60.0) -> Bot:
        self.path.write_text(yaml.safe_dump(self.config))
        env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(ROOT),
            "XDG_STATE_HOME": str(self.workdir / "state"),
        }
        binary = Path(sys.executable).with_name("botweave")
        command = [str(binary) if binary.exists() else sys.executable, *([] if binary.exists() else ["-m", "botweave.runtime.cli"])]
        self.proc = subprocess.Popen(
            [*command, "web", str(self.path), "--ephemeral"],
            stdout=self.out.open("wb"), stderr=self.err.open("wb"), env=env, cwd=self.workdir,
        )
        await self.next_link(timeout)
        return self

    def links(self) -> list[str]:
        return [f"{m.group(1)}/#code={m.group(2)}" for m in LINK.finditer(self.out.read_text())]

    async def next_link(self, timeout: float = 30.0, *, after: int = 0) -> str:
        """The newest sign-in link printed, once more than `after` were."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            links = self.links()
            if len(links) > after:
                return links[-1]
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"botweave web exited {self.proc.returncode}:\n{self.err.read_text()[-3000:]}")
            await asyncio.sleep(0.1)
        raise TimeoutError(f"botweave web printed no sign-in link:\n{self.err.read_text()[-3000:]}")

    def logs(self) -> str:
        return self.err.read_text(errors="replace")

    async def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        for _ in range(100):
            if self.proc.poll() is not None:
                return
            await asyncio.sleep(0.1)
        self.proc.kill()
        self.proc.wait()


def through(relay: Relay, link: str) -> str:
    """The same link, to the relay's port."""
    return re.sub(r"^http://[^/]+", relay.base_url, link)


async def wait_for(predicate: Any, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def screenshot_path(name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"
