"""Teams from an operator's side: `botweave init` writes a section that loads, `botweave doctor`
gets a token and reads the OpenID metadata (and says what to fix when either fails), and
`botweave run` answers a signed activity from the Bot Connector emulator as a real process."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from botweave.runtime.config import load_config
from botweave.runtime.doctor import doctor
from botweave.runtime.scaffold import init

from tests.conftest import free_port
from tests.emulators.teams import APP_ID, APP_PASSWORD, PERSONAL, TeamsEmulator, text_shown
from tests.emulators.telegram import wait_until
from tests.test_process import ready

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def emulator() -> AsyncIterator[TeamsEmulator]:
    emu = await TeamsEmulator().start()
    yield emu
    await emu.stop()


def test_init_writes_a_teams_section_that_waits_for_its_credentials(tmp_path: Path) -> None:
    path = tmp_path / "bot.yaml"
    out = io.StringIO()
    assert init(str(path), ["teams"], "offline/echo", out=out, err=io.StringIO(), interactive=False) == 0
    config = load_config(path, env={"TEAMS_APP_ID": APP_ID, "TEAMS_APP_PASSWORD": APP_PASSWORD})
    assert set(config.enabled_platforms()) == {"teams"}
    section = config.platform("teams")
    assert section is not None and section.app_id == APP_ID  # type: ignore[attr-defined]
    assert section.path == "/api/messages"  # type: ignore[attr-defined]
    bare = load_config(path, env={})
    assert bare.enabled_platforms() == {}
    assert bare.missing_credentials("teams") == [
        "platforms.teams.app_id is empty (set TEAMS_APP_ID)",
        "platforms.teams.app_password is empty (set TEAMS_APP_PASSWORD)",
    ]


def write(tmp_path: Path, emulator: TeamsEmulator, **teams: str) -> Path:
    section = {**emulator.config(), **teams}
    lines = "".join(f"    {key}: '{value}'\n" for key, value in section.items())
    config = tmp_path / "bot.yaml"
    config.write_text(
        "bot: {unknown_user_policy: allow}\n"
        "agents:\n  assistant: {model: offline/echo}\n"
        f"platforms:\n  teams:\n{lines}"
    )
    return config


async def test_doctor_gets_a_token_and_reads_the_openid_metadata(tmp_path: Path, emulator: TeamsEmulator) -> None:
    out = io.StringIO()
    code = await doctor(str(write(tmp_path, emulator)), out=out, model=False)
    lines = out.getvalue().splitlines()
    assert code == 0, lines
    assert f"ok   teams: a token for app {APP_ID} from the token endpoint" in lines
    assert "ok   teams openid metadata: signing keys of issuer https://api.botframework.com from the OpenID metadata" in lines
    assert [r["grant_type"] for r in emulator.token_requests] == ["client_credentials"]


async def test_doctor_names_the_setting_when_the_password_or_the_metadata_is_wrong(
    tmp_path: Path, emulator: TeamsEmulator
) -> None:
    config = write(tmp_path, emulator, app_password="not-the-secret",
                   openid_metadata_url=f"{emulator.base}/nothing/here")
    out = io.StringIO()
    code = await doctor(str(config), out=out, model=False)
    lines = out.getvalue().splitlines()
    assert code == 1
    token = next(line for line in lines if line.startswith("FAIL teams: "))
    assert "invalid_client" in token and "fix: set platforms.teams.app_id and app_password" in token
    assert "not-the-secret" not in out.getvalue()
    metadata = next(line for line in lines if line.startswith("FAIL teams openid metadata: "))
    assert "HTTP 404" in metadata and "platforms.teams.openid_metadata_url" in metadata


async def test_botweave_run_answers_a_signed_activity_and_refuses_an_unsigned_one(
    tmp_path: Path, emulator: TeamsEmulator
) -> None:
    port, ops = free_port(), free_port()
    config = write(tmp_path, emulator, listen=f"127.0.0.1:{port}")
    config.write_text(config.read_text() + f"ops: {{listen: '127.0.0.1:{ops}'}}\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botweave", "run", str(config),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=str(ROOT), env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    url = f"http://127.0.0.1:{port}/api/messages"
    try:
        await ready(ops)
        assert await emulator.deliver(emulator.message("from a real process"), url=url, token=None) == 401
        assert await emulator.deliver(emulator.message("hello from Teams"), url=url) == 200
        await wait_until(lambda: emulator.bot_posts(PERSONAL), 60, "the answer")
        assert [text_shown(p) for p in emulator.bot_posts(PERSONAL)] == ["assistant (offline echo) heard: hello from Teams"]
        proc.terminate()
        _, stderr = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    errors = stderr.decode()
    assert proc.returncode == 0, errors
    assert "teams: connected as" in errors and "Traceback" not in errors
    assert APP_PASSWORD not in errors
