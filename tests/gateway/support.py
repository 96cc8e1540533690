"""What the gateway tests share: tokens for a few principals, an App with the gateway in front
of a loopback model, and raw WebSocket frames for the tests that speak the wire themselves."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from botweave import App
from botweave.gateway import Client

from tests.emulators.openai import OpenAIEmulator

TOKENS = {
    "ann": "ann-token-0123456789abcdef",  # chats, answers approvals and pairing as Telegram user 1
    "bob": "bob-token-0123456789abcdef",  # another person who chats
    "eve": "eve-token-0123456789abcdef",  # only reads
    "root": "root-token-0123456789abcdef",  # an operator
}
TOKEN_CONFIG = [
    {"name": "ann", "token": TOKENS["ann"], "scopes": ["write", "approvals", "pairing"], "user": "telegram:1"},
    {"name": "bob", "token": TOKENS["bob"], "scopes": ["write", "approvals"]},
    {"name": "eve", "token": TOKENS["eve"], "scopes": ["read"]},
    {"name": "root", "token": TOKENS["root"], "scopes": ["admin"]},
]
TIMEOUT = 20.0


def config(llm: OpenAIEmulator, *, tokens: bool = True, gateway: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    """An agent on the loopback model and the gateway on a free port (with the tokens above)."""
    section: dict[str, Any] = {"listen": "127.0.0.1:0", **(gateway or {})}
    if tokens:
        section.setdefault("tokens", TOKEN_CONFIG)
    return {
        "agents": {"helper": {"model": "openai/gpt-4o-mini", "api_base": llm.base_url, "api_key": "sk-test"}},
        "gateway": section,
        **more,
    }


def client(app: App, who: str | None = "ann", **options: Any) -> Client:
    return Client(app.gateway.url, TOKENS[who] if who else None, **options)


async def answer_of(c: Client, message_id: str, timeout: float = TIMEOUT) -> Any:
    """The `final` event of the run answering `message_id`."""
    return await c.next_event(timeout, where=lambda e: e.event == "final" and e.data.get("message_id") == message_id)


async def collect(c: Client, done: Any, timeout: float = TIMEOUT) -> list[Any]:
    """Every event from now until `done(events so far)` holds."""
    events: list[Any] = []
    async with asyncio.timeout(timeout):
        while not done(events):
            events.append(await c.next_event(timeout))
    return events


def has(events: list[Any], event: str, **data: Any) -> bool:
    return any(e.event == event and all(e.data.get(k) == v for k, v in data.items()) for e in events)


class Raw:
    """One WebSocket spoken frame by frame (what a client in another language would send)."""

    def __init__(self, url: str, *, origin: str | None = None, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = dict(headers or {})
        if origin is not None:
            self.headers["Origin"] = origin
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def __aenter__(self) -> Raw:
        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(self.url, headers=self.headers, max_msg_size=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.http is not None:
            await self.http.close()

    async def send(self, frame: Any) -> None:
        assert self.ws is not None
        await self.ws.send_str(frame if isinstance(frame, str) else json.dumps(frame))

    async def request(self, request_id: Any, method: str, params: Any = None) -> dict[str, Any]:
        """Send a request; its answer (events that come first are kept in `events`)."""
        frame: dict[str, Any] = {"type": "req", "id": request_id, "method": method}
        if params is not None:
            frame["params"] = params
        await self.send(frame)
        return await self.answer(request_id)

    events: list[dict[str, Any]]

    async def next(self, timeout: float = TIMEOUT) -> dict[str, Any] | None:
        """The next frame, or None once the server closed."""
        assert self.ws is not None
        msg = await self.ws.receive(timeout=timeout)
        if msg.type != aiohttp.WSMsgType.TEXT:
            return None
        return json.loads(msg.data)

    async def event(self, timeout: float = TIMEOUT) -> dict[str, Any] | None:
        """The next event of a conversation (presence notices skipped), or None once closed."""
        while True:
            frame = await self.next(timeout)
            if frame is None or frame.get("event") != "presence":
                return frame

    async def answer(self, request_id: Any, timeout: float = TIMEOUT) -> dict[str, Any]:
        self.events = getattr(self, "events", [])
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.next(timeout)
                assert frame is not None, f"the server closed ({self.close_code}) before answering {request_id}"
                if frame["type"] == "res" and frame["id"] == request_id:
                    return frame
                self.events.append(frame)

    async def connect(self, token: str | None, **params: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"min_protocol": 1, "max_protocol": 1, "client": {"name": "raw", "version": "0"}, **params}
        if token is not None:
            body["auth"] = {"token": token}
        return await self.request("hello", "connect", body)

    async def closed(self, timeout: float = TIMEOUT) -> int | None:
        """Read until the server closes; its close code."""
        assert self.ws is not None
        async with asyncio.timeout(timeout):
            while not self.ws.closed:
                msg = await self.ws.receive()
                if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
                    break
        return self.ws.close_code

    @property
    def close_code(self) -> int | None:
        return self.ws.close_code if self.ws is not None else None
