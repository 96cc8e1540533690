import asyncio
import gc
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio

from tests.emulators.openai import OpenAIEmulator
from tests.emulators.telegram import TelegramEmulator

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

#: What reached asyncio's default exception handler or aiohttp's unhandled-exception log while
#: the current test ran; `unhandled_exception_guard` fails the test if anything did.
_unhandled: list[str] = []


def _record_unhandled() -> None:
    """Wrap asyncio's default handler and aiohttp's `log_exception` (its path for a request
    handler that raised: a 500 and a traceback) so every hit is recorded, then reported as usual."""
    from aiohttp.web_protocol import RequestHandler

    default_handler = asyncio.BaseEventLoop.default_exception_handler
    log_exception = RequestHandler.log_exception

    def recording_default_handler(self: asyncio.BaseEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if exc is not None:
            _unhandled.append(f"asyncio default handler: {context.get('message')}: {exc!r}")
        default_handler(self, context)

    def recording_log_exception(self: RequestHandler, *args: Any, **kwargs: Any) -> None:
        _unhandled.append(f"aiohttp unhandled exception: {args[0] if args else ''} {kwargs.get('exc_info')!r}")
        log_exception(self, *args, **kwargs)

    asyncio.BaseEventLoop.default_exception_handler = recording_default_handler  # type: ignore[method-assign]
    RequestHandler.log_exception = recording_log_exception  # type: ignore[method-assign]


_record_unhandled()


@pytest.fixture(autouse=True)
def unhandled_exception_guard() -> Iterator[None]:
    """No exception may reach asyncio's default handler ("Task exception was never
    retrieved", a failing callback) or aiohttp's unhandled-exception path, in any test: every
    task has an owner that retrieves its outcome, every request handler answers. Collected
    garbage is checked too, since that is when an unretrieved task exception is reported."""
    _unhandled.clear()
    yield
    gc.collect()
    found, _unhandled[:] = list(_unhandled), []
    if found:
        pytest.fail("exceptions reached a default handler:\n" + "\n".join(found), pytrace=False)


@pytest.fixture(autouse=True)
def private_state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`botweave run` and `chat` keep state in the user state dir by default: every test (and
    every process it starts) gets its own, never the real one."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server on 127.0.0.1 for this test session (.ci/run installs it)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed (apt-get install -y redis-server; .ci/run does this)")
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
async def start_app() -> AsyncIterator[Callable[[Any], Awaitable[Any]]]:
    """Start an App from a config (mapping or bot.yaml path); every one is stopped afterwards,
    whatever the test did."""
    from botweave import App

    apps: list[App] = []

    async def start(config: Any) -> App:
        app = App.from_config(config)
        apps.append(app)
        await app.start()
        return app

    yield start
    for app in apps:
        await asyncio.wait_for(app.stop(), 15)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Any]:
    """The store contract holds for every backend: tests using this run against each."""
    from botweave.store import MemoryStore, SQLiteStore
    from botweave.store.redis import RedisStore

    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "sqlite":
        sqlite = SQLiteStore(tmp_path / "state.db")
        await sqlite.connect()
        yield sqlite
        await sqlite.close()
        return
    redis = RedisStore(request.getfixturevalue("redis_url"), prefix=f"test:{uuid.uuid4().hex}:")
    await redis.connect()
    yield redis
    await redis.close()


@pytest_asyncio.fixture
async def openai_emulator() -> AsyncIterator[OpenAIEmulator]:
    emulator = OpenAIEmulator()
    await emulator.start()
    try:
        yield emulator
    finally:
        await emulator.stop()


@pytest_asyncio.fixture
async def llm(openai_emulator: OpenAIEmulator) -> OpenAIEmulator:
    """The loopback model under the short name the agent and tool tests use; a module that
    needs it to answer differently defines its own."""
    return openai_emulator


@pytest_asyncio.fixture
async def telegram_emulator() -> AsyncIterator[TelegramEmulator]:
    emu = await TelegramEmulator().start()
    try:
        yield emu
    finally:
        await emu.stop()
