"""`offline/echo`: a stand-in model so botweave runs with no key and no network.

It is registered as a litellm custom provider, so the exact code path of a real model runs
(litellm call, streaming wrapper, error handling); only the answer is canned. The answer
names the agent and repeats the whole user turn it received, which lets a person and the
tests see exactly what the agent was given (attribution, quoted context and all).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from litellm import CustomLLM
from litellm.types.utils import GenericStreamingChunk, ModelResponse

PROVIDER = "offline"
AGENT_METADATA_KEY = "botweave_agent"
_WORDS = re.compile(r"\S+\s*|\s+")


def echo_reply(agent: str, messages: list[dict[str, Any]]) -> str:
    user_turns = [m for m in messages if m.get("role") == "user"]
    turn = user_turns[-1].get("content", "") if user_turns else ""
    if isinstance(turn, list):  # content parts
        turn = " ".join(str(p.get("text", "")) for p in turn if isinstance(p, dict))
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

