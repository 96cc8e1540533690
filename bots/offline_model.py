"""`offline/echo`: a stand-in model so botweave runs with no key and no network.

It is registered as a litellm custom provider, so the exact code path of a real model runs
(litellm call, streaming wrapper, error handling); only the answer is canned. The answer
names the agent and repeats the whole user turn it received, which lets a person and the
tests see exactly what the agent was given (attribution, quoted context and all). It cannot
see, so each image it is shown is described by its type and size (`[image image/png 12 KB]`):
with no key at all, a person can check that a photo reached the agent.
"""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from typing import Any

from botweave.files import human_size
from litellm import CustomLLM
from litellm.types.utils import GenericStreamingChunk, ModelResponse

PROVIDER = "offline"
AGENT_METADATA_KEY = "botweave_agent"
_WORDS = re.compile(r"\S+\s*|\s+")


def describe_image(part: dict[str, Any]) -> str:
    """`[image image/png 12 KB]` for an image content part sent as a data: URL."""
    image = part.get("image_url")
    url = str(image.get("url", "") if isinstance(image, dict) else image or "")
    if not url.startswith("data:") or "," not in url:
        return "[image]"
    header, payload = url[len("data:") :].split(",", 1)
    mime = header.split(";", 1)[0] or "image"
    try:
        size = len(base64.b64decode(payload))
    except ValueError:
        return f"[image {mime}]"
    return f"[image {mime} {human_size(size)}]"


def echo_reply(agent: str, messages: list[dict[str, Any]]) -> str:
    user_turns = [m for m in messages if m.get("role") == "user"]
    turn = user_turns[-1].get("content", "") if user_turns else ""
    if isinstance(turn, list):  # content parts: the words, then what each image is
        words = [str(p.get("text", "")) for p in turn if isinstance(p, dict) and p.get("type") == "text"]
        images = [describe_image(p) for p in turn if isinstance(p, dict) and p.get("type") == "image_url"]
        turn = " ".join(part for part in (*words, *images) if part)
    return f"{agent} (offline echo) heard: {turn}"


def _agent_name(litellm_params: dict[str, Any] | None) -> str:
    metadata = (litellm_params or {}).get("metadata") or {}
    return str(metadata.get(AGENT_METADATA_KEY) or "assistant")


class OfflineEcho(CustomLLM):
    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        text = echo_reply(_agent_name(kwargs.get("litellm_params")), messages)
        response: ModelResponse = kwargs["model_response"]
        response.choices[0].message.content = text
        response.model = model
        return response

    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        text = echo_reply(_agent_name(kwargs.get("litellm_params")), messages)
        response: ModelResponse = kwargs["model_response"]
        response.choices[0].message.content = text
        response.model = model
        return response

    # litellm iterates what astreaming returns without awaiting it (an async generator), though
    # its base class annotates a coroutine.
    async def astreaming(  # type: ignore[override]
        self, model: str, messages: list[Any], *args: Any, **kwargs: Any
    ) -> AsyncIterator[GenericStreamingChunk]:
        text = echo_reply(_agent_name(kwargs.get("litellm_params")), messages)
        pieces = _WORDS.findall(text)
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            yield GenericStreamingChunk(
                text=piece,
                is_finished=last,
                finish_reason="stop" if last else "",
                usage=None,
                index=0,
                tool_use=None,
            )


def register(litellm_module: Any) -> None:
    """Add the provider once; litellm keeps the map process-wide."""
    providers = litellm_module.custom_provider_map
    if not any(p.get("provider") == PROVIDER for p in providers):
        providers.append({"provider": PROVIDER, "custom_handler": OfflineEcho()})

