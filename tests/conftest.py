import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


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
