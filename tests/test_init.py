"""`botweave init`: a commented bot.yaml that loads, for the platforms and model chosen, and
never written over an existing file."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from botweave.runtime.config import load_config
from botweave.runtime.scaffold import init

ROOT = Path(__file__).resolve().parents[1]
TOKENS = {
    "TELEGRAM_BOT_TOKEN": "1:tg", "DISCORD_BOT_TOKEN": "dc", "SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1",
}


def test_the_file_loads_with_every_platform_and_the_model(tmp_path: Path) -> None:
    path = tmp_path / "bot.yaml"
    out, err = io.StringIO(), io.StringIO()
    code = init(str(path), ["console", "telegram", "discord", "slack"], "openai/gpt-4o-mini", out=out, err=err,
                interactive=False)
    assert code == 0, err.getvalue()
    text = path.read_text()
    assert text.count("\n#") + text.count("  #") > 10  # commented for a person to read
    config = load_config(path, env=TOKENS)
    assert config.agents["assistant"].model == "openai/gpt-4o-mini"
    assert set(config.enabled_platforms()) == {"console", "telegram", "discord", "slack"}
    assert config.platforms.telegram.token.get_secret_value() == "1:tg"
    # before the variables are set the file still loads; the platforms wait for their tokens
    bare = load_config(path, env={})
    assert set(bare.enabled_platforms()) == {"console"}
    assert bare.missing_credentials("telegram") == ["platforms.telegram.token is empty (set TELEGRAM_BOT_TOKEN)"]
    assert "next: export TELEGRAM_BOT_TOKEN, DISCORD_BOT_TOKEN, SLACK_BOT_TOKEN, SLACK_APP_TOKEN" in out.getvalue()


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "bot.yaml"
    path.write_text("mine: true\n")
    err = io.StringIO()
    assert init(str(path), ["console"], "offline/echo", out=io.StringIO(), err=err, interactive=False) == 1
    assert path.read_text() == "mine: true\n" and "not overwritten" in err.getvalue()


def test_on_a_terminal_it_asks_for_what_was_not_given(tmp_path: Path) -> None:
    answers = iter(["telegram, console", ""])
    asked: list[str] = []

    def read(question: str) -> str:
        asked.append(question)
        return next(answers)

    path = tmp_path / "bot.yaml"
    assert init(str(path), None, None, out=io.StringIO(), err=io.StringIO(), interactive=True, read=read) == 0
    assert asked[0].startswith("Platforms (console, telegram, discord, slack") and asked[1].startswith("Model")
    config = load_config(path, env=TOKENS)
    assert set(config.enabled_platforms()) == {"console", "telegram"}
    assert config.agents["assistant"].model == "offline/echo"


def test_the_cli_writes_the_file_and_refuses_an_unknown_platform(tmp_path: Path) -> None:
    def botweave(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "botweave", "init", *args], capture_output=True, text=True, cwd=tmp_path,
            stdin=subprocess.DEVNULL, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}, timeout=60,
        )

    done = botweave("--platform", "discord")
    assert done.returncode == 0, done.stderr
    assert "wrote bot.yaml" in done.stdout and "discord:" in (tmp_path / "bot.yaml").read_text()
    unknown = botweave("other.yaml", "--platform", "irc")
    assert unknown.returncode == 2 and "unknown platform(s) irc" in unknown.stderr
    assert not (tmp_path / "other.yaml").exists()
