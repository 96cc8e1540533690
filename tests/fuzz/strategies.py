"""Hypothesis strategies: real platform payloads (from the emulators), mutated the way a hostile
or broken sender would mutate them, and raw request bodies that are not JSON at all.

`mutated(base)` takes one real payload and applies one to three mutations at random places in
its tree: a value replaced by one of another type (numbers for text, objects for ids, lists
for strings, huge or non-finite numbers, odd unicode with lone surrogates and NULs), a key
deleted, a value buried under deep nesting, a scalar wrapped in a list. `raw_bodies()` gives
bytes that no parser should be trusted with: truncated JSON, invalid UTF-8, top-level arrays
and numbers, nesting tens of thousands deep, other encodings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hypothesis import strategies as st

#: Characters including what breaks naive code: lone surrogates, NUL, controls, bidi marks,
#: combining marks, emoji and characters outside the BMP.
ODD_CHARACTERS = st.characters(codec=None, exclude_categories=())
ODD_TEXT = st.one_of(
    st.text(ODD_CHARACTERS, max_size=40),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "\u202e", "e\u0301", "😀", "\U0001f600" * 50, "<@U0BOT>",
                     "/start", "", " ", "9" * 400, "1e309", "NaN", "&amp;", "<br>"]),
)
HUGE_NUMBERS = st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, -(10**30), 10**300, 1.7e308, -0.0, 1e-320])
ODD_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    HUGE_NUMBERS,
    st.floats(allow_nan=True, allow_infinity=True),
    ODD_TEXT,
)
ODD_VALUES = st.recursive(
    ODD_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(ODD_CHARACTERS, max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value buried `depth` levels deep in alternating lists and objects."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"x": value}
    return value


def _places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside `value` (keys of objects, indexes of lists)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key)
            yield from _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*path, index)
            yield from _places(item, (*path, index))


def _parent(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        value = value[step]
    return value


@st.composite
def mutated(draw: st.DrawFn, base: Any, max_mutations: int = 3) -> Any:
    """`base` with one to `max_mutations` mutations at random places (see the module docstring)."""
    value = json.loads(json.dumps(base))  # a copy without shared parts, as if read off the wire
    for _ in range(draw(st.integers(min_value=1, max_value=max_mutations))):
        places = list(_places(value))
        if not places:
            return draw(ODD_VALUES)
        path = draw(st.sampled_from(places))
        parent, key = _parent(value, path), path[-1]
        action = draw(st.sampled_from(["retype", "retype", "retype", "delete", "bury", "wrap", "text"]))
        if action == "delete":
            del parent[key]
        elif action == "bury":
            parent[key] = nested(draw(st.integers(min_value=20, max_value=300)), parent[key])
        elif action == "wrap":
            parent[key] = [parent[key]]
        elif action == "text":
            parent[key] = draw(ODD_TEXT)
        else:
            parent[key] = draw(ODD_VALUES)
    return value


def encode(value: Any) -> bytes:
    """JSON as a sender would put it on the wire, non-ASCII escaped (so a lone surrogate
    arrives as a valid `\\ud800` escape, and NaN / Infinity as Python writes them); a value too
    deep for the encoder is sent as a plain object instead."""
    try:
        return json.dumps(value).encode("ascii")
    except (RecursionError, ValueError):
        return b"{}"


@st.composite
def raw_bodies(draw: st.DrawFn, valid: bytes) -> bytes:
    """Bytes that are not a usable JSON object, some of them cut from the valid body `valid`."""
    choice = draw(st.integers(min_value=0, max_value=9))
    if choice == 0:
        return valid[: draw(st.integers(min_value=0, max_value=max(0, len(valid) - 1)))]  # truncated
    if choice == 1:
        return draw(st.binary(max_size=200))  # anything, invalid UTF-8 mostly
    if choice == 2:
        depth = draw(st.integers(min_value=1000, max_value=100_000))
        return b"[" * depth + b"]" * depth
    if choice == 3:
        depth = draw(st.integers(min_value=1000, max_value=50_000))
        return valid[:-1] + b', "deep": ' + b'{"a":' * depth + b"1" + b"}" * depth + b"}"
    if choice == 4:
        return draw(st.sampled_from([b"[]", b"[1, 2]", b"42", b'"text"', b"null", b"true", b"", b"\xef\xbb\xbf{}",
                                     b"1" * 5000, b'{"update_id": 1' + b"0" * 5000 + b"}"]))
    if choice == 5:
        return valid.decode("utf-8", "replace").encode("utf-16")  # another encoding
    if choice == 6:
        return valid.replace(b'"', b"'")  # not quite JSON
    if choice == 7:
        position = draw(st.integers(min_value=0, max_value=len(valid)))
        return valid[:position] + draw(st.binary(min_size=1, max_size=8)) + valid[position:]  # bytes spliced in
    if choice == 8:
        return b'{"payload": ' + valid + b"}" if draw(st.booleans()) else b"payload=" + valid
    return encode(draw(ODD_VALUES))
