"""litellm without the per-call bookkeeping nobody reads.

Every litellm call prices its answer (a model-map lookup, slow for a model litellm does not
know) and queues a success-logging task that builds a full logging payload, whether or not any
logging integration is configured. A streamed call, once its last chunk is out, also assembles
the whole response again in a worker thread, counting tokens with tiktoken when the provider
sent no usage, to price and log it. That was about a third of the CPU of a turn. botweave reads
none of it (the footer shows the model and the time, not a price), so while no litellm
callback, budget, cache or cost reporting is configured, those steps are skipped. The check runs on every call: configure a callback (litellm.callbacks,
success_callback, ...) at any time and litellm does all of it again, unchanged.

Each step is replaced only where this litellm has it under the expected name; a litellm that
moved one keeps doing that step (slower, never wrong). `quieted` says which were replaced.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

log = logging.getLogger(__name__)

#: litellm's lists of logging integrations; any entry means someone reads what a call logs.
CALLBACK_LISTS = (
    "callbacks",
    "success_callback",
    "failure_callback",
    "input_callback",
    "service_callback",
    "audit_log_callbacks",
    "_async_success_callback",
    "_async_failure_callback",
    "_async_input_callback",
)

_MARK = "__botweave_quiet__"


def listening(litellm: Any) -> bool:
    """Whether anything reads a call's cost or logging payload: an integration, a budget, or
    costs reported in streamed usage."""
    if any(getattr(litellm, name, None) for name in CALLBACK_LISTS):
        return True
    return (
        bool(getattr(litellm, "max_budget", 0))
        or bool(getattr(litellm, "include_cost_in_streaming_usage", False))
        or getattr(litellm, "cache", None) is not None
    )


def _unless_listening(litellm: Any, original: Callable[..., Any], quiet: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def step(*args: Any, **kwargs: Any) -> Any:
        if listening(litellm):
            return original(*args, **kwargs)
        return quiet(*args, **kwargs)

    setattr(step, _MARK, True)
    return step


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


async def _nothing_async(*args: Any, **kwargs: Any) -> None:
    return None


def _quiet_stream_end(litellm: Any, original: Callable[..., Any], reported: Callable[..., Any] | None) -> Callable[..., Any]:
    """A stream that delivered its last chunk ends right away while nobody listens; the
    provider's stream is closed as usual. A caller that asked for usage (`stream_options`)
    gets it first, as one more chunk, when the provider reported it: litellm would rebuild
    the whole response to learn the same numbers. Without a reported usage, litellm's own
    ending estimates it."""

    @functools.wraps(original)
    async def finish(stream: Any, *args: Any, **kwargs: Any) -> Any:
        if listening(litellm) or not getattr(stream, "sent_last_chunk", False):
            return await original(stream, *args, **kwargs)
        if getattr(stream, "send_stream_usage", True) and not getattr(stream, "sent_stream_usage", True):
            usage = reported(stream.chunks) if reported is not None else None
            if usage is None:
                return await original(stream, *args, **kwargs)
            chunk = stream._new_usage_chunk()
            chunk.usage = usage
            stream.sent_stream_usage = True
            return chunk
        await stream.aclose()
        raise StopAsyncIteration

    setattr(finish, _MARK, True)
    return finish


class _OneIterator:
    """A provider's stream read through one iterator for its whole life.

    litellm reads each chunk with a fresh `async for` over the provider's stream and returns
    from inside it, so every chunk leaves an unfinished async generator behind, which the
    event loop then has to finalize from the garbage collector (a wake-up of the loop and a
    task per chunk). Iterating this object hands out the same iterator every time, so the
    provider's generator simply resumes where the last chunk left it."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._iterator = stream.__aiter__()

    def __aiter__(self) -> Any:
        return self._iterator

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    async def aclose(self) -> None:
        closing = getattr(self._iterator, "aclose", None)
        if closing is not None and self._iterator is not self.stream:
            await closing()
        if hasattr(self.stream, "aclose"):
            await self.stream.aclose()
        elif hasattr(self.stream, "close"):
            result = self.stream.close()
            if result is not None:
                await result


def _one_iterator(original: Callable[..., Any], iterable: Callable[[Any], bool]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def step(wrapper: Any) -> Any:
        stream = wrapper.completion_stream
        if stream is not None and type(stream) is not _OneIterator and not isinstance(stream, (str, bytes)) and iterable(stream):
            wrapper.completion_stream = _OneIterator(stream)
        return await original(wrapper)

    setattr(step, _MARK, True)
    return step


def _validated_first(original: Callable[..., Any], fast: tuple[type, ...], invalid: type[Exception]) -> Callable[..., Any]:
    """The OpenAI SDK builds each response and stream chunk with its own lenient `construct`,
    written in Python: about 60 µs a chunk, the largest single cost of a streamed reply. The
    same models validated by pydantic take 2-3 µs and come out equal (extra fields kept).
    Only what fails validation (a provider's own finish reason, say) is still constructed
    leniently, as before."""

    @functools.wraps(original)
    def process(client: Any, *, data: Any, cast_to: Any, response: Any) -> Any:
        if cast_to in fast and type(data) is dict and not getattr(client, "_strict_response_validation", True):
            try:
                return cast_to.model_validate(data)
            except invalid:
                pass
        return original(client, data=data, cast_to=cast_to, response=response)

    setattr(process, _MARK, True)
    return process


def _cookies_only_when_set(original: Callable[..., Any]) -> Callable[..., Any]:
    """httpx (the client litellm gives the OpenAI SDK) rebuilds each response as a urllib
    request and response to look for cookies, Set-Cookie header or not: 4% of the CPU of a
    turn. A response without one cannot change the jar; httpx's successor checks the same."""

    @functools.wraps(original)
    def extract(cookies: Any, response: Any) -> None:
        headers = response.headers
        if "set-cookie" not in headers and "set-cookie2" not in headers:
            return
        original(cookies, response)

    setattr(extract, _MARK, True)
    return extract


def _httpx_cookies() -> list[str]:
    try:
        import httpx
    except ImportError:
        return []
    original = getattr(httpx.Cookies, "extract_cookies", None)
    if not callable(original):
        return []
    if not getattr(original, _MARK, False):
        setattr(httpx.Cookies, "extract_cookies", _cookies_only_when_set(original))
    return ["httpx.Cookies.extract_cookies"]


def _openai_models() -> list[str]:
    """Validated-first construction of the chat models litellm reads from the OpenAI SDK."""
    try:
        import pydantic
        from openai._base_client import BaseClient
        from openai.types.chat import ChatCompletion, ChatCompletionChunk
    except ImportError:
        return []
    original = getattr(BaseClient, "_process_response_data", None)
    if not callable(original):
        return []
    if not getattr(original, _MARK, False):
        fast = (ChatCompletion, ChatCompletionChunk)
        setattr(BaseClient, "_process_response_data", _validated_first(original, fast, pydantic.ValidationError))
    return ["openai.BaseClient._process_response_data"]


class ModelCallExecutor(ThreadPoolExecutor):
    """An event loop's default executor that prepares litellm's requests to OpenAI models on
    the loop itself and runs everything else in its threads, as any default executor does.

    litellm's `acompletion` hands the preparation of every request (mapping parameters,
    picking the cached client; no network, for the OpenAI provider) to a worker thread. With a
    few hundred conversations answering at once, those preparations queue for the executor's
    few threads, and each thread then waits for the interpreter lock that the busy event loop
    holds: turns took longer for the hop than for the work (about 5% of a burst's wall time).
    Other providers may read credentials or fetch tokens while preparing (cloud SDKs do), so
    theirs still run in a thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if not prepared_on_loop(fn):
            return super().submit(fn, *args, **kwargs)
        return settled(Future(), fn, *args, **kwargs)


#: A thread pool's future or an event loop's: both are settled the same way.
F = TypeVar("F", Future[Any], asyncio.Future[Any])


def settled(future: F, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> F:
    """`future`, done with what `fn(*args, **kwargs)` returned or raised right here: work an
    executor would have run in a thread (the caller gets an exception the same way)."""
    try:
        future.set_result(fn(*args, **kwargs))
    except BaseException as exc:  # handed to the caller, as a thread would
        future.set_exception(exc)
    return future


def prepared_on_loop(fn: Any) -> bool:
    """Whether `fn` is litellm's `completion` (wrapped in a context's `run`) for an OpenAI
    model, as `acompletion` hands it to the executor."""
    if not isinstance(fn, functools.partial) or not fn.args:
        return False
    inner = fn.args[0]
    if not isinstance(inner, functools.partial) or getattr(inner.func, "__name__", "") != "completion":
        return False
    if not getattr(inner.func, "__module__", "").startswith("litellm"):
        return False
    provider = inner.keywords.get("custom_llm_provider")
    model = inner.keywords.get("model")
    return provider == "openai" or (provider is None and isinstance(model, str) and model.startswith("openai/"))


class StreamEndedEarly(RuntimeError):
    """The provider's stream closed before it said the answer was finished (a cut connection
    looks like a short answer otherwise)."""


def direct_chunks(litellm: Any, response: Any) -> AsyncIterator[Any] | None:
    """The chunks of a streamed OpenAI chat completion read straight from the OpenAI SDK, or
    None when litellm's own reading is needed.

    litellm turns every chunk into a chunk of its own (about 90 µs each, most of the CPU of a
    streamed reply beyond the request itself) so that logging integrations, cost reporting,
    per-chunk rules and providers with their own formats all see one shape. For the OpenAI
    provider, while none of that is configured, the SDK's chunks already are that shape: the
    same `choices[0].delta` (content, tool calls, images), and the provider's `usage` chunk
    when it was asked for. What litellm would still check is checked here: a stream that ends
    without a finish reason is an error, not a short answer. Closing goes through litellm's
    stream, as it would."""
    try:
        from litellm.constants import LITELLM_MAX_STREAMING_DURATION_SECONDS
        from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
        from openai import AsyncStream
    except ImportError:
        return None
    if (
        type(response) is not CustomStreamWrapper
        or getattr(response, "custom_llm_provider", None) != "openai"
        or type(getattr(response, "completion_stream", None)) is not AsyncStream
        or getattr(response, "sent_first_chunk", True)
        or getattr(response, "merge_reasoning_content_in_choices", True)
        or getattr(litellm, "post_call_rules", None)
        or LITELLM_MAX_STREAMING_DURATION_SECONDS is not None
        or listening(litellm)
    ):
        return None
    return _read_directly(response, response.completion_stream)


async def _read_directly(wrapper: Any, stream: Any) -> AsyncIterator[Any]:
    finished = False
    try:
        async for chunk in stream:
            choices = chunk.choices
            if choices and choices[0].finish_reason:
                finished = True
            yield chunk
        if not finished:
            raise StreamEndedEarly("the model's stream ended before a finish_reason was received")
    finally:
        await wrapper.aclose()


def quiet(litellm: Any) -> list[str]:
    """Skip pricing and success logging while nobody listens, and the per-chunk waste that
    helps nobody; returns the steps replaced."""
    replaced: list[str] = _openai_models() + _httpx_cookies()
    targets: list[tuple[Any, str, Callable[..., Any]]] = []
    try:
        from litellm import utils
        from litellm.litellm_core_utils.litellm_logging import Logging
        from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
    except ImportError:  # a litellm laid out differently: leave it as it is
        log.debug("litellm's logging internals not found; every call keeps its bookkeeping")
        return replaced
    targets = [
        (Logging, "response_cost_calculator", _nothing),  # pricing, on every answer
        (Logging, "async_success_handler", _nothing_async),  # the logging payload, per call
        (Logging, "dispatch_success_handlers", _nothing_async),  # the same at the end of a stream
        (utils, "dispatch_success_logging", _nothing),  # queueing that task at all
    ]
    for owner, name, stand_in in targets:
        original = getattr(owner, name, None)
        if not callable(original):
            continue
        if not getattr(original, _MARK, False):
            setattr(owner, name, _unless_listening(litellm, original, stand_in))
        replaced.append(f"{getattr(owner, '__name__', owner)}.{name}")
    from litellm.litellm_core_utils import streaming_handler

    finish = getattr(CustomStreamWrapper, "_finalize_completed_stream", None)
    if callable(finish):
        if not getattr(finish, _MARK, False):
            reported = getattr(streaming_handler, "_reported_total_usage", None)
            if not hasattr(CustomStreamWrapper, "_new_usage_chunk"):
                reported = None  # no way to hand usage over: litellm's own ending does it
            setattr(CustomStreamWrapper, "_finalize_completed_stream", _quiet_stream_end(litellm, finish, reported))
        replaced.append("CustomStreamWrapper._finalize_completed_stream")
    step = getattr(CustomStreamWrapper, "__anext__", None)
    iterable = getattr(streaming_handler, "is_async_iterable", None)
    if callable(step) and callable(iterable):
        if not getattr(step, _MARK, False):
            setattr(CustomStreamWrapper, "__anext__", _one_iterator(step, iterable))
        replaced.append("CustomStreamWrapper.__anext__")
    return replaced


def quieted(litellm: Any) -> list[str]:
    """The steps currently replaced (for tests and `botweave check`-style diagnostics)."""
    found: list[str] = []
    try:
        from openai._base_client import BaseClient

        if getattr(getattr(BaseClient, "_process_response_data", None), _MARK, False):
            found.append("openai.BaseClient._process_response_data")
    except ImportError:
        pass
    try:
        import httpx

        if getattr(getattr(httpx.Cookies, "extract_cookies", None), _MARK, False):
            found.append("httpx.Cookies.extract_cookies")
    except ImportError:
        pass
    try:
        from litellm import utils
        from litellm.litellm_core_utils.litellm_logging import Logging
        from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
    except ImportError:
        return found
    for owner, name in (
        (Logging, "response_cost_calculator"),
        (Logging, "async_success_handler"),
        (Logging, "dispatch_success_handlers"),
        (utils, "dispatch_success_logging"),
        (CustomStreamWrapper, "_finalize_completed_stream"),
        (CustomStreamWrapper, "__anext__"),
    ):
        if getattr(getattr(owner, name, None), _MARK, False):
            found.append(f"{getattr(owner, '__name__', owner)}.{name}")
    return found
