"""Agents: a named model with instructions, answering from the conversation's history.

litellm is imported on first use, not at import time: it costs seconds to import and would
otherwise slow `botweave --help` and every `import bots`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from botweave.config import AgentConfig
from botweave.store import Append, Store

log = logging.getLogger(__name__)


@cache
def litellm_module() -> Any:
    """Import litellm once, offline-safe, with the offline model registered."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    from botweave.offline_model import register

    litellm.suppress_debug_info = True
    register(litellm)
    return litellm


class AgentError(RuntimeError):
    """The model could not answer; the message is safe to log (no keys, no prompt)."""


class History:
    """A conversation's turns in the store, newest last, trimmed to the agent's budget."""

    def __init__(self, store: Store) -> None:
        self._store = store

    @staticmethod
    def key(conversation: str) -> str:
        return f"history:{conversation}"

    async def load(self, conversation: str, max_turns: int) -> list[dict[str, str]]:
        if max_turns <= 0:
            return []
        raw = await self._store.list_range(self.key(conversation), -2 * max_turns, -1)
        return [json.loads(item) for item in raw]

    async def append(self, conversation: str, max_turns: int, *entries: dict[str, str]) -> None:
        op = self.append_op(conversation, max_turns, *entries)
        await self._store.list_append(op.key, *op.values, max_len=op.max_len)

    def append_op(self, conversation: str, max_turns: int, *entries: dict[str, str]) -> Append:
        """The append as an operation, for a turn that commits it with its other effects."""
        values = tuple(json.dumps(e, ensure_ascii=False) for e in entries)
        return Append(self.key(conversation), values, max(2 * max_turns, 2))

    async def reset(self, conversation: str) -> None:
        await self._store.delete(self.key(conversation))


@dataclass
class Agent:
    name: str
    config: AgentConfig

    @property
    def model(self) -> str:
        return self.config.model

    def _request(self, history: list[dict[str, str]], user_turn: str, stream: bool) -> dict[str, Any]:
        messages = [{"role": "system", "content": self.config.instructions}, *history]
        messages.append({"role": "user", "content": user_turn})
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "stream": stream,
            "timeout": self.config.timeout_seconds,
            "metadata": {"botweave_agent": self.name},
        }
        if self.config.temperature is not None:
            request["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            request["max_tokens"] = self.config.max_tokens
        if self.config.api_base:
            request["api_base"] = self.config.api_base
        if self.config.api_key is not None:
            request["api_key"] = self.config.api_key.get_secret_value()
        return request

    def _failure(self, exc: Exception) -> AgentError:
        detail = str(exc)[:300]
        if self.config.api_key is not None:
            detail = detail.replace(self.config.api_key.get_secret_value(), "***")
        return AgentError(f"agent {self.name} ({self.model}) failed: {type(exc).__name__}: {detail}")

    async def complete(self, history: list[dict[str, str]], user_turn: str) -> str:
        litellm = litellm_module()
        try:
            response = await litellm.acompletion(**self._request(history, user_turn, stream=False))
        except Exception as exc:
            raise self._failure(exc) from exc
        return response.choices[0].message.content or ""

    async def stream(self, history: list[dict[str, str]], user_turn: str) -> AsyncIterator[str]:
        litellm = litellm_module()
        try:
            response = await litellm.acompletion(**self._request(history, user_turn, stream=True))
            async for chunk in response:
                delta = chunk.choices[0].delta.content if chunk.choices else None
                if delta:
                    yield delta
        except Exception as exc:
            raise self._failure(exc) from exc
