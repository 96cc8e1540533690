r"""Model markdown as Telegram text plus entities, with plain text as the fallback.

Replies are sent as text + `MessageEntity` lists rather than MarkdownV2, so no escaping can ever
break one. If the conversion fails, if the rendered text would not fit one message, or if
Telegram rejects the entities, the original text goes out unformatted: a readable reply beats
a pretty one that Telegram refuses.

The converter (telegramify-markdown, on the pulldown-cmark parser) reads CommonMark plus
extensions, and on its own it would eat characters the model wrote as text: inline HTML
(`<br>` vanishes), entity references (`&nbsp;` becomes a no-break space, `&amp;` an `&`),
backslashes (`\.` becomes `.`), `$…$` math and `||…||` spoilers, and it turns LaTeX into
symbols. Telegram renders none of those, so `literal_markdown` first escapes them, outside
code: the reader sees exactly what the model wrote except Markdown's own syntax (emphasis,
code, links, lists, headings, quotes, tables). A backslash before an emphasis, code,
strikethrough or table delimiter (`\*`, `\_`, `` \` ``, `\~`, `\|`) stays an escape, as the
model meant it; any other backslash is a character (`\d`, `\.`, LaTeX's `\(` and `\[`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import pyromark
import telegramify_markdown
from telegram import Bot, MessageEntity
from telegram.error import BadRequest, TelegramError
from telegramify_markdown.converter import STANDARD_OPTIONS

log = logging.getLogger(__name__)

T = TypeVar("T")

TELEGRAM_MAX_UTF16 = 4096
TELEGRAM_MAX_CAPTION_UTF16 = 1024
_ENTITY_PROBLEMS = ("can't parse entities", "can't find end of", "entity", "entities")


# A backslash escape the model meant as Markdown (of an inline delimiter), any other
# backslash, a spoiler's `||`, and the characters that start HTML, entities and math.
_LITERAL = re.compile(r"\\[*_`~|]|\\|\|\||[<&$]")


def utf16_len(text: str) -> int:
    return telegramify_markdown.utf16_len(text)


def _code_regions(markdown: str) -> list[tuple[int, int]]:
    """UTF-8 byte ranges the parser reads as code (spans, fenced and indented blocks), where
    every character is already literal."""
    regions = []
    for payload, where in pyromark.events_with_range(markdown, options=STANDARD_OPTIONS):
        if not isinstance(payload, dict):
            continue
        start = payload.get("Start")
        if (isinstance(start, dict) and "CodeBlock" in start) or "Code" in payload:
            regions.append((where["start"], where["end"]))
    return regions


def _escape_literal(match: re.Match[str]) -> str:
    found = match.group(0)
    if len(found) == 2 and found[0] == "\\":
        return found  # an escape of Markdown syntax: kept
    if found == "||":
        return "\\|\\|"
    return "\\" + found  # `\\` for a lone backslash, `\\<`, `\\&`, `\\$`


def literal_markdown(markdown: str) -> str:
    """`markdown` with everything outside code that the converter would not show as written
    escaped, so that it is shown as written (see the module docstring)."""
    if _LITERAL.search(markdown) is None:
        return markdown
    data = markdown.encode("utf-8")
    parts: list[str] = []
    cursor = 0
    for start, end in _code_regions(markdown):
        parts.append(_LITERAL.sub(_escape_literal, data[cursor:start].decode("utf-8")))
        parts.append(data[start:end].decode("utf-8"))
        cursor = end
    parts.append(_LITERAL.sub(_escape_literal, data[cursor:].decode("utf-8")))
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Rendered:
    """Plain text plus Telegram entities; `entities` is None when sending as plain text."""

    text: str
    entities: list[MessageEntity] | None


def render(markdown: str, bot: Bot, limit: int = TELEGRAM_MAX_UTF16) -> Rendered:
    """Model markdown → text + entities; the original text when that fails or would not fit
    `limit` (a message's, or a caption's)."""
    try:
        text, entities = telegramify_markdown.convert(literal_markdown(markdown), latex_escape=False)
    except Exception:  # boundary: a third-party converter on the model's text; formatting is never worth a lost reply
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
