"""A real terminal for the CLI's tests: `botweave` run inside tmux, typed at with `send-keys`
and read back with `capture-pane`, the way a person's terminal shows it (a pty alone shows
the bytes written, not what stays on the screen after the prompt redraws over them).

Each terminal has a tmux server of its own (`-L`), so tests never see each other's windows.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux): "
                                                      "the terminal tests drive botweave in a tmux window")
#: Printed by the shell in the window once botweave exits, with its exit code.
EXITED = "botweave-exited:"


class Terminal:
    """One tmux window, 120 × 40, running `botweave ARGS` in `cwd`."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        assert TMUX is not None
        self.socket = f"bwtest-{uuid.uuid4().hex[:10]}"
        settings = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TERM": "xterm-256color", **(env or {})}
        command = " ".join(shlex.quote(part) for part in [sys.executable, "-m", "botweave", *args])
        assignments = " ".join(f"{key}={shlex.quote(value)}" for key, value in settings.items())
        # The window stays after botweave exits, showing how it ended.
        script = f"env {assignments} {command}; echo {EXITED}$?; sleep 600"
        self._tmux("new-session", "-d", "-x", "120", "-y", "40", "-c", str(cwd), script)
        self.started = time.monotonic()

    def _tmux(self, *args: str) -> str:
        assert TMUX is not None
        done = subprocess.run([TMUX, "-L", self.socket, *args], capture_output=True, text=True, timeout=10,
                              env={**os.environ, "TMUX": ""})
        return done.stdout

    def screen(self) -> str:
        """What the window shows now, its wrapped lines joined again (-J)."""
        return self._tmux("capture-pane", "-p", "-J")

    def type(self, text: str) -> None:
        """`text` as typed (literally), then Enter."""
        self._tmux("send-keys", "-l", text)
        self._tmux("send-keys", "Enter")

    def key(self, key: str) -> None:
        """One key as tmux names it: C-c, C-d, Enter."""
        self._tmux("send-keys", key)

    def wait_for(self, found: Callable[[str], bool] | str, timeout: float = 30.0) -> str:
        """The screen once `found` holds for it (a string: once it shows that text)."""
        test = (lambda screen: found in screen) if isinstance(found, str) else found
        deadline = time.monotonic() + timeout
        screen = self.screen()
        while not test(screen):
            if time.monotonic() > deadline:
                raise AssertionError(f"not on the screen within {timeout:g}s; it shows:\n{screen}")
            time.sleep(0.1)
            screen = self.screen()
        return screen

    def exit_code(self, timeout: float) -> int:
        """botweave's exit code, once it has exited; fails when it has not within `timeout`."""
        screen = self.wait_for(EXITED, timeout)
        return int(screen.split(EXITED, 1)[1].split()[0])

    def close(self) -> None:
        self._tmux("kill-server")
