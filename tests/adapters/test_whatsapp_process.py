"""WhatsApp through the real CLI: `botweave run` in a subprocess against the Cloud API emulator,
`botweave schedule run` for proactive sends, and `botweave doctor`.

What Meta and the people involved would notice: the verification answered, a forgery refused,
a message answered once however often Meta delivers it (a restart in between included: the
SQLite store remembers), and a scheduled send to someone silent for 24 hours going out as the
template, or refused with an error naming the setting, never dropped in silence.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.conftest import free_port
from tests.emulators.telegram import wait_until
from tests.emulators.whatsapp import ANN, BOB, TOKEN, VERIFY_TOKEN, WhatsAppEmulator

ROOT = Path(__file__).resolve().parents[2]
ECHO = "assistant (offline echo) heard: "
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


@pytest.fixture
async def emulator() -> AsyncIterator[WhatsAppEmulator]:
    emu = await WhatsAppEmulator().start()
    yield emu
    await emu.stop()


def write_config(tmp_path: Path, emu: WhatsAppEmulator, webhook: int, ops: int, **section: object) -> Path:
    config = {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"whatsapp": emu.section(webhook, **section)},
        "schedules": {
            "digest_ann": {"cron": "0 8 * * *", "agent": "assistant", "prompt": "morning digest",
                           "target": f"whatsapp:{ANN.wa_id}"},
            "digest_bob": {"cron": "0 8 * * *", "agent": "assistant", "prompt": "morning digest",
                           "target": f"whatsapp:{BOB.wa_id}"},
        },
        "store": {"url": f"sqlite:///{tmp_path / 'state.db'}"},
        "ops": {"listen": f"127.0.0.1:{ops}"},
    }
    path = tmp_path / "bot.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


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
            await asyncio.sleep(0.2)


async def botweave(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botweave", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(ROOT), env=ENV,
    )


async def stop(proc: asyncio.subprocess.Process) -> str:
    proc.send_signal(signal.SIGTERM)
    _, stderr = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, stderr.decode()
    return stderr.decode()


async def test_botweave_run_answers_once_across_redelivery_and_restart(tmp_path: Path, emulator: WhatsAppEmulator) -> None:
    webhook, ops = free_port(), free_port()
    config = write_config(tmp_path, emulator, webhook, ops)
    emulator.webhook_url = f"http://127.0.0.1:{webhook}/whatsapp"
    proc = await botweave("run", str(config))
    logged = ""
    try:
        await ready(ops)
        assert await emulator.verify(VERIFY_TOKEN, "challenge-42") == (200, "challenge-42")
        assert (await emulator.verify("wrong", "challenge-42"))[0] == 403
        message = emulator.person_message(ANN, text="hello from a phone")
        body = emulator.notification(messages=[message], contacts=[ANN.contact()])
        assert (await emulator.deliver(body, signing="forged")).status == 401
        assert (await emulator.deliver(body, signing="none")).status == 401
        assert (await emulator.deliver(body)).status == 200
        await wait_until(lambda: emulator.texts_to(ANN), 60, "the reply")
        assert (await emulator.deliver(body)).status == 200  # Meta delivers it again
        await asyncio.sleep(1.0)
        assert emulator.texts_to(ANN) == [ECHO + "hello from a phone"]
        await wait_until(lambda: message["id"] in emulator.read, 10, "the read receipt")
    finally:
        if proc.returncode is None:
            logged = await stop(proc)
    assert "whatsapp: connected" in logged and "Traceback" not in logged
    assert TOKEN not in logged and emulator.unauthorised == []

    again = await botweave("run", str(config))  # the same store: what was answered stays answered
    try:
        await ready(ops)
        assert (await emulator.deliver(body)).status == 200
        await emulator.says(ANN, "a new one")
        await wait_until(lambda: len(emulator.texts_to(ANN)) >= 2, 60, "the second reply")
        await asyncio.sleep(0.5)
        assert emulator.texts_to(ANN) == [ECHO + "hello from a phone", ECHO + "a new one"]
    finally:
        if again.returncode is None:
            await stop(again)


async def test_a_scheduled_send_outside_the_window_is_the_template_or_a_clear_error(
    tmp_path: Path, emulator: WhatsAppEmulator
) -> None:
    webhook, ops = free_port(), free_port()
    config = write_config(tmp_path, emulator, webhook, ops)
    emulator.webhook_url = f"http://127.0.0.1:{webhook}/whatsapp"
    proc = await botweave("run", str(config))
    try:
        await ready(ops)
        await emulator.says(ANN, "good morning")  # Ann wrote just now: her window is open
        await wait_until(lambda: emulator.texts_to(ANN), 60, "the reply")
    finally:
        if proc.returncode is None:
            await stop(proc)

    # Ann: inside the window (the mark is in the shared SQLite store), a free-form message.
    ann = await botweave("schedule", "run", "digest_ann", "--config", str(config))
    _, err = await asyncio.wait_for(ann.communicate(), 90)
    assert ann.returncode == 0, err.decode()
    assert emulator.sent_to(ANN)[-1].type == "text" and "morning digest" in emulator.texts_to(ANN)[-1]

    # Bob never wrote: without a template the run fails and says what to set.
    bob = await botweave("schedule", "run", "digest_bob", "--config", str(config))
    _, err = await asyncio.wait_for(bob.communicate(), 90)
    assert bob.returncode == 1
    assert "24-hour" in err.decode() and "platforms.whatsapp.template" in err.decode()
    assert emulator.sent_to(BOB) == []

    # With a template configured, the same run goes out as the template.
    write_config(tmp_path, emulator, webhook, ops, template={"name": "daily_digest", "language": "en_US"})
    bob = await botweave("schedule", "run", "digest_bob", "--config", str(config))
    _, err = await asyncio.wait_for(bob.communicate(), 90)
    assert bob.returncode == 0, err.decode()
    [sent] = emulator.sent_to(BOB)
    assert sent.type == "template" and sent.body["template"]["name"] == "daily_digest"
    assert "morning digest" in sent.text


async def test_doctor_checks_the_token_with_a_real_call(tmp_path: Path, emulator: WhatsAppEmulator) -> None:
    config = write_config(tmp_path, emulator, free_port(), free_port())
    ok = await botweave("doctor", str(config), "--no-model")
    out, err = await asyncio.wait_for(ok.communicate(), 90)
    lines = out.decode().splitlines()
    assert ok.returncode == 0, (lines, err.decode())
    assert "ok   whatsapp: access token accepted; sending as Botweave Test" in lines
    assert ("GET", f"/v21.0/{emulator.section()['phone_number_id']}") in emulator.calls

    write_config(tmp_path, emulator, free_port(), free_port(), access_token="EAAG-revoked")
    bad = await botweave("doctor", str(config), "--no-model")
    out, _ = await asyncio.wait_for(bad.communicate(), 90)
    assert bad.returncode == 1
    [line] = [line for line in out.decode().splitlines() if line.startswith("FAIL whatsapp")]
    assert "refused the access token" in line and "platforms.whatsapp.access_token" in line
    assert "EAAG-revoked" not in out.decode()
