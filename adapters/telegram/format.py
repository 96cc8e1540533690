"""Model markdown as Telegram text plus entities, with plain text as the fallback.

Replies are sent as text + `MessageEntity` lists rather than MarkdownV2, so no escaping can ever
break one. If the conversion fails, if the rendered text would not fit one message, or if
Telegram rejects the entities, the original text goes out unformatted: a readable reply beats
a pretty one that Telegram refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import telegramify_markdown
from telegram import Bot, MessageEntity
from telegram.error import BadRequest, TelegramError

log = logging.getLogger(__name__)

T = TypeVar("T")

TELEGRAM_MAX_UTF16 = 4096
TELEGRAM_MAX_CAPTION_UTF16 = 1024
_ENTITY_PROBLEMS = ("can't parse entities", "can't find end of", "entity", "entities")


def utf16_len(text: str) -> int:
    return telegramify_markdown.utf16_len(text)


@dataclass(frozen=True, slots=True)
class Rendered:
    """Plain text plus Telegram entities; `entities` is None when sending as plain text."""

    text: str
    entities: list[MessageEntity] | None


def render(markdown: str, bot: Bot, limit: int = TELEGRAM_MAX_UTF16) -> Rendered:
    """Model markdown → text + entities; the original text when that fails or would not fit
    `limit` (a message's, or a caption's)."""
    try:
        text, entities = telegramify_markdown.convert(markdown)
    except Exception:  # the converter is third-party; formatting is never worth a lost reply
        log.warning("telegram: markdown conversion failed; sending plain text", exc_info=True)
        return Rendered(markdown, None)
    if not text.strip() or utf16_len(text) > limit:
        return Rendered(markdown, None)
    native = [MessageEntity.de_json(entity.to_dict(), bot) for entity in entities]
    return Rendered(text, native or None)


class Formatted:
    """One outgoing text: rendered first, and plain for good once Telegram rejects the entities.

    The switch sticks, so a retry after a 429 does not try the rejected formatting again.
    """

    def __init__(self, markdown: str, bot: Bot, limit: int = TELEGRAM_MAX_UTF16) -> None:
        self.raw = markdown
        self.current = render(markdown, bot, limit)

    async def apply(self, call: Callable[[str, list[MessageEntity] | None], Awaitable[T]]) -> T:
        current = self.current
        try:
            return await call(current.text, current.entities)
        except BadRequest as exc:
            if current.entities is None or not entity_problem(exc):
                raise
            log.warning("telegram: formatting rejected (%s); sending plain text", exc.message)
            self.current = Rendered(self.raw, None)  # a rejected request was not delivered
            return await call(self.raw, None)


def description(exc: TelegramError) -> str:
    return str(exc.message).lower()


def entity_problem(exc: TelegramError) -> bool:
    return isinstance(exc, BadRequest) and any(fragment in description(exc) for fragment in _ENTITY_PROBLEMS)
