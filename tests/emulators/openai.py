"""A loopback OpenAI-compatible server, so litellm's real HTTP path runs in tests.

It answers `POST /v1/chat/completions` plainly or as server-sent events (`stream: true`) and
`POST /v1/audio/transcriptions` (multipart, like Whisper), in OpenAI's wire format, and records
every request so tests can assert what the model was sent.

What it answers, for each chat request in arrival order:

1. the next scripted reply, if any (`queue`, `queue_text`, `queue_tool_calls`);
2. otherwise what `on_request(body)` returns, if that hook is set and returns something;
3. otherwise `reply` (plain text).

A reply can be text, tool calls (several of them are parallel calls), both, images, or an HTTP error,
and can carry its own latency and streaming shape. Tool calls get OpenAI-style ids; every later
request is checked against them the way OpenAI checks a conversation (each `tool` message must
answer a `tool_calls` entry of the assistant message right before it, and every call must be
answered), and against what this server really issued; anything wrong lands in `violations`.
OpenAI refuses the structurally invalid ones with a 400, and so does this server unless
`strict_tools` is turned off.

It is meant to be cheap under load: benchmarks run a few hundred conversations against it at
once, so there is no per-request logging and the listen backlog is large.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import inspect
import itertools
import json
import math
import secrets
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from aiohttp import web

from tests.emulators.serving import client_gone

DEFAULT_REPLY = "Hello from the emulator. It streams, too."
DEFAULT_TRANSCRIPT = "Hello from the emulated transcription."
#: What Whisper accepts, judged by the uploaded file's name like OpenAI does.
AUDIO_EXTENSIONS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_BODY = 64 * 1024 * 1024

TOOL_WITHOUT_CALL = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
)
CALLS_WITHOUT_RESULTS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
INVALID_IMAGE = "You uploaded an unsupported image. Please make sure your image is valid."


@dataclass
class ToolCall:
    """One function call the model makes; `id` is filled in (OpenAI style) when it is issued."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None
    #: Which chat request (index into `requests`) the call was issued in answer to.
    request_index: int | None = None

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)

    def wire(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments_json}}


@dataclass
class Reply:
    """How to answer one chat request. Unset fields fall back to the emulator's attributes."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    #: Seconds before the answer starts (the model "thinking"); None means `emulator.delay`.
    delay: float | None = None
    #: Stream the text in this many pieces; None means `emulator.stream_chunks`.
    chunks: int | None = None
    #: Seconds between streamed pieces; None means `emulator.chunk_delay`.
    chunk_delay: float | None = None
    #: Answer with this HTTP error status instead (429, 500, ...).
    status: int | None = None
    error_message: str = "emulated failure"
    error_type: str = "server_error"
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Token counts to report; None means an estimate from the request and reply sizes.
    usage: dict[str, int] | None = None
    #: None means "tool_calls" when there are calls, else "stop".
    finish_reason: str | None = None
    #: Images the model returns, as (mime, bytes): in the message's `images` list as data: URLs
    #: (the shape image-generating models have through OpenAI-compatible APIs), or streamed in
    #: one delta before the finish.
    images: list[tuple[str, bytes]] = field(default_factory=list)


#: The failures `OpenAIEmulator.fail` can make a model (or one of its keys) answer with.
FAULTS = ("429", "503", "cut", "context", "400", "401")


@dataclass
class Fault:
    """How one model (or one model with one key) fails: `kind` is one of FAULTS; `times`
    None fails every request, a number only that many; `retry_after` is sent as the
    `Retry-After` header (seconds or an HTTP date) with a 429 or 503."""

    kind: str
    retry_after: str | None = None
    times: int | None = None
    #: Requests answered normally before the failures begin.
    after: int = 0
    #: What a cut stream says before it breaks off.
    words: str = "These words never finish"


ToolCallSpec = Union[ToolCall, dict[str, Any], tuple[str, Any]]
ReplySpec = Union[Reply, str, ToolCall, dict[str, Any], Sequence[ToolCallSpec]]
Hook = Callable[[dict[str, Any]], Union[ReplySpec, None, Awaitable[Union[ReplySpec, None]]]]


def tool_call(name: str, arguments: dict[str, Any] | str | None = None, *, id: str | None = None) -> ToolCall:  # noqa: A002
    return ToolCall(name, {} if arguments is None else arguments, id)


def _as_tool_call(spec: ToolCallSpec) -> ToolCall:
    if isinstance(spec, ToolCall):
        return ToolCall(spec.name, spec.arguments, spec.id)
    if isinstance(spec, dict):
        function = spec.get("function", spec)
        return ToolCall(function["name"], function.get("arguments", {}), spec.get("id"))
    name, arguments = spec
    return ToolCall(name, arguments)


def as_reply(spec: ReplySpec) -> Reply:
    """Accepts a Reply, a text, one tool call, or a list of (parallel) tool calls."""
    if isinstance(spec, Reply):
        return Reply(**{**spec.__dict__, "tool_calls": [_as_tool_call(c) for c in spec.tool_calls]})
    if isinstance(spec, str):
        return Reply(text=spec)
    if isinstance(spec, (ToolCall, dict)):
        return Reply(tool_calls=[_as_tool_call(spec)])
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        return Reply(tool_calls=[_as_tool_call(spec)])  # one ("name", arguments) pair
    return Reply(tool_calls=[_as_tool_call(c) for c in spec])


def text_of(message: dict[str, Any]) -> str:
    """The text of a chat message, whether its content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def split_even(text: str, pieces: int) -> list[str]:
    """`text` cut into `pieces` contiguous parts of near-equal length (none empty unless text is)."""
    pieces = max(1, min(pieces, len(text))) if text else 1
    size = len(text) / pieces
    cuts = [round(i * size) for i in range(pieces + 1)]
    return [text[cuts[i]:cuts[i + 1]] for i in range(pieces)]


@dataclass
class ImagePart:
    """An image content part a client sent; `data` is decoded for data: URLs, else None."""

    url: str
    mime: str | None
    data: bytes | None
    detail: str | None
    role: str
    message_index: int


@dataclass
class Transcription:
    """One /v1/audio/transcriptions upload as the emulator saw it."""

    filename: str | None
    content_type: str | None
    data: bytes
    model: str | None
    prompt: str | None
    language: str | None
    response_format: str | None
    fields: dict[str, str]
    at: float
    #: The file part's own headers, as the multipart parser read them (name → value).
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Exchange:
    """One chat request and what it was answered with (times from time.monotonic())."""

    index: int
    body: dict[str, Any]
    arrived: float
    reply: Reply | None = None
    status: int = 200
    answered: float | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)

    @property
    def streamed(self) -> bool:
        return bool(self.body.get("stream"))


class ReplyScript:
    """Replies queued for a model emulator's next requests, in order; every model emulator is
    scripted this way, whichever wire format it speaks."""

    def __init__(self) -> None:
        self._script: deque[Reply] = deque()

    def queue(self, *replies: ReplySpec) -> None:
        """Answer the next requests with these, in order (before any fallback)."""
        self._script.extend(as_reply(r) for r in replies)

    def queue_text(self, text: str, **options: Any) -> None:
        self._script.append(Reply(text=text, **options))

    def queue_tool_calls(self, *calls: ToolCallSpec, text: str | None = None, **options: Any) -> None:
        """The next request is answered with these calls, made in parallel in one message."""
        self._script.append(Reply(text=text, tool_calls=[_as_tool_call(c) for c in calls], **options))

    def queue_error(self, status: int, message: str = "emulated failure", **options: Any) -> None:
        self._script.append(Reply(status=status, error_message=message, **options))

    @property
    def pending_replies(self) -> int:
        return len(self._script)


class OpenAIEmulator(ReplyScript):
    def __init__(self, reply: str = DEFAULT_REPLY, *, delay: float = 0.0) -> None:
        super().__init__()
        #: The text answered when nothing is scripted and no hook answers.
        self.reply = reply
        #: Seconds each request takes before answering, like a real model thinking; turns
        #: that must overlap (admission tests) need one, benchmarks use it as model latency.
        self.delay = delay
        #: Every chat request body, in arrival order.
        self.requests: list[dict[str, Any]] = []
        #: When set, every request (chat and transcription) fails with this HTTP status.
        self.fail_with: int | None = None
        #: Pieces a streamed text is cut into; None streams it word by word, each word followed
        #: by a space (the historical shape some tests rely on).
        self.stream_chunks: int | None = None
        #: Seconds between streamed pieces.
        self.chunk_delay: float = 0.0
        #: Pieces each streamed tool call's arguments are cut into, like OpenAI's fragments.
        self.argument_chunks: int = 3
        #: Refuse conversations OpenAI would refuse (broken tool call/result pairing) with a 400.
        self.strict_tools = True
        #: Called with the request body when no scripted reply is left; may be async; returning
        #: None falls back to `reply`.
        self.on_request: Hook | None = None
        #: The transcript returned for uploads; `on_transcription` can compute one instead.
        self.transcript = DEFAULT_TRANSCRIPT
        self.on_transcription: Callable[[Transcription], str] | None = None
        self.transcriptions: list[Transcription] = []
        self.exchanges: list[Exchange] = []
        #: Tool calls this server issued, by id.
        self.issued: dict[str, ToolCall] = {}
        #: Everything found wrong in what clients sent (tool pairing, unknown ids, bad images).
        self.violations: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0
        #: Failures by (model, key): key None fails the model whatever key is used.
        self.faults: dict[tuple[str, str | None], Fault] = {}
        #: Every chat request by (model as sent, key as sent; "" without one), failed or not.
        self.counts: Counter[tuple[str, str]] = Counter()
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    # --- failures per model and key ------------------------------------------------------

    def fail(self, model: str, kind: str, *, key: str | None = None, retry_after: str | float | None = None,
             times: int | None = None, after: int = 0) -> None:
        """Make `model` (the name as sent, `openai/` left off) fail with `kind` (see FAULTS),
        for every key or only `key`, after answering `after` requests normally."""
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; one of {FAULTS}")
        self.faults[(model, key)] = Fault(kind, None if retry_after is None else str(retry_after), times, after=after)

    def heal(self, model: str | None = None) -> None:
        """Stop failing `model` (every model when None)."""
        for entry in [entry for entry in self.faults if model is None or entry[0] == model]:
            del self.faults[entry]

    def count(self, model: str | None = None, key: str | None = None) -> int:
        """Requests that reached this server for `model` and/or `key` (None: any)."""
        return sum(n for (m, k), n in self.counts.items() if (model is None or m == model) and (key is None or k == key))

    def _fault_for(self, model: str, key: str) -> Fault | None:
        for entry in ((model, key), (model, None)):
            fault = self.faults.get(entry)
            if fault is None:
                continue
            if fault.after > 0:
                fault.after -= 1
                continue
            if fault.times is not None:
                if fault.times <= 0:
                    continue
                fault.times -= 1
            return fault
        return None

    async def _faulty(self, request: web.Request, body: dict[str, Any], fault: Fault) -> web.StreamResponse:
        headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
        if fault.kind == "429":
            return self._error(429, "Rate limit reached for requests", "requests", code="rate_limit_exceeded",
                               headers=headers)
        if fault.kind == "503":
            return self._error(503, "The server is overloaded or not ready yet.", "server_error", headers=headers)
        if fault.kind == "context":
            return self._error(
                400, "This model's maximum context length is 16385 tokens. However, your messages resulted in "
                "20112 tokens. Please reduce the length of the messages.", "invalid_request_error",
                param="messages", code="context_length_exceeded",
            )
        if fault.kind == "400":
            return self._error(400, "Invalid value for 'temperature': must be between 0 and 2.", "invalid_request_error",
                               param="temperature", code=None)
        if fault.kind == "401":
            return self._error(401, "Incorrect API key provided.", "invalid_request_error", code="invalid_api_key")
        # a cut: words, then the connection ends without a finish reason
        model = str(body.get("model", "emulated"))
        if not body.get("stream"):
            return web.Response(body=b'{"id": "chatcmpl-emu", "choi', content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(self._chunk(model, {"role": "assistant", "content": ""}, None))
        for word in fault.words.split(" "):
            await response.write(self._chunk(model, {"content": word + " "}, None))
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[client_gone])
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        # Hundreds of clients connect at once in benchmarks; a short backlog would drop SYNs.
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=2048)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # --- queries for assertions ----------------------------------------------------------

    def _request(self, index: int) -> dict[str, Any]:
        return self.requests[index]

    def messages(self, index: int = -1) -> list[dict[str, Any]]:
        return list(self._request(index).get("messages") or [])

    def last_user_text(self, index: int = -1) -> str:
        for message in reversed(self.messages(index)):
            if message.get("role") == "user":
                return text_of(message)
        return ""

    def tools_offered(self, index: int = -1) -> list[str]:
        """Names of the functions the client declared in that request."""
        return [t.get("function", {}).get("name", "") for t in self._request(index).get("tools") or []]

    def tool_results(self, index: int = -1) -> list[dict[str, Any]]:
        """The `tool` messages of one request (the latest by default)."""
        return [m for m in self.messages(index) if m.get("role") == "tool"]

    def tool_result(self, call_id: str) -> dict[str, Any] | None:
        """The latest `tool` message answering `call_id`, from any request."""
        for body in reversed(self.requests):
            for message in body.get("messages") or []:
                if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
                    return message
        return None

    def tool_output(self, call_id: str) -> Any:
        """The content of the result for `call_id`, decoded from JSON when it is JSON."""
        message = self.tool_result(call_id)
        if message is None:
            raise KeyError(f"no tool result for {call_id}")
        content = text_of(message)
        try:
            return json.loads(content)
        except ValueError:
            return content

    @property
    def issued_calls(self) -> list[ToolCall]:
        return list(self.issued.values())

    def unanswered_calls(self) -> list[ToolCall]:
        """Issued calls no later request carried a result for."""
        answered = {
            m.get("tool_call_id") for body in self.requests for m in body.get("messages") or [] if m.get("role") == "tool"
        }
        return [c for c in self.issued.values() if c.id not in answered]

    def assert_tool_protocol(self) -> None:
        assert not self.violations, "tool protocol violations:\n" + "\n".join(self.violations)

    def image_parts(self, index: int = -1) -> list[ImagePart]:
        """Every image content part of one request (the latest by default), in order."""
        found = []
        for position, message in enumerate(self.messages(index)):
            content = message.get("content")
            if not isinstance(content, list):
                continue
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "image_url":
                    continue
                image = part.get("image_url")
                url = image.get("url", "") if isinstance(image, dict) else str(image or "")
                detail = image.get("detail") if isinstance(image, dict) else None
                mime, data = _decode_data_url(url)
                found.append(ImagePart(url, mime, data, detail, str(message.get("role")), position))
        return found

    def images(self, index: int = -1) -> list[bytes]:
        """The decoded bytes of every data: URL image in one request."""
        return [p.data for p in self.image_parts(index) if p.data is not None]

    # --- wire ----------------------------------------------------------------------------

    def _chunk(self, model: str, delta: dict[str, Any], finish: str | None, *, usage_field: bool = False) -> bytes:
        body: dict[str, Any] = {
            "id": "chatcmpl-emu",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": "fp_emulated",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage_field:
            body["usage"] = None
        return f"data: {json.dumps(body)}\n\n".encode()

    @staticmethod
    def _error(status: int, message: str, kind: str, *, code: str | None = None, param: str | None = None,
               headers: dict[str, str] | None = None) -> web.Response:
        return web.json_response(
            {"error": {"message": message, "type": kind, "param": param, "code": code}}, status=status, headers=headers
        )

    def _new_call_id(self) -> str:
        return f"call_{next(self._ids):04d}{secrets.token_hex(10)}"

    async def _choose(self, body: dict[str, Any]) -> Reply:
        if self._script:
            return self._script.popleft()
        if self.on_request is not None:
            spec = self.on_request(body)
            if inspect.isawaitable(spec):
                spec = await spec
            if spec is not None:
                return as_reply(spec)
        return Reply(text=self.reply)

    def _check_messages(self, index: int, messages: list[dict[str, Any]]) -> tuple[str, str] | None:
        """Records what is wrong with the conversation; returns OpenAI's refusal, if it would refuse."""
        refusal: tuple[str, str] | None = None
        where = f"request {index}"
        open_ids: list[str] = []  # calls of the last assistant message still awaiting results
        open_at = -1
        answered: set[str] = set()

        def close_block() -> None:
            nonlocal refusal, open_ids
            missing = [i for i in open_ids if i not in answered]
            if missing:
                self.violations.append(f"{where}: tool calls without results: {missing}")
                refusal = refusal or (CALLS_WITHOUT_RESULTS.format(ids=", ".join(missing)), f"messages.[{open_at}].role")
            open_ids = []

        for position, message in enumerate(messages):
            role = message.get("role")
            if role == "tool":
                call_id = message.get("tool_call_id")
                if not call_id:
                    self.violations.append(f"{where}: tool message {position} has no tool_call_id")
                    refusal = refusal or (TOOL_WITHOUT_CALL, f"messages.[{position}].role")
                    continue
                if call_id not in self.issued:
                    self.violations.append(f"{where}: tool result {position} answers {call_id!r}, never issued here")
                if call_id not in open_ids:
                    self.violations.append(
                        f"{where}: tool result {position} for {call_id!r} does not follow the assistant message calling it"
                    )
                    refusal = refusal or (TOOL_WITHOUT_CALL, f"messages.[{position}].role")
                elif call_id in answered:
                    self.violations.append(f"{where}: tool call {call_id!r} answered twice")
                answered.add(call_id)
                continue
            close_block()
            answered = set()
            if role == "assistant" and message.get("tool_calls"):
                open_at = position
                for call in message["tool_calls"]:
                    call_id = call.get("id")
                    open_ids.append(call_id)
                    issued = self.issued.get(call_id)
                    function = call.get("function") or {}
                    if issued is None:
                        self.violations.append(f"{where}: assistant message {position} carries call {call_id!r}, never issued here")
                    elif function.get("name") != issued.name or not _same_json(function.get("arguments"), issued.arguments_json):
                        self.violations.append(f"{where}: call {call_id!r} in history differs from the one issued")
        close_block()
        return refusal

    def _check_images(self, index: int) -> str | None:
        for part in self.image_parts(index):
            if part.url.startswith("data:") and (part.data is None or part.mime not in IMAGE_MIMES):
                self.violations.append(f"request {index}: undecodable or non-image data URL ({part.url[:40]}...)")
                return INVALID_IMAGE
        return None

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, int]:
        if reply.usage is not None:
            return dict(reply.usage)
        prompt = max(1, len(json.dumps(body.get("messages") or [])) // 4)
        completion = max(1, math.ceil(len(reply.text or "") / 4) + sum(len(c.arguments_json) // 4 + 3 for c in reply.tool_calls))
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        index = len(self.requests)
        self.requests.append(body)
        exchange = Exchange(index, body, time.monotonic())
        self.exchanges.append(exchange)
        model = str(body.get("model", ""))
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.counts[(model, key)] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            fault = self._fault_for(model, key) if self.faults else None
            if fault is not None:
                response = await self._faulty(request, body, fault)
                exchange.status = response.status
                return response
            return await self._answer(request, body, exchange)
        finally:
            self.in_flight -= 1
            exchange.answered = time.monotonic()

    async def _answer(self, request: web.Request, body: dict[str, Any], exchange: Exchange) -> web.StreamResponse:
        refusal = self._check_messages(exchange.index, list(body.get("messages") or []))
        image_refusal = self._check_images(exchange.index)
        reply = None if self.fail_with is not None else await self._choose(body)
        exchange.reply = reply
        delay = self.delay if reply is None or reply.delay is None else reply.delay
        if delay > 0:
            await asyncio.sleep(delay)
        if self.fail_with is not None or reply is None:
            exchange.status = self.fail_with or 500
            return self._error(exchange.status, "emulated failure", "server_error")
        if refusal is not None and self.strict_tools:
            exchange.status = 400
            return self._error(400, refusal[0], "invalid_request_error", param=refusal[1])
        if image_refusal is not None:
            exchange.status = 400
            return self._error(400, image_refusal, "invalid_request_error", code="invalid_image_format")
        if reply.status is not None:
            exchange.status = reply.status
            return self._error(reply.status, reply.error_message, reply.error_type, code=reply.error_code, headers=reply.headers)
        for call in reply.tool_calls:
            call.id = call.id or self._new_call_id()
            call.request_index = exchange.index
            self.issued[call.id] = call
        exchange.tool_calls = list(reply.tool_calls)
        model = body.get("model", "emulated")
        usage = self._usage(body, reply)
        finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
            if reply.tool_calls:
                message["tool_calls"] = [c.wire() for c in reply.tool_calls]
            elif message["content"] is None:
                message["content"] = ""
            if reply.images:
                message["images"] = _image_items(reply.images)
            return web.json_response(
                {
                    "id": "chatcmpl-emu",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "system_fingerprint": "fp_emulated",
                    "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                    "usage": usage,
                },
                headers=reply.headers,
            )
        return await self._stream(request, body, reply, model, usage, finish)

    async def _stream(
        self, request: web.Request, body: dict[str, Any], reply: Reply, model: str, usage: dict[str, int], finish: str
    ) -> web.StreamResponse:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = reply.chunks if reply.chunks is not None else self.stream_chunks
        pause = reply.chunk_delay if reply.chunk_delay is not None else self.chunk_delay
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **reply.headers})
        await response.prepare(request)

        async def send(delta: dict[str, Any], finish_reason: str | None = None, *, wait: bool = False) -> None:
            if wait and pause > 0:
                await asyncio.sleep(pause)
            await response.write(self._chunk(model, delta, finish_reason, usage_field=include_usage))

        text = reply.text
        if text is None and not reply.tool_calls:
            text = ""
        await send({"role": "assistant", "content": "" if text is not None else None, "refusal": None})
        if text:
            pieces = [w + " " for w in text.split(" ")] if chunks is None else split_even(text, chunks)
            for number, piece in enumerate(pieces):
                await send({"content": piece}, wait=number > 0)
        for position, call in enumerate(reply.tool_calls):
            header = {"index": position, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            await send({"tool_calls": [header]}, wait=bool(text) or position > 0)
            for fragment in split_even(call.arguments_json, self.argument_chunks):
                await send({"tool_calls": [{"index": position, "function": {"arguments": fragment}}]}, wait=True)
        if reply.images:
            await send({"images": _image_items(reply.images)}, wait=True)
        await send({}, finish, wait=True)
        if include_usage:
            final = {"id": "chatcmpl-emu", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                     "system_fingerprint": "fp_emulated", "choices": [], "usage": usage}
            await response.write(f"data: {json.dumps(final)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # --- audio ---------------------------------------------------------------------------

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        upload = form.get("file")
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if upload is None or isinstance(upload, str):
            return self._error(400, "you must provide a file", "invalid_request_error", param="file")
        record = Transcription(
            filename=upload.filename,
            content_type=upload.content_type,
            data=upload.file.read(),
            model=fields.get("model"),
            prompt=fields.get("prompt"),
            language=fields.get("language"),
            response_format=fields.get("response_format"),
            fields=fields,
            at=time.monotonic(),
            headers=dict(upload.headers),
        )
        self.transcriptions.append(record)
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        if self.fail_with is not None:
            return self._error(self.fail_with, "emulated failure", "server_error")
        if not record.model:
            return self._error(400, "you must provide a model parameter", "invalid_request_error", param="model")
        extension = (record.filename or "").rsplit(".", 1)[-1].lower() if "." in (record.filename or "") else ""
        if extension not in AUDIO_EXTENSIONS:
            return self._error(
                400, f"Invalid file format. Supported formats: {list(AUDIO_EXTENSIONS)}", "invalid_request_error",
                param="file", code="invalid_value",
            )
        text = self.on_transcription(record) if self.on_transcription is not None else self.transcript
        kind = record.response_format or "json"
        if kind in ("text", "srt", "vtt"):
            if kind == "srt":
                text = f"1\n00:00:00,000 --> 00:00:01,000\n{text}\n\n"
            elif kind == "vtt":
                text = f"WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text}\n\n"
            return web.Response(text=text, content_type="text/plain")
        if kind == "verbose_json":
            return web.json_response(
                {"task": "transcribe", "language": record.language or "english", "duration": 1.0, "text": text,
                 "segments": []}
            )
        return web.json_response({"text": text, "usage": {"type": "duration", "seconds": 1}})


def _image_items(images: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    return [
        {"type": "image_url", "index": i, "image_url": {"url": f"data:{mime};base64,{base64.b64encode(data).decode()}"}}
        for i, (mime, data) in enumerate(images)
    ]


def _decode_data_url(url: str) -> tuple[str | None, bytes | None]:
    if not url.startswith("data:") or "," not in url:
        return None, None
    header, payload = url[len("data:"):].split(",", 1)
    parts = header.split(";")
    mime = parts[0] or None
    if "base64" not in parts[1:]:
        return mime, None
    try:
        return mime, base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return mime, None


def _same_json(left: Any, right: Any) -> bool:
    try:
        return json.loads(left) == json.loads(right)
    except (TypeError, ValueError):
        return left == right
