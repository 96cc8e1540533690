"""MIME types as strangers declare them: parsed once, here, before anything uses one.

A file's type arrives as text someone else chose: Telegram's `mime_type`, Discord's
`content_type`, Slack's `mimetype`, a web server's Content-Type, a model's tool arguments. It
then decides what is read and how (`allow_mime`, images, documents, voice notes) and travels
on in headers (the transcription upload, a platform upload). So every such value goes through
`clean_mime`, which accepts exactly the syntax of RFC 6838 and RFC 9110:

- `type/subtype`, each a restricted name: a letter or digit, then up to 126 letters, digits or
  ``! # $ & - ^ _ . +`` (compared lower-cased);
- then optional ``; name=value`` parameters, the name a token, the value a token or a quoted
  string of printable ASCII.

A value whose type/subtype does not parse is unknown (`None`): never half-used, never quoted
back. Parameters that do not parse are dropped and the type kept. Nothing that passes holds a
control character, a line break or a non-ASCII character, so no declared type can add a
header line or make a notice long: a clean type is at most `MAX_LENGTH` characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

#: What a file of unknown type is called.
UNKNOWN: Final = "application/octet-stream"
#: The longest clean type, parameters included; parameters past it are dropped.
MAX_LENGTH: Final = 255

#: RFC 6838's restricted-name, as a regular-expression fragment (also what `allow_mime`
#: patterns are made of, besides `*`).
RESTRICTED_NAME: Final = r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}"
_TOKEN = r"[!#$%&'*+.^_`|~0-9a-z-]+"
_QUOTED = r'"(?:[\t\x20\x21\x23-\x5b\x5d-\x7e]|\\[\t\x20-\x7e])*"'
_FLAGS = re.ASCII | re.IGNORECASE
_TYPE = re.compile(rf"[ \t]*({RESTRICTED_NAME})/({RESTRICTED_NAME})[ \t]*", _FLAGS)
_PARAMETER = re.compile(rf";[ \t]*({_TOKEN})=({_TOKEN}|{_QUOTED})[ \t]*", _FLAGS)
_PATTERN = re.compile(rf"(\*|{RESTRICTED_NAME})/(\*|{RESTRICTED_NAME})", _FLAGS)


def _parse(value: object) -> tuple[str, list[tuple[str, str]]] | None:
    """The lower-cased type and the parameters that parse (name lower-cased, value as
    written), within `MAX_LENGTH`; None when `value` is not a MIME type."""
    if not isinstance(value, str):
        return None
    found = _TYPE.match(value)
    if found is None or (found.end() < len(value) and value[found.end()] != ";"):
        return None
    kind = f"{found[1]}/{found[2]}".lower()
    parameters: list[tuple[str, str]] = []
    length, position = len(kind), found.end()
    while (parameter := _PARAMETER.match(value, position)) is not None:
        length += len(parameter[1]) + len(parameter[2]) + 3  # "; " and "="
        if length > MAX_LENGTH:
            break
        parameters.append((parameter[1].lower(), parameter[2]))
        position = parameter.end()
    return kind, parameters


def clean_mime(value: object) -> str | None:
    """`Image/PNG; Charset="x"` → `image/png; charset="x"`; None for anything that is not a
    MIME type (see the module docstring)."""
    parsed = _parse(value)
    if parsed is None:
        return None
    kind, parameters = parsed
    return kind + "".join(f"; {name}={found}" for name, found in parameters)


def base_mime(value: object) -> str:
    """The type without its parameters (`image/png`), or '' when `value` is not a MIME type."""
    parsed = _parse(value)
    return parsed[0] if parsed is not None else ""


def mime_parameter(value: object, name: str) -> str | None:
    """One parameter's value (`charset`), unquoted; None when absent or `value` is not a type."""
    parsed = _parse(value)
    for key, found in parsed[1] if parsed is not None else ():
        if key == name.lower():
            return re.sub(r"\\(.)", r"\1", found[1:-1]) if found.startswith('"') else found
    return None


def is_mime_pattern(pattern: str) -> bool:
    """`image/png`, `image/*` or `*/*`: what `allow_mime` may list."""
    return _PATTERN.fullmatch(pattern) is not None


def mime_allowed(mime: object, patterns: Iterable[str]) -> bool:
    """`image/png` against `image/*`, `*/*` or `image/png`; a value that is not a MIME type
    matches nothing."""
    kind, _, subtype = base_mime(mime).partition("/")
    if not kind:
        return False
    for pattern in patterns:
        want_kind, _, want_subtype = pattern.lower().partition("/")
        if want_kind in ("*", kind) and want_subtype in ("*", subtype):
            return True
    return False
