"""Plugins, both ways in: a package installed with pip (its `botweave.plugins` entry point) and a
module named in bot.yaml. Each registers a command and a hook, and a person on Telegram (the
emulator, through python-telegram-bot) sees both at work."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from botweave import App
from botweave.config import ConfigError
from botweave.runtime.plugins import load_plugins

from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    wait_until,
)
from tests.support import StartApp

ANN = TelegramEmulator.user(1, "Ann", "ann")

INSTALLED = '''
"""Installed with pip: /ping answers, and every reply is signed."""
from botweave.hooks import HookEvent


async def ping(inbound):
    return "pong: " + " ".join(inbound.message.command_args)


def sign(event: HookEvent) -> None:
    event.text = (event.text or "") + " ·signed"


def setup(app):
    app.commands.register("ping", ping, help="answer pong", args="[words]")
    app.hooks.register("message_sending", sign)
'''

NAMED = '''
"""Named in bot.yaml: /shout answers, and what people write reaches the agent in capitals."""
import dataclasses

heard = []


async def shout(inbound):
    return "!".join(inbound.message.command_args).upper()


def capitals(event):
    heard.append(event.message.text)
    event.message = dataclasses.replace(event.message, content=event.message.text.upper())


def setup(app):
    app.commands.register("shout", shout, help="say it loud", args="WORD...")
    app.hooks.register("message_received", capitals)
'''


def wheel(tmp_path: Path, module: str, source: str) -> Path:
    """A pure-Python wheel holding `module` and announcing it under `botweave.plugins`, built
    the way the wheel format defines it (a zip with a .dist-info), so pip installs it like any
    package from an index."""
    dist = f"{module}-0.1"
    files = {
        f"{module}.py": textwrap.dedent(source),
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: botweave-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}.dist-info/entry_points.txt": f"[botweave.plugins]\nsigner = {module}\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    files[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    path = tmp_path / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The installed plugin in a site directory of this test's own (on sys.path for this test
    only, so no other App sees it), and the named one as a module on sys.path."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
         str(wheel(tmp_path, "bw_signer_plugin", INSTALLED))],
        check=True, capture_output=True,
    )
    assert (site / "bw_signer_plugin-0.1.dist-info" / "entry_points.txt").is_file()
    named = tmp_path / "named"
    named.mkdir()
    (named / "bw_shout_plugin.py").write_text(textwrap.dedent(NAMED))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(named))
    return "bw_shout_plugin"


async def test_an_installed_and_a_named_plugin_add_commands_and_hooks(
    plugins: str, telegram_emulator: TelegramEmulator, start_app: StartApp
) -> None:
    emu = telegram_emulator
    app = await start_app({
        "agents": {"assistant": {"model": "offline/echo"}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu)}},
        "plugins": [plugins],
    })
    assert app.plugins == ["plugin signer (entry point bw_signer_plugin)", "plugins.0 (bw_shout_plugin)"]
    dm = emu.private_chat(ANN)
    for number, text in enumerate(["/help", "/ping a b", "/shout hey you", "hello there"], start=1):
        emu.push_message(dm, ANN, text)
        await wait_until(lambda: len(emu.sent_texts(1)) >= number, timeout=30, what=f"a reply to {text}")
    help_text, ping, shout, answer = emu.sent_texts(1)
    assert "/ping [words] — answer pong" in help_text and "/shout WORD... — say it loud" in help_text
    assert ping == "pong: A B ·signed"  # message_received hooks run before commands do
    assert shout == "HEY!YOU ·signed"
    assert answer == "assistant (offline echo) heard: HELLO THERE ·signed"
    assert sys.modules["bw_shout_plugin"].heard == ["/help", "/ping a b", "/shout hey you", "hello there"]


def test_a_plugin_that_cannot_load_stops_the_start_with_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "bw_no_setup.py").write_text("x = 1\n")
    (tmp_path / "bw_async_setup.py").write_text("async def setup(app):\n    pass\n")
    (tmp_path / "bw_failing_setup.py").write_text("def setup(app):\n    raise RuntimeError('no database')\n")
    config = {"agents": {"a": {"model": "offline/echo"}}}
    cases = {
        "bw_missing_module": "plugins.0: cannot import 'bw_missing_module' (ModuleNotFoundError",
        "bw_no_setup": "plugins.0: module bw_no_setup has no setup(app) function",
        "bw_async_setup": "plugins.0 (bw_async_setup): setup(app) must be a plain function",
        "bw_failing_setup": "plugins.0 (bw_failing_setup): setup(app) failed (RuntimeError: no database)",
    }
    for module, message in cases.items():
        with pytest.raises(ConfigError) as caught:
            App.from_config({**config, "plugins": [module]})
        assert caught.value.problems[0].startswith(message), caught.value.problems


def test_a_module_reached_both_ways_runs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "bw_counted.py").write_text("calls = []\ndef setup(app):\n    calls.append(app)\n")
    ran = load_plugins(object(), ["bw_counted", "bw_counted:setup"])
    assert ran == ["plugins.0 (bw_counted)"]
    assert len(sys.modules["bw_counted"].calls) == 1


async def test_the_documented_plugin_works_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from tests.support import message

    readme = (Path(__file__).resolve().parents[1] / "docs" / "guides" / "plugins.md").read_text()
    block = readme.split("<!-- plugin-example -->")[1].split("<!-- /plugin-example -->")[0]
    (tmp_path / "bw_readme_dice.py").write_text(block.split("```python")[1].split("```")[0])
    monkeypatch.syspath_prepend(str(tmp_path))
    app = App.from_config({"agents": {"a": {"model": "offline/echo"}}, "plugins": ["bw_readme_dice"]})
    command = app.commands.get("roll")
    assert command is not None and command.usage() == "/roll [SIDES]" and app.hooks.has("message_sent")
    answer = await command.handler(SimpleNamespace(message=message("/roll 20")))  # type: ignore[arg-type]
    assert answer is not None and answer.startswith("🎲 ") and answer.endswith("(d20)")


async def test_a_plugin_tool_is_offered_to_the_agents_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from botweave import App
    from botweave.metrics import REGISTRY

    from tests.support import RecordingAdapter, message

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "bw_dice_plugin.py").write_text(textwrap.dedent('''
        def roll(sides: int = 6) -> int:
            """Roll a die.

            Args:
                sides: How many sides it has."""
            return sides  # a loaded die: the test knows what comes up

        def setup(app):
            app.add_tool(roll, agents=["gamer"])
    '''))
    app = App.from_config({
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"gamer": {"model": "offline/echo"}, "plain": {"model": "offline/echo"}},
        "routes": [{"match": {"chat_id": "games"}, "agent": "gamer"}, {"match": {"chat_id": "other"}, "agent": "plain"}],
        "plugins": ["bw_dice_plugin"],
    })
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    await app.start(platforms=[])
    try:
        assert "roll" in app.agents["gamer"].tools and "roll" not in app.agents["plain"].tools
        calls = {"tool": "roll", "outcome": "ok"}
        before = REGISTRY.get_sample_value("botweave_tool_calls_total", calls) or 0.0
        await app.handle(message('call roll {"sides": 20}', chat_id="games"))
        assert "roll returned 20" in adapter.texts()[-1]
        assert REGISTRY.get_sample_value("botweave_tool_calls_total", calls) == before + 1
        await app.handle(message('call roll {"sides": 20}', chat_id="other"))
        assert "roll returned" not in adapter.texts()[-1]  # not this agent's tool
    finally:
        await app.stop()
