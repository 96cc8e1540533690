"""Crash and stall scenarios against real `botweave run` processes, a real redis-server and
the platform emulators; shared by the process tests (one run each) and bench/crash.py (many).

A run starts an ingress and two workers on Redis, sends `messages` user messages over `chats`
conversations, and then, once a quarter of them are answered, either kills a worker with
SIGKILL or pauses Redis (`CLIENT PAUSE`). It waits for every answer and reports what a user
would have seen:

* lost: messages never answered; duplicated: messages answered more than once;
* in flight: sends whose answer the killed worker never read (the platform has the message,
  the worker could not know) - the only sends Telegram may show twice;
* takeover: for each conversation that still had messages to answer when the fault struck,
  how long until its next answer; the longest is the takeover time, and the conversations
  that waited more than `STALL_S` are the stalled ones;
* history: every conversation's stored history must be its messages in order, each once,
  each followed by its answer; and no request to the model may hold a turn twice;
* the processes' logs: how many store-outage warnings and how many tracebacks they wrote.

Each platform's emulator holds a sent message for `send_delay` seconds after storing it and
before answering, so a kill lands while sends are in flight, as with a real network.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from tests.emulators import discord as discord_emu
from tests.emulators.discord import DiscordEmulator
from tests.emulators.openai import OpenAIEmulator
from tests.emulators.slack import SlackEmulator, event_callback, slack_section
from tests.emulators.teams import Conversation, TeamsEmulator
from tests.emulators.telegram import TelegramEmulator
from tests.emulators.whatsapp import VERIFY_TOKEN, Person, WhatsAppEmulator

ROOT = Path(__file__).resolve().parents[1]
TOKEN = re.compile(r"c(\d+)-m(\d+)")
STALL_S = 3.0


# --- platforms: the emulator, the config section, how a user talks, what the user sees ------------


class SlowTelegram(TelegramEmulator):
    """Holds each sent message `send_delay` seconds after storing it; counts the sends whose
    client was gone by the time the answer was ready."""

    def __init__(self, send_delay: float) -> None:
        super().__init__()
        self.send_delay = send_delay
        self.unanswered = 0

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        result = await super()._api_sendMessage(params)
        await asyncio.sleep(self.send_delay)
        return result

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        response = await super()._handle(request)
        if request.match_info.get("method") == "sendMessage" and _gone(request):
            self.unanswered += 1
        return response


class SlowDiscord(DiscordEmulator):
    async def _create_message(self, request: web.Request) -> web.Response:
        response = await super()._create_message(request)
        await asyncio.sleep(self.send_delay)
        if _gone(request):
            self.unanswered += 1
        return response


class SlowSlack(SlackEmulator):
    def __init__(self, send_delay: float) -> None:
        super().__init__()
        self.send_delay = send_delay
        self.unanswered = 0

    async def _api(self, request: web.Request) -> web.Response:
        response = await super()._api(request)
        if request.match_info.get("method") == "chat.postMessage":
            await asyncio.sleep(self.send_delay)
            if _gone(request):
                self.unanswered += 1
        return response


class SlowWhatsApp(WhatsAppEmulator):
    """Holds each message send `send_delay` seconds after taking it, and reports its `sent`
    status to the webhook (with the send's key) as Meta does."""

    def __init__(self, send_delay: float) -> None:
        super().__init__()
        self.send_delay = send_delay
        self.unanswered = 0
        self.report_statuses = True

    async def _messages(self, request: web.Request) -> web.Response:
        response = await super()._messages(request)
        await asyncio.sleep(self.send_delay)
        if _gone(request):
            self.unanswered += 1
        return response


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


class Side:
    """One platform as the test sees it."""

    name = ""
    emulator: Any

    async def start(self, send_delay: float) -> None: ...
    async def stop(self) -> None:
        await self.emulator.stop()

    def section(self) -> dict[str, Any]: ...
    def open_chats(self, count: int) -> None: ...
    async def connected(self, timeout: float) -> None: ...
    async def say(self, chat: int, text: str) -> None: ...
    def answers(self) -> list[str]:
        """The text of every message the bot posted that a user can see, oldest first."""
        ...

    @property
    def unanswered(self) -> int:
        return int(self.emulator.unanswered)


class TelegramSide(Side):
    name = "telegram"

    async def start(self, send_delay: float) -> None:
        self.emulator = await SlowTelegram(send_delay).start()
        self._chats: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def section(self) -> dict[str, Any]:
        emu = self.emulator
        return {"token": emu.token, "api_base_url": emu.api_base_url, "poll_timeout": 1, "requests_per_second": 10_000}

    def open_chats(self, count: int) -> None:
        for i in range(count):
            user = self.emulator.user(20_000 + i, f"User{i}")
            self._chats.append((self.emulator.private_chat(user), user))

    async def connected(self, timeout: float) -> None:
        """Updates queue until the ingress polls: nothing to wait for."""

    async def say(self, chat: int, text: str) -> None:
        where, who = self._chats[chat]
        self.emulator.push_message(where, who, text)

    def answers(self) -> list[str]:
        return [m.get("text", "") for m in self.emulator.sent()]


class DiscordSide(Side):
    name = "discord"

    async def start(self, send_delay: float) -> None:
        emu = SlowDiscord()
        emu.send_delay = send_delay  # type: ignore[attr-defined]
        emu.unanswered = 0  # type: ignore[attr-defined]
        emu.echo_own = False  # the ingress would only drop them
        self.emulator = await emu.start()
        self._channels: list[str] = []

    def section(self) -> dict[str, Any]:
        return {"token": self.emulator.token, "api_base_url": self.emulator.api_base, "gateway_url": self.emulator.gateway_url}

    def open_chats(self, count: int) -> None:
        for i in range(count):
            channel_id = str(60_000 + i)
            self.emulator.channels[channel_id] = discord_emu._text_channel(channel_id, f"room-{i}")
            self._channels.append(channel_id)

    async def connected(self, timeout: float) -> None:
        await self.emulator.wait_ready(timeout)

    async def say(self, chat: int, text: str) -> None:
        emu = self.emulator
        await emu.dispatch("MESSAGE_CREATE", emu.message(text, channel_id=self._channels[chat], author=emu.alice))

    def answers(self) -> list[str]:
        return [m["content"] for m in list(self.emulator.bot_messages())]


class SlackSide(Side):
    name = "slack"

    async def start(self, send_delay: float) -> None:
        self.emulator = SlowSlack(send_delay)
        await self.emulator.start()
        self._channels: list[str] = []

    def section(self) -> dict[str, Any]:
        return slack_section(self.emulator, "socket")

    def open_chats(self, count: int) -> None:
        for i in range(count):  # a direct message each, from a person each
            channel = f"D{i:07d}"
            self.emulator.add_user(f"U{i:07d}", f"Person{i}")
            self.emulator.add_channel(channel, "im")
            self._channels.append(channel)

    async def connected(self, timeout: float) -> None:
        await self.emulator.wait_connected(timeout)

    async def say(self, chat: int, text: str) -> None:
        emu = self.emulator
        event = emu.post_as_user(self._channels[chat], f"U{chat:07d}", text)
        await emu.send_envelope(event_callback(event), timeout=60)

    def answers(self) -> list[str]:
        return [m["text"] for channel in self._channels for m in self.emulator.messages[channel] if m.get("bot_id")]


class WhatsAppSide(Side):
    name = "whatsapp"

    async def start(self, send_delay: float) -> None:
        self.emulator = await SlowWhatsApp(send_delay).start()
        with socket.socket() as sock:  # the ingress's webhook port
            sock.bind(("127.0.0.1", 0))
            self._port = sock.getsockname()[1]
        self.emulator.webhook_url = f"http://127.0.0.1:{self._port}/whatsapp"
        self._people: list[Person] = []

    def section(self) -> dict[str, Any]:
        return self.emulator.section(self._port)

    def open_chats(self, count: int) -> None:
        self._people = [Person(f"Person{i}", wa_id=str(15_550_000_000 + i), user_id=f"US.{i:020d}") for i in range(count)]

    async def connected(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if (await self.emulator.verify(VERIFY_TOKEN))[0] == 200:
                    return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the ingress's webhook never answered")
            await asyncio.sleep(0.1)

    async def say(self, chat: int, text: str) -> None:
        """Meta delivers until the webhook answers 200 (a 500 means: not recorded)."""
        person = self._people[chat]
        message = self.emulator.person_message(person, text=text)
        body = self.emulator.notification(messages=[message], contacts=[person.contact()])
        while (await self.emulator.deliver(body)).status != 200:
            await asyncio.sleep(0.2)

    def answers(self) -> list[str]:
        return [s.text for s in self.emulator.sent if s.type == "text"]


class SlowTeams(TeamsEmulator):
    def __init__(self, send_delay: float) -> None:
        super().__init__()
        self.send_delay = send_delay
        self.unanswered = 0

    async def _post(self, request: web.Request, *, reply_to: str | None) -> web.Response:
        response = await super()._post(request, reply_to=reply_to)
        if response.status == 201:
            await asyncio.sleep(self.send_delay)
            if _gone(request):
                self.unanswered += 1
        return response


class TeamsSide(Side):
    """Personal chats, each with a person of its own; the ingress's messaging endpoint gets
    each message as a signed activity (its 200 means the ingress recorded it)."""

    name = "teams"

    async def start(self, send_delay: float) -> None:
        self.emulator = await SlowTeams(send_delay).start()
        self._people: list[dict[str, Any]] = []
        self._port = _free_port()

    def section(self) -> dict[str, Any]:
        return self.emulator.config(self._port)

    def open_chats(self, count: int) -> None:
        for i in range(count):
            person = {"id": f"29:1person-{i:04d}", "name": f"Person{i}"}
            self.emulator.conversations[f"a:1chat-{i:04d}"] = Conversation(f"a:1chat-{i:04d}", "personal", [person])
            self._people.append(person)

    async def connected(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self._port)
                writer.close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("the ingress never listened") from None
                await asyncio.sleep(0.1)

    async def say(self, chat: int, text: str) -> None:
        emu = self.emulator
        activity = emu.message(text, conversation=f"a:1chat-{chat:04d}", sender=self._people[chat])
        for _ in range(120):  # the Bot Connector retries what was not answered 200
            try:
                if await emu.deliver(activity, url=f"http://127.0.0.1:{self._port}/api/messages") == 200:
                    return
            except OSError:
                pass
            await asyncio.sleep(0.5)
        raise TimeoutError(f"the ingress never took {text}")

    def answers(self) -> list[str]:
        return [str(a.get("text") or "") for c in range(len(self._people))
                for a in self.emulator.bot_posts(f"a:1chat-{c:04d}")]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SIDES: dict[str, type[Side]] = {
    "telegram": TelegramSide, "discord": DiscordSide, "slack": SlackSide, "whatsapp": WhatsAppSide, "teams": TeamsSide,
}


class EchoModel(OpenAIEmulator):
    """Answers each turn by naming the message it answers, after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay=delay)
        self.on_request = lambda body: "re: " + str(body["messages"][-1]["content"])


# --- processes ------------------------------------------------------------------------------------


class Processes:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, config: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "botweave", "-v", *args, str(config)],
            cwd=ROOT,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.running[name] = proc
        return proc

    def kill(self, name: str) -> int:
        """SIGKILL; returns the pid it had."""
        proc = self.running[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        return proc.pid

    async def terminate(self, name: str, timeout: float = 20.0) -> float:
        """SIGTERM; the seconds until the process exited."""
        proc = self.running[name]
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None:
            if time.monotonic() - started > timeout:
                proc.kill()
                break
            await asyncio.sleep(0.02)
        return time.monotonic() - started

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')}" for p in sorted(self.workdir.glob("*.log")))

    def close(self) -> None:
        for proc in self.running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


# --- one run --------------------------------------------------------------------------------------


@dataclass
class Result:
    platform: str
    fault: str
    messages: int
    lost: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0  # chunks the killed worker had announced (intent) and not confirmed
    unread_answers: int = 0  # of those, the sends whose answer the platform wrote to a dead socket
    takeover_s: float = 0.0
    stalled: int = 0
    waiting_at_fault: int = 0
    held_by_dead: int = 0  # stream entries the killed worker had read and not finished
    history_problems: list[str] = field(default_factory=list)
    model_problems: list[str] = field(default_factory=list)
    outage_warnings: int = 0
    tracebacks: int = 0
    wall_s: float = 0.0
    logs: str = ""
    timeline: list[float] = field(default_factory=list)  # seconds after the fault of each first answer

    def line(self) -> str:
        dup = sum(n - 1 for n in self.duplicated.values())
        return (
            f"{self.platform:8} {self.fault:5}  lost {len(self.lost):3}  duplicated {dup:3}  "
            f"in flight {self.in_flight:2} (answer unread {self.unread_answers:2})  "
            f"{'takeover' if self.fault == 'kill' else 'resumed '} {self.takeover_s:5.1f}s  "
            f"stalled {self.stalled:2}/{self.waiting_at_fault:2} chats (dead worker held {self.held_by_dead:2})  "
            f"history bad {len(self.history_problems):2}  model saw repeats {len(self.model_problems):2}  "
            f"outage warnings {self.outage_warnings:2}  tracebacks {self.tracebacks:2}  wall {self.wall_s:5.1f}s"
        )


def write_config(path: Path, side: Side, redis_url: str, llm_url: str, prefix: str) -> Path:
    config = {
        "agents": {"assistant": {"model": "openai/loopback", "api_base": llm_url, "api_key": "sk-loopback"}},
        "platforms": {side.name: side.section()},
        "bot": {"unknown_user_policy": "allow", "group_policy": "respond_all"},
        "store": {"url": redis_url, "prefix": prefix},  # leases and grace at their defaults
    }
    path.write_text(yaml.safe_dump(config))
    return path


async def run(
    platform: str,
    fault: str,
    redis_url: str,
    workdir: Path,
    *,
    messages: int = 600,
    chats: int = 60,
    model_delay: float = 0.2,
    send_delay: float = 0.08,
    pause_s: float = 10.0,
    timeout: float = 120.0,
) -> Result:
    """One scenario: `fault` is "kill" (SIGKILL a worker) or "pause" (CLIENT PAUSE Redis)."""
    import redis.asyncio as aioredis

    workdir.mkdir(parents=True, exist_ok=True)
    side = SIDES[platform]()
    await side.start(send_delay)
    llm = EchoModel(model_delay)
    await llm.start()
    prefix = f"crash-{uuid.uuid4().hex[:8]}:"
    config = write_config(workdir / "bot.yaml", side, redis_url, llm.base_url, prefix)
    procs = Processes(workdir)
    side.open_chats(chats)
    result = Result(platform, fault, messages)
    first_seen: dict[str, float] = {}
    watching = True

    async def watch() -> None:
        while watching:
            now = time.monotonic()
            for text in side.answers():
                found = TOKEN.search(text)
                if found:
                    first_seen.setdefault(found.group(0), now)
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    started = time.monotonic()
    try:
        procs.spawn("ingress", config, "run", "--role", "ingress")
        procs.spawn("worker-1", config, "run", "--role", "worker")
        procs.spawn("worker-2", config, "run", "--role", "worker")
        await side.connected(60)
        per_chat = messages // chats
        tokens = [f"c{c}-m{n}" for n in range(per_chat) for c in range(chats)]
        for token in tokens:
            await side.say(int(token[1:].split("-")[0]), token)
        deadline = time.monotonic() + timeout
        while len(first_seen) < len(tokens) // 4:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(first_seen)} answers before the fault")
            await asyncio.sleep(0.02)
        fault_at = time.monotonic()
        answered = set(first_seen)
        if fault == "kill":
            # the busier worker: the kill should land in the middle of turns and sends
            held = {name: await held_by(redis_url, prefix, procs.running[name].pid) for name in ("worker-1", "worker-2")}
            pid = procs.kill(max(held, key=lambda name: held[name]))
            result.in_flight = await unconfirmed_intents(redis_url, prefix, pid)
            result.held_by_dead = await held_by(redis_url, prefix, pid)
        else:
            client = aioredis.from_url(redis_url)
            await client.execute_command("CLIENT", "PAUSE", int(pause_s * 1000), "ALL")
            await client.aclose()
        waiting = {}
        for c in range(chats):
            for n in range(per_chat):
                if f"c{c}-m{n}" not in answered:
                    waiting[c] = f"c{c}-m{n}"
                    break
        while len(first_seen) < len(tokens) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(2.0)  # a late duplicate would show up now
        result.wall_s = time.monotonic() - started
        counts = Counter(m.group(0) for m in (TOKEN.search(t) for t in side.answers()) if m)
        result.lost = [t for t in tokens if counts[t] == 0]
        result.duplicated = {t: n for t, n in counts.items() if n > 1}
        result.unread_answers = side.unanswered
        delays = [first_seen[t] - fault_at for t in waiting.values() if t in first_seen]
        result.waiting_at_fault = len(waiting)
        result.takeover_s = max(delays, default=0.0)
        result.stalled = sum(1 for d in delays if d > STALL_S)
        result.timeline = sorted(at - fault_at for at in first_seen.values())
        result.history_problems = await check_histories(redis_url, prefix, chats, per_chat)
        result.model_problems = check_requests(llm.requests)
    finally:
        watching = False
        await watcher
        for name in list(procs.running):
            if procs.running[name].poll() is None:
                await procs.terminate(name)
        procs.close()
        result.logs = procs.logs()
        result.outage_warnings = result.logs.count("is not answering")
        result.tracebacks = result.logs.count("Traceback (most recent call last)")
        await llm.stop()
        await side.stop()
    return result


async def unconfirmed_intents(redis_url: str, prefix: str, pid: int) -> int:
    """Chunks whose intent the process `pid` wrote and never confirmed: its sends in flight."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url, decode_responses=True)
    count = 0
    try:
        async for key in client.scan_iter(match=f"{prefix}outbox:*", count=1000):
            raw = await client.get(key)
            record = json.loads(raw) if raw else {}
            if record.get("s") == "intent" and str(record.get("by", "")).endswith(f":{pid}"):
                count += 1
    finally:
        await client.aclose()
    return count


async def held_by(redis_url: str, prefix: str, pid: int) -> int:
    """How many inbound entries the worker `pid` had read and not acknowledged."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url, decode_responses=True)
    try:
        summary = await client.xpending(f"{prefix}inbound", "workers")
    finally:
        await client.aclose()
    return sum(int(c["pending"]) for c in summary.get("consumers") or [] if f"-{pid}-" in str(c["name"]))


async def check_histories(redis_url: str, prefix: str, chats: int, per_chat: int) -> list[str]:
    """Each conversation's history: its messages in order, each once, each with its answer."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url, decode_responses=True)
    problems = []
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}history:*", count=500)]
        if len(keys) != chats:
            problems.append(f"{len(keys)} histories for {chats} conversations")
        for key in keys:
            items = [json.loads(raw) for raw in await client.lrange(key, 0, -1)]
            entries = [e for item in items for e in (item if isinstance(item, list) else [item])]
            tokens = [(e["role"], m.group(0) if (m := TOKEN.search(e["content"])) else "?") for e in entries]
            chat = next((t for _, t in tokens if t != "?"), "?").split("-")[0]
            expected = [(role, f"{chat}-m{n}") for n in range(per_chat) for role in ("user", "assistant")]
            if tokens != expected:
                problems.append(f"{key}: {tokens}")
    finally:
        await client.aclose()
    return problems


def check_requests(requests: list[dict[str, Any]]) -> list[str]:
    """No request may show the model a turn twice, or a later turn before an earlier one."""
    problems = []
    for request in requests:
        users = [m["content"] for m in request["messages"] if m["role"] == "user"]
        numbers = [int(m.group(2)) for u in users if (m := TOKEN.search(u))]
        if numbers != sorted(set(numbers)):
            problems.append(" ".join(users))
    return problems


# --- the embedded store: a single `botweave run` with no server -----------------------------------


@dataclass
class RestartResult:
    remembered: bool
    approved_kept: bool
    admitted_by_cli: bool
    logs: str


def summary(results: list[Result]) -> str:
    """The spread of several runs of one scenario."""

    def spread(values: list[float]) -> str:
        if not values:
            return "-"
        return f"min {min(values):.1f}  median {sorted(values)[len(values) // 2]:.1f}  max {max(values):.1f}"

    lost = [float(len(r.lost)) for r in results]
    dup = [float(sum(n - 1 for n in r.duplicated.values())) for r in results]
    flight = [float(r.in_flight) for r in results]
    takeover = [r.takeover_s for r in results]
    return (
        f"lost {spread(lost)} | duplicated {spread(dup)} | in flight {spread(flight)} | takeover s {spread(takeover)}"
    )
