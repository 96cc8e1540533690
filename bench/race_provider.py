"""The race's in-process model: a litellm custom provider that answers as the loopback model does.

With `bench/race.py --model in-process` every contestant, botweave and the hand-written bots
alike, calls `litellm.acompletion` with `race/bench-model`, and litellm hands the call to this
provider inside the bot's own process: no HTTP, no OpenAI SDK, so what is raced is the
frameworks' own cost around one litellm call. The hand-written bots register it the way the
litellm docs show (`litellm.custom_provider_map`); botweave loads this module as a plugin,
which does the same (a provider registered in Python is seen by this process only, so
botweave makes these calls in its own process).

The answer is the loopback model's (`answer r<run> c<chat> m<k> ... over`); its latency is
the number in the file `$BOTWEAVE_RACE_DELAY_FILE` names, which the harness rewrites between
runs (read again only when the file changed). A streamed answer spreads its chunks over the
latency, as the loopback model does.

It imports litellm only in `register`, so the harness can use `reply_chunks` without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from typing import Any

PROVIDER = "race"
MODEL = f"{PROVIDER}/bench-model"
DELAY_FILE_ENV = "BOTWEAVE_RACE_DELAY_FILE"

MARKER = re.compile(r"\br(\d+) c(\d+) m(\d+)\b")
FILLER = "one two three four five six seven eight nine ten eleven twelve".split()
FINAL_WORD = "over"


def reply_chunks(messages: list[dict[str, Any]]) -> list[str]:
    """The answer to the last user turn, as the chunks a stream delivers (marker first, whole)."""
    last = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    content = last.get("content") if last else ""
    found = MARKER.search(content if isinstance(content, str) else json.dumps(content))
    marker = found.group(0) if found else "r0 c0 m0"
    return [f"answer {marker} ", *(w + " " for w in FILLER), FINAL_WORD]


class _Delay:
    """The latency the harness set, read again only when its file changed."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._stamp: float | None = None
        self._value = 0.0

    def __call__(self) -> float:
        if not self.path:
            return 0.0
        try:
            stamp = os.stat(self.path).st_mtime_ns
        except OSError:
            return 0.0
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                with open(self.path) as file:
                    self._value = float(file.read().strip() or 0)
            except (OSError, ValueError):
                self._value = 0.0
        return self._value


def register() -> None:
    """Add the provider to litellm's map, once."""
    import litellm
    from litellm import CustomLLM
    from litellm.types.utils import GenericStreamingChunk, ModelResponse

    delay = _Delay(os.environ.get(DELAY_FILE_ENV))

    class RaceModel(CustomLLM):  # type: ignore[misc]
        async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
            wait = delay()
            if wait > 0:
                await asyncio.sleep(wait)
            chunks = reply_chunks(messages)
            response: ModelResponse = kwargs["model_response"]
            response.model = model
            response.choices[0].message.content = "".join(chunks)  # type: ignore[union-attr]
            return response

        async def astreaming(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            chunks = reply_chunks(messages)
            step = delay() / len(chunks)
            started = time.monotonic()
            for index, piece in enumerate(chunks, 1):
                if step > 0:
                    await asyncio.sleep(max(0.0, started + step * index - time.monotonic()))
                last = index == len(chunks)
                yield GenericStreamingChunk(
                    text=piece, is_finished=last, finish_reason="stop" if last else "", usage=None, index=0,
                    tool_use=None,
                )

    if not any(entry.get("provider") == PROVIDER for entry in litellm.custom_provider_map):
        litellm.custom_provider_map.append({"provider": PROVIDER, "custom_handler": RaceModel()})


def setup(app: Any) -> None:
    """As a botweave plugin (`plugins: [race_provider]`): the provider, in the bot's process."""
    register()
