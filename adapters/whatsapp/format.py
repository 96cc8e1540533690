r"""Model Markdown as WhatsApp writes emphasis: `*bold*`, `_italic_`, `~strike~`, code as is.

WhatsApp reads a few marks of its own and nothing else: no HTML, no entities, no escapes.
So the conversion only rewrites Markdown's own emphasis and headings into WhatsApp's marks
and a link into its label and address; every other character (`<br>`, `&amp;`, `$5`, `\d`)
reaches the person exactly as the model wrote it. Code (fenced blocks and inline spans) is
left untouched: WhatsApp shows both as monospace.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"(```.*?```|`[^`\n]+`)", re.DOTALL)
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")


def _prose(text: str) -> str:
    text = _HEADING.sub(lambda m: f"*{m.group(1)}*", text)
    text = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", text)
    text = _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    return _LINK.sub(lambda m: m.group(1) if m.group(1) == m.group(2) else f"{m.group(1)} ({m.group(2)})", text)


def to_whatsapp(text: str) -> str:
    """`text` with Markdown emphasis, headings and links written WhatsApp's way, code kept."""
    parts = _FENCE.split(text)
    return "".join(part if index % 2 else _prose(part) for index, part in enumerate(parts))


def one_line(text: str, limit: int) -> str:
    """`text` as a template parameter may hold it: no line breaks or tabs, no runs of spaces
    (WhatsApp refuses those), at most `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def cut(text: str, limit: int) -> str:
    """A label within `limit` characters (button titles: 20, list rows: 24)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
