"""The `botweave` command as a user runs it: a subprocess, talking through a pipe."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def botweave(*args: str, stdin: str = "", cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "botweave", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=120,
    )


def test_chat_through_a_pipe_answers_resets_and_exits_cleanly_on_eof():
    result = botweave("chat", stdin="hello\n/new\nagain\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "assistant (offline echo) heard: hello"
    assert lines[1] == "Started a new conversation; earlier messages are forgotten."
    assert lines[2] == "assistant (offline echo) heard: again"
    assert "Traceback" not in result.stderr


def test_chat_uses_the_example_config_by_default(tmp_path):
    (tmp_path / "bot.yaml.example").write_text((ROOT / "bot.yaml.example").read_text())
    result = botweave("chat", stdin="/status\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "model: offline/echo" in result.stdout


def test_check_prints_the_effective_config_with_secrets_masked(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text(
        textwrap.dedent(
            """
            agents:
              a: {model: offline/echo}
            platforms:
              console: {}
              telegram: {token: "${TG_TOKEN}"}
            """
        )
    )
    result = botweave("check", str(config), env={"TG_TOKEN": "123:do-not-print"})
    assert result.returncode == 0, result.stderr
    assert "do-not-print" not in result.stdout + result.stderr
    assert "token: '***'" in result.stdout
    assert "# platforms that would start: console, telegram" in result.stdout


def test_check_reports_a_broken_config_with_the_field_and_exit_code_2(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text("agents:\n  a: {model: m}\nplatforms:\n  telegram:\n    unknown_user_policy: maybe\n")
    result = botweave("check", str(config))
    assert result.returncode == 2
    assert "platforms.telegram.unknown_user_policy: must be one of deny, pair, allow (got 'maybe')" in result.stderr
    assert "Traceback" not in result.stderr


def test_version_and_help_are_fast_and_do_not_import_litellm():
    result = botweave("--version")
    assert result.returncode == 0 and result.stdout.startswith("botweave ")
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, botweave, botweave.runtime.cli; print('litellm' in sys.modules, 'telegram' in sys.modules)"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert probe.stdout.strip() == "False False"


def test_sigint_while_waiting_for_input_exits_cleanly():
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "botweave", "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    try:
        proc.stdin.write("hello\n")
        proc.stdin.flush()
        assert proc.stdout.readline().startswith("assistant (offline echo) heard: hello")
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)  # stdin stays open: the reader is blocked on it
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 10
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()


def test_check_reports_whether_redis_is_reachable(tmp_path, redis_url):
    config = tmp_path / "bot.yaml"
    config.write_text(f"agents: {{a: {{model: offline/echo}}}}\nstore: {{url: '{redis_url}'}}\n")
    result = botweave("check", str(config))
    assert result.returncode == 0 and f"# store: {redis_url} is reachable" in result.stdout
    config.write_text("agents: {a: {model: offline/echo}}\nstore: {url: 'redis://:pw-secret@127.0.0.1:1/0'}\n")
    result = botweave("check", str(config))
    assert result.returncode == 3 and "# store: cannot reach the Redis store at redis://:***@127.0.0.1:1/0" in result.stdout
    assert "pw-secret" not in result.stdout + result.stderr


def test_run_with_unreachable_redis_is_one_clear_error(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text("agents: {a: {model: offline/echo}}\nplatforms: {console: {}}\nstore: {url: 'redis://127.0.0.1:1/0'}\n")
    result = botweave("run", str(config))
    assert result.returncode != 0
    assert "cannot reach the Redis store at redis://127.0.0.1:1/0" in result.stderr
    assert "Traceback" not in result.stderr


ROOM_CONFIG = """
agents:
  planner: {model: offline/echo}
  critic: {model: offline/echo}
platforms: {console: {}}
rooms:
  standup:
    roster: [planner, critic]
    schedule: "0 9 * * 1-5"
    timezone: Europe/Berlin
    kickoff: "Good morning!"
    target: console:console
routes:
  - {match: {}, room: standup}
"""


def test_room_list_and_run_now(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text(ROOM_CONFIG)
    listed = botweave("room", "list", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("standup  [planner, critic]  schedule: 0 9 * * 1-5  next: ")
    assert "+01:00" in listed.stdout or "+02:00" in listed.stdout  # Berlin time
    ran = botweave("room", "run", "standup", "--config", str(config))
    assert ran.returncode == 0, ran.stderr
    posts = [line for line in ran.stdout.splitlines() if line.startswith("[")]
    assert [p.split("]")[0] for p in posts] == ["[planner", "[critic"]
    assert "Good morning!" in ran.stdout
    unknown = botweave("room", "run", "nosuch", "--config", str(config))
    assert unknown.returncode == 1 and "unknown room 'nosuch'" in unknown.stderr


def test_chat_keeps_state_in_a_file_per_config_unless_ephemeral(tmp_path, private_state_dir):
    config = tmp_path / "mybot.yaml"
    config.write_text("agents: {assistant: {model: offline/echo}}\nplatforms: {console: {}}\n")
    ephemeral = botweave("chat", "--ephemeral", str(config), stdin="hello\n")
    assert ephemeral.returncode == 0, ephemeral.stderr
    assert not list(private_state_dir.rglob("*.db"))
    kept = botweave("-v", "chat", str(config), stdin="hello\n")
    assert kept.returncode == 0, kept.stderr
    [database] = list(private_state_dir.rglob("*.db"))
    assert database.name.startswith("mybot-") and f"store: sqlite:///{database}" in kept.stderr
