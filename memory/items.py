"""A remembered item, and the pure decisions about items: which a request carries, which match
a search, whether a fact may be kept."""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

#: The longest fact kept: a memory item is a sentence or two, not a document.
MAX_FACT_CHARS = 1000
#: How many items one `recall` returns at most.
RECALL_LIMIT = 10
PROMPT_HEADER = (
    "What you remember about the person you are answering, most recently used first "
    "(`recall` searches for more, `remember` keeps something new, `forget` drops an item by id):"
)
_WORD = re.compile(r"\w+", re.UNICODE)


class FactRefused(ValueError):
    """A fact that cannot be kept; the message says why, for the model and the person."""


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One remembered fact: plain text, when it was made and last used (epoch seconds), and the
    conversation it was said in."""

    id: str
    text: str
    created: float
    last_used: float
    source: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> MemoryItem:
        value = json.loads(raw)
        return cls(str(value["id"]), str(value["text"]), float(value["created"]), float(value["last_used"]), str(value["source"]))

    def public(self) -> dict[str, object]:
        """The item as a person or the model is shown it."""
        return {"id": self.id, "text": self.text, "created": self.created, "last_used": self.last_used}


def new_item_id() -> str:
    return secrets.token_hex(5)


def checked_fact(fact: object) -> str:
    """The fact as it will be kept, or FactRefused naming the problem."""
    if not isinstance(fact, str):
        raise FactRefused("the fact must be text")
    text = " ".join(fact.split())
    if not text:
        raise FactRefused("the fact is empty; nothing was remembered")
    if len(text) > MAX_FACT_CHARS:
        raise FactRefused(
            f"the fact is {len(text)} characters long; a memory item holds at most {MAX_FACT_CHARS}. "
            "Remember a short sentence instead."
        )
    return text


def item_tokens(item: MemoryItem) -> int:
    """A line's tokens, estimated as the context window counts text it has no tokenizer for."""
    return math.ceil((len(item.text) + len(item.id) + 6) / 4)


def prompt_limit(inject_tokens: int, max_items: int) -> int:
    """How many of the most recent items can fit `inject_tokens` at most (a line is at least
    four tokens), so a store reads no more than that."""
    return max(0, min(max_items, inject_tokens // 4))


def for_prompt(items: Iterable[MemoryItem], inject_tokens: int) -> list[MemoryItem]:
    """The items, most recently used first, that fit `inject_tokens`: in order until the
    next would not fit."""
    chosen: list[MemoryItem] = []
    used = 0
    for item in items:
        used += item_tokens(item)
        if used > inject_tokens:
            break
        chosen.append(item)
    return chosen


def render(items: Sequence[MemoryItem]) -> str:
    """The block the agent's instructions carry; empty when nothing is remembered."""
    if not items:
        return ""
    return "\n".join([PROMPT_HEADER, *(f"- [{item.id}] {item.text}" for item in items)])


def terms(query: str) -> list[str]:
    return [word.casefold() for word in _WORD.findall(query)][:32]


def matches(items: Iterable[MemoryItem], query: str, limit: int = RECALL_LIMIT) -> list[MemoryItem]:
    """The bounded scan the memory and Redis stores search with: items sharing the most words
    with the query (then the most recently used) first."""
    wanted = set(terms(query))
    if not wanted:
        return []
    scored = []
    for item in items:
        words = set(terms(item.text))
        hits = len(wanted & words) + sum(1 for w in wanted if len(w) > 3 and any(x.startswith(w) for x in words if x not in wanted))
        if hits:
            scored.append((hits, item.last_used, item))
    scored.sort(key=lambda entry: (-entry[0], -entry[1]))
    return [item for _, _, item in scored[:limit]]
