"""HTML as readable text: what `fetch_url` gives the model instead of markup.

The standard library's parser is enough for this and has no opinion about broken HTML (it
never raises on it). Scripts, styles and the page head are dropped, block elements become
line breaks, list items bullets, headings `#` lines and table cells are separated by ` | `;
links keep their text only, so the model reads what a person would see.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head"})
_BLOCK = frozenset({
    "address", "article", "aside", "blockquote", "dd", "details", "div", "dl", "dt", "fieldset", "figcaption",
    "figure", "footer", "form", "header", "hr", "main", "nav", "ol", "p", "pre", "section", "summary", "table",
    "tbody", "thead", "tfoot", "tr", "ul", "li", "h1", "h2", "h3", "h4", "h5", "h6", "br", "body", "html",
})
#: Elements that start a line but do not set a paragraph apart.
_LINE = frozenset({"li", "tr", "dt", "dd", "br"})
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "track", "wbr"})
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n{3,}")


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skipping: list[str] = []
        self._in_title = False
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if self._skipping:
            if tag == self._skipping[-1] and tag not in _VOID:
                self._skipping.append(tag)
            return
        if tag in _SKIP:
            self._skipping.append(tag)
            return
        if tag == "pre":
            self._pre += 1
        if tag in _BLOCK:
            self.parts.append("\n")
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self.parts.append("#" * int(tag[1]) + " ")
        elif tag == "li":
            self.parts.append("- ")
        elif tag in ("td", "th"):
            self.parts.append(" | ")
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self.parts.append(f"[{alt}]")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if self._skipping:
            if tag == self._skipping[-1]:
                self._skipping.pop()
            return
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in _BLOCK and tag not in _LINE:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
            return
        if self._skipping:
            return
        self.parts.append(data if self._pre else _SPACES.sub(" ", data.replace("\n", " ")))


def html_to_text(html: str) -> tuple[str, str]:
    """(title, text) of an HTML document."""
    reader = _Reader()
    reader.feed(html)
    reader.close()
    lines = [line.strip() for line in "".join(reader.parts).splitlines()]
    text = _BLANKS.sub("\n\n", "\n".join(lines)).strip()
    return " ".join(reader.title.split()), text
