"""Untrusted payloads made safe to read, before any SDK parser or normaliser sees them.

Platform payloads are JSON, and JSON says nothing about types: a `text` may arrive as a
number, a `chat.id` as an object, a timestamp as 10^30, a subtree nested ten thousand deep.
SDK parsers mostly store what they are given, so a wrong type surfaces later as an exception
in whatever reads it. Each adapter therefore describes the fields it reads as a `Schema`, and
`sanitise` applies it at the edge:

- a field of the wrong type is treated as absent (dropped), as if the platform had not sent it;
- an object missing a field it cannot do without (a message without a chat) is itself absent;
- fields the schema does not describe are kept for the SDK (cleaned the same way);
- every string is made safe for the model call (`clean_text`), every number bounded, every
  list capped, and anything nested deeper than `MAX_DEPTH` dropped;
- a declared file type (`MIME`) is a MIME type or absent, so no platform's value can carry a
  line break into a header, or pages of text into a notice.

So a normaliser reading a sanitised payload finds each described field either absent or of
its type, and nothing it hands on can make the model call fail.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from botweave.mime import clean_mime

MAX_DEPTH: Final = 40  # deeper than any real payload; deeper subtrees are dropped
MAX_ITEMS: Final = 1000  # longer lists are cut here
MAX_INT: Final = 2**64  # platform ids fit; larger integers are not ids of anything
MAX_TIMESTAMP: Final = 2**34  # seconds since 1970: the year 2514

# Lone surrogates cannot be encoded as UTF-8, so a request carrying one fails at the model
# call; NUL is refused by several providers and by most databases. Both become U+FFFD, one
# UTF-16 unit each like the characters they replace, so entity offsets stay valid.
_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT: Final = "\ufffd"


def clean_text(text: str) -> str:
    """`text` with what a model call or a UTF-8 encoder would choke on replaced by U+FFFD."""
    if _UNSAFE_TEXT.search(text) is None:
        return text
    return _UNSAFE_TEXT.sub(REPLACEMENT, text)


class _Invalid:
    """The marker for "this value is not usable": dropped from an object or a list."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "INVALID"


INVALID: Final = _Invalid()


class Dropped(list[str]):
    """Where a sanitised payload lost something (`message.text`, `entities[2]`), for the one
    log line that says what was ignored."""

    def at(self, path: str, key: str) -> str:
        return f"{path}.{key}" if path else key


class Spec(ABC):
    """What one field may hold; `check` returns the usable value or INVALID, and notes in
    `dropped` (when given) the path of anything inside that it left out."""

    __slots__ = ()

    @abstractmethod
    def check(self, value: Any, depth: int, dropped: Dropped | None = None, path: str = "") -> Any: ...


@dataclass(frozen=True, slots=True)
class Scalar(Spec):
    name: str
    accept: Callable[[Any], Any]  # the value to keep, or INVALID

    def check(self, value: Any, depth: int, dropped: Dropped | None = None, path: str = "") -> Any:
        return self.accept(value)


def _str(value: Any) -> Any:
    return clean_text(value) if isinstance(value, str) else INVALID


def _int(value: Any) -> Any:
    return value if type(value) is int and -MAX_INT < value < MAX_INT else INVALID


def _bool(value: Any) -> Any:
    return value if isinstance(value, bool) else INVALID


def _number(value: Any) -> Any:
    if type(value) is int and -MAX_INT < value < MAX_INT:
        return value
    return value if type(value) is float and math.isfinite(value) else INVALID


def _timestamp(value: Any) -> Any:
    return value if type(value) is int and 0 <= value < MAX_TIMESTAMP else INVALID


def _numeric_id(value: Any) -> Any:
    """An id that platforms send as a string of digits (Discord snowflakes), or as a number."""
    if isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isdigit():
        return value
    return value if type(value) is int and 0 <= value < MAX_INT else INVALID


def _mime(value: Any) -> Any:
    """A declared file type: a MIME type (normalised, see `botweave.mime`), or not usable."""
    clean = clean_mime(value)
    return INVALID if clean is None else clean


STR: Final = Scalar("str", _str)
INT: Final = Scalar("int", _int)
BOOL: Final = Scalar("bool", _bool)
NUMBER: Final = Scalar("number", _number)
TIMESTAMP: Final = Scalar("timestamp", _timestamp)
NUMERIC_ID: Final = Scalar("numeric id", _numeric_id)
MIME: Final = Scalar("MIME type", _mime)


def one_of(*values: str) -> Scalar:
    """A string from a fixed set (an enumeration the reader switches on)."""
    allowed = frozenset(values)
    return Scalar("one of " + "|".join(sorted(allowed)), lambda v: v if isinstance(v, str) and v in allowed else INVALID)


@dataclass(frozen=True, slots=True)
class ListOf(Spec):
    item: Spec
    #: Fewer usable items than this and the list is absent (a reader that takes the first).
    min_items: int = 0

    def check(self, value: Any, depth: int, dropped: Dropped | None = None, path: str = "") -> Any:
        if not isinstance(value, list) or depth > MAX_DEPTH:
            return INVALID
        kept = []
        for index, item in enumerate(value[:MAX_ITEMS]):
            checked = self.item.check(item, depth + 1, dropped, f"{path}[{index}]" if dropped is not None else "")
            if checked is not INVALID:
                kept.append(checked)
            elif dropped is not None:
                dropped.append(f"{path}[{index}]")
        if dropped is not None and len(value) > MAX_ITEMS:
            dropped.append(f"{path}[{MAX_ITEMS}:]")
        return kept if len(kept) >= self.min_items else INVALID


@dataclass(frozen=True, slots=True)
class Nullable(Spec):
    """A field where null means something (a deleted message), kept as null."""

    inner: Spec

    def check(self, value: Any, depth: int, dropped: Dropped | None = None, path: str = "") -> Any:
        return None if value is None else self.inner.check(value, depth, dropped, path)


@dataclass(frozen=True, slots=True)
class Default(Spec):
    """A field the next parser cannot do without: absent or of the wrong type, it holds
    `value` (what "absent" means for it: "" for a text, [] for a list)."""

    inner: Spec
    value: Any

    def check(self, value: Any, depth: int, dropped: Dropped | None = None, path: str = "") -> Any:
        checked = self.inner.check(value, depth, dropped, path)
        if checked is INVALID:
            if dropped is not None:
                dropped.append(path)
            return self.value() if callable(self.value) else self.value
        return checked


@dataclass(slots=True)
class Schema(Spec):
    """An object: its described fields, the ones it cannot do without, and whether fields it
    does not describe are kept (cleaned) for the SDK that parses it next."""

    name: str
    fields: dict[str, Spec] = field(default_factory=dict)
    required: frozenset[str] = frozenset()
    keep_unknown: bool = True
    #: A rule across fields (which fields a variant needs); an object breaking it is absent.
    rule: Callable[[dict[str, Any]], bool] | None = None
    _defaults: list[tuple[str, Default]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._defaults = [(key, spec) for key, spec in self.fields.items() if isinstance(spec, Default)]

    def define(
        self,
        fields: Mapping[str, Spec],
        required: Iterable[str] = (),
        *,
        rule: Callable[[dict[str, Any]], bool] | None = None,
    ) -> Schema:
        """Fill in a schema declared earlier (schemas that refer to each other, or to themselves)."""
        self.fields.update(fields)
        self.__post_init__()
        self.required = self.required | frozenset(required)
        if rule is not None:
            self.rule = rule
        return self

    def check(self, value: Any, depth: int, dropped: Dropped | None = None, path: str = "") -> Any:
        if not isinstance(value, dict) or depth > MAX_DEPTH:
            return INVALID
        mark = len(dropped) if dropped is not None else 0
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                continue
            spec = self.fields.get(key)
            if spec is None:
                if not self.keep_unknown:
                    continue
                checked = clean(item, depth + 1)
                key = clean_text(key)
            elif item is None and not isinstance(spec, (Nullable, Default)):  # null: absent
                continue
            else:
                here = dropped.at(path, key) if dropped is not None else ""
                checked = spec.check(item, depth + 1, dropped, here)
            if checked is INVALID:
                if key in self.required:
                    return _absent(dropped, mark)
                if dropped is not None:
                    dropped.append(dropped.at(path, key))
                continue
            out[key] = checked
        for key, spec in self._defaults:
            if key not in out:
                out[key] = spec.value() if callable(spec.value) else spec.value
        if not self.required <= out.keys() or (self.rule is not None and not self.rule(out)):
            return _absent(dropped, mark)
        return out


    def __repr__(self) -> str:
        return f"Schema({self.name})"


def _absent(dropped: Dropped | None, mark: int) -> _Invalid:
    """An object that is absent as a whole: its parent notes it, not the parts it lost."""
    if dropped is not None:
        del dropped[mark:]
    return INVALID


def clean(value: Any, depth: int = 0) -> Any:
    """Any JSON value made safe without a schema: strings cleaned, numbers bounded, lists
    capped, depth limited."""
    if isinstance(value, str):
        return clean_text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return _number(value)
    if depth > MAX_DEPTH:
        return INVALID
    if isinstance(value, list):
        kept = (clean(v, depth + 1) for v in value[:MAX_ITEMS])
        return [v for v in kept if v is not INVALID]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            checked = clean(item, depth + 1)
            if isinstance(key, str) and checked is not INVALID:
                out[clean_text(key)] = checked
        return out
    return INVALID


def sanitise(value: Any, schema: Spec, dropped: Dropped | None = None) -> Any | None:
    """`value` as `schema` describes it; None when it is not usable at all. With `dropped`,
    the paths of the fields left out are noted there."""
    checked = schema.check(value, 0, dropped, "")
    return None if checked is INVALID else checked


def text_or_empty(value: Any) -> str:
    """A string field read defensively: its cleaned text, or "" for anything else."""
    return clean_text(value) if isinstance(value, str) else ""
