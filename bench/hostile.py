"""Hostile input, one message at a time: what a single file costs the bot, against an ordinary
file of the same kind measured in the same run.

Target: a single image, document or tool result raises the bot's peak RSS by at most 200 MB,
and its message is answered (with a notice where something was cut or refused) within 10 s.

Every case runs in a bot of its own: `botweave run` as a subprocess against the Telegram
emulator and the OpenAI emulator (both in this process), so no case inherits another's
memory. The bot answers one ordinary text message first (imports and first-call costs are
paid there) and is left until it is idle, then its peak RSS is reset (`/proc/<pid>/clear_refs`) and the case's message is
sent; growth is VmHWM after the answer minus VmRSS before the message, CPU is the bot
process's own user and system time over the same span, and time runs from the message's
arrival at the emulator to the answer's.

Tool results come from tests/hostile_mcp_server.py, an MCP server over stdio that the bot
starts: the model calls one of its tools and answers once it has the result (the server is a
process of its own, so only what reading its answer costs the bot is counted). The table
ends with what the model was given for each tool result.

    python3 bench/hostile.py [--runs N] [--cases NAME-OR-KIND,...] [--list]

Run it alone on the machine (flock -x /work/locks/machine ...) when its figures matter.

Adding a case: append a `Case` to `CASES`. A case has
- `name`, and `kind`: cases are compared within their kind (image, document, tool result, ...);
- `baseline=True` on the one ordinary input of its kind, which the others are divided by;
- `send(world)`: put the message into the platform (`world.telegram`, `world.chat`,
  `world.user`; `world.document(...)` sends a file), and queue what the model should answer
  (`world.llm`: e.g. a tool call, then a text);
- `config(world)`: bot.yaml keys to merge in, key by key (an agent's `tools:`, `media:`
  settings), `{}` by default;
- `answer`: the text that shows the message was answered (the model's last reply; the
  emulator's default reply unless the case queues its own).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402

from tests.emulators.openai import DEFAULT_REPLY, OpenAIEmulator, tool_call  # noqa: E402
from tests.emulators.telegram import TelegramEmulator, adapter_config  # noqa: E402
from tests.hostile_files import (  # noqa: E402
    declared_png,
    endless_page_pdf,
    inflating_pdf,
    many_pages_pdf,
    one_bit_png,
    photo_jpeg,
    text_pdf,
)

MAX_GROWTH_MB = 200
MAX_SECONDS = 10.0
ANSWER_TIMEOUT = 60.0
HOSTILE_SERVER = ROOT / "tests" / "hostile_mcp_server.py"
#: What the model says once it has a tool's result: the sign that the message was answered.
TOOL_ANSWER = "Done with the tool."
#: The tool timeout of the tool-result cases: a server that hangs is given up after it.
TOOL_TIMEOUT_S = 5


@dataclass
class World:
    """What a case reaches: the emulators, the person and their chat, a folder of its own."""

    telegram: TelegramEmulator
    llm: OpenAIEmulator
    workdir: Path
    user: dict[str, Any] = field(default_factory=lambda: TelegramEmulator.user(1, "Ann", "ann"))

    @property
    def chat(self) -> dict[str, Any]:
        return self.telegram.private_chat(self.user)

    def document(self, data: bytes, file_name: str, mime_type: str, caption: str = "what is this?") -> None:
        self.telegram.push_document(self.chat, self.user, data, caption, file_name=file_name, mime_type=mime_type)


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    send: Callable[[World], None]
    baseline: bool = False
    config: Callable[[World], dict[str, Any]] = lambda world: {}
    answer: str = DEFAULT_REPLY


def _file(data: Callable[[], bytes], file_name: str, mime_type: str) -> Callable[[World], None]:
    """A case sending one file, made once however many runs send it."""
    made = functools.cache(data)
    return lambda world: world.document(made(), file_name, mime_type)


def _tool(name: str, **arguments: Any) -> Callable[[World], None]:
    """A case in which the model calls the hostile MCP server's tool `name`, then answers."""

    def send(world: World) -> None:
        world.llm.queue_tool_calls(tool_call(f"hostile__{name}", arguments))
        world.llm.queue_text(TOOL_ANSWER)
        world.telegram.push_message(world.chat, world.user, f"please run {name}")

    return send


def _hostile_server(world: World) -> dict[str, Any]:
    server = {"command": [sys.executable, str(HOSTILE_SERVER)]}
    tools = [{"mcp": {"hostile": server}, "timeout_seconds": TOOL_TIMEOUT_S}]
    return {"agents": {"assistant": {"tools": tools}}}


def _tool_case(name: str, tool: str, baseline: bool = False, **arguments: Any) -> Case:
    return Case(name, "tool result", _tool(tool, **arguments), baseline, _hostile_server, TOOL_ANSWER)


def _gradient(width: int, height: int, kind: str = "PNG", **options: Any) -> bytes:
    """A real colour picture, smooth enough to stay small on the wire."""
    buffer = io.BytesIO()
    Image.linear_gradient("L").resize((width, height)).convert("RGB").save(buffer, format=kind, **options)
    return buffer.getvalue()


def _report_pdf() -> bytes:
    return text_pdf(*(f"Page {n}: revenue grew, costs fell, the outlook is steady." for n in range(1, 11)))


CASES: list[Case] = [
    Case("photo 1600x1200 JPEG (as sent)", "image", _file(photo_jpeg, "photo.jpg", "image/jpeg"), baseline=True),
    Case("PNG declaring 20000x20000", "image", _file(declared_png, "huge.png", "image/png")),
    Case("PNG declaring 9000x9000 colour", "image", _file(lambda: declared_png(9000, 9000), "wide.png", "image/png")),
    Case("1-bit PNG 9000x9000 (scaled)", "image", _file(one_bit_png, "scan.png", "image/png")),
    Case("colour PNG 9000x2500 (scaled)", "image", _file(lambda: _gradient(9000, 2500), "pano.png", "image/png")),
    Case("colour TIFF 6000x4000 (scaled)", "image",
         _file(lambda: _gradient(6000, 4000, "TIFF", compression="tiff_adobe_deflate"), "scan.tiff", "image/tiff")),
    Case("15 MB photo 5600x4200 (as sent)", "image", _file(lambda: photo_jpeg(5600, 4200), "big.jpg", "image/jpeg")),
    Case("PDF of 10 pages", "document", _file(_report_pdf, "report.pdf", "application/pdf"), baseline=True),
    Case("PDF inflating past pypdf's limit", "document", _file(inflating_pdf, "bomb.pdf", "application/pdf")),
    Case("PDF of 3000 slow pages", "document", _file(many_pages_pdf, "long.pdf", "application/pdf")),
    Case("PDF of one endless page", "document", _file(endless_page_pdf, "page.pdf", "application/pdf")),
    Case("19 MB text file", "document", _file(lambda: b"a" * 19_000_000 + "😀".encode(), "log.txt", "text/plain")),
    _tool_case("MCP result of 2 bytes", "echo", baseline=True, text="ok"),
    _tool_case("MCP result of 50 MB", "flood", size=50_000_000),
    _tool_case("MCP answer that is not JSON", "malformed", kind="garbage"),
    _tool_case("MCP answer cut mid-JSON", "malformed", kind="truncated"),
    _tool_case("MCP server dying mid-call", "crash"),
    _tool_case(f"MCP server hanging ({TOOL_TIMEOUT_S} s timeout)", "hang"),
]


# --- measuring one case -----------------------------------------------------------------------------------


@dataclass
class Result:
    case: Case
    growth_mb: float
    cpu_seconds: float
    seconds: float
    answered: bool
    notice: str | None
    given: str | None  # for a tool result: what the model was given


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` on top, mappings merged key by key."""
    merged = dict(base)
    for key, value in extra.items():
        old = merged.get(key)
        merged[key] = _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
    return merged


def _status(pid: int, field_name: str) -> int:
    """A /proc/<pid>/status size in bytes (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field_name} for {pid}")


def _cpu_seconds(pid: int) -> float:
    """The user and system time `pid` has used (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _settled(pid: int, timeout: float = 60.0) -> None:
    """Wait until `pid` has been idle for a second (at most a clock tick in each quarter), so
    that nothing it began before the case (litellm is imported in the background from start)
    is counted as the case's."""
    deadline = time.monotonic() + timeout
    idle = 0
    used = _cpu_seconds(pid)
    while idle < 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        now = _cpu_seconds(pid)
        idle = idle + 1 if now - used <= 0.01 else 0  # one clock tick at most
        used = now


def _given(llm: OpenAIEmulator) -> str | None:
    """What the model was given as the last tool result, shortened."""
    if not llm.issued_calls:
        return None
    output = llm.tool_output(llm.issued_calls[-1].id)
    text = output if isinstance(output, str) else json.dumps(output)
    return text if len(text) <= 110 else f"{text[:100]}… ({len(text)} characters)"


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def _botweave() -> list[str]:
    return [sys.executable, "-m", "botweave", "run"]


async def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.01)


async def measure(case: Case, workdir: Path) -> Result:
    telegram = await TelegramEmulator().start()
    llm = OpenAIEmulator()
    await llm.start()
    world = World(telegram, llm, workdir)
    config: dict[str, Any] = {
        "platforms": {"telegram": {**adapter_config(telegram), "unknown_user_policy": "allow"}},
        "agents": {"assistant": {"model": "openai/gpt-4o", "api_base": llm.base_url, "api_key": "sk-loopback"}},
    }
    config = _merged(config, case.config(world))
    path = workdir / "bot.yaml"
    path.write_text(yaml.safe_dump(config))
    log = (workdir / "bot.log").open("wb")
    bot = subprocess.Popen(
        [*_botweave(), str(path)], cwd=workdir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    chat_id = world.user["id"]
    try:
        await _wait(lambda: bool(telegram.calls_to("getUpdates")), 60, "the bot to start polling")
        telegram.push_message(world.chat, world.user, "hello")
        await _wait(lambda: DEFAULT_REPLY in telegram.sent_texts(chat_id), 60, "the warm-up answer")
        await _settled(bot.pid)  # the warm-up's bookkeeping, and what the bot imports in the background
        before = len(telegram.sent_texts(chat_id))
        rss = _status(bot.pid, "VmRSS")
        _reset_peak(bot.pid)
        cpu = _cpu_seconds(bot.pid)
        case.send(world)  # files are made here, in this process: the clock starts once it is sent
        started = time.monotonic()
        answered = True
        try:
            await _wait(lambda: case.answer in telegram.sent_texts(chat_id)[before:], ANSWER_TIMEOUT, case.name)
        except TimeoutError:
            answered = False
        seconds = time.monotonic() - started
        cpu = _cpu_seconds(bot.pid) - cpu
        await asyncio.sleep(0.2)
        growth = max(0, _status(bot.pid, "VmHWM") - rss) / 1e6
        new = [text for text in telegram.sent_texts(chat_id)[before:] if text != case.answer]
        return Result(case, growth, cpu, seconds, answered, new[0] if new else None, _given(llm))
    finally:
        bot.send_signal(signal.SIGTERM)
        try:
            bot.wait(timeout=20)
        except subprocess.TimeoutExpired:
            bot.kill()
            bot.wait()
        log.close()
        await telegram.stop()
        await llm.stop()


# --- the report --------------------------------------------------------------------------------------------


def _spread(values: list[float], unit: str, digits: int) -> str:
    middle = statistics.median(values)
    return f"{middle:.{digits}f} {unit} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def report(results: dict[str, list[Result]], cases: list[Case]) -> int:
    baselines = {case.kind: results[case.name] for case in cases if case.baseline and case.name in results}
    failures = 0
    print(f"\n{'case':38} {'peak RSS growth':>24} {'x base':>7} {'time to answer':>22} {'x base':>7} "
          f"{'bot CPU':>20}  verdict")
    for case in cases:
        runs = results.get(case.name)
        if not runs:
            continue
        growth = [r.growth_mb for r in runs]
        seconds = [r.seconds for r in runs]
        cpu = [r.cpu_seconds for r in runs]
        base = baselines.get(case.kind)
        ratio_rss = ratio_time = "-"
        if base:
            ratio_rss = f"{statistics.median(growth) / max(1.0, statistics.median(r.growth_mb for r in base)):.1f}"
            ratio_time = f"{statistics.median(seconds) / statistics.median(r.seconds for r in base):.1f}"
        ok = all(r.answered for r in runs) and max(growth) <= MAX_GROWTH_MB and max(seconds) <= MAX_SECONDS
        failures += not ok
        verdict = "PASS" if ok else "FAIL" + ("" if all(r.answered for r in runs) else " (not answered)")
        print(f"{case.name:38} {_spread(growth, 'MB', 1):>24} {ratio_rss:>7} {_spread(seconds, 's', 2):>22} "
              f"{ratio_time:>7} {_spread(cpu, 's', 2):>20}  {verdict}")
    print(f"\ntarget: growth <= {MAX_GROWTH_MB} MB and answered within {MAX_SECONDS:g} s, in every run "
          "(median, min-max; x base: the median over the ordinary input of the same kind, growth divided by "
          "at least 1 MB)")
    notices = {r.case.name: r.notice for runs in results.values() for r in runs if r.notice}
    if notices:
        print("\nnotices:")
        for name, notice in notices.items():
            print(f"  {name}: {notice}")
    given = {r.case.name: r.given for runs in results.values() for r in runs if r.given}
    if given:
        print("\nwhat the model was given:")
        for name, text in given.items():
            print(f"  {name}: {text}")
    return 1 if failures else 0


async def main(runs: int, names: list[str] | None) -> int:
    cases = [case for case in CASES if names is None or case.name in names or case.kind in names]
    results: dict[str, list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="botweave-hostile-") as folder:
        for run in range(1, runs + 1):
            for index, case in enumerate(cases):
                workdir = Path(folder) / f"{run}-{index}"
                workdir.mkdir()
                result = await measure(case, workdir)
                results.setdefault(case.name, []).append(result)
                state = "answered" if result.answered else "NOT ANSWERED"
                print(f"run {run} {case.name:38} {result.growth_mb:7.1f} MB {result.seconds:6.2f} s "
                      f"(CPU {result.cpu_seconds:5.2f} s)  {state}", flush=True)
    return report(results, cases)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", help="case names or kinds, comma-separated (default: all)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args()
    if args.list:
        for case in CASES:
            print(f"{case.kind:12} {case.name}{'  (baseline)' if case.baseline else ''}")
        sys.exit(0)
    sys.exit(asyncio.run(main(args.runs, args.cases.split(",") if args.cases else None)))
