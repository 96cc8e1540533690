"""A program that serves botweave inside its own `asyncio.run` finds its interpreter as it left
it: no function or class of litellm, openai, httpx, aiohttp or asyncio replaced, the event
loop's attributes the same objects, the garbage collector tuned as it was (see
tests/host_alone.py, run in a fresh interpreter so nothing earlier in this one counts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: pydantic completes a model class's schema the first time the class is used, in its own
#: `__pydantic_*` attributes: pydantic's bookkeeping, whoever's use triggers it.
PYDANTIC_OWN = "__pydantic_"


@pytest.mark.parametrize(
    ("client", "stream"), [("auto", False), ("litellm", True)], ids=["direct-whole", "litellm-streamed"]
)
def test_serving_botweave_leaves_the_programs_libraries_and_interpreter_as_they_were(client, stream):
    command = [sys.executable, "-m", "tests.host_alone", client, *(["--stream"] if stream else [])]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["exit code"] == 0 and outcome["answered"] and outcome["model requests"] == 1
    assert outcome["compared"] > 10_000  # litellm, openai, httpx, aiohttp and asyncio were all looked at
    assert outcome["loop"] == [] and outcome["SIGHUP kept while serving"] is True
    assert [change for change in outcome["changed"] if PYDANTIC_OWN not in change] == []
