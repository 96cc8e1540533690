"""How long the command line takes to answer before it does any work, against how long Python
takes to import one ordinary library (`import aiohttp`), measured in the same run.

`botweave --help` and `--version` import nothing beyond the standard library, so they should
cost about what a Python start with one library import costs (a ratio near or under 1).
`check` loads the configuration's models, the kernel and the features that define them (and
litellm only when a model is not the offline stand-in), so it costs several times more.
Each figure is the median of several runs of a fresh process: the machines here are noisy.

    python3 bench/startup.py [--runs N] [--config PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "bot.yaml.example"


def seconds(argv: list[str], runs: int, cwd: Path) -> float:
    """The median wall time of `argv` as a fresh process."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--config", default=str(EXAMPLE), help="the bot.yaml `check` reads (default: bot.yaml.example)")
    args = parser.parse_args()
    botweave = [sys.executable, "-m", "botweave"]
    cases = {
        "python -c 'import aiohttp' (baseline)": [sys.executable, "-c", "import aiohttp"],
        "botweave --help": [*botweave, "--help"],
        "botweave --version": [*botweave, "--version"],
        "botweave check": [*botweave, "check", args.config],
    }
    seconds(cases["botweave --help"], 1, ROOT)  # compiled bytecode in place before anything is timed
    measured = {name: seconds(argv, args.runs, ROOT) for name, argv in cases.items()}
    baseline = next(iter(measured.values()))
    print(f"median of {args.runs} runs each; ratio = time / baseline")
    for name, value in measured.items():
        print(f"  {name:40} {value * 1000:7.0f} ms   ratio {value / baseline:5.2f}")


if __name__ == "__main__":
    main()
