"""The world the race's bots live in: platform emulators with many users, and a loopback model.

The platform emulators are the test suite's own (`tests/emulators/`), used as they are; the
subclasses here only add what a benchmark needs and the tests do not:

* every message the bot posts or edits is reported to a `Tracker` the moment the emulator
  handles it, instead of being searched for in the emulator's call log (a linear scan per
  poll would make the harness the bottleneck at a few thousand messages);
* many private conversations at once: 200 Telegram users, 200 Discord DM channels (the
  Discord emulator knows one DM channel), 200 Slack IM channels;
* cheap bulk injection: a Slack envelope is written to the socket without waiting for its
  ack (the test helper waits for each ack in turn).

Each user message carries a marker (`r<run> c<chat> m<k>`); the model answers
`answer r<run> c<chat> m<k> ... over`, so every reply names the message it answers and the
tracker can tell order, duplicates and completion (a streamed reply is complete when its
text ends in `over`).

`python3 bench/race_world.py model` runs the loopback model in its own process (so its CPU is
charged neither to the bot nor to the harness) and prints its base URL. Its latency is set at
run time with `POST /_race` `{"delay": seconds}`: a plain answer comes after `delay`; a
streamed one spreads its chunks evenly over `delay` (the first after delay/n, the last at
`delay`), so streaming bots see tokens arrive over the whole turn.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.race_provider import FINAL_WORD, MARKER, reply_chunks  # noqa: E402
from tests.emulators import discord as discord_emu  # noqa: E402
from tests.emulators import slack as slack_emu  # noqa: E402
from tests.emulators.openai import OpenAIEmulator  # noqa: E402
from tests.emulators.telegram import TelegramEmulator  # noqa: E402

_SNOWFLAKE = re.compile(r"\d{3,}")


def user_text(run: int, chat: int, k: int) -> str:
    return f"hello r{run} c{chat} m{k} how are you"


# --- who watches the replies -----------------------------------------------------------------


@dataclass
class Reply:
    first_at: float
    writes: list[float]
    done_at: float | None = None

    @property
    def edits(self) -> int:
        return len(self.writes) - 1

    def gaps(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.writes)]


class Sink(Protocol):
    def write(self, chat_key: str, message_id: str, kind: str, text: str) -> None: ...


class Tracker:
    """The replies of one run: expects message k = `ks` of chats 0..chats-1 of run `run`."""

    def __init__(self, run: int, chats: int, ks: range) -> None:
        self.run = run
        self.chats = chats
        self.ks = ks
        self.expected = chats * len(ks)
        self.replies: dict[tuple[int, int], Reply] = {}
        self.arrivals: dict[int, list[int]] = defaultdict(list)
        self._by_message: dict[tuple[str, str], tuple[int, int]] = {}
        self.completed = 0
        self.duplicates = 0
        self.strays = 0  # posts naming no message of this run (another run's late reply, junk)
        self.last_progress = time.monotonic()
        self.done = asyncio.Event()

    def write(self, chat_key: str, message_id: str, kind: str, text: str) -> None:
        now = time.monotonic()
        if kind == "send":
            found = MARKER.search(text)
            if found is None or int(found.group(1)) != self.run:
                self.strays += 1
                return
            key = (int(found.group(2)), int(found.group(3)))
            if key in self.replies or key[1] not in self.ks or key[0] >= self.chats:
                self.duplicates += key in self.replies
                self.strays += key not in self.replies
                return
            reply = self.replies[key] = Reply(first_at=now, writes=[now])
            self._by_message[(chat_key, message_id)] = key
            self.arrivals[key[0]].append(key[1])
        else:
            known = self._by_message.get((chat_key, message_id))
            if known is None:
                return
            reply = self.replies[known]
            reply.writes.append(now)
        self.last_progress = now
        if reply.done_at is None and text.rstrip().endswith(FINAL_WORD):
            reply.done_at = now
            self.completed += 1
            if self.completed >= self.expected:
                self.done.set()

    async def wait(self, idle_timeout: float) -> bool:
        """Until every reply is complete, or nothing moved for `idle_timeout` seconds."""
        while not self.done.is_set():
            left = self.last_progress + idle_timeout - time.monotonic()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self.done.wait(), min(left, 1.0))
            except asyncio.TimeoutError:
                pass
        return True

    # --- what the run looked like --------------------------------------------------------

    @property
    def finished_at(self) -> float | None:
        done = [r.done_at for r in self.replies.values() if r.done_at is not None]
        return max(done) if done else None

    @property
    def missing(self) -> int:
        return self.expected - self.completed

    def order_violations(self) -> int:
        """Replies to message k that arrived before the reply to message k-1 of the same chat."""
        count = 0
        for chat in range(self.chats):
            for k in self.ks[1:]:
                now, before = self.replies.get((chat, k)), self.replies.get((chat, k - 1))
                if now is not None and before is not None and now.first_at < before.first_at:
                    count += 1
        return count

    def write_gaps(self) -> list[float]:
        return [gap for reply in self.replies.values() for gap in reply.gaps()]


class _Null:
    def write(self, chat_key: str, message_id: str, kind: str, text: str) -> None: ...


# --- platforms -------------------------------------------------------------------------------


class RaceTelegram(TelegramEmulator):
    """The Bot API emulator, reporting each sent or edited message to `sink`."""

    sink: Sink = _Null()

    async def _api_sendMessage(self, params: dict[str, Any]) -> Any:
        result = await super()._api_sendMessage(params)
        self.sink.write(str(result["chat"]["id"]), str(result["message_id"]), "send", str(result.get("text", "")))
        return result

    async def _api_editMessageText(self, params: dict[str, Any]) -> Any:
        result = await super()._api_editMessageText(params)
        self.sink.write(str(result["chat"]["id"]), str(result["message_id"]), "edit", str(result.get("text", "")))
        return result


class RaceDiscord(discord_emu.DiscordEmulator):
    """The Discord emulator with any number of DM channels, reporting the bot's posts and edits."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.dm_channels: set[str] = set()
        self.sink: Sink = _Null()

    def _known_channel(self, channel_id: str) -> bool:
        return channel_id in self.dm_channels or super()._known_channel(channel_id)

    async def _create_message(self, request: web.Request) -> web.Response:
        response = await super()._create_message(request)
        self._report(response, "send")
        return response

    async def _edit_message(self, request: web.Request) -> web.Response:
        response = await super()._edit_message(request)
        self._report(response, "edit")
        return response

    def _report(self, response: web.Response, kind: str) -> None:
        if response.status == 200 and isinstance(response.body, bytes):
            data = json.loads(response.body)
            self.sink.write(str(data["channel_id"]), str(data["id"]), kind, str(data.get("content", "")))


class RaceSlack(slack_emu.SlackEmulator):
    """The Slack emulator reporting posts and updates, with fire-and-forget event delivery."""

    def __init__(self) -> None:
        super().__init__()
        self.sink: Sink = _Null()

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        answer = super()._m_chat_postMessage(params)
        if answer.get("ok"):
            self.sink.write(str(answer["channel"]), str(answer["ts"]), "send", str(params.get("text", "")))
        return answer

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        answer = super()._m_chat_update(params)
        if answer.get("ok"):
            self.sink.write(str(answer["channel"]), str(answer["ts"]), "edit", str(answer.get("text", "")))
        return answer

    async def push(self, body: dict[str, Any]) -> None:
        """Write one events_api envelope to the Socket Mode connection; the ack is not awaited."""
        envelope = slack_emu.Envelope(envelope_id=str(uuid.uuid4()), body=body)
        self.envelopes[envelope.envelope_id] = envelope
        await self._sockets[-1].send_json(
            {
                "envelope_id": envelope.envelope_id,
                "payload": body,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": 0,
                "retry_reason": "",
            }
        )


@dataclass
class Chat:
    index: int
    key: str  # the platform's chat id, as the emulator reports it
    data: Any = None  # whatever the world needs to post as this chat's user


class World(Protocol):
    """One platform emulator, seen by the harness."""

    name: str
    edit_floor: float  # seconds: the least a platform allows between two writes of one message
    sink: Sink

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def connected(self, timeout: float) -> None: ...
    def chats(self, run: int, count: int) -> list[Chat]: ...
    def call_count(self) -> int: ...
    def calls_since(self, start: int) -> Counter[str]: ...
    async def inject(self, batch: list[tuple[Chat, str]]) -> None: ...
    def botweave_section(self) -> dict[str, Any]: ...
    def reference_args(self, kind: str) -> list[str]: ...


class EmulatorWorld:
    """What every world does by handing it to its emulator: start, stop, and where the
    emulator reports the bot's writes."""

    emu: Any

    @property
    def sink(self) -> Sink:
        return self.emu.sink

    @sink.setter
    def sink(self, value: Sink) -> None:
        self.emu.sink = value

    async def start(self) -> None:
        await self.emu.start()

    async def stop(self) -> None:
        await self.emu.stop()


class TelegramWorld(EmulatorWorld):
    name = "telegram"
    edit_floor = 1.1  # seconds between edits of one message in a private chat

    def __init__(self, requests_per_second: float) -> None:
        self.emu = RaceTelegram()
        self.requests_per_second = requests_per_second

    async def connected(self, timeout: float) -> None:
        """Polling bots are ready when they answer, which the harness checks with a ping."""

    def call_count(self) -> int:
        return len(self.emu.calls)

    def calls_since(self, start: int) -> Counter[str]:
        return Counter(call.method for call in self.emu.calls[start:])

    def chats(self, run: int, count: int) -> list[Chat]:
        out = []
        for i in range(count):
            user = self.emu.user(10_000_000 + run * 10_000 + i, f"User{i}")
            chat = self.emu.private_chat(user)
            out.append(Chat(i, str(chat["id"]), (chat, user)))
        return out

    async def inject(self, batch: list[tuple[Chat, str]]) -> None:
        for chat, text in batch:
            self.emu.push_message(chat.data[0], chat.data[1], text)

    def botweave_section(self) -> dict[str, Any]:
        return {
            "telegram": {
                "token": self.emu.token,
                "api_base_url": self.emu.api_base_url,
                "poll_timeout": 10,
                "requests_per_second": self.requests_per_second,
            }
        }

    def reference_args(self, kind: str) -> list[str]:
        if kind == "probe":
            return ["race_probe.py", "--api-base-url", self.emu.api_base_url, "--token", self.emu.token]
        if kind == "aiogram":
            return ["reference/aiogram_bot.py", "--server", f"http://127.0.0.1:{self.emu.port}", "--token", self.emu.token]
        args = ["reference/ptb_bot.py", "--api-base-url", self.emu.api_base_url, "--token", self.emu.token]
        return args + (["--concurrent"] if kind == "ptb_concurrent" else [])


class DiscordWorld(EmulatorWorld):
    name = "discord"
    edit_floor = 1.0

    def __init__(self) -> None:
        self.emu = RaceDiscord()

    async def connected(self, timeout: float) -> None:
        await self.emu.wait_ready(timeout)

    def call_count(self) -> int:
        return len(self.emu.requests)

    def calls_since(self, start: int) -> Counter[str]:
        return Counter(f"{r.method} {_SNOWFLAKE.sub('{id}', r.path)}" for r in self.emu.requests[start:])

    def chats(self, run: int, count: int) -> list[Chat]:
        out = []
        for i in range(count):
            channel = str(400_000_000 + run * 10_000 + i)
            self.emu.dm_channels.add(channel)
            author = discord_emu.user(str(500_000_000 + run * 10_000 + i), f"user{i}")
            out.append(Chat(i, channel, author))
        return out

    async def inject(self, batch: list[tuple[Chat, str]]) -> None:
        for chat, text in batch:
            data = self.emu.message(text, channel_id=chat.key, author=chat.data)
            await self.emu.dispatch("MESSAGE_CREATE", data)

    def botweave_section(self) -> dict[str, Any]:
        return {
            "discord": {
                "token": self.emu.token,
                "api_base_url": self.emu.api_base,
                "gateway_url": self.emu.gateway_url,
            }
        }

    def reference_args(self, kind: str) -> list[str]:
        return [
            "reference/discordpy_bot.py", "--api-base", self.emu.api_base,
            "--gateway", self.emu.gateway_url, "--token", self.emu.token,
        ]


class SlackWorld(EmulatorWorld):
    name = "slack"
    edit_floor = 1.0

    def __init__(self) -> None:
        self.emu = RaceSlack()

    async def connected(self, timeout: float) -> None:
        await self.emu.wait_connected(timeout)

    def call_count(self) -> int:
        return len(self.emu.calls)

    def calls_since(self, start: int) -> Counter[str]:
        return Counter(call.method for call in self.emu.calls[start:])

    def chats(self, run: int, count: int) -> list[Chat]:
        out = []
        for i in range(count):
            user, channel = f"U{run:03d}{i:05d}", f"D{run:03d}{i:05d}"
            self.emu.add_user(user, f"User{i}")
            self.emu.add_channel(channel, "im")
            out.append(Chat(i, channel, user))
        return out

    async def inject(self, batch: list[tuple[Chat, str]]) -> None:
        for chat, text in batch:
            event = self.emu.post_as_user(chat.key, chat.data, text)
            await self.emu.push(slack_emu.event_callback(event))

    def botweave_section(self) -> dict[str, Any]:
        return {
            "slack": {
                "bot_token": slack_emu.BOT_TOKEN,
                "app_token": slack_emu.APP_TOKEN,
                "mode": "socket",
                "api_base_url": self.emu.api_base_url,
            }
        }

    def reference_args(self, kind: str) -> list[str]:
        return [
            "reference/bolt_bot.py", "--api-base-url", self.emu.api_base_url,
            "--bot-token", slack_emu.BOT_TOKEN, "--app-token", slack_emu.APP_TOKEN,
        ]


# --- the model -------------------------------------------------------------------------------


class RaceModel(OpenAIEmulator):
    """The loopback OpenAI emulator answering each message with its marker, at a set latency."""

    def __init__(self) -> None:
        super().__init__()
        self.requests_served = 0
        self.streams = 0
        self.arrivals: list[tuple[float, str]] = []  # (monotonic time, marker) of each request

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/_race", self._configure)
        app.router.add_get("/_race", self._stats)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def _configure(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.delay = float(body.get("delay", self.delay))
        return web.json_response({"delay": self.delay})

    async def _stats(self, request: web.Request) -> web.Response:
        arrivals, self.arrivals = self.arrivals, []
        return web.json_response(
            {"requests": self.requests_served, "streams": self.streams, "delay": self.delay, "arrivals": arrivals}
        )

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests_served += 1
        chunks = reply_chunks(body.get("messages") or [])
        self.arrivals.append((time.monotonic(), chunks[0].split(" ", 1)[1].strip()))
        model = body.get("model", "bench-model")
        delay = self.delay
        if not body.get("stream"):
            if delay > 0:
                await asyncio.sleep(delay)
            return web.json_response(
                {
                    "id": "chatcmpl-race",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": "".join(chunks)}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 20, "completion_tokens": len(chunks), "total_tokens": 20 + len(chunks)},
                }
            )
        self.streams += 1
        # Like the API: with `stream_options.include_usage` every chunk carries `usage: null`
        # and one more chunk, with no choices, carries the counts.
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(self._chunk(model, {"role": "assistant", "content": ""}, None, usage_field=with_usage))
        step = delay / len(chunks)
        started = time.monotonic()
        for index, piece in enumerate(chunks, 1):
            if step > 0:
                await asyncio.sleep(max(0.0, started + step * index - time.monotonic()))
            await response.write(self._chunk(model, {"content": piece}, None, usage_field=with_usage))
        await response.write(self._chunk(model, {}, "stop", usage_field=with_usage))
        if with_usage:
            usage = {"prompt_tokens": 20, "completion_tokens": len(chunks), "total_tokens": 20 + len(chunks)}
            final = {"id": "chatcmpl-race", "object": "chat.completion.chunk", "created": int(time.time()),
                     "model": model, "choices": [], "usage": usage}
            await response.write(f"data: {json.dumps(final)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _serve_model() -> None:
    model = RaceModel()
    print(await model.start(), flush=True)
    loop = asyncio.get_running_loop()
    stdin_closed = asyncio.Event()
    stdin = sys.stdin.fileno()
    loop.add_reader(stdin, lambda: None if os.read(stdin, 65536) else stdin_closed.set())
    await stdin_closed.wait()  # the harness closes our stdin (or dies): time to go
    await model.stop()


if __name__ == "__main__":
    if sys.argv[1:] != ["model"]:
        sys.exit("usage: python3 bench/race_world.py model")
    asyncio.run(_serve_model())
