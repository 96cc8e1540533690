"""The `botweave` command as a user runs it: a subprocess, talking through a pipe."""

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.emulators.telegram import wait_until

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


def test_chat_shows_tools_working_with_no_key():
    script = 'call react {"emoji": "👍"}\ncall send_message {"target": "origin", "text": "an extra message"}\n'
    result = botweave("chat", stdin=script)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "(reacted 👍 to 1)"
    assert re.fullmatch(
        r'assistant \(offline echo\): react returned \{"status": "ok", "target": "console:console", '
        r'"message_ids": \["[0-9a-f]{6}-1"\], "detail": ""\}',
        lines[1],
    ), lines[1]
    assert lines[2] == "an extra message"
    assert lines[3].startswith('assistant (offline echo): send_message returned {"status": "ok"')


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


#: What `botweave --help` and `--version` must not load: each costs from tens of milliseconds
#: (pydantic, aiohttp, the kernel's models) to seconds (litellm, the MCP SDK).
HEAVY_AT_START = (
    "litellm", "mcp", "mcp_types", "openai", "pydantic", "aiohttp", "yaml", "asyncio", "telegram", "discord",
    "slack_bolt", "opentelemetry", "prompt_toolkit", "botweave.config", "botweave.types", "botweave.runtime.app",
    "botweave.runtime.config", "botweave.runtime.process", "botweave.tools", "botweave.gateway", "botweave.adapters",
)


def _loaded_by(argv: list[str]) -> tuple[list[str], str]:
    """The modules a fresh interpreter holds once `botweave ARGV` has answered, and its output."""
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print('MODULES=' + json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        "from botweave.runtime.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    listed = done.stderr.rsplit("MODULES=", 1)[1]
    return json.loads(listed), done.stdout


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["run", "--help"]])
def test_help_and_version_import_nothing_heavy(argv):
    """The command line imports what a command needs when it runs it: answering --help or
    --version loads only the standard library and botweave's own few modules for it."""
    modules, out = _loaded_by(argv)
    assert out.startswith(("usage: botweave", "botweave "))
    heavy = [name for name in modules if any(name == top or name.startswith(f"{top}.") for top in HEAVY_AT_START)]
    assert heavy == []
    assert [name for name in modules if name.startswith("botweave")] == [
        "botweave", "botweave.runtime", "botweave.runtime.cli", "botweave.runtime.exits", "botweave.runtime.logs",
        "botweave.version",
    ]


def test_check_of_an_offline_bot_does_not_import_litellm_or_the_mcp_sdk(tmp_path):
    """`check` needs the configuration's models, not a model library: with only the offline
    stand-in it never imports litellm, and an MCP server it lists is not started or imported."""
    config = tmp_path / "bot.yaml"
    config.write_text(
        "agents:\n  a:\n    model: offline/echo\n    tools:\n      - mcp: {search: {command: [python, s.py]}}\n"
        "platforms:\n  console: {}\n"
    )
    modules, out = _loaded_by(["check", str(config)])
    assert "# platforms that would start: console" in out
    assert "litellm" not in modules and "mcp" not in modules and "mcp_types" not in modules


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
    assert result.returncode == 3
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


def test_verbose_goes_before_or_after_the_subcommand(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text("agents: {a: {model: offline/echo}}\nplatforms: {console: {}}\n")
    for args in (("-v", "chat", str(config)), ("chat", str(config), "-v")):
        result = botweave(*args, stdin="hi\n")
        assert result.returncode == 0, result.stderr
        assert "INFO" in result.stderr, args  # -v turned INFO logging on, wherever it stood


def test_every_subcommand_finds_the_same_default_config(tmp_path):
    (tmp_path / "bot.yaml").write_text("agents: {mine: {model: offline/echo}}\nplatforms: {console: {}}\n")
    checked = botweave("check", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "mine:" in checked.stdout
    chatted = botweave("chat", stdin="/status\n", cwd=tmp_path)
    assert "agent: mine" in chatted.stdout


def test_check_refuses_a_model_litellm_cannot_route(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text("agents: {a: {model: offline/echo}, b: {model: nosuchprovider/model-x}}\n")
    result = botweave("check", str(config))
    assert result.returncode == 2
    assert "agents.b.model: litellm cannot route 'nosuchprovider/model-x'" in result.stderr
    assert "agents.a.model" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_variable_that_is_not_set_stops_the_start_with_its_name(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text("agents: {a: {model: offline/echo, instructions: 'You are ${BOT_PERSONA}'}}\n")
    env = {k: v for k, v in os.environ.items() if k != "BOT_PERSONA"}
    result = botweave("chat", str(config), stdin="hi\n", env=env)
    assert result.returncode == 2
    assert "agents.a.instructions: ${BOT_PERSONA} is not set" in result.stderr


def test_yaml_errors_name_the_file_and_line(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text("agents:\n  a: {model: offline/echo\nplatforms: {}\n")
    result = botweave("check", str(config))
    assert result.returncode == 2
    assert f"{config}:3:" in result.stderr and "not valid YAML" in result.stderr
    assert "<unicode string>" not in result.stderr


def test_room_run_into_a_platform_that_is_not_running_is_one_line_and_exit_1(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text(ROOM_CONFIG)
    result = botweave("room", "run", "standup", "--target", "discord:123", "--config", str(config))
    assert result.returncode == 1
    assert "target 'discord:123' does not resolve: platform 'discord' is not running" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_platform_that_refuses_the_token_makes_the_exit_code_1(tmp_path, telegram_emulator):
    """The console still answers, so the person at it is not left stranded; the exit code
    tells a supervisor that an enabled platform never came up."""

    emu = telegram_emulator
    config = tmp_path / "bot.yaml"
    config.write_text(
        "agents: {a: {model: offline/echo}}\n"
        "platforms:\n"
        "  console: {}\n"
        f"  telegram: {{token: '999:wrong-token', api_base_url: '{emu.api_base_url}'}}\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botweave", "run", str(config),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=str(ROOT), env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(b"hello\n"), timeout=60)
    assert proc.returncode == 1
    assert "a (offline echo) heard: hello" in stdout.decode()
    errors = stderr.decode()
    assert "platform telegram failed to start: Telegram rejected the bot token" in errors
    assert "wrong-token" not in errors and "Traceback" not in errors


SCHEDULE_CONFIG = """
agents:
  reporter: {model: offline/echo}
platforms: {console: {}}
schedules:
  digest:
    cron: "30 7 * * *"
    timezone: Asia/Tokyo
    agent: reporter
    prompt: What happened overnight?
    target: console:console
  nowhere:
    cron: "@daily"
    agent: reporter
    prompt: Hello?
    target: telegram:42
"""


def test_schedule_list_and_run_now(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text(SCHEDULE_CONFIG)
    listed = botweave("schedule", "list", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("digest  agent: reporter  cron: 30 7 * * * (Asia/Tokyo)  target: console:console  next: ")
    assert listed.stdout.splitlines()[0].endswith("T07:30:00+09:00")  # Tokyo time
    ran = botweave("schedule", "run", "digest", "--config", str(config))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "reporter (offline echo) heard: [schedule digest] What happened overnight?"
    failed = botweave("schedule", "run", "nowhere", "--config", str(config))
    assert failed.returncode == 1 and "schedule nowhere failed: target 'telegram:42' does not resolve" in failed.stderr


def test_chat_on_a_terminal_has_a_banner_a_prompt_history_and_a_thinking_cue(tmp_path):
    """A pseudo-terminal, as a person's shell gives one: the banner names the agent and model,
    the prompt shows a cue while the first reply waits, Ctrl-D leaves, and the line is kept in
    the prompt's history for the next session."""
    import os
    import pty
    import select
    import time

    master, slave = pty.openpty()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TERM": "xterm", "XDG_STATE_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "botweave", "chat"], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path
    )
    os.close(slave)
    seen = b""

    def wait_for(needle: bytes, timeout: float = 60.0) -> bool:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while needle not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
        return needle in seen

    try:
        assert wait_for(b"assistant \xc2\xb7 offline/echo \xc2\xb7 /help for commands, Ctrl-D to leave"), seen
        assert wait_for("›".encode()), seen
        os.write(master, b"hello\r")
        assert wait_for(b"thinking"), seen  # the first reply waits for the model library to load
        assert wait_for(b"assistant (offline echo) heard: hello"), seen
        # Ctrl-D once the prompt is back: while a reply prints, the terminal is briefly in
        # cooked mode, where the line discipline itself would take a Ctrl-D
        time.sleep(0.5)
        os.write(master, b"\x04")
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        os.close(master)
    assert "hello" in (tmp_path / "botweave" / "console_history").read_text()
    assert b"Traceback" not in seen


def test_log_format_goes_before_or_after_the_subcommand():
    from botweave.runtime.cli import _parser

    for argv in (["--log-format", "json", "run"], ["run", "--log-format", "json"], ["-v", "doctor", "--log-format", "json"]):
        assert _parser().parse_args(argv).log_format == "json", argv
    assert _parser().parse_args(["--log-format", "json", "chat", "-v"]).log_format == "json"  # not undone
    assert _parser().parse_args(["chat"]).log_format == "text"


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


# --- first run: the dead ends a new user met --------------------------------------------------


def test_chat_on_redis_answers_in_order_and_exits_at_end_of_input(tmp_path, redis_url):
    """The console is this process's own: with a Redis store its lines are answered here,
    not through the shared stream, and the end of input ends the chat."""
    config = tmp_path / "bot.yaml"
    config.write_text(
        "agents: {a: {model: offline/echo}}\nplatforms: {console: {}}\n"
        f"store: {{url: '{redis_url}', prefix: 'chat-{tmp_path.name}:'}}\n"
    )
    result = botweave("chat", str(config), stdin="one\ntwo\nthree\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"a (offline echo) heard: {word}" for word in ("one", "two", "three")]
    unreachable = tmp_path / "gone.yaml"
    unreachable.write_text("agents: {a: {model: offline/echo}}\nstore: {url: 'redis://127.0.0.1:1/0'}\n")
    gone = botweave("chat", str(unreachable), stdin="one\n")
    assert gone.returncode == 3 and "cannot reach the Redis store" in gone.stderr
    assert "Traceback" not in gone.stderr


def test_a_second_chat_on_the_same_state_is_answered_too(tmp_path, private_state_dir):
    """State is kept between runs (a SQLite file): the next run's first line is new, not a
    repeat of this run's first line."""
    (tmp_path / "bot.yaml").write_text("agents: {a: {model: offline/echo}}\nplatforms: {console: {}}\n")
    first = botweave("chat", stdin="hello\n", cwd=tmp_path)
    second = botweave("chat", stdin="hello again\n", cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.splitlines() == ["a (offline echo) heard: hello"]
    assert second.stdout.splitlines() == ["a (offline echo) heard: hello again"]


def test_start_answers_like_help_and_an_unknown_command_says_so(tmp_path):
    (tmp_path / "bot.yaml").write_text("agents: {a: {model: offline/echo}}\nplatforms: {console: {}}\n")
    helped = botweave("chat", stdin="/help\n", cwd=tmp_path)
    result = botweave("chat", stdin="/start\n/frobnicate now\nhello\n", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    help_text = helped.stdout.strip()
    assert help_text.startswith("Commands:") and "/start" in help_text
    assert result.stdout.startswith(help_text + "\n")
    after = result.stdout[len(help_text) :].strip().splitlines()
    assert after == ["Unknown command /frobnicate. Send /help to see what I understand.", "a (offline echo) heard: hello"]


def test_an_unknown_nested_key_lists_the_allowed_ones_with_a_close_match(tmp_path):
    config = tmp_path / "bot.yaml"
    config.write_text("agents: {a: {model: offline/echo}}\nplatforms: {telegram: {tokn: '123:abc'}}\n")
    result = botweave("check", str(config))
    assert result.returncode == 2
    line = next(line for line in result.stderr.splitlines() if "tokn" in line)
    assert "platforms.telegram.tokn: unknown key (did you mean 'token'?); allowed keys:" in line
    assert "webhook_secret" in line and "trusted_proxies" in line
    assert "123:abc" not in result.stderr


def _pairing_config(path: Path, emu: Any, **bot: Any) -> Path:
    platforms = {"telegram": {"token": emu.token, "api_base_url": emu.api_base_url, "poll_timeout": 1}}
    path.write_text(yaml.safe_dump({
        "agents": {"a": {"model": "offline/echo"}},
        "bot": {"unknown_user_policy": "pair", **bot},
        "platforms": platforms,
    }))
    return path


async def _start_run(*args: str, log: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "botweave", "run", *args,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=log.open("w"),
        cwd=str(ROOT), env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )


async def _stop_run(proc: asyncio.subprocess.Process) -> int:
    proc.send_signal(signal.SIGTERM)
    return await asyncio.wait_for(proc.wait(), 30)


async def test_pairing_with_the_default_store_is_approved_from_another_shell(tmp_path, telegram_emulator, private_state_dir):
    """With the embedded SQLite store (the default) the log names a `botweave pair approve`
    line that works as written from another process while the bot runs; the first person
    approved becomes the owner; SIGTERM is a clean stop (exit 0)."""
    emu = telegram_emulator
    config = _pairing_config(tmp_path / "bot.yaml", emu)
    log = tmp_path / "run.log"
    proc = await _start_run(str(config), log=log)
    try:
        ann = emu.user(7, "Ann", "ann")
        emu.push_message(emu.private_chat(ann), ann, "hello?")
        await wait_until(lambda: emu.sent_texts(7), timeout=60, what="the pairing code")
        code = re.search(r"Your pairing code is ([A-Z2-9]{8})", emu.sent_texts(7)[0]).group(1)  # type: ignore[union-attr]
        await wait_until(lambda: "asked to pair" in log.read_text(), timeout=10, what="the pairing log line")
        hint = next(line for line in log.read_text().splitlines() if "asked to pair" in line)
        command = re.search(r"approve with `(botweave pair approve [^`]+)`", hint).group(1)  # type: ignore[union-attr]
        assert command == f"botweave pair approve telegram <code> --config {shlex.quote(str(config.resolve()))}"
        words = shlex.split(command.replace("<code>", code))[1:]
        approved = await asyncio.to_thread(botweave, *words, cwd=tmp_path)  # another shell, elsewhere
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.strip() == "approved Ann (id 7) on telegram and made them the owner"
        emu.push_message(emu.private_chat(ann), ann, "may I come in?")
        await wait_until(lambda: len(emu.sent_texts(7)) >= 2, timeout=30, what="the answer after approval")
        assert emu.sent_texts(7)[1] == "a (offline echo) heard: may I come in?"
    finally:
        code_at_exit = await _stop_run(proc)
    assert code_at_exit == 0, log.read_text()[-2000:]
    assert "Traceback" not in log.read_text()


async def test_pairing_with_state_in_memory_never_points_at_the_command_line(tmp_path, telegram_emulator):
    """`--ephemeral` keeps state in the bot's memory, where `botweave pair` cannot reach: the
    log says who can approve instead (the owner with /pair), or what to change when nobody can."""
    emu = telegram_emulator
    for owner, expected in ((None, "nobody can approve it"), ("1000", "the owner approves with /pair approve <code>")):
        config = _pairing_config(tmp_path / f"bot-{owner}.yaml", emu, **({"owner_user_id": owner} if owner else {}))
        log = tmp_path / f"run-{owner}.log"
        proc = await _start_run("--ephemeral", str(config), log=log)
        try:
            stranger = emu.user(8 if owner else 9, "Sam")
            emu.push_message(emu.private_chat(stranger), stranger, "hi")
            await wait_until(lambda: "asked to pair" in log.read_text(), timeout=60, what="the pairing log line")
        finally:
            assert await _stop_run(proc) == 0
        text = log.read_text()
        assert "botweave pair" not in text.replace("`botweave pair` cannot reach", ""), text
        started = next(line for line in text.splitlines() if "unknown users get a pairing code" in line)
        asked = next(line for line in text.splitlines() if "asked to pair" in line)
        assert expected in started and expected in asked
        if owner:
            notice = emu.sent_texts(1000)[-1]
            assert "/pair approve" in notice and "botweave pair" not in notice


def test_a_python_tool_next_to_bot_yaml_imports_wherever_the_command_runs(tmp_path):
    folder = tmp_path / "mybot"
    folder.mkdir()
    (folder / "nearby_tools.py").write_text(
        "from botweave import tool\n\n@tool\ndef shout(text: str) -> str:\n    \"\"\"Loud.\"\"\"\n    return text.upper()\n"
    )
    (folder / "bot.yaml").write_text(
        "agents:\n  a: {model: offline/echo, tools: [{python: 'nearby_tools:shout'}]}\nplatforms: {console: {}}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = botweave("check", str(folder / "bot.yaml"), cwd=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "nearby_tools:shout" in result.stdout


def test_a_sighup_while_the_bot_starts_is_applied_once_it_serves(tmp_path, private_state_dir):
    """SIGHUP while `run` still loads bot.yaml's Python tools (their import takes seconds) does
    not kill the process by the signal's default action: the bot says it came, reloads once
    it serves, and still stops cleanly on SIGTERM."""
    import time

    (tmp_path / "slowtools.py").write_text(textwrap.dedent(
        """
        import pathlib, time
        from botweave import tool

        pathlib.Path(__file__).with_name("importing").write_text("now")
        time.sleep(3)


        @tool
        def ping() -> str:
            \"\"\"Answers pong.\"\"\"
            return "pong"
        """
    ))
    (tmp_path / "bot.yaml").write_text(
        "agents:\n  a:\n    model: offline/echo\n    tools: [{python: 'slowtools:*'}]\nplatforms:\n  console: {}\n"
    )
    log = tmp_path / "run.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "botweave", "run"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err,
            cwd=tmp_path, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "importing").exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGHUP)  # the tools' module is still importing
        while "config unchanged: revision" not in log.read_text():
            assert proc.poll() is None, f"the SIGHUP ended the bot (exit {proc.returncode}):\n{log.read_text()}"
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        text = log.read_text()
        assert "SIGHUP arrived while the configuration was loading" in text
        assert text.index("console: connected") < text.index("config unchanged: revision")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_a_sighup_to_a_command_that_does_not_reload_ends_it_as_before(tmp_path):
    """Only `run` and `web` reload on SIGHUP; `chat` (whose closed terminal sends it) keeps
    the signal's default action."""
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "botweave", "chat", "--ephemeral"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=tmp_path, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    try:
        proc.stdin.write("hello\n")
        proc.stdin.flush()
        assert proc.stdout.readline().startswith("assistant (offline echo) heard: hello")
        started = time.monotonic()
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=15) == -signal.SIGHUP
        assert time.monotonic() - started < 10
    finally:
        proc.kill()
        proc.wait()


def test_help_says_how_to_call_a_tool_when_the_agent_is_the_offline_model(tmp_path):
    """The offline stand-in answers nothing but echoes and `call TOOL {json}`: /help says so,
    with an example built from the agent's first tool; a real model's /help does not."""
    result = botweave("chat", "--ephemeral", stdin="/help\n", cwd=ROOT / "examples" / "4-approval")
    assert result.returncode == 0, result.stderr
    assert "support runs on offline/echo" in result.stdout
    assert "To make it call a tool, write: call TOOL {json arguments}" in result.stdout
    assert 'e.g. call lookup_order {"order_id": "..."}' in result.stdout
    assert "Its tools: lookup_order, refund" in result.stdout
    (tmp_path / "bot.yaml").write_text("agents:\n  a: {model: openai/gpt-4o-mini}\nplatforms:\n  console: {}\n")
    real = botweave("chat", "--ephemeral", stdin="/help\n", cwd=tmp_path)
    assert real.returncode == 0, real.stderr
    assert "/new" in real.stdout and "call TOOL" not in real.stdout


def test_check_prints_its_verdict_before_the_configuration(tmp_path):
    """The two lines a person runs `check` for come first; the effective configuration (over a
    hundred lines for the example) follows under a heading."""
    result = botweave("check", str(ROOT / "bot.yaml.example"), env={"XDG_STATE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# platforms that would start: console"
    assert lines[1].startswith("# store: sqlite:") and lines[1].endswith(" is reachable")
    assert lines[2] == "# the effective configuration, secrets masked:"
    assert len(lines) > 50 and "agents:" in lines[3:]
