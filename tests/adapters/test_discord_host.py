"""botweave's Discord adapter changes discord.py for its own client only: a program running a
discord.py bot of its own in the same process finds discord.py as it ships (see
tests/adapters/discord_host.py, run in fresh interpreters, one with the adapter and the
program's bot, one with the program's bot alone)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run(mode: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "tests.adapters.discord_host", mode]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_adapter_changes_nothing_of_discord_py_that_a_plain_client_does_not_and_reads_its_own_odd_frames():
    with_adapter, plain_alone = run("adapter"), run("plain")
    # Whatever changes in discord's modules, classes and loggers is what discord.py itself
    # changes for any client (its once-per-process voice warning flags): nothing is ours.
    assert with_adapter["changed by the adapter"] == plain_alone["changed"]
    assert with_adapter["changed"] == plain_alone["changed"]
    assert not any("_from_json" in key or "filters" in key for key in with_adapter["changed"])
    # The frame orjson refuses is read by the adapter's own client, and its connection stays.
    assert with_adapter["adapter received"] == ["surrogate \ufffd here", "plain words", "still here"]
    # The program's own bot beside it runs on discord.py's own classes and decoder.
    for report in (with_adapter, plain_alone):
        bot = report["plain bot"]
        assert bot["seen"] == ["to the plain bot"]
        assert bot["stock state"] and bot["stock gateway"] and bot["stock parser"]
        assert bot.get("odd frame", "JSONDecodeError") == "JSONDecodeError"  # (when orjson is installed)
    assert with_adapter["plain bot"].get("odd frame") == plain_alone["plain bot"].get("odd frame")


def test_discord_py_voice_warnings_are_dropped_for_the_adapter_only():
    with_adapter, plain_alone = run("adapter"), run("plain")
    voice = [line for line in plain_alone["warnings"] if "voice will NOT be supported" in line]
    assert len(voice) == len(plain_alone["voice warnings due"])  # discord.py warns a plain client
    assert with_adapter["warnings"] == []  # the adapter's client was built first and kept quiet


def discord_names(tree: ast.Module) -> set[str]:
    """The names a module binds to discord.py's modules, classes and functions."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "discord"}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "discord":
            names |= {a.asname or a.name for a in node.names}
    return names


def root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def test_the_adapter_source_assigns_nothing_into_discord_py():
    """No statement of the adapter assigns to (or `setattr`s on) anything reached from a
    discord.py module or class: what it changes, it changes on its own client's objects."""
    found = []
    for path in sorted((ROOT / "adapters" / "discord").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        theirs = discord_names(tree)
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = [t for t in node.targets if isinstance(t, (ast.Attribute, ast.Subscript))]
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and not isinstance(node.target, ast.Name):
                targets = [node.target]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
                targets = node.args[:1]  # the object whose attribute is set
            if any(root(target) in theirs for target in targets):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert found == []
