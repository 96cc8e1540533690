"""A bot's whole life as a process, through the Python API (`App.from_config(path).run()`) and
`App.serve`: it blocks until a signal and stops cleanly, and a platform that dies ends it
with exit code 1."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from botweave import App
from botweave.runtime.app import EXIT_OK, EXIT_PLATFORM

from tests.conftest import free_port
from tests.emulators.telegram import TelegramEmulator, adapter_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "import sys\nfrom botweave import App\n\nsys.exit(App.from_config(sys.argv[1]).run())\n"


async def ready(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            assert time.monotonic() < deadline, "the bot never became ready"
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_app_run_blocks_until_a_signal_and_stops_cleanly(tmp_path: Path, sig: signal.Signals) -> None:
    port = free_port()
    (tmp_path / "bot.py").write_text(SCRIPT)
    config = tmp_path / "bot.yaml"
    config.write_text(f"agents: {{a: {{model: offline/echo}}}}\nplatforms: {{console: {{}}}}\nops: {{listen: '127.0.0.1:{port}'}}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(tmp_path / "bot.py"), str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=str(ROOT), env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    try:
        await ready(port)
        assert proc.returncode is None  # run() blocks: stdin is still open
        proc.send_signal(sig)
        _, stderr = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0, stderr.decode()
    errors = stderr.decode()
    assert "console: connected as botweave (pipe)" in errors  # run() logs at INFO unless told otherwise
    assert "Traceback" not in errors


async def test_a_platform_that_dies_ends_serve_with_exit_code_1(telegram_emulator: TelegramEmulator) -> None:
    app = App.from_config({
        "agents": {"a": {"model": "offline/echo"}},
        "platforms": {"telegram": {**adapter_config(telegram_emulator, poll_timeout=1), "conflict_retries": 0}},
    })
    serving = asyncio.create_task(app.serve())
    await asyncio.sleep(0.3)
    assert not serving.done()
    telegram_emulator.conflict(times=1)  # another instance polls with our token: Telegram's 409
    code = await asyncio.wait_for(serving, 15)
    assert code == EXIT_PLATFORM != EXIT_OK
    assert "409 Conflict" in app.failed_platforms["telegram"]
