"""Which client makes an agent's model calls (`models.client` in bot.yaml).

* `auto` (the default): botweave's own OpenAI-compatible client (`openai_compatible`) for
  litellm's `openai/` models, litellm for every other model. While litellm in this process
  has an integration configured (a callback such as a tracing or logging service, a cache, a
  budget), `openai/` models go through litellm too, since only litellm's own calls feed those.
* `litellm`: every call through litellm.
* `direct`: every call through botweave's own client; an agent whose model is not an
  `openai/` one is a configuration error (`ensure_direct`).

With `auto` or `litellm`, the offline echo model (`offline/...`) answers here, with no
client at all (`offline_model.OfflineCalls`): there is nothing to reach.

The reason is CPU: for an OpenAI-format model litellm's translation layers cost several times
what the HTTP call itself does (docs/performance.md has the figures).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Literal

from botweave.model_calls import LitellmCalls, ModelCalls, ModelOutput
from botweave.offline_model import OfflineCalls, is_offline
from botweave.openai_compatible import OpenAICompatible, speaks_openai

ClientChoice = Literal["auto", "litellm", "direct"]

#: litellm's settings that mean someone reads what its calls log or count.
INTEGRATIONS = ("callbacks", "success_callback", "failure_callback", "input_callback")


def litellm_integrated() -> bool:
    """Whether litellm, if this process imported it, has a logging integration, a cache or
    a budget configured (read from its public settings)."""
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return False
    if getattr(litellm, "cache", None) is not None or bool(getattr(litellm, "max_budget", 0)):
        return True
    # litellm lists its own "cache" hook among the callbacks once any call has set up caching,
    # and leaves it there with no cache configured: that one feeds nobody
    return any(entry != "cache" for name in INTEGRATIONS for entry in getattr(litellm, name, None) or ())


def ensure_direct(models: Mapping[str, str]) -> dict[str, str]:
    """With `direct`: for each agent (name → model) it cannot serve, why."""
    return {
        agent: f"{model!r} is not an openai/ model, and `models.client: direct` speaks OpenAI's chat format "
        "only (use auto, which sends other models through litellm)"
        for agent, model in models.items()
        if not speaks_openai(model)
    }


class ModelClients:
    """`ModelCalls` that hands each request to the client its model and `choice` call for."""

    def __init__(self, choice: ClientChoice = "auto") -> None:
        self.choice = choice
        self.direct = OpenAICompatible()
        self.litellm = LitellmCalls()
        self.offline = OfflineCalls()

    def uses_litellm(self, models: Iterable[str]) -> bool:
        """Whether any of these models is answered by litellm here, as things stand now."""
        return any(self.client_for(model) is self.litellm for model in models)

    def client_for(self, model: str) -> ModelCalls:
        if is_offline(model):
            return self.offline
        if self.choice == "direct":
            return self.direct
        if self.choice == "litellm" or not speaks_openai(model):
            return self.litellm
        if self.choice == "auto" and litellm_integrated():
            return self.litellm
        return self.direct

    async def answer(self, request: dict[str, Any]) -> ModelOutput:
        return await self.client_for(str(request["model"])).answer(request)

    def stream(self, request: dict[str, Any]) -> AsyncIterator[ModelOutput]:
        return self.client_for(str(request["model"])).stream(request)

    def open(self) -> None:
        """From now on (the App's start), direct calls share pooled connections."""
        self.direct.open()

    async def close(self) -> None:
        await self.direct.close()
