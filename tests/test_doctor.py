"""`botweave doctor` against the emulators: each kind of failure is one FAIL line with its fix,
and any failure makes the exit code 1."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from pathlib import Path

from botweave.runtime.doctor import doctor

from tests.emulators.openai import OpenAIEmulator
from tests.emulators.telegram import TelegramEmulator

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, *, token: str, emu: TelegramEmulator, model: OpenAIEmulator, store: str = "memory://") -> Path:
    config = tmp_path / "bot.yaml"
    config.write_text(
        "agents:\n"
        f"  helper: {{model: openai/gpt-emu, api_base: '{model.base_url}', api_key: sk-test}}\n"
        "platforms:\n"
        f"  telegram: {{token: '{token}', api_base_url: '{emu.api_base_url}'}}\n"
        "  discord: {token: '${DISCORD_TOKEN_UNSET:-}'}\n"
        f"store: {{url: '{store}'}}\n"
    )
    return config


async def run(config: Path, **options: bool) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = await doctor(str(config), out=out, **options)
    return code, out.getvalue().splitlines()


async def test_a_working_config_is_all_ok_and_a_platform_without_credentials_is_skipped(
    tmp_path: Path, telegram_emulator: TelegramEmulator, openai_emulator: OpenAIEmulator, redis_url: str
) -> None:
    config = write(tmp_path, token=telegram_emulator.token, emu=telegram_emulator, model=openai_emulator, store=redis_url)
    code, lines = await run(config)
    assert code == 0, lines
    assert lines[0].startswith("ok   config: ")
    assert "ok   telegram: token accepted by getMe (@ThisBot)" in lines
    assert "ok   telegram webhook: none needed (polling)" in lines
    assert "skip discord: no credentials: platforms.discord.token is empty (set DISCORD_TOKEN_UNSET)" in lines
    assert f"ok   store: {redis_url} answers" in lines
    assert any(line.startswith("ok   model openai/gpt-emu (agent helper): answered in") for line in lines)
    assert openai_emulator.requests[-1]["max_tokens"] == 1


async def test_a_rejected_token_fails_with_its_fix(
    tmp_path: Path, telegram_emulator: TelegramEmulator, openai_emulator: OpenAIEmulator
) -> None:
    config = write(tmp_path, token="999:wrong", emu=telegram_emulator, model=openai_emulator)
    code, lines = await run(config, model=False)
    assert code == 1
    assert (
        "FAIL telegram: getMe refused the token (401 Unauthorized) "
        "fix: set platforms.telegram.token to the token @BotFather gave you"
    ) in lines
    assert "skip model: not checked (--no-model)" in lines
    assert not any("999:wrong" in line for line in lines)


async def test_an_unreachable_store_fails_with_its_fix(
    tmp_path: Path, telegram_emulator: TelegramEmulator, openai_emulator: OpenAIEmulator
) -> None:
    config = write(tmp_path, token=telegram_emulator.token, emu=telegram_emulator, model=openai_emulator,
                   store="redis://:pw-secret@127.0.0.1:1/0")
    code, lines = await run(config, model=False)
    assert code == 1
    store = [line for line in lines if line.startswith("FAIL store: ")]
    assert store and "cannot reach the Redis store at redis://:***@127.0.0.1:1/0" in store[0]
    assert "fix: start the store or fix store.url" in store[0] and "pw-secret" not in store[0]


async def test_a_failing_model_fails_with_its_fix(
    tmp_path: Path, telegram_emulator: TelegramEmulator, openai_emulator: OpenAIEmulator
) -> None:
    openai_emulator.fail_with = 401
    config = write(tmp_path, token=telegram_emulator.token, emu=telegram_emulator, model=openai_emulator)
    code, lines = await run(config)
    assert code == 1
    model = [line for line in lines if line.startswith("FAIL model openai/gpt-emu (agent helper): ")]
    assert model and "AuthenticationError" in model[0] and "fix: check agents.helper.model" in model[0]
    assert "sk-test" not in "\n".join(lines)


async def test_the_cli_prints_one_line_per_check_and_exits_1(
    tmp_path: Path, telegram_emulator: TelegramEmulator, openai_emulator: OpenAIEmulator
) -> None:
    config = write(tmp_path, token="999:wrong", emu=telegram_emulator, model=openai_emulator)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botweave", "doctor", str(config), "--no-model",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(ROOT),
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, stderr.decode()
    lines = stdout.decode().splitlines()
    assert lines[0].startswith("ok   config: ")
    assert sorted(line.split(" ", 1)[0] for line in lines[1:]) == ["FAIL", "ok", "skip", "skip", "skip"], lines
    assert "skip gateway: off (no gateway.listen)" in lines
    assert any(line.startswith("FAIL telegram: getMe refused the token") for line in lines)
    assert "Traceback" not in stderr.decode()
    assert "Unclosed" not in stderr.decode()  # the refused check closed its HTTP session too


async def test_a_broken_config_is_one_fail_line(tmp_path: Path) -> None:
    config = tmp_path / "bot.yaml"
    config.write_text("agents: {a: {model: offline/echo}}\nplatforms: {telegram: {mode: carrier-pigeon}}\n")
    code, lines = await run(config)
    assert code == 1 and len(lines) == 1
    assert lines[0].startswith(f"FAIL config: {config}: platforms.telegram.mode:")


async def test_webhook_settings_telegram_cannot_deliver_to_fail(
    tmp_path: Path, telegram_emulator: TelegramEmulator
) -> None:
    config = tmp_path / "bot.yaml"
    config.write_text(
        "agents: {a: {model: offline/echo}}\n"
        f"platforms: {{telegram: {{token: '{telegram_emulator.token}', api_base_url: '{telegram_emulator.api_base_url}',"
        " mode: webhook, webhook_url: 'http://bot.example.com:8080/telegram'}}\n"
    )
    code, lines = await run(config, model=False)
    assert code == 1
    webhook = [line for line in lines if line.startswith("FAIL telegram webhook: ")]
    assert len(webhook) == 3, lines  # not https, a port Telegram does not deliver to, no secret
    assert any("is not https" in line for line in webhook) and any("uses port 8080" in line for line in webhook)
    assert any("fix: set platforms.telegram.webhook_secret" in line for line in webhook)
