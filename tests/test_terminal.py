"""The CLI in a real terminal (tmux): what a person at the keyboard sees and can do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.terminal import Terminal, needs_tmux

pytestmark = needs_tmux
ROOT = Path(__file__).resolve().parents[1]
CONSOLE_BOT = "agents:\n  assistant: {model: offline/echo}\nplatforms:\n  console: {}\n"


@pytest.fixture
def terminals(private_state_dir: Path) -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def _open(terminals: list[Terminal], args: list[str], cwd: Path) -> Terminal:
    terminal = Terminal(args, cwd)
    terminals.append(terminal)
    return terminal


@pytest.mark.parametrize("key", ["C-c", "C-d"])
def test_web_beside_the_console_ends_on_ctrl_c_or_ctrl_d_within_5_seconds(tmp_path, terminals, key):
    """From a folder with a bot.yaml the console runs beside the page: its replies show in the
    terminal, and the keys that end a chat end the whole bot."""
    (tmp_path / "bot.yaml").write_text(CONSOLE_BOT)
    term = _open(terminals, ["web", "--ephemeral", "--gateway-listen", "127.0.0.1:0"], tmp_path)
    term.wait_for("open this link to sign in")
    term.wait_for(lambda screen: screen.rstrip().endswith("›"))
    term.type("hello")
    term.wait_for("assistant (offline echo) heard: hello")
    time.sleep(0.3)  # the prompt is back
    pressed = time.monotonic()
    term.key(key)
    assert term.exit_code(timeout=5.0) == 0
    assert time.monotonic() - pressed < 5.0
    assert "Traceback" not in term.screen()


def test_web_answers_sigint_after_ctrl_c_left_the_prompt(tmp_path, terminals):
    """A second Ctrl-C (a SIGINT, once the prompt has gone) is not swallowed either: the
    prompt never takes the bot's own SIGINT handler."""
    (tmp_path / "bot.yaml").write_text(CONSOLE_BOT)
    term = _open(terminals, ["web", "--ephemeral", "--gateway-listen", "127.0.0.1:0"], tmp_path)
    term.wait_for("open this link to sign in")
    term.wait_for(lambda screen: screen.rstrip().endswith("›"))
    term.key("C-c")
    term.key("C-c")
    assert term.exit_code(timeout=5.0) in (0, 130)


def test_chat_replies_stay_on_screen_after_the_prompt_redraws_and_log_lines_follow(tmp_path, terminals):
    """With INFO logging each turn writes a log line after its reply, and the prompt redraws
    after both: every reply and every log line is still readable afterwards."""
    term = _open(terminals, ["chat", "--ephemeral", "-v"], tmp_path)
    term.wait_for("Ctrl-D to leave")
    term.wait_for(lambda screen: screen.rstrip().endswith("›"))
    term.type("hello")
    term.wait_for("outcome=replied")
    term.type("there")
    screen = term.wait_for(lambda s: s.count("outcome=replied") == 2)
    time.sleep(0.5)  # the prompt's redraws settle
    screen = term.screen()
    assert "assistant (offline echo) heard: hello" in screen
    assert "assistant (offline echo) heard: there" in screen
    assert screen.count("outcome=replied") == 2
    assert screen.index("heard: hello") < screen.index("heard: there")
    term.key("C-d")
    assert term.exit_code(timeout=10.0) == 0


def test_approval_in_a_terminal_reads_well_and_the_agent_answers_after_it(terminals, private_state_dir):
    """examples/4-approval as its README runs it: the request shows its arguments as an
    indented block (no Markdown fences), what the second line is says itself, and after the
    press the agent's answer and the next replies appear."""
    term = _open(terminals, ["chat", "--ephemeral"], ROOT / "examples" / "4-approval")
    term.wait_for("Ctrl-D to leave")
    term.wait_for(lambda screen: screen.rstrip().endswith("›"))
    term.type('call refund {"order_id": "A-1001", "amount": 25}')
    term.wait_for("[1] Approve  [2] Deny")
    # the owner's notification of the request follows it, from the push layer's own task
    screen = term.wait_for("(notification: Activity in support; /notify changes what you are sent)")
    assert "```" not in screen
    assert '    "order_id": "A-1001",' in screen
    assert "\nActivity in support\n" not in screen
    time.sleep(0.3)
    term.type("1")
    screen = term.wait_for("support (offline echo): refund returned refunded 25.00 on A-1001")
    term.type("thanks")
    term.wait_for("support (offline echo) heard: thanks")
    term.key("C-d")
    assert term.exit_code(timeout=10.0) == 0
