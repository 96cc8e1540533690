"""The race: botweave against the bots a user would write by hand, in one run, on one machine.

Each contestant is a real process: `botweave run bot.yaml` with a generated config, or one of
the hand-written bots in `bench/reference/` (python-telegram-bot, aiogram 3, discord.py,
slack-bolt; each calls `litellm.acompletion` and replies in the same chat). All of them talk
to the test suite's platform emulators and to one loopback OpenAI-compatible model, so they
do the same work over the same wire formats. Machines here are noisy, so every measure is a
ratio against the reference measured in the same run (or against an ideal time), printed
with both raw numbers.

The measures (`--case`), each over `--chats` private chats:

* cpu: zero model latency, `--messages` per chat; the bot's CPU seconds per answered
  message, botweave / the reference (Telegram: PTB in its default, sequential mode; Discord:
  discord.py; Slack: slack-bolt). Target: at most 1.
* latency: model latency `--latency` (0.5 s), K = `--messages` per chat; the wall time until
  the last reply against the ideal K × latency (one turn at a time per chat, chats in
  parallel), and per-chat order: a reply to message k seen before the reply to k-1 of the
  same chat, or a missing reply, is a violation. Target: at most 1.25 × ideal, no violation.
  The reference (PTB with concurrent_updates, discord.py, slack-bolt) is shown alongside.
* streaming: the same with botweave's `streaming: true`; the model spreads its chunks over
  the latency. Target: wall at most 1.25 × K × max(latency, edit floor), and no two writes
  to one message closer than the platform's floor (Telegram 1.1 s in private chats, Discord
  and Slack 1 s).
* throughput: Telegram, zero latency, `--throughput-messages` (8) per chat; messages per
  second, botweave / aiogram 3 (concurrent handlers over aiohttp). Target: at least 1, with
  botweave keeping per-chat order.
* ceiling: a raw-aiohttp probe with no SDK and no litellm through the same harness (below).

The litellm path, Telegram: every contestant's model is a litellm custom provider in its own
process (`bench/race_provider.py`, registered through litellm's public `custom_provider_map`,
the way an Anthropic, Gemini, Ollama or offline agent's calls go through litellm in the bot's
process), whatever `--model` says for the other cases; botweave makes these calls in its own
process (a provider registered in Python is not seen by a model process):

* litellm-serial: one chat sending `--serial-messages` (1,000) in a row, zero latency; CPU per
  answered message, botweave / PTB (sequential). Target: at most 1.
* litellm-cpu: the cpu case on this path, `--chats` × `--messages`, botweave / PTB
  (sequential). Target: at most 0.7.
* litellm-throughput: the throughput case on this path (each chat warmed up with one
  exchange first, as in every case), botweave / aiogram 3. Target: at least 1.

Who runs where, and why:

* the bot under test is alone in its process; its CPU (utime + stime from /proc, its
  children included) is charged to it and nothing else;
* the loopback model runs in a process of its own (`race_world.py model`), so its CPU is
  charged neither to the bot nor to the harness;
* the platform emulators run in this process with the harness, which only injects messages
  and timestamps replies as the emulator handles them. Its CPU per message and its share of
  a core are printed with every run, and the ceiling case shows how much the harness can
  carry at most: a contestant far below it measures itself, not the harness.

Each measured run gets a contestant process of its own, against an emulator of its own: it
starts, answers one ping, is measured, and stops, so no run inherits what an earlier one left
behind (`--reuse`, which `--quick` implies, starts every contestant once instead, all at
once, and measures every run with it). Every run uses fresh chats, warmed up with one
exchange each (so per-user lookups and connections are made before the clock starts), then
gets its whole burst at once: message 1 of every chat, then message 2 of every chat, and so
on. The reference and botweave take turns going first from one repetition to the next. botweave's Telegram
`requests_per_second` is raised (`--telegram-rps`): the emulator stands for a self-hosted Bot
API server, and the hand-written bots do not pace at all. botweave keeps its state in
`memory://` unless `--store sqlite` gives it the SQLite file `botweave run` uses when bot.yaml
names no store (a fresh file per started bot); either way every reply chunk goes through the
durable outbox (an intent before the send, a confirmation after it).

    python3 bench/race.py [--platform telegram|discord|slack|all]
                          [--case cpu|latency|streaming|throughput|ceiling|litellm-serial|litellm-cpu|litellm-throughput|litellm|all]
                          [--chats 200] [--messages 5] [--serial-messages 1000] [--repeat N]
                          [--store memory|sqlite|default] [--quick]
                          [--profile] [--profile-gil] [--trace] [--model-processes N] [--defaults] [--model http|in-process]

`--defaults` runs botweave as a new user does: no `store:` and no `models:` section (the
SQLite file next to its config, model calls in its own process). `--model in-process` gives
every contestant its model as a litellm custom provider in its own process
(`bench/race_provider.py`): no HTTP, no OpenAI SDK, so what is raced is the frameworks' own
cost around one litellm call (botweave then makes its calls in its own process, since a
provider registered in Python is not seen by a model process).

`--trace` prints, for every run, where its wall time went beyond the model's latency (from the
times the model saw each request and the emulator saw each reply): burst → a chat's first
model request, a reply → the same chat's next request, and a request → its reply, then the
same spans for the chat that finished last.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import itertools
import logging
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

from bench.race_provider import DELAY_FILE_ENV  # noqa: E402
from bench.race_provider import MODEL as IN_PROCESS_MODEL  # noqa: E402
from bench.race_world import (  # noqa: E402
    MARKER,
    Chat,
    DiscordWorld,
    SlackWorld,
    TelegramWorld,
    Tracker,
    World,
    user_text,
)

PLATFORMS = ("telegram", "discord", "slack")
CASES = ("cpu", "latency", "streaming", "throughput", "ceiling", "litellm-serial", "litellm-cpu", "litellm-throughput")
#: The cases whose contestants all call a litellm custom provider in their own process.
LITELLM_CASES = ("litellm-serial", "litellm-cpu", "litellm-throughput")
#: Contestant kinds run with that provider (the reference bots' `--in-process-model`).
LITELLM_SUFFIX = "_litellm"
SYSTEM_PROMPT = "You are a concise, friendly assistant."  # the same as the hand-written bots'
MODEL = "openai/bench-model"
SETTLE_S = 0.25  # quiet time before and after a measured burst
PING_TIMEOUT_S = 180.0
PR_SET_PDEATHSIG = 1
FLOOR_TOLERANCE_S = 0.01  # timestamps are taken at the emulator, after a loopback hop

#: Which hand-written bot each measure is compared with.
REFERENCES: dict[str, dict[str, str]] = {
    "telegram": {
        "cpu": "ptb_sequential", "latency": "ptb_concurrent", "throughput": "aiogram", "ceiling": "probe",
        "litellm-serial": "ptb_sequential_litellm", "litellm-cpu": "ptb_sequential_litellm",
        "litellm-throughput": "aiogram_litellm",
    },
    "discord": {"cpu": "discordpy", "latency": "discordpy"},
    "slack": {"cpu": "bolt", "latency": "bolt"},
}
LABELS = {
    "botweave": "botweave",
    "botweave_streaming": "botweave streaming",
    "ptb_sequential": "PTB (sequential)",
    "ptb_concurrent": "PTB concurrent_updates",
    "aiogram": "aiogram 3",
    "discordpy": "discord.py",
    "bolt": "slack-bolt AsyncApp",
    "probe": "raw aiohttp probe",
    "botweave_litellm": "botweave → litellm",
    "ptb_sequential_litellm": "PTB (sequential) → litellm",
    "aiogram_litellm": "aiogram 3 → litellm",
}
#: The most CPU per message (botweave / reference) each CPU case allows.
CPU_TARGETS = {"cpu": 1.0, "litellm-serial": 1.0, "litellm-cpu": 0.7}


@dataclass
class Settings:
    chats: int
    messages: int
    throughput_messages: int
    latency: float
    repeat: int
    telegram_rps: float
    idle_timeout: float
    botweave: list[str]
    logs: Path
    profile: bool = False
    #: py-spy samples only the thread holding the interpreter lock (`--profile-gil`).
    profile_gil: bool = False
    trace: bool = False
    store: str = "memory"
    model_processes: int = 1
    model: str = "http"
    delay_file: Path | None = None
    client: str | None = None
    #: Messages the one chat of the litellm-serial case sends in a row.
    serial_messages: int = 1000
    #: Sections laid over botweave's generated bot.yaml (bench/overhead.py: a feature switched on).
    overlay: dict[str, object] | None = None


# --- processes -------------------------------------------------------------------------------


def _ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime + stime in seconds) of a live process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _ticks()


def tree_cpu(pid: int) -> float:
    """CPU seconds used by `pid` and its live descendants."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                parents[int(entry)], cpu[int(entry)] = stat
    total = 0.0
    for candidate, used in cpu.items():
        node = candidate
        while node and node != pid:
            node = parents.get(node, 0)
        if node == pid:
            total += used
    return total


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the harness dies, however it dies, so no bot
    is left running behind a crashed or killed harness."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def process_env() -> dict[str, str]:
    env = dict(os.environ)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["PYTHONUNBUFFERED"] = "1"
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


class ModelServer:
    """The loopback model in its own process; its latency is changed between runs, there and
    in the file the in-process model reads (`delay_file`)."""

    def __init__(self, delay_file: Path | None = None) -> None:
        self.delay_file = delay_file
        self.proc: subprocess.Popen[bytes] | None = None
        self.base_url = ""
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / "race_world.py"), "model"],
            cwd=ROOT,
            env=process_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=_die_with_parent,
        )
        assert self.proc.stdout is not None
        line = await asyncio.to_thread(self.proc.stdout.readline)
        if not line.startswith(b"http"):
            raise RuntimeError(f"the model emulator did not start (said {line!r})")
        self.base_url = line.decode().strip()
        self._session = aiohttp.ClientSession()

    async def configure(self, delay: float) -> None:
        assert self._session is not None
        if self.delay_file is not None:
            self.delay_file.write_text(repr(delay))
        async with self._session.post(self.base_url.removesuffix("/v1") + "/_race", json={"delay": delay}) as answer:
            answer.raise_for_status()

    async def arrivals(self) -> list[tuple[float, str]]:
        """When each model request since the last call arrived, and which message it answers."""
        assert self._session is not None
        async with self._session.get(self.base_url.removesuffix("/v1") + "/_race") as answer:
            answer.raise_for_status()
            return [(float(at), marker) for at, marker in (await answer.json())["arrivals"]]

    def cpu(self) -> float:
        return tree_cpu(self.proc.pid) if self.proc else 0.0

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                await asyncio.to_thread(self.proc.wait, 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@dataclass
class Contestant:
    kind: str
    world: World
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_s: float = 0.0
    next_run: int = 1

    @property
    def label(self) -> str:
        return LABELS[self.kind]

    def spawn(self, env: dict[str, str], cwd: Path) -> None:
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )

    def cpu(self) -> float:
        assert self.proc is not None
        return tree_cpu(self.proc.pid)

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.label} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join("    " + line for line in text[-lines:])

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    async def stop(self, grace: float = 15.0) -> None:
        """SIGTERM (sent by `terminate`, or now), then `grace` seconds to exit cleanly, then SIGKILL."""
        if self.proc is None:
            return
        self.terminate()
        deadline = time.monotonic() + grace
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.proc.poll() is None:
            print(
                f"note: {self.world.name} {self.label} was still shutting down {grace:.0f} s after SIGTERM "
                f"(load average {load_average()}): killed",
                flush=True,
            )
            self.proc.kill()
            self.proc.wait()


def botweave_command(explicit: str | None) -> list[str]:
    """The command that runs this tree's botweave.

    By default the installed `botweave` (run by this interpreter when it sits next to it, so
    /proc shows the bot itself rather than a shim), with this tree first on PYTHONPATH. When
    that does not start (an editable install pointing at a tree in mid-change), this tree's
    own CLI module is used instead, and the harness says so.
    """
    if explicit:
        return shlex.split(explicit)
    beside = Path(sys.executable).with_name("botweave")
    found = shutil.which("botweave")
    command = [sys.executable, str(beside)] if beside.exists() else [found] if found else []
    if command:
        check = subprocess.run(
            [*command, "--version"], cwd=tempfile.gettempdir(), env=botweave_env(), capture_output=True, timeout=120
        )
        if check.returncode == 0:
            print(f"botweave: `{shlex.join(command)}` says {check.stdout.decode().strip()!r}")
            return command
        print(f"note: `{shlex.join(command)} --version` failed:\n{check.stderr.decode(errors='replace')[-600:]}")
    for module in ("botweave.cli", "bots.cli"):
        if (ROOT / Path(*module.split("."))).with_suffix(".py").exists():
            print(f"note: running botweave as `python3 -m {module}` from {ROOT}")
            return [sys.executable, "-m", module]
    sys.exit("no working `botweave` command: pip install -e . (or pass --botweave 'python3 -m <package>.cli')")


def botweave_env() -> dict[str, str]:
    """This tree first on the path, so the botweave raced is the one next to this file."""
    env = process_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def store_url(store: str, path: Path) -> str:
    """`memory` keeps state in the bot's process; `sqlite` is the file `botweave run` uses
    when bot.yaml names no store (here one per run, next to the run's config)."""
    return "memory://" if store == "memory" else f"sqlite:///{path.with_suffix('.db')}"


def in_process_model(kind: str, settings: Settings) -> bool:
    """Whether this contestant's model is the litellm custom provider in its own process: on
    the litellm path's cases, or for every contestant with `--model in-process`."""
    return kind.endswith(LITELLM_SUFFIX) or settings.model == "in-process"


def contestant_env(base: dict[str, str], settings: Settings, in_process: bool) -> dict[str, str]:
    """With the in-process model, the contestant finds `race_provider` on its path and the
    file its latency is read from."""
    if not in_process:
        return base
    assert settings.delay_file is not None, "the in-process model reads its latency from the delay file"
    env = dict(base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH), env.get("PYTHONPATH")]))
    env[DELAY_FILE_ENV] = str(settings.delay_file)
    return env


def write_botweave_config(
    path: Path, world: World, model_url: str, streaming: bool, settings: Settings, in_process: bool | None = None
) -> Path:
    if in_process is None:
        in_process = settings.model == "in-process"
    config: dict[str, object] = {
        "bot": {"unknown_user_policy": "allow", "streaming": streaming},
        "agents": {
            "assistant": {
                "model": IN_PROCESS_MODEL if in_process else MODEL,
                "api_base": model_url,
                "api_key": "sk-bench",
                "instructions": SYSTEM_PROMPT,
                "max_history": 50,
            }
        },
        "platforms": world.botweave_section(),
    }
    if settings.store != "default":
        config["store"] = {"url": store_url(settings.store, path)}
    models: dict[str, object] = {}
    if settings.model_processes >= 0:
        # the provider is registered in this process only: a model process would not know it
        models["processes"] = 0 if in_process else settings.model_processes
    if settings.client is not None:
        models["client"] = settings.client
    if models:
        config["models"] = models
    if in_process:
        config["plugins"] = ["race_provider"]
    for section, value in (settings.overlay or {}).items():
        known = config.get(section)
        config[section] = {**known, **value} if isinstance(known, dict) and isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def make_world(platform: str, settings: Settings) -> World:
    if platform == "telegram":
        return TelegramWorld(settings.telegram_rps)
    if platform == "discord":
        return DiscordWorld()
    return SlackWorld()


# --- where the CPU goes (--profile) ---------------------------------------------------------


class Profiler:
    """py-spy sampling one contestant for one measured window, summarised by package.

    Samples of idle threads are left out (py-spy's default), so the samples are where the
    process spent CPU. py-spy pauses the process for each sample (without that, coroutine
    stacks come out cut), which stretches wall times: profiled runs are for finding where the
    CPU goes, not for the ratios.
    """

    def __init__(self, pid: int, output: Path, *, gil: bool = False) -> None:
        self.output = output
        binary = shutil.which("py-spy")
        if binary is None:
            sys.exit("--profile needs py-spy (pip install py-spy)")
        # with `gil`, a thread waiting on a queue (the store's, an executor's) is never sampled:
        # py-spy counts such threads as busy otherwise
        how = ["--gil", "--rate", "250"] if gil else ["--rate", "100"]
        self.proc = subprocess.Popen(
            [binary, "record", "--pid", str(pid), *how, "--format", "raw",
             "--full-filenames", "--subprocesses", "--output", str(output)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    async def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 15
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
        return summarise_profile(self.output)


def _package(frame: str) -> str:
    """Which package a raw py-spy frame `function (path:line)` belongs to."""
    if "(" not in frame:
        return "native"
    path = frame[frame.rfind("(") + 1 :].rsplit(":", 1)[0]
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0].removesuffix(".py")
    if path.startswith(str(BENCH)):
        return "bot script"
    if path.startswith(str(ROOT)) or path.startswith("/work/"):
        return "botweave"
    if "/lib/python3" in path:
        return "stdlib:" + path.split("/lib/python3", 1)[1].split("/")[1].removesuffix(".py")
    return "other"


def summarise_profile(path: Path, top: int = 6) -> str:
    """Self time (the innermost frame) and inclusive time (anywhere on the stack) per package."""
    own: dict[str, int] = {}
    anywhere: dict[str, int] = {}
    total = 0
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "no samples"
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaf = _package(frames[-1])
        own[leaf] = own.get(leaf, 0) + count
        for package in {_package(f) for f in frames}:
            anywhere[package] = anywhere.get(package, 0) + count
    if not total:
        return "no samples"

    def ranked(table: dict[str, int]) -> str:
        best = sorted(table.items(), key=lambda item: -item[1])[:top]
        return ", ".join(f"{name} {count / total:.0%}" for name, count in best)

    return f"{total} samples; self: {ranked(own)}; on the stack: {ranked(anywhere)}"


# --- one measured run ------------------------------------------------------------------------


@dataclass
class Result:
    platform: str
    case: str
    kind: str
    run: int
    rep: int
    chats: int
    per_chat: int
    latency: float
    answered: int
    missing: int
    duplicates: int
    strays: int
    violations: int
    wall: float
    inject_s: float
    bot_cpu: float
    model_cpu: float
    harness_cpu: float
    edits: list[int] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    floor: float = 0.0
    profile: str = ""
    timeline: str = ""
    calls: dict[str, int] = field(default_factory=dict)  # platform API calls the bot made, by method

    @property
    def cpu_ms(self) -> float:
        return self.bot_cpu / max(self.answered, 1) * 1000

    @property
    def rate(self) -> float:
        return self.answered / self.wall if self.wall > 0 else 0.0

    @property
    def ideal(self) -> float:
        if self.case == "streaming":
            return self.per_chat * max(self.latency, self.floor)
        return self.per_chat * self.latency

    @property
    def wall_ratio(self) -> float:
        return self.wall / self.ideal if self.ideal > 0 else float("nan")

    @property
    def fast_edits(self) -> int:
        return sum(1 for gap in self.gaps if gap < self.floor - FLOOR_TOLERANCE_S)

    @property
    def harness_share(self) -> float:
        return self.harness_cpu / self.wall if self.wall > 0 else 0.0


async def ping(contestant: Contestant) -> None:
    """Wait until the contestant answers one message (it is connected, litellm is imported)."""
    world = contestant.world
    deadline = time.monotonic() + PING_TIMEOUT_S
    connect = asyncio.ensure_future(world.connected(PING_TIMEOUT_S))
    try:
        while not connect.done():
            contestant.check_alive()
            await asyncio.wait({connect}, timeout=0.5)
        connect.result()
    finally:
        connect.cancel()
    tracker = Tracker(0, 1, range(0, 1))
    world.sink = tracker
    [chat] = world.chats(0, 1)
    await world.inject([(chat, user_text(0, 0, 0))])
    while not tracker.done.is_set():
        contestant.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{contestant.label} did not answer a ping in {PING_TIMEOUT_S:.0f}s:\n{contestant.log_tail()}")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(tracker.done.wait(), 0.5)
    contestant.ready_s = time.monotonic() - contestant.started_at


async def measure(contestant: Contestant, case: str, rep: int, model: ModelServer, settings: Settings) -> Result:
    world = contestant.world
    run = contestant.next_run
    contestant.next_run += 1
    latency = settings.latency if case in ("latency", "streaming") else 0.0
    if case in ("throughput", "ceiling", "litellm-throughput"):
        per_chat = settings.throughput_messages
    else:
        per_chat = settings.serial_messages if case == "litellm-serial" else settings.messages
    chats = world.chats(run, 1 if case == "litellm-serial" else settings.chats)

    await model.configure(0.0)
    warm = Tracker(run, len(chats), range(0, 1))
    world.sink = warm
    await world.inject([(chat, user_text(run, chat.index, 0)) for chat in chats])
    if not await warm.wait(settings.idle_timeout):
        contestant.check_alive()
        print(f"    warning: {warm.missing} of {warm.expected} warm-up replies missing", flush=True)
    await model.configure(latency)
    await asyncio.sleep(SETTLE_S)

    tracker = Tracker(run, len(chats), range(1, per_chat + 1))
    world.sink = tracker
    burst: list[tuple[Chat, str]] = [(c, user_text(run, c.index, k)) for k in tracker.ks for c in chats]
    profiler = None
    if settings.profile:
        assert contestant.proc is not None
        output = settings.logs / f"profile-{world.name}-{case}-{contestant.kind}-run{run}.txt"
        profiler = Profiler(contestant.proc.pid, output, gil=settings.profile_gil)
        await asyncio.sleep(0.5)  # py-spy attaches
    await model.arrivals()  # forget the warm-up's
    calls0 = world.call_count()
    bot0, model0, harness0 = contestant.cpu(), model.cpu(), time.process_time()
    started = time.monotonic()
    await world.inject(burst)
    inject_s = time.monotonic() - started
    await tracker.wait(settings.idle_timeout)
    harness1 = time.process_time()
    finished = tracker.finished_at or time.monotonic()
    await asyncio.sleep(SETTLE_S)
    bot1, model1 = contestant.cpu(), model.cpu()
    calls = dict(world.calls_since(calls0))
    profile = await profiler.stop() if profiler is not None else ""
    timeline = timeline_of(tracker, await model.arrivals(), started, latency) if settings.trace else ""
    contestant.check_alive()
    return Result(
        platform=world.name,
        case=case,
        kind=contestant.kind,
        run=run,
        rep=rep,
        chats=len(chats),
        per_chat=per_chat,
        latency=latency,
        answered=tracker.completed,
        missing=tracker.missing,
        duplicates=tracker.duplicates,
        strays=tracker.strays,
        violations=tracker.order_violations(),
        wall=finished - started,
        inject_s=inject_s,
        bot_cpu=bot1 - bot0,
        model_cpu=model1 - model0,
        harness_cpu=harness1 - harness0,
        edits=[reply.edits for reply in tracker.replies.values()],
        gaps=tracker.write_gaps(),
        floor=world.edit_floor,
        profile=profile,
        calls=calls,
        timeline=timeline,
    )


def timeline_of(tracker: Tracker, arrivals: list[tuple[float, str]], started: float, latency: float) -> str:
    """Where a run's wall time went beyond the model's latency, in three spans (ms, median/p90/max):
    burst → a chat's first model request, a reply → the same chat's next request, and a request →
    its reply less the latency."""
    requested: dict[tuple[int, int], float] = {}
    for at, marker in arrivals:
        found = MARKER.search(marker)
        if found is not None and int(found.group(1)) == tracker.run:
            requested.setdefault((int(found.group(2)), int(found.group(3))), at)
    first, between, answer = [], [], []
    for (chat, k), at in requested.items():
        reply = tracker.replies.get((chat, k))
        if k == tracker.ks[0]:
            first.append(at - started)
        elif (before := tracker.replies.get((chat, k - 1))) is not None and before.done_at is not None:
            between.append(at - before.done_at)
        if reply is not None and reply.done_at is not None:
            answer.append(reply.done_at - at - latency)

    def spans(values: list[float]) -> str:
        if not values:
            return "—"
        ranked = sorted(values)
        return "/".join(f"{ranked[int(q * (len(ranked) - 1))] * 1000:.0f}" for q in (0.5, 0.9, 1.0))

    last = max(
        (chat for chat in range(tracker.chats) if (chat, tracker.ks[-1]) in tracker.replies),
        key=lambda chat: tracker.replies[(chat, tracker.ks[-1])].done_at or 0.0,
        default=None,
    )
    slowest = ""
    if last is not None:
        steps, before = [], started
        for k in tracker.ks:
            at, reply = requested.get((last, k)), tracker.replies.get((last, k))
            if at is None or reply is None or reply.done_at is None:
                break
            steps.append(f"+{(at - before) * 1000:.0f} ask, +{(reply.done_at - at - latency) * 1000:.0f} reply")
            before = reply.done_at
        slowest = f"; last chat: {' | '.join(steps)}"
    return (
        f"burst→first request {spans(first)}, reply→next request {spans(between)}, "
        f"request→reply−L {spans(answer)} ms{slowest}"
    )


def describe(result: Result) -> str:
    parts = [
        f"{result.answered}/{result.answered + result.missing} answered",
        f"wall {result.wall:.2f} s",
        f"{result.rate:.0f} msg/s",
        f"bot CPU {result.cpu_ms:.2f} ms/msg",
        f"order violations {result.violations}",
    ]
    if result.duplicates:
        parts.append(f"duplicates {result.duplicates}")
    if result.strays:
        parts.append(f"posts answering no message of this run {result.strays}")
    if result.case == "streaming":
        parts.append(f"edits/msg {statistics.fmean(result.edits or [0]):.1f} (max {max(result.edits or [0])})")
        parts.append(f"min edit gap {min(result.gaps):.2f} s" if result.gaps else "no edits")
    busiest = sorted(result.calls.items(), key=lambda item: -item[1])[:4]
    per_message = ", ".join(f"{name} {count / max(result.answered, 1):.2f}" for name, count in busiest)
    parts.append(f"API calls/msg: {per_message}")
    parts.append(f"injected in {result.inject_s:.2f} s")
    parts.append(
        f"harness {result.harness_cpu / max(result.answered, 1) * 1000:.2f} ms/msg ({result.harness_share:.0%} of a core)"
    )
    parts.append(f"model {result.model_cpu / max(result.answered, 1) * 1000:.2f} ms/msg")
    return ", ".join(parts)


# --- a platform's race -----------------------------------------------------------------------


def contestants_for(platform: str, cases: Sequence[str]) -> list[str]:
    kinds: list[str] = []
    for case in cases:
        for kind in case_contestants(platform, case):
            if kind not in kinds:
                kinds.append(kind)
    return kinds


def case_contestants(platform: str, case: str) -> list[str]:
    if case == "streaming":
        return ["botweave_streaming"]
    if case in LITELLM_CASES:
        reference = REFERENCES[platform].get(case)
        return ["botweave" + LITELLM_SUFFIX, reference] if reference else []
    if case == "ceiling":
        return ["probe"] if platform == "telegram" else []
    reference = REFERENCES[platform].get(case)
    if reference is None:
        return []
    return ["botweave", reference]


_configs = itertools.count(1)  # a config (and SQLite file) per started bot: no run inherits a database


async def spawn(platform: str, kind: str, settings: Settings, model: ModelServer) -> Contestant:
    """Start an emulator of its own for one contestant, and the contestant against it."""
    world = make_world(platform, settings)
    await world.start()
    log = settings.logs / f"{platform}-{kind}.log"
    in_process = in_process_model(kind, settings) and kind != "probe"
    if kind.startswith("botweave"):
        config = write_botweave_config(
            settings.logs / f"{platform}-{kind}-{next(_configs)}.yaml", world, model.base_url,
            kind == "botweave_streaming", settings, in_process,
        )
        contestant = Contestant(kind, world, [*settings.botweave, "run", str(config)], log)
        contestant.spawn(contestant_env(botweave_env(), settings, in_process), settings.logs)
    else:
        script, *args = world.reference_args(kind.removesuffix(LITELLM_SUFFIX))
        argv = [sys.executable, str(BENCH / script), *args, "--model-base", model.base_url]
        if in_process:
            argv += ["--model", IN_PROCESS_MODEL, "--in-process-model"]
        contestant = Contestant(kind, world, argv, log)
        contestant.spawn(contestant_env(process_env(), settings, in_process), BENCH)
    return contestant


async def ready(contestants: list[Contestant]) -> None:
    pings = [asyncio.ensure_future(ping(c)) for c in contestants]
    try:
        await asyncio.gather(*pings)
    except BaseException:
        for task in pings:
            task.cancel()
        await asyncio.gather(*pings, return_exceptions=True)
        raise


async def run_one(
    contestant: Contestant, case: str, rep: int, settings: Settings, model: ModelServer,
    report: Callable[[Result], None], *, fresh: bool,
) -> None:
    result = await measure(contestant, case, rep, model, settings)
    started = f"started {contestant.ready_s:.1f} s before, " if fresh else ""
    print(
        f"  {result.platform:8} {case:10} {contestant.label:24} run {rep + 1}: {started}{describe(result)}", flush=True
    )
    if result.profile:
        print(f"      profile: {result.profile}", flush=True)
    if result.timeline:
        print(f"      timeline: {result.timeline}", flush=True)
    report(result)


def lineup(platform: str, case: str, rep: int) -> list[str]:
    kinds = case_contestants(platform, case)
    return kinds[::-1] if rep % 2 else kinds  # alternate who goes first, so drift hits both alike


async def stop_all(contestants: list[Contestant]) -> None:
    """Stop every bot at once, then their emulators: a bot shuts down cleanly only while
    its platform still answers (gone, it may retry connecting until it is killed)."""
    for contestant in contestants:
        contestant.terminate()
    await asyncio.gather(*(c.stop() for c in contestants))
    await asyncio.gather(*(c.world.stop() for c in contestants))


async def race_fresh(
    platform: str, cases: Sequence[str], settings: Settings, model: ModelServer, report: Callable[[Result], None]
) -> bool:
    """Every measured run gets a contestant process of its own, started for it and alone on
    the machine (besides the harness and the model): runs do not inherit each other's state.
    A run that fails is reported and skipped (the others still count); returns False if any did."""
    ok = True
    told: set[str] = set()
    for rep in range(settings.repeat):
        for case in cases:
            for kind in lineup(platform, case, rep):
                contestant = await spawn(platform, kind, settings, model)
                try:
                    await ready([contestant])
                    await run_one(contestant, case, rep, settings, model, report, fresh=True)
                except RuntimeError as exc:
                    ok = False
                    detail = str(exc) if kind not in told else str(exc).splitlines()[0]
                    told.add(kind)
                    print(f"  {platform:8} {case:10} {LABELS[kind]:24} run {rep + 1}: FAILED: {detail}", flush=True)
                finally:
                    await stop_all([contestant])
    return ok


async def race_reusing(
    platforms: Sequence[str], cases: Sequence[str], settings: Settings, model: ModelServer,
    report: Callable[[Result], None],
) -> bool:
    """Start every contestant of every platform at once, then run every case with them: quick,
    but start-ups overlap and later runs meet a process that has served the earlier ones."""
    ok = True
    lineups: dict[str, list[Contestant]] = {}
    try:
        for platform in platforms:
            lineups[platform] = [await spawn(platform, k, settings, model) for k in contestants_for(platform, cases)]
        starting = [p for p in platforms if lineups[p]]
        outcomes = await asyncio.gather(*(ready(lineups[p]) for p in starting), return_exceptions=True)
        for platform, outcome in zip(starting, outcomes):
            if isinstance(outcome, BaseException):
                ok = False
                print(f"{platform}: FAILED: {outcome}", flush=True)
                continue
            started = ", ".join(f"{c.label} {c.ready_s:.1f} s" for c in lineups[platform])
            print(f"{platform}: ready — {started} (start-up, all contestants at once)", flush=True)
        for platform, outcome in zip(starting, outcomes):
            if isinstance(outcome, BaseException):
                continue
            by_kind = {c.kind: c for c in lineups[platform]}
            try:
                for rep in range(settings.repeat):
                    for case in cases:
                        for kind in lineup(platform, case, rep):
                            await run_one(by_kind[kind], case, rep, settings, model, report, fresh=False)
            except RuntimeError as exc:
                ok = False
                print(f"{platform}: FAILED: {exc}", flush=True)
    finally:
        await stop_all([c for contestants in lineups.values() for c in contestants])
    return ok


async def race(
    platforms: Sequence[str], cases: Sequence[str], settings: Settings, model: ModelServer,
    report: Callable[[Result], None], *, reuse: bool,
) -> bool:
    """Returns False when a platform could not be raced."""
    for platform in platforms:
        missing = [c for c in cases if not case_contestants(platform, c)]
        if missing:
            print(f"{platform}: no race for {', '.join(missing)} (the targets set those on Telegram only)", flush=True)
    if reuse:
        return await race_reusing(platforms, cases, settings, model, report)
    ok = True
    for platform in platforms:
        ok = await race_fresh(platform, cases, settings, model, report) and ok
    return ok


# --- the verdicts ----------------------------------------------------------------------------


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "n/a"
    mid = fmt.format(statistics.median(values))
    if len(values) == 1:
        return mid
    return f"{mid} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


@dataclass
class Verdict:
    platform: str
    measure: str
    botweave: str
    reference: str
    ratio: str
    target: str
    ok: bool | None

    @property
    def mark(self) -> str:
        return "n/a" if self.ok is None else "PASS" if self.ok else "MISS"


def paired(mine: list[Result], theirs: list[Result]) -> list[tuple[Result, Result]]:
    """Runs of the same repetition, side by side (a repetition one side failed is left out)."""
    by_rep = {r.rep: r for r in theirs}
    return [(a, by_rep[a.rep]) for a in mine if a.rep in by_rep]


def judge(platform: str, case: str, results: list[Result]) -> Verdict | None:
    mine = [r for r in results if r.platform == platform and r.case == case and r.kind.startswith("botweave")]
    kinds = case_contestants(platform, case)
    ref_kind = next((k for k in kinds if not k.startswith("botweave")), None)
    theirs = [r for r in results if r.platform == platform and r.case == case and r.kind == ref_kind]
    ref_label = LABELS[ref_kind] if ref_kind else "—"
    if case in CPU_TARGETS and paired(mine, theirs):
        ratios = [a.cpu_ms / b.cpu_ms for a, b in paired(mine, theirs)]
        target = CPU_TARGETS[case]
        where = "" if case == "cpu" else f" → litellm, {mine[0].chats} × {mine[0].per_chat}"
        return Verdict(
            platform, f"CPU/msg, zero latency{where}",
            spread([r.cpu_ms for r in mine]) + " ms",
            f"{ref_label} {spread([r.cpu_ms for r in theirs])} ms",
            spread(ratios), f"≤ {target:.2f}",
            statistics.median(ratios) <= target and not any(r.missing for r in mine),
        )
    if case == "latency" and mine:
        ok = statistics.median([r.wall_ratio for r in mine]) <= 1.25 and all(
            r.violations == 0 and r.missing == 0 for r in mine
        )
        ref = (
            f"{ref_label} {spread([r.wall for r in theirs])} s = {spread([r.wall_ratio for r in theirs])}× ideal, "
            f"{spread([float(r.violations + r.missing) for r in theirs], '{:.0f}')} viol."
            if theirs
            else "—"
        )
        ideal = mine[0].ideal
        return Verdict(
            platform, f"wall, L={mine[0].latency:g}s, K={mine[0].per_chat}",
            f"{spread([r.wall for r in mine])} s, {spread([float(r.violations + r.missing) for r in mine], '{:.0f}')} viol.",
            ref, spread([r.wall_ratio for r in mine]) + "× ideal", f"≤ 1.25× {ideal:.2f} s, 0 viol.", ok,
        )
    if case == "streaming" and mine:
        fast = sum(r.fast_edits for r in mine)
        ok = statistics.median([r.wall_ratio for r in mine]) <= 1.25 and fast == 0 and not any(r.missing for r in mine)
        gaps = [min(r.gaps) for r in mine if r.gaps]
        edits = [statistics.fmean(r.edits) for r in mine if r.edits]
        return Verdict(
            platform, f"streaming wall, floor {mine[0].floor:g}s",
            f"{spread([r.wall for r in mine])} s, edits/msg {spread(edits, '{:.1f}')}, "
            f"min gap {spread(gaps)} s, {fast} too fast",
            "—", spread([r.wall_ratio for r in mine]) + f"× {mine[0].ideal:.2f} s",
            "≤ 1.25×, no edit under the floor", ok,
        )
    if case in ("throughput", "litellm-throughput") and paired(mine, theirs):
        ratios = [a.rate / b.rate for a, b in paired(mine, theirs)]
        ok = statistics.median(ratios) >= 1.0 and all(r.violations == 0 and r.missing == 0 for r in mine)
        where = " → litellm" if case == "litellm-throughput" else ""
        return Verdict(
            platform, f"throughput{where}, K={mine[0].per_chat}",
            f"{spread([r.rate for r in mine], '{:.0f}')} msg/s, "
            f"{spread([float(r.violations + r.missing) for r in mine], '{:.0f}')} viol.",
            f"{ref_label} {spread([r.rate for r in theirs], '{:.0f}')} msg/s",
            spread(ratios), "≥ 1.00, order kept", ok,
        )
    if case == "ceiling" and theirs:
        return Verdict(
            platform, f"harness ceiling, K={theirs[0].per_chat}",
            "—", f"{ref_label} {spread([r.rate for r in theirs], '{:.0f}')} msg/s",
            f"harness {spread([r.harness_share * 100 for r in theirs], '{:.0f}')}% of a core", "(information)", None,
        )
    return None


def print_verdict(verdict: Verdict) -> None:
    print(
        f"{verdict.platform:8} {verdict.measure:32} botweave {verdict.botweave} | {verdict.reference} "
        f"→ {verdict.ratio} (target {verdict.target}) {verdict.mark}",
        flush=True,
    )


def print_table(verdicts: list[Verdict], results: list[Result]) -> None:
    if not verdicts:
        return
    rows = [("platform", "measure", "botweave", "reference", "ratio", "target", "")]
    rows += [(v.platform, v.measure, v.botweave, v.reference, v.ratio, v.target, v.mark) for v in verdicts]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print()
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))
    shares = [r.harness_share for r in results]
    if shares:
        print(
            f"\nharness (emulators + tracking, this process): {spread([s * 100 for s in shares], '{:.0f}')}% of a core "
            f"while measuring; medians {statistics.median([r.harness_cpu / max(r.answered, 1) * 1000 for r in results]):.2f} "
            f"ms/msg, model emulator {statistics.median([r.model_cpu / max(r.answered, 1) * 1000 for r in results]):.2f} ms/msg"
        )
        if max(shares) > 0.85:
            print("warning: the harness was near a full core in some run: that run may measure the harness")


# --- main ------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> int:
    # SIGTERM ends the race like Ctrl-C does: the running measure is cancelled and every
    # contestant stopped on the way out.
    me = asyncio.current_task()
    assert me is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, me.cancel)
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # bots hanging up mid-poll at the end
    logging.getLogger("aiohttp.access").setLevel(logging.CRITICAL)
    platforms = list(PLATFORMS) if args.platform == "all" else [args.platform]
    if args.case == "all":
        cases = [c for c in CASES if c != "ceiling"]
        if "telegram" in platforms:
            cases.append("ceiling")
    else:
        cases = list(LITELLM_CASES) if args.case == "litellm" else [args.case]
    logs = Path(tempfile.mkdtemp(prefix="botweave-race-"))
    settings = Settings(
        chats=args.chats,
        messages=args.messages,
        throughput_messages=args.throughput_messages,
        latency=args.latency,
        repeat=args.repeat,
        telegram_rps=args.telegram_rps,
        idle_timeout=args.idle_timeout,
        botweave=botweave_command(args.botweave),
        logs=logs,
        profile=args.profile or args.profile_gil,
        profile_gil=args.profile_gil,
        trace=args.trace,
        store=args.store,
        model_processes=args.model_processes,
        model=args.model,
        delay_file=logs / "model-delay",
        client=args.client,
        serial_messages=args.serial_messages,
    )
    processes = "default" if settings.model_processes < 0 else settings.model_processes
    print(
        f"race: {settings.chats} chats × {settings.messages} messages (throughput: × {settings.throughput_messages}; "
        f"litellm-serial: 1 × {settings.serial_messages}), "
        f"model latency {settings.latency:g} s, {settings.repeat} run(s) each, {os.cpu_count()} cores, "
        f"botweave store {settings.store}, model processes {processes}, model {settings.model}, "
        f"models.client {settings.client or 'unset'}; "
        f"botweave runs with {ROOT} first on PYTHONPATH; logs in {logs}; load average {load_average()}",
        flush=True,
    )
    results: list[Result] = []
    model = ModelServer(settings.delay_file)
    await model.start()
    interrupted = False
    try:
        failed = not await race(platforms, cases, settings, model, results.append, reuse=args.reuse)
    except (asyncio.CancelledError, KeyboardInterrupt):
        failed = interrupted = True  # every contestant was stopped on the way out
        print("\ninterrupted: the verdicts below cover the runs that finished", flush=True)
    finally:
        await model.stop()
    print()
    verdicts = [v for p in platforms for c in cases if (v := judge(p, c, results)) is not None]
    for verdict in verdicts:
        print_verdict(verdict)
    print_table(verdicts, results)
    print(f"load average at the end: {load_average()} (other work on the machine shows in wall times, less in CPU)")
    if not args.keep_logs and not settings.profile and not failed:
        shutil.rmtree(logs, ignore_errors=True)
    return 130 if interrupted else 1 if failed else 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", choices=(*PLATFORMS, "all"), default="all")
    parser.add_argument(
        "--case", choices=(*CASES, "litellm", "all"), default="all",
        help="one measure, `litellm` for the three litellm-path cases, or all of them",
    )
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5, help="messages per chat (cpu, latency, streaming)")
    parser.add_argument("--throughput-messages", type=int, default=8, help="messages per chat (throughput)")
    parser.add_argument(
        "--serial-messages", type=int, default=1000,
        help="messages the one chat of litellm-serial sends in a row (fewer for a shorter run)",
    )
    parser.add_argument("--latency", type=float, default=0.5, help="model latency in seconds (latency, streaming)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each measure")
    parser.add_argument(
        "--trace", action="store_true",
        help="print where each run's wall time went: burst → first model request, reply → next request, "
        "request → reply beyond the latency",
    )
    parser.add_argument(
        "--quick", action="store_true", help="20 chats × 2 messages (litellm-serial: 1 × 50), one run, --reuse: a smoke test in under a minute"
    )
    parser.add_argument(
        "--reuse", action="store_true",
        help="start every contestant once, all at once, and measure every run with it (quicker; by default each "
        "measured run gets a fresh process, so no run inherits what an earlier one left behind)",
    )
    parser.add_argument(
        "--telegram-rps", type=float, default=10_000,
        help="botweave's Telegram requests_per_second: the emulator is a self-hosted Bot API server, "
        "and the hand-written bots do not pace at all",
    )
    parser.add_argument("--idle-timeout", type=float, default=30.0, help="give up on a run after this long without progress")
    parser.add_argument("--botweave", help="command that runs botweave (default: the installed `botweave`)")
    parser.add_argument(
        "--store", choices=("memory", "sqlite", "default"), default="memory",
        help="botweave's store: memory:// (default), the SQLite file `botweave run` uses when bot.yaml names none "
        "(here a fresh one per started bot), or `default`: no store section at all",
    )
    parser.add_argument(
        "--model-processes", type=int, default=1,
        help="botweave's models.processes: model calls in this many helper processes (their CPU is the bot's), "
        "0 in the bot's own process, -1 no models section at all (botweave's default)",
    )
    parser.add_argument(
        "--model", choices=("http", "in-process"), default="http",
        help="every contestant's model: the loopback OpenAI-compatible server (default), or a litellm custom "
        "provider inside each bot's own process (bench/race_provider.py; no HTTP: the frameworks' own cost; "
        "botweave then makes its calls in its own process)",
    )
    parser.add_argument(
        "--client", choices=("auto", "litellm", "direct"),
        help="botweave's models.client (unset by default: the section names none); `litellm` measures the "
        "litellm path a non-OpenAI model takes",
    )
    parser.add_argument(
        "--defaults", action="store_true",
        help="botweave as a new user runs it: no store or models section (the same as --store default "
        "--model-processes -1)",
    )
    parser.add_argument(
        "--profile-gil", action="store_true",
        help="--profile sampling only the thread that holds the interpreter lock, 250 times a second: where "
        "the Python CPU goes, without threads that wait on a queue counted as busy",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the contestants' logs and configs")
    parser.add_argument(
        "--profile", action="store_true",
        help="sample every contestant with py-spy while it is measured and say where its CPU goes "
        "(raw profiles are kept with the logs; sampling costs the bots some CPU, so compare ratios from runs without it)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.chats, args.messages, args.throughput_messages, args.repeat, args.reuse = 20, 2, 3, 1, True
        args.serial_messages = 50
    if args.defaults:
        args.store, args.model_processes = "default", -1
    if args.model == "in-process" and args.model_processes > 0:
        parser.error("--model in-process: a custom provider registered in Python is seen by the bot's process only "
                     "(use --model-processes 0)")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
