"""What one tool result costs the bot: an MCP server that floods (one answer of `--size`
bytes) against a benign one (a few bytes), through the same path.

Each case runs in a fresh process of its own, so peak memory is the case's alone: the bot
(an `App` with one agent, the model emulator on loopback) connects to
tests/hostile_mcp_server.py over stdio, answers one warm-up turn (the first turn of a process
loads litellm), then one turn in which the model calls the tool. Reported per case: the
turn's wall time, the bot's CPU time during it, and how far the bot's peak RSS (VmHWM, reset
just before the turn) rose above what it was before the turn (the server is another process
and is not counted), with what the model was given. Each case runs `--repeats` times; the machine is noisy, so the spread is
printed with the median, and the flood's figures as ratios to the benign one's.

    python3 bench/mcp_flood.py [--size 50000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SERVER = str(ROOT / "tests" / "hostile_mcp_server.py")


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    """Start the process's peak RSS (VmHWM) afresh from what it is now (Linux 4.0 and later)."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")


async def one_case(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    from botweave import App

    from tests.emulators.openai import OpenAIEmulator, tool_call
    from tests.support import RecordingAdapter, message

    llm = OpenAIEmulator()
    await llm.start()
    app = App.from_config({
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"remote": {
            "model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loopback",
            "tools": [{"mcp": {"hostile": {"command": [sys.executable, SERVER]}}, "timeout_seconds": 60}],
        }},
        "platforms": {"console": {"enabled": False}},
    })
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    await app.start(platforms=[])
    try:
        llm.queue_text("ready")
        await app.handle(message("warm up"))
        llm.queue_tool_calls(tool_call(f"hostile__{tool}", arguments))
        llm.queue_text("answered")
        _reset_peak()
        before = _status_kb("VmRSS")
        cpu = time.process_time()
        began = time.monotonic()
        outcome = await app.handle(message("call the tool"))
        took = time.monotonic() - began
        cpu = time.process_time() - cpu
        peak = _status_kb("VmHWM")
        given = llm.tool_output(llm.issued_calls[-1].id)
        shown = json.dumps(given)[:100] if not isinstance(given, str) else f"{len(given)} characters of text"
        return {
            "seconds": took, "cpu": cpu, "rss_rise_mb": max(0, peak - before) / 1024,
            "answered": outcome.status == "replied" and adapter.texts()[-1:] == ["answered"], "given": shown,
        }
    finally:
        await app.stop()
        await llm.stop()


def run_case(tool: str, arguments: dict[str, Any], repeats: int) -> list[dict[str, Any]]:
    runs = []
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, __file__, "--case", json.dumps([tool, arguments])],
            capture_output=True, text=True, check=True, timeout=600,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs


def summary(name: str, runs: list[dict[str, Any]]) -> dict[str, float]:
    figures = {key: statistics.median(run[key] for run in runs) for key in ("seconds", "cpu", "rss_rise_mb")}
    spread = {key: (min(run[key] for run in runs), max(run[key] for run in runs)) for key in figures}
    print(f"{name:>18}: {figures['seconds']:6.2f} s (range {spread['seconds'][0]:.2f}-{spread['seconds'][1]:.2f}), "
          f"CPU {figures['cpu']:6.2f} s, peak RSS +{figures['rss_rise_mb']:6.1f} MB "
          f"(range {spread['rss_rise_mb'][0]:.1f}-{spread['rss_rise_mb'][1]:.1f}), "
          f"answered {sum(run['answered'] for run in runs)}/{len(runs)}; the model got: {runs[0]['given']}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=50_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        tool, arguments = json.loads(args.case)
        print(json.dumps(asyncio.run(one_case(tool, arguments))))
        return
    benign = summary("benign (2 bytes)", run_case("echo", {"text": "ok"}, args.repeats))
    flood = summary(f"flood ({args.size // 1_000_000} MB)", run_case("flood", {"size": args.size}, args.repeats))
    print(f"{'flood / benign':>18}: time x{flood['seconds'] / benign['seconds']:.2f}, "
          f"CPU x{flood['cpu'] / max(benign['cpu'], 1e-3):.2f}, peak RSS rise {flood['rss_rise_mb']:.1f} MB "
          f"against {benign['rss_rise_mb']:.1f} MB")


if __name__ == "__main__":
    main()
