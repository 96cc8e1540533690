"""`botweave.gateway.Client`: the gateway's protocol from Python.

    async with Client("ws://127.0.0.1:8787/ws", token) as client:
        session = await client.create_session(title="hello")
        await client.send(session, "What is the capital of France?")
        async for event in client.events():
            if event.event == "final":
                print(event.data["text"])
                break

The client keeps, per conversation, the `seq` of the last event it handed out (`cursors`),
and when the connection drops it connects again and resumes from them, so its iterator
yields every event of the conversations it follows once and in order, across the server's
restarts and its own reconnects. `send` carries an idempotency key (made up when not given)
and sends again under the same key after a reconnect, so a message sent "during" a drop runs
once. The tests and bench/ drive the gateway through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .protocol import CLOSE_PROTOCOL, CLOSE_REVOKED, CLOSE_UNAUTHORIZED, PROTOCOL

log = logging.getLogger(__name__)

#: Close codes after which connecting again cannot help.
FINAL_CLOSES = frozenset({CLOSE_UNAUTHORIZED, CLOSE_PROTOCOL, CLOSE_REVOKED})
RECONNECT_PAUSES_S = (0.1, 0.25, 0.5, 1.0, 2.0)


class GatewayError(Exception):
    """An error answer (`code`, `message`, `retryable`, `retry_after_ms`), or the connection
    ending for good (`code` `closed`)."""

    def __init__(self, code: str, message: str, *, retryable: bool = False, retry_after_ms: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms


@dataclass(frozen=True, slots=True)
class Event:
    event: str
    data: dict[str, Any]
    conversation: str | None = None
    seq: int | None = None


@dataclass
class Client:
    url: str
    token: str | None = None
    #: Cursors to resume from (`{conversation: last_seq}`, saved from an earlier run, say).
    resume: Mapping[str, int] = field(default_factory=dict)
    name: str = "botweave-python"
    #: Connect again (and resume) when the connection drops, instead of ending.
    reconnect: bool = True
    #: Sent as the Origin header, as a browser page would (tests of the origin rule).
    origin: str | None = None
    timeout: float = 30.0

    def __post_init__(self) -> None:
        self.cursors: dict[str, int] = dict(self.resume)
        #: The connect answer (principal, scopes, methods, snapshot, ...).
        self.welcome: dict[str, Any] = {}
        #: Events the server sent again that the cursors say were handed out already.
        self.duplicates = 0
        #: Error answers to frames that had no id (what the server could not read).
        self.unanswered: list[dict[str, Any]] = []
        self.close_code: int | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._events: asyncio.Queue[Event | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._ended: GatewayError | None = None

    # --- connecting ---------------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> dict[str, Any]:
        """Open the connection and resume from the cursors; the connect answer."""
        if self._http is None:
            self._http = aiohttp.ClientSession()
        try:
            await self._open()
        except BaseException:
            await self._http.close()
            self._http = None
            raise
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="botweave client reader")
        return self.welcome

    async def _open(self) -> None:
        assert self._http is not None
        headers = {"Origin": self.origin} if self.origin else {}
        ws = await self._http.ws_connect(self.url, max_msg_size=0, headers=headers, timeout=aiohttp.ClientWSTimeout(ws_close=5))
        params: dict[str, Any] = {
            "min_protocol": PROTOCOL,
            "max_protocol": PROTOCOL,
            "client": {"name": self.name, "version": "1"},
            "resume": dict(self.cursors),
        }
        if self.token:
            params["auth"] = {"token": self.token}
        await ws.send_str(json.dumps({"type": "req", "id": "connect", "method": "connect", "params": params}))
        frame: dict[str, Any] = {}
        while frame.get("type") != "res":  # the answer comes first; skip anything that does not
            msg = await ws.receive(timeout=self.timeout)
            if msg.type != aiohttp.WSMsgType.TEXT:
                await ws.close()
                raise GatewayError("closed", f"the gateway closed the connection ({ws.close_code})")
            frame = json.loads(msg.data)
        if not frame.get("ok"):
            error = frame.get("error") or {}
            await ws.close()
            raise GatewayError(str(error.get("code")), str(error.get("message")), retryable=bool(error.get("retryable")),
                               retry_after_ms=error.get("retry_after_ms"))
        self.welcome = frame["result"]
        self._ws = ws
        self._connected.set()

    async def _read(self) -> None:
        while True:
            ws = self._ws
            assert ws is not None
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    self._frame(json.loads(msg.data))
            self._connected.clear()
            self.close_code = ws.close_code
            dropped = GatewayError("disconnected", f"the connection dropped ({ws.close_code})", retryable=True)
            for waiter in self._waiting.values():  # their answers went with the connection
                if not waiter.done():
                    waiter.set_exception(dropped)
            self._waiting.clear()
            if self._closing or not self.reconnect or ws.close_code in FINAL_CLOSES:
                self._end(GatewayError("closed", f"the connection closed ({ws.close_code})"))
                return
            if not await self._reopen():
                return

    async def _reopen(self) -> bool:
        for pause in itertools.chain(RECONNECT_PAUSES_S, itertools.repeat(RECONNECT_PAUSES_S[-1])):
            await asyncio.sleep(pause)
            if self._closing:
                self._end(GatewayError("closed", "the client was closed"))
                return False
            try:
                await self._open()
                return True
            except GatewayError as exc:
                if not exc.retryable and exc.code != "closed":
                    self._end(exc)
                    return False
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                log.debug("gateway client: reconnecting failed: %s", exc)
        return False

    def _end(self, error: GatewayError) -> None:
        self._ended = error
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(error)
        self._waiting.clear()
        self._events.put_nowait(None)

    def _frame(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "res":
            waiter = self._waiting.pop(str(frame.get("id")), None)
            if waiter is None:
                self.unanswered.append(frame)
            elif not waiter.done():
                if frame.get("ok"):
                    waiter.set_result(frame.get("result"))
                else:
                    error = frame.get("error") or {}
                    waiter.set_exception(GatewayError(
                        str(error.get("code")), str(error.get("message")),
                        retryable=bool(error.get("retryable")), retry_after_ms=error.get("retry_after_ms"),
                    ))
            return
        conversation, seq = frame.get("conversation"), frame.get("seq")
        if isinstance(conversation, str) and isinstance(seq, int):
            if frame.get("event") != "resync" and seq <= self.cursors.get(conversation, -1):
                self.duplicates += 1
                return
            self.cursors[conversation] = seq
        self._events.put_nowait(Event(str(frame.get("event")), frame.get("data") or {}, conversation, seq))

    async def close(self) -> None:
        self._closing = True
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), 5)
            if not self._reader.done():
                self._reader.cancel()
        if self._http is not None:
            await self._http.close()
            self._http = None

    # --- calling ------------------------------------------------------------------------------

    async def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """One request and its answer; `GatewayError` for an error answer."""
        if self._ended is not None:
            raise self._ended
        await asyncio.wait_for(self._connected.wait(), self.timeout)
        ws = self._ws
        assert ws is not None
        request_id = str(next(self._ids))
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = waiter
        await ws.send_str(json.dumps({"type": "req", "id": request_id, "method": method, "params": dict(params or {})}))
        return await asyncio.wait_for(waiter, self.timeout)

    async def create_session(self, title: str = "", agent: str | None = None) -> str:
        params: dict[str, Any] = {"title": title}
        if agent is not None:
            params["agent"] = agent
        return str((await self.call("sessions.create", params))["session"]["id"])

    async def subscribe(self, conversation: str, last_seq: int | None = None) -> int:
        """Follow a conversation (from now on, or after `last_seq`); its newest seq now."""
        params: dict[str, Any] = {"conversation": conversation}
        known = self.cursors.get(conversation) if last_seq is None else last_seq
        if known is not None:
            params["last_seq"] = known
        result = await self.call("subscribe", params)
        self.cursors.setdefault(conversation, int(result["seq"]))
        return int(result["seq"])

    async def send(
        self,
        session: str,
        text: str,
        *,
        attachments: list[str] | None = None,
        idempotency_key: str | None = None,
        reply_to: str | None = None,
    ) -> str:
        """Send a message into a session (following it); the message's id. Sent again under
        the same key while the gateway is away, so it runs once."""
        conversation = f"web:{session}"
        if conversation not in self.cursors:
            await self.subscribe(conversation)
        params: dict[str, Any] = {"session": session, "text": text, "idempotency_key": idempotency_key or uuid.uuid4().hex}
        if attachments:
            params["attachments"] = attachments
        if reply_to:
            params["reply_to"] = reply_to
        for pause in (*RECONNECT_PAUSES_S, None):
            try:
                return str((await self.call("chat.send", params))["message_id"])
            except (GatewayError, asyncio.TimeoutError, ConnectionError) as exc:
                retry = isinstance(exc, (asyncio.TimeoutError, ConnectionError)) or exc.retryable
                if pause is None or not retry or self._closing:
                    raise
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def stop(self, session: str) -> None:
        """Stop the session's running answer (as /stop)."""
        await self.call("chat.stop", {"session": session})

    async def upload(self, data: bytes, filename: str, mime: str = "application/octet-stream") -> str:
        """Upload a file for `send`'s attachments; its file_id."""
        assert self._http is not None
        base = self.url.replace("ws://", "http://", 1).replace("wss://", "https://", 1).rsplit("/ws", 1)[0]
        headers = {"Content-Type": mime, "X-Filename": filename}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.origin:
            headers["Origin"] = self.origin
        async with self._http.post(f"{base}/uploads", data=data, headers=headers) as response:
            answer = await response.json()
            if response.status != 201:
                error = answer.get("error") or {}
                raise GatewayError(str(error.get("code")), str(error.get("message")))
            return str(answer["file_id"])

    # --- events -------------------------------------------------------------------------------

    async def next_event(
        self, timeout: float | None = None, *, where: Callable[[Event], bool] | None = None
    ) -> Event:
        """The next event (the next one `where` accepts, skipping others)."""
        async with asyncio.timeout(timeout if timeout is not None else self.timeout):
            while True:
                event = await self._events.get()
                if event is None:
                    self._events.put_nowait(None)
                    raise self._ended or GatewayError("closed", "the connection ended")
                if where is None or where(event):
                    return event

    async def events(self) -> AsyncIterator[Event]:
        """Every event, in order, until the connection ends for good."""
        while True:
            event = await self._events.get()
            if event is None:
                self._events.put_nowait(None)
                return
            yield event

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()
