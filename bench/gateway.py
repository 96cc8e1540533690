"""The gateway's figures, each against what it is compared with, measured in the same run.

1. **CPU per turn, web vs Telegram.** The same bot (`botweave run`, offline/echo, the default
   SQLite store unless `--store memory`) answers the same messages, once for people on the
   Telegram emulator (no gateway configured: the baseline a Telegram bot pays) and once for
   people at the gateway (`botweave.gateway.Client`, one connection per person). The bot's CPU
   (utime + stime from /proc) over the measured turns, divided by the turns. Both without
   streaming and both streaming. Target: web ≤ 1.1 × Telegram.
2. **500 clients chatting at once**: each connection its own session, each sending its
   messages one after the other without waiting; every message answered, and each session's
   answers in the order its messages were sent.
3. **Fan-out**: a room on the Telegram emulator watched by 200 clients; the delay from a room
   turn's publication (its message's `at`) to each client receiving it, p50 / p95. Target:
   p95 ≤ 50 ms.
4. **Memory per idle connection**: the bot's RSS growth over 500 connected, idle clients.

The harness (emulators, clients) runs in this process and shares the machine with the bot:
take figures under `flock -x /work/locks/machine`, and repeat (`--repeats`) for the spread.

    python3 bench/gateway.py [--turns 1000] [--chats 20] [--clients 500] [--watchers 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from contextlib import suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import yaml  # noqa: E402
from botweave.gateway import Client  # noqa: E402

from tests.emulators.openai import OpenAIEmulator  # noqa: E402
from tests.emulators.telegram import TelegramEmulator  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Bot:
    """`botweave run` in a process of its own, with its own state dir."""

    def __init__(self, workdir: Path, config: dict[str, Any], *args: str) -> None:
        self.workdir = workdir
        path = workdir / "bot.yaml"
        path.write_text(yaml.safe_dump(config))
        env = {**os.environ, "XDG_STATE_HOME": str(workdir / "state"), "PYTHONPATH": str(ROOT)}
        self.log = open(workdir / "bot.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "botweave", "run", str(path), *args],
            cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def listening(self, port: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the bot exited ({self.proc.returncode}):\n{self.tail()}")
            with suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            await asyncio.sleep(0.1)
        raise SystemExit(f"the bot did not listen on {port}:\n{self.tail()}")

    def tail(self) -> str:
        return (self.workdir / "bot.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def base_config(store: str, workdir: Path, *, streaming: bool) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bot": {"unknown_user_policy": "allow", "streaming": streaming},
        "agents": {"assistant": {"model": "offline/echo", "max_history": 20}},
    }
    if store == "memory":
        config["store"] = {"url": "memory://"}
    return config


# --- 1. CPU per turn ----------------------------------------------------------------------------


class Replies:
    """Counts the bot's Telegram replies per chat as they land, without rescanning."""

    def __init__(self, emu: TelegramEmulator) -> None:
        self.emu = emu
        self.seen = 0
        self.counts: dict[int, int] = defaultdict(int)

    def update(self) -> None:
        calls = self.emu.calls
        for call in calls[self.seen :]:
            if call.method == "sendMessage" and call.status == 200 and isinstance(call.result, dict):
                self.counts[call.result["chat"]["id"]] += 1
        self.seen = len(calls)

    async def wait(self, chat: int, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.update()
            if self.counts[chat] >= count:
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"telegram chat {chat} got {self.counts[chat]} of {count} answers")
            await asyncio.sleep(0.002)


async def telegram_turns(workdir: Path, store: str, chats: int, turns: int, streaming: bool) -> float:
    """The bot's CPU seconds per turn for Telegram people (no gateway)."""
    emu = await TelegramEmulator().start()
    config = base_config(store, workdir, streaming=streaming)
    config["platforms"] = {"telegram": {"token": emu.token, "api_base_url": emu.api_base_url, "poll_timeout": 1,
                                        "requests_per_second": 1000}}
    ops = free_port()
    bot = Bot(workdir, config, "--ops-listen", f"127.0.0.1:{ops}")
    try:
        await bot.listening(ops)
        replies = Replies(emu)
        people = [TelegramEmulator.user(5000 + n, f"P{n}") for n in range(chats)]
        rooms = [emu.private_chat(p) for p in people]

        async def person(n: int, rounds: int, offset: int) -> None:
            for r in range(rounds):
                emu.push_message(rooms[n], people[n], f"message number {offset + r} from person {n}")
                await replies.wait(rooms[n]["id"], offset + r + 1)

        await asyncio.gather(*(person(n, 3, 0) for n in range(chats)))  # warm-up: imports, first turns
        rounds = max(1, turns // chats)
        before = cpu_seconds(bot.pid)
        await asyncio.gather(*(person(n, rounds, 3) for n in range(chats)))
        return (cpu_seconds(bot.pid) - before) / (rounds * chats)
    finally:
        bot.stop()
        await emu.stop()


async def web_turns(workdir: Path, store: str, chats: int, turns: int, streaming: bool) -> float:
    """The bot's CPU seconds per turn for people at the gateway, one connection each."""
    port = free_port()
    config = base_config(store, workdir, streaming=streaming)
    config["gateway"] = {"listen": f"127.0.0.1:{port}"}
    config["platforms"] = {"web": {"streaming": streaming}}
    bot = Bot(workdir, config)
    try:
        await bot.listening(port)
        clients = [Client(f"ws://127.0.0.1:{port}/ws", timeout=60) for _ in range(chats)]
        for client in clients:
            await client.connect()
        sessions = [await c.create_session() for c in clients]

        async def person(n: int, rounds: int, offset: int) -> None:
            client = clients[n]
            for r in range(rounds):
                sent = await client.send(sessions[n], f"message number {offset + r} from person {n}")
                await client.next_event(60, where=lambda e, sent=sent: e.event == "final" and e.data["message_id"] == sent)

        await asyncio.gather(*(person(n, 3, 0) for n in range(chats)))
        rounds = max(1, turns // chats)
        before = cpu_seconds(bot.pid)
        await asyncio.gather(*(person(n, rounds, 3) for n in range(chats)))
        used = cpu_seconds(bot.pid) - before
        for client in clients:
            await client.close()
        return used / (rounds * chats)
    finally:
        bot.stop()


# --- 2. 500 clients -------------------------------------------------------------------------------


async def many_clients(workdir: Path, store: str, count: int, messages: int) -> dict[str, Any]:
    port = free_port()
    config = base_config(store, workdir, streaming=True)
    config["gateway"] = {"listen": f"127.0.0.1:{port}", "max_buffered": 5000}
    bot = Bot(workdir, config)
    try:
        await bot.listening(port)
        clients = [Client(f"ws://127.0.0.1:{port}/ws", timeout=120) for _ in range(count)]
        await asyncio.gather(*(c.connect() for c in clients))
        sessions = await asyncio.gather(*(c.create_session() for c in clients))
        # warm the bot (litellm's import) before the clock runs
        warm = await clients[0].send(sessions[0], "warm up")
        await clients[0].next_event(120, where=lambda e: e.event == "final" and e.data["message_id"] == warm)
        started = time.monotonic()
        cpu0 = cpu_seconds(bot.pid)

        async def chat(client: Client, session: str) -> tuple[int, bool]:
            sent = [await client.send(session, f"question {n}") for n in range(messages)]
            answered: list[str] = []
            while len(answered) < len(sent):
                event = await client.next_event(120, where=lambda e: e.event == "final" and e.data["message_id"] in sent)
                answered.append(event.data["message_id"])
            return len(answered), answered == sent

        results = await asyncio.gather(*(chat(c, s) for c, s in zip(clients, sessions)))
        wall = time.monotonic() - started
        cpu = cpu_seconds(bot.pid) - cpu0
        await asyncio.gather(*(c.close() for c in clients))
        return {
            "clients": count,
            "messages": count * messages,
            "answered": sum(n for n, _ in results),
            "sessions_in_order": sum(ordered for _, ordered in results),
            "wall_s": wall,
            "bot_cpu_ms_per_turn": cpu / (count * messages) * 1000,
        }
    finally:
        bot.stop()


# --- 3. fan-out -----------------------------------------------------------------------------------


async def fan_out(workdir: Path, store: str, watchers: int, activities: int) -> list[float]:
    """Seconds from each room turn's publication to each watcher receiving it."""
    emu = await TelegramEmulator().start()
    # A stand-up update of the same length every turn (about 400 characters). The echo model
    # would repeat the growing room transcript, which soon takes several Telegram messages a
    # turn and meets the group limit.
    model = OpenAIEmulator(" ".join([
        "Yesterday I finished the review of the billing changes and paired on the flaky import test.",
        "Today I am cutting the release candidate, writing its notes and watching the canary.",
        "Blockers: none, but I need a second pair of eyes on the migration before noon.",
        "Also: the on-call rota for next week is still open, please add yourselves.",
    ]))
    model_url = await model.start()
    group = emu.group(-100900, "Stand-up")
    port = free_port()
    roster = [f"agent{n}" for n in range(4)]
    config = base_config(store, workdir, streaming=False)
    config["agents"] = {name: {"model": "openai/bench-model", "api_base": model_url, "api_key": "sk-bench",
                               "display_name": name.title()} for name in roster}
    config["platforms"] = {"telegram": {"token": emu.token, "api_base_url": emu.api_base_url, "poll_timeout": 1,
                                        "requests_per_second": 1000, "group_policy": "respond_all"}}
    # One round: each human message (counted by max_messages too) sets off exactly the four
    # turns every watcher waits for. Telegram lets a bot post 20 messages a minute into a
    # group, so activities past the fifth are paced by the bot; the delay measured starts at
    # a turn's publication, after that pacing.
    config["rooms"] = {"standup": {"roster": roster, "max_rounds": 1, "max_messages": len(roster) + 1}}
    config["routes"] = [{"match": {"chat_id": "-100900"}, "room": "standup"}]
    config["gateway"] = {"listen": f"127.0.0.1:{port}", "max_buffered": 5000}
    bot = Bot(workdir, config)
    delays: list[float] = []
    try:
        await bot.listening(port)
        clients = [Client(f"ws://127.0.0.1:{port}/ws", timeout=60) for _ in range(watchers)]
        await asyncio.gather(*(c.connect() for c in clients))
        await asyncio.gather(*(c.subscribe("telegram:-100900") for c in clients))
        person = TelegramEmulator.user(77, "Pat")

        async def watch(client: Client, turns: int) -> None:
            seen = 0
            while seen < turns:
                event = await client.next_event(120, where=lambda e: e.event == "message")
                if event.data["author"]["kind"] == "agent":
                    delays.append(time.time() - float(event.data["at"]))
                    seen += 1

        emu.push_message(group, person, "warm up: what is the plan?")  # imports, first turns: not counted
        await asyncio.gather(*(watch(c, 4) for c in clients))
        delays.clear()
        for n in range(activities):
            emu.push_message(group, person, f"what is the plan for day {n}?")
            await asyncio.gather(*(watch(c, 4) for c in clients))
        await asyncio.gather(*(c.close() for c in clients))
        return delays
    finally:
        bot.stop()
        await emu.stop()
        await model.stop()


# --- 4. memory ----------------------------------------------------------------------------------


async def idle_memory(workdir: Path, store: str, count: int) -> float:
    port = free_port()
    config = base_config(store, workdir, streaming=True)
    config["gateway"] = {"listen": f"127.0.0.1:{port}"}
    bot = Bot(workdir, config)
    try:
        await bot.listening(port)
        # The bot imports litellm while it starts (in a thread, after it already listens) and
        # the first connections and turn make one-off allocations: all of that before measuring.
        warm = [Client(f"ws://127.0.0.1:{port}/ws", timeout=120) for _ in range(20)]
        for client in warm:
            await client.connect()
        session = await warm[0].create_session()
        sent = await warm[0].send(session, "warm up")
        await warm[0].next_event(120, where=lambda e: e.event == "final" and e.data["message_id"] == sent)
        for client in warm:
            await client.close()
        await asyncio.sleep(2)
        before = rss_bytes(bot.pid)
        clients = [Client(f"ws://127.0.0.1:{port}/ws", timeout=60) for _ in range(count)]
        await asyncio.gather(*(c.connect() for c in clients))
        await asyncio.sleep(2)
        after = rss_bytes(bot.pid)
        await asyncio.gather(*(c.close() for c in clients))
        return (after - before) / count
    finally:
        bot.stop()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=1000, help="measured turns per CPU run")
    parser.add_argument("--chats", type=int, default=20, help="people chatting at once in the CPU runs")
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--messages", type=int, default=3, help="messages each of the many clients sends")
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--activities", type=int, default=4, help="room activities the watchers follow")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--only", choices=("cpu", "clients", "fanout", "memory"))
    args = parser.parse_args()
    print(f"bench/gateway.py: store {args.store}, load {Path('/proc/loadavg').read_text().split()[:3]}", flush=True)

    with tempfile.TemporaryDirectory(prefix="bw-gateway-bench-") as tmp:
        base = Path(tmp)
        counter = iter(range(10_000))

        def fresh() -> Path:
            path = base / f"run-{next(counter)}"
            path.mkdir()
            return path

        if args.only in (None, "cpu"):
            for streaming in (False, True):
                ratios, tg, wb = [], [], []
                for _ in range(args.repeats):  # interleaved, so drift hits both alike
                    t = await telegram_turns(fresh(), args.store, args.chats, args.turns, streaming)
                    w = await web_turns(fresh(), args.store, args.chats, args.turns, streaming)
                    tg.append(t * 1000)
                    wb.append(w * 1000)
                    ratios.append(w / t)
                label = "streamed" if streaming else "whole"
                print(f"cpu per turn ({label} replies): telegram {' '.join(f'{v:.2f}' for v in tg)} ms; "
                      f"web {' '.join(f'{v:.2f}' for v in wb)} ms; web/telegram "
                      f"{' '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}; target ≤ 1.10)",
                      flush=True)
        if args.only in (None, "clients"):
            for _ in range(args.repeats):
                result = await many_clients(fresh(), args.store, args.clients, args.messages)
                print(f"{result['clients']} clients: {result['answered']}/{result['messages']} answered, "
                      f"{result['sessions_in_order']}/{result['clients']} sessions in order, "
                      f"{result['wall_s']:.1f} s wall, {result['bot_cpu_ms_per_turn']:.2f} ms bot CPU per turn", flush=True)
        if args.only in (None, "fanout"):
            for _ in range(args.repeats):
                delays = await fan_out(fresh(), args.store, args.watchers, args.activities)
                print(f"fan-out to {args.watchers} watchers: {len(delays)} deliveries, p50 {percentile(delays, 0.5) * 1000:.1f} ms, "
                      f"p95 {percentile(delays, 0.95) * 1000:.1f} ms, max {max(delays) * 1000:.1f} ms (target p95 ≤ 50 ms)",
                      flush=True)
        if args.only in (None, "memory"):
            for _ in range(args.repeats):
                per = await idle_memory(fresh(), args.store, args.clients)
                print(f"memory per idle connection: {per / 1024:.1f} KiB ({args.clients} connections)", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
