"""The offline echo model's answer served through litellm, as a custom provider: for the tests
that need a model reached the way an Anthropic, Gemini or Ollama agent is (botweave answers
`offline/` models itself, without litellm)."""

from __future__ import annotations

from typing import Any

from botweave.offline_model import echo_reply
from litellm import CustomLLM
from litellm.types.utils import ModelResponse


class OfflineEcho(CustomLLM):  # type: ignore[misc]
    """Answers every request with the echo model's words (no tool calls)."""

    async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        response: ModelResponse = kwargs["model_response"]
        response.model = model
        response.choices[0].message.content = echo_reply("assistant", messages)
        return response
