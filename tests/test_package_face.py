"""The package's face: `botweave` hands on its public names without loading the layers above
the kernel until one of theirs is asked for, so a program (or a platform package) that uses
only kernel types does not pay for the runtime, the tools or the platform SDKs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import botweave
import pytest

#: What a kernel import must not load: the runtime and the features, and the heavy SDKs behind them.
ABOVE_THE_KERNEL = (
    "botweave.runtime", "botweave.tools", "botweave.adapters", "botweave.policies", "botweave.rooms",
    "botweave.push", "botweave.media", "litellm", "openai", "telegram", "discord", "slack_bolt", "slack_sdk",
    "mcp", "apscheduler",
)


def loaded_after(statement: str) -> list[str]:
    """The modules a fresh interpreter holds after running `statement`."""
    code = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    return json.loads(done.stdout)


def above_the_kernel(modules: list[str]) -> list[str]:
    return [name for name in modules if any(name == top or name.startswith(f"{top}.") for top in ABOVE_THE_KERNEL)]


@pytest.mark.parametrize("statement", ["import botweave.types", "from botweave import BotMessage"])
def test_a_kernel_import_loads_nothing_above_the_kernel(statement: str) -> None:
    modules = loaded_after(statement)
    assert "botweave.types" in modules
    assert above_the_kernel(modules) == []


def test_the_package_alone_loads_only_its_version() -> None:
    """`import botweave` runs before every `botweave.*` import (the command line's too), so it
    loads nothing until a name is asked for: not the kernel, not pydantic."""
    modules = loaded_after("import botweave")
    assert [name for name in modules if name.startswith("botweave")] == ["botweave", "botweave.version"]
    assert "pydantic" not in modules


def test_the_app_is_loaded_when_first_asked_for() -> None:
    modules = loaded_after("from botweave import App, tool")
    assert "botweave.runtime.app" in modules and "botweave.tools.python" in modules


def test_every_public_name_is_there_and_listed() -> None:
    from botweave.runtime.app import App
    from botweave.tools.python import tool

    assert botweave.App is App and botweave.tool is tool
    assert all(hasattr(botweave, name) for name in botweave.__all__)
    assert set(botweave.__all__) <= set(dir(botweave))
    with pytest.raises(AttributeError, match="no attribute 'Ap'"):
        botweave.Ap  # noqa: B018
