"""Agents: a named model with instructions, answering from the conversation's history.

litellm is imported on first use, not at import time: it costs seconds to import and would
otherwise slow `botweave --help` and every `import bots`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import mimetypes
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from botweave.config import AgentConfig
from botweave.store import Store
from botweave.types import OutboundFile

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
        await self._store.list_append(
            self.key(conversation),
            *(json.dumps(e, ensure_ascii=False) for e in entries),
            max_len=max(2 * max_turns, 2),
        )

    async def reset(self, conversation: str) -> None:
        await self._store.delete(self.key(conversation))


#: A user turn as the model reads it: text, or OpenAI-style content parts (text and images).
UserContent = str | list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class UserTurn:
    """What an agent is given for one message: the text (words, transcripts, documents, markers
    for what was not read), the images it may look at as content parts, and `record`, the
    compact text history keeps instead of the bytes (None: the text itself)."""

    text: str
    images: tuple[dict[str, Any], ...] = ()
    record: str | None = None

    def content(self, prefix: str = "") -> UserContent:
        text = prefix + self.text
        if not self.images:
            return text
        words = [{"type": "text", "text": text}] if text.strip() else []
        return [*words, *self.images]

    def history(self, prefix: str = "") -> str:
        return prefix + (self.text if self.record is None else self.record)


def decode_data_url(url: str) -> tuple[str, bytes] | None:
    """(type, bytes) of a base64 `data:` URL; None for anything else."""
    if not url.startswith("data:") or "," not in url:
        return None
    header, payload = url[len("data:") :].split(",", 1)
    parts = header.split(";")
    if "base64" not in parts[1:]:
        return None
    try:
        return (parts[0] or "application/octet-stream"), base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None


def _image_url(item: Any) -> str:
    """The URL of an image part, whether litellm handed it over as a dict or an object."""
    image = item.get("image_url") if isinstance(item, dict) else getattr(item, "image_url", None)
    if isinstance(image, dict):
        return str(image.get("url") or "")
    return str(getattr(image, "url", image) or "")


def images_of(message: Any, found: list[OutboundFile]) -> None:
    """Collect the images a model returned (litellm's `images`, or image parts of a list
    content) as files; images given only by an http URL are not fetched."""
    items = list(getattr(message, "images", None) or [])
    content = getattr(message, "content", None)
    if isinstance(content, list):
        items += [p for p in content if isinstance(p, dict) and p.get("type") == "image_url"]
    for item in items:
        decoded = decode_data_url(_image_url(item))
        if decoded is None:
            log.info("a model returned an image that is not a data: URL; not sent")
            continue
        mime, data = decoded
        extension = mimetypes.guess_extension(mime, strict=False) or ".png"
        found.append(OutboundFile(data, f"image-{len(found) + 1}{extension}", mime))


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")


@dataclass
class Agent:
    name: str
    config: AgentConfig

    @property
    def model(self) -> str:
        return self.config.model

    def _request(self, history: list[dict[str, str]], user_turn: UserContent, stream: bool) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.config.instructions}, *history]
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

    async def complete(
        self, history: list[dict[str, str]], user_turn: UserContent, images: list[OutboundFile] | None = None
    ) -> str:
        """The whole reply's text; images the model returns land in `images`."""
        litellm = litellm_module()
        try:
            response = await litellm.acompletion(**self._request(history, user_turn, stream=False))
        except Exception as exc:
            raise self._failure(exc) from exc
        message = response.choices[0].message
        if images is not None:
            images_of(message, images)
        return _text_of(message.content)

    async def stream(
        self, history: list[dict[str, str]], user_turn: UserContent, images: list[OutboundFile] | None = None
    ) -> AsyncIterator[str]:
        """The reply's text as it arrives; images the model returns land in `images`."""
        litellm = litellm_module()
        try:
            response = await litellm.acompletion(**self._request(history, user_turn, stream=True))
            async for chunk in response:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if images is not None:
                    images_of(delta, images)
                text = delta.content
                if text:
                    yield text
        except Exception as exc:
            raise self._failure(exc) from exc
