"""Model calls straight to an OpenAI-compatible chat completions endpoint, over aiohttp.

litellm makes every provider look like OpenAI. For a model that already speaks OpenAI's chat
format (litellm's `openai/` models: OpenAI itself, or whatever server `api_base` names that
offers `/chat/completions`: vLLM, llama.cpp, LM Studio, Ollama's OpenAI endpoint, a gateway)
that translation is almost all of a call's CPU: litellm maps the parameters, the OpenAI SDK
builds an httpx request and pydantic response objects, litellm wraps those again, and each
answer is priced and logged whether or not anyone reads it. Here the request body is the
agent's request as it stands, and the answer is read from the JSON (or the server-sent
events) into a `ModelOutput` directly.

What litellm and the OpenAI SDK do on this path that still matters is done here too: the key
from `api_key` or `OPENAI_API_KEY`, the timeout, two retries with backoff for a refused
connection, 408, 409, 429 and 5xx (honouring `Retry-After`), token counts for streams
(`stream_options.include_usage`), streamed tool-call fragments, images in the answer, and a
stream that ends without a finish reason is a failure, not a short answer. Failures are
`ModelAPIError`s named as litellm names them (`AuthenticationError`, `RateLimitError`, ...),
so a turn's log line reads the same whichever client made the call. Nothing here reads or
sets anything of litellm's.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import aiohttp
from botweave.model_calls import CallPart, ModelOutput, image_urls, text_of
from botweave.version import __version__

#: litellm's prefix for models that speak OpenAI's chat format.
PREFIX = "openai/"
DEFAULT_BASE = "https://api.openai.com/v1"
#: Tries after the first, as the OpenAI SDK (and so litellm) makes them, unless the request
#: names its own (`num_retries`, as litellm reads it).
RETRIES = 2
RETRY_STATUSES = frozenset({408, 409, 429})
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
#: The longest `Retry-After` waited for; a longer one fails the call at once.
MAX_RETRY_AFTER_S = 60.0
#: Connections kept open to all model servers together.
CONNECTIONS = 256
#: What a request carries for litellm that is not part of the request body.
NOT_IN_BODY = frozenset(
    {"model", "api_base", "api_key", "timeout", "metadata", "drop_params", "stream", "num_retries", "max_retries"}
)
#: The most characters of a server's error message kept in an exception.
MAX_DETAIL = 500


class ModelAPIError(RuntimeError):
    """A model call that failed; `status` is the HTTP status when the server answered."""

    def __init__(
        self, detail: str, *, status: int | None = None, retry_after: float | None = None, code: str | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.retry_after = retry_after
        self.code = code


class BadRequestError(ModelAPIError):
    pass


class AuthenticationError(ModelAPIError):
    pass


class PermissionDeniedError(ModelAPIError):
    pass


class NotFoundError(ModelAPIError):
    pass


class UnprocessableEntityError(ModelAPIError):
    pass


class RateLimitError(ModelAPIError):
    pass


class InternalServerError(ModelAPIError):
    pass


class ServiceUnavailableError(ModelAPIError):
    pass


class APIConnectionError(ModelAPIError):
    """The server could not be reached, or the connection broke before the answer was whole."""


class Timeout(ModelAPIError):
    pass


_BY_STATUS: dict[int, type[ModelAPIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: Timeout,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def speaks_openai(model: str) -> bool:
    """Whether this client can make `model`'s calls (litellm's `openai/` models)."""
    return model.startswith(PREFIX) and len(model) > len(PREFIX)


def error_for(status: int, body: bytes, headers: Any = None) -> ModelAPIError:
    """The exception for a server's error answer: its class by status, its text the
    server's own message."""
    detail = body.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    code = None
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict) and error.get("message"):
            detail = str(error["message"])
        elif isinstance(error, str):
            detail = error
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            code = error["code"]
    kind = _BY_STATUS.get(status) or (InternalServerError if status >= 500 else ModelAPIError)
    return kind(
        f"{detail[:MAX_DETAIL] or 'no detail'} (HTTP {status})", status=status, retry_after=_retry_after(headers), code=code
    )


def _retry_after(headers: Any) -> float | None:
    """The server's `retry-after-ms` or `Retry-After` (seconds or an HTTP date), if any."""
    if headers is None:
        return None
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _retryable(exc: ModelAPIError) -> bool:
    if isinstance(exc, (APIConnectionError, Timeout)):
        return True
    return exc.status is not None and (exc.status in RETRY_STATUSES or exc.status >= 500)


def _backoff(attempt: int, exc: ModelAPIError) -> float | None:
    """Seconds before the next try, or None when the server asks for longer than is waited."""
    if exc.retry_after is not None:
        return exc.retry_after if exc.retry_after <= MAX_RETRY_AFTER_S else None
    return float(min(FIRST_BACKOFF_S * 2**attempt, MAX_BACKOFF_S) * (1 - 0.25 * random.random()))


T = TypeVar("T")


async def _tried(attempt: Callable[[], Awaitable[T]], retries: int) -> T:
    """`attempt()`, tried again after a failure worth trying again, up to `retries` times."""
    for number in range(retries + 1):
        try:
            return await attempt()
        except ModelAPIError as exc:
            wait = _backoff(number, exc) if number < retries and _retryable(exc) else None
            if wait is None:
                raise
        await asyncio.sleep(wait)
    raise AssertionError("not reached: the last try raises or returns")


class _Target:
    """Where one request goes and how: URL, headers, body, timeout."""

    __slots__ = ("url", "headers", "body", "timeout", "retries")

    def __init__(self, request: dict[str, Any], *, stream: bool) -> None:
        model = str(request["model"])
        if not speaks_openai(model):
            raise BadRequestError(f"{model!r} is not an openai/ model; this client speaks OpenAI's chat format only")
        base = str(request.get("api_base") or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE).rstrip("/")
        self.url = f"{base}/chat/completions"
        key = request.get("api_key") or os.environ.get("OPENAI_API_KEY")
        if not key and not request.get("api_base"):
            raise AuthenticationError("no API key: set the agent's api_key, or OPENAI_API_KEY")
        self.headers = {"Content-Type": "application/json", "User-Agent": f"botweave/{__version__}"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        organization = os.environ.get("OPENAI_ORGANIZATION")
        if organization:
            self.headers["OpenAI-Organization"] = organization
        body = {name: value for name, value in request.items() if name not in NOT_IN_BODY and value is not None}
        body["model"] = model[len(PREFIX) :]
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True, **(body.get("stream_options") or {})}
        self.body = json.dumps(body, ensure_ascii=False).encode()
        retries = request.get("num_retries", request.get("max_retries"))
        self.retries = retries if isinstance(retries, int) and retries >= 0 else RETRIES
        seconds = request.get("timeout")
        limit = float(seconds) if isinstance(seconds, (int, float)) else None
        # a whole answer must arrive within the limit; a stream must keep moving within it
        self.timeout = (
            aiohttp.ClientTimeout(total=None, sock_connect=limit, sock_read=limit)
            if stream
            else aiohttp.ClientTimeout(total=limit)
        )


def _new_session(connections: int = 0) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections, ttl_dns_cache=300), trust_env=True)


class OpenAICompatible:
    """`ModelCalls` made straight to an OpenAI-compatible server, for `openai/` models.

    Between `open` and `close` (the App's start and stop) calls share one aiohttp session
    and its pooled connections; otherwise each call opens a session of its own and closes it
    when it is done (an Agent used on its own, in a script or a test, leaves nothing open)."""

    def __init__(self, *, connections: int = CONNECTIONS) -> None:
        self._connections = connections
        self._sharing = False
        self._shared: aiohttp.ClientSession | None = None

    def open(self) -> None:
        """From now on calls share one session (opened by the first of them)."""
        self._sharing = True

    async def close(self) -> None:
        self._sharing = False
        shared, self._shared = self._shared, None
        if shared is not None and not shared.closed:
            await shared.close()

    def _session(self) -> tuple[aiohttp.ClientSession, bool]:
        """The session for one call, and whether the call owns it (and must close it)."""
        if not self._sharing:
            return _new_session(), True
        shared = self._shared
        if shared is None or shared.closed:
            shared = self._shared = _new_session(self._connections)
        elif shared.loop is not asyncio.get_running_loop():
            return _new_session(), True
        return shared, False

    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        target = _Target(request, stream=False)
        return output_of(await _tried(lambda: self._post(target), target.retries))

    async def _post(self, target: _Target) -> Any:
        session, owned = self._session()
        try:
            async with session.post(target.url, data=target.body, headers=target.headers, timeout=target.timeout) as response:
                raw = await response.read()
                if response.status >= 400:
                    raise error_for(response.status, raw, response.headers)
        except asyncio.TimeoutError:
            raise Timeout(f"no answer from {target.url} within the agent's timeout") from None
        except aiohttp.ClientError as exc:
            raise APIConnectionError(f"{type(exc).__name__}: {exc}") from None
        finally:
            if owned:
                await session.close()
        try:
            return json.loads(raw)
        except ValueError:
            raise APIConnectionError(f"the model's answer is not JSON: {raw[:200]!r}") from None

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        target = _Target(request, stream=True)
        session, owned = self._session()
        try:
            response = await _tried(lambda: self._open(session, target), target.retries)
            async with response:
                async for output in _events(response, target.url):
                    yield output
        finally:
            if owned:
                await session.close()

    async def _open(self, session: aiohttp.ClientSession, target: _Target) -> aiohttp.ClientResponse:
        """The stream's response once its status is in (a failure before any words may be
        tried again; one during the stream may not)."""
        try:
            response = await session.post(target.url, data=target.body, headers=target.headers, timeout=target.timeout)
        except asyncio.TimeoutError:
            raise Timeout(f"no answer from {target.url} within the agent's timeout") from None
        except aiohttp.ClientError as exc:
            raise APIConnectionError(f"{type(exc).__name__}: {exc}") from None
        if response.status >= 400:
            async with response:
                try:
                    raw = await response.read()
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    raw = b""
            raise error_for(response.status, raw, response.headers)
        return response


async def _events(response: aiohttp.ClientResponse, url: str) -> AsyncIterator[ModelOutput]:
    """The stream's pieces, one per chunk, read as server-sent events."""
    buffer = b""
    finished = False
    try:
        async for data in response.content.iter_any():
            buffer += data
            if b"\n" not in data:
                continue
            complete, _, buffer = buffer.rpartition(b"\n")
            for chunk in _chunks(complete):
                if chunk is None:
                    finished = True
                    continue
                piece, ends = piece_of(chunk)
                finished = finished or ends
                if piece.text or piece.calls or piece.image_urls or piece.usage is not None:
                    yield piece
    except asyncio.TimeoutError:
        raise Timeout(f"the stream from {url} stalled for longer than the agent's timeout") from None
    except aiohttp.ClientError as exc:
        raise APIConnectionError(f"the stream from {url} broke: {type(exc).__name__}: {exc}") from None
    if not finished:
        raise APIConnectionError(f"the stream from {url} ended before the model said it was finished")


def _chunks(lines: bytes) -> Iterator[dict[str, Any] | None]:
    """The JSON chunks in complete `data:` lines (None for `[DONE]`); other fields, comments
    and blank lines are skipped. An error the server sends mid-stream raises."""
    for line in lines.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            yield None
            continue
        if not payload:
            continue
        try:
            chunk = json.loads(payload)
        except ValueError:
            raise APIConnectionError(f"the model streamed something that is not JSON: {payload[:200]!r}") from None
        if isinstance(chunk, dict) and "error" in chunk and not chunk.get("choices"):
            error = chunk["error"]
            status = error.get("code") if isinstance(error, dict) else None
            raise error_for(status if isinstance(status, int) else 500, payload)
        if isinstance(chunk, dict):
            yield chunk


def _usage(body: dict[str, Any]) -> tuple[int, int] | None:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return None
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _calls(parts: Any) -> tuple[CallPart, ...]:
    calls = []
    for position, part in enumerate(parts if isinstance(parts, list) else ()):
        if not isinstance(part, dict):
            continue
        function = part.get("function") or {}
        index = part.get("index")
        calls.append(
            CallPart(
                index if isinstance(index, int) else position,
                str(part.get("id") or ""),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
            )
        )
    return tuple(calls)


def output_of(body: Any) -> ModelOutput:
    """A whole answer (a chat completion) as a `ModelOutput`."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not choices or not isinstance(choices[0], dict):
        raise APIConnectionError(f"the model's answer has no choices: {str(body)[:200]}")
    message = choices[0].get("message") or {}
    return ModelOutput(text_of(message.get("content")), _calls(message.get("tool_calls")), image_urls(message), _usage(body),
                       str(body.get("model") or ""))


def piece_of(chunk: dict[str, Any]) -> tuple[ModelOutput, bool]:
    """One streamed chunk as a piece of the answer, and whether it ends the answer."""
    usage = _usage(chunk)
    choices = chunk.get("choices")
    if not choices or not isinstance(choices[0], dict):
        return ModelOutput(usage=usage, model=str(chunk.get("model") or "")), False
    choice = choices[0]
    delta = choice.get("delta") or {}
    piece = ModelOutput(text_of(delta.get("content")), _calls(delta.get("tool_calls")), image_urls(delta), usage,
                        str(chunk.get("model") or ""))
    return piece, bool(choice.get("finish_reason"))
