"""How an agent reaches its model, and what it reads back.

An agent hands a request (litellm's `acompletion` arguments) to its `ModelCalls` and reads
the answer as `ModelOutput`: the words, the tool calls (or, streamed, fragments of them), the
images and the token counts. That is all a turn uses of an answer, and it is a plain value, so
it reads the same whichever client made the call (litellm here, `LitellmCalls`; botweave's own
OpenAI-compatible client, `openai_compatible`; `model_clients` picks one per model) and
whether the call ran in this process or in a helper process (the runtime's model processes)
whose answer crossed a pipe.

litellm is imported on first use, not at import time: it costs seconds to import and would
otherwise slow `botweave --help` and every `import bots`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from botweave.failover import classify


@dataclass(frozen=True, slots=True)
class CallPart:
    """A tool call the model asked for, or a streamed fragment of one: fragments with the same
    `index` belong to one call, the first names it and the arguments arrive in pieces."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ModelOutput:
    """A whole answer, or one streamed piece of it. `usage` is (prompt, completion) tokens when
    the provider reported them; `model` the model that answered, as the provider named it
    (often more exact than the one asked: a dated version)."""

    text: str = ""
    calls: tuple[CallPart, ...] = ()
    image_urls: tuple[str, ...] = ()
    usage: tuple[int, int] | None = None
    model: str = ""


class ModelCallFailed(RuntimeError):
    """A model call that failed where the caller cannot see the original exception (another
    process); `kind` is the original's type name, the message its text, and `status`,
    `retry_after` and `code` what choosing the next model reads of it (botweave.failover)."""

    def __init__(
        self,
        kind: str,
        detail: str,
        status: int | None = None,
        retry_after: float | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after
        self.code = code


def failure_fields(exc: BaseException, limit: int) -> tuple[str, str, int | None, float | None, str | None]:
    """What of a failure crosses to another process: `ModelCallFailed`'s arguments."""
    failure = classify(exc)
    code = getattr(exc, "code", None)
    return failure.name, str(exc)[:limit], failure.status, failure.retry_after, code if isinstance(code, str) else None


class ModelCalls(Protocol):
    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        """The whole answer to `request` (litellm's `acompletion` arguments)."""
        ...

    def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        """The answer to `request` piece by piece, as the provider streams it."""
        ...


@cache
def litellm_module() -> Any:
    """Import litellm once, offline-safe (its model map read from the package, not fetched)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


_imported = False


def import_litellm() -> asyncio.Future[Any]:
    """litellm, imported in a daemon thread of its own: the import takes seconds, and an event
    loop blocked that long freezes everything else the process serves (a terminal's prompt,
    health checks, other conversations). Not in the loop's default executor: `asyncio.run`
    joins that executor's threads on the way out, so a bot told to stop while the import ran
    would wait for it first."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return  # the waiter gave up (the bot is stopping)
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def run() -> None:
        try:
            result, error = litellm_module(), None
        except Exception as exc:  # boundary: a background import, its failure handed to the waiter, who logs it
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the loop has closed: nobody waits any more

    threading.Thread(target=run, name="import litellm", daemon=True).start()
    return future


async def load_litellm() -> Any:
    """litellm, imported off the loop the first time (see `import_litellm`)."""
    global _imported
    if not _imported:
        await import_litellm()
        _imported = True
    return litellm_module()


def litellm_loaded() -> bool:
    """Whether litellm is imported already (whoever imported it), so that asking it something
    costs no import."""
    return litellm_module.cache_info().currsize > 0


class LitellmCalls:
    """Model calls made by litellm (its public `acompletion`) in this process: any provider
    litellm knows, and the custom providers registered with it here."""

    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        litellm = await load_litellm()
        response = await litellm.acompletion(**request)
        message = response.choices[0].message
        calls = tuple(
            CallPart(position, call.id or "", call.function.name or "", call.function.arguments or "")
            for position, call in enumerate(getattr(message, "tool_calls", None) or [])
        )
        return ModelOutput(text_of(message.content), calls, image_urls(message), usage_of(response), model_of(response))

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        litellm = await load_litellm()
        response = await litellm.acompletion(**asking_for_usage(request))
        finished = False
        async for chunk in response:
            finished = finished or bool(chunk.choices and getattr(chunk.choices[0], "finish_reason", None))
            yield piece_of(chunk)
        if not finished:
            # a stream cut short is a failure, not a short answer (the next model may answer)
            raise ModelCallFailed("APIConnectionError", "the stream ended before the model said it was finished")


def piece_of(chunk: Any) -> ModelOutput:
    """One streamed chunk as a piece of the answer."""
    usage = usage_of(chunk)
    delta = chunk.choices[0].delta if chunk.choices else None
    if delta is None:
        return ModelOutput(usage=usage, model=model_of(chunk))
    calls = []
    for position, part in enumerate(getattr(delta, "tool_calls", None) or []):
        index = getattr(part, "index", None)
        function = getattr(part, "function", None)
        calls.append(
            CallPart(
                index if isinstance(index, int) else position,
                getattr(part, "id", None) or "",
                getattr(function, "name", None) or "",
                getattr(function, "arguments", None) or "",
            )
        )
    return ModelOutput(text_of(delta.content), tuple(calls), image_urls(delta), usage, model_of(chunk))


def model_of(response: Any) -> str:
    """The model a response or stream chunk says answered ("" when it does not say)."""
    return str(getattr(response, "model", None) or "")


def usage_of(response: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens a response or stream chunk reports, None when it has none."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    return int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0)


def text_of(content: Any) -> str:
    """The words of a message's content, whether a string or a list of parts."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")


def image_urls(message: Any) -> tuple[str, ...]:
    """The URLs of the images a model returned: the message's (or delta's) `images`, or image
    parts of a list content; `message` is litellm's object or the JSON as it came."""
    fields: dict[str, Any] = message if isinstance(message, dict) else {}
    items = list((fields.get("images") if fields else getattr(message, "images", None)) or [])
    content = fields.get("content") if fields else getattr(message, "content", None)
    if isinstance(content, list):
        items += [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    return tuple(_image_url(item) for item in items)


def _image_url(item: Any) -> str:
    """The URL of an image part, whether litellm handed it over as a dict or an object."""
    image = item.get("image_url") if isinstance(item, dict) else getattr(item, "image_url", None)
    if isinstance(image, dict):
        return str(image.get("url") or "")
    return str(getattr(image, "url", image) or "")


def asking_for_usage(request: dict[str, Any]) -> dict[str, Any]:
    """A streamed `request` that asks for the token counts at its end, whatever the provider.

    litellm takes `stream_options` from every caller: it passes the option on to the APIs that
    know it (OpenAI's and those compatible with it), and for the others it reads the counts
    their own streams carry (Anthropic's `message_start` and `message_delta`, Gemini's
    `usageMetadata`, Ollama's last line) and hands them over the same way, as a last chunk.
    Without the option it hands over none, whichever provider counted."""
    options = request.get("stream_options") or {}
    return {**request, "stream_options": {**options, "include_usage": True}}
