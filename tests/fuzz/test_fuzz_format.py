"""Markdown rendering never loses what the model wrote outside Markdown syntax.

Text made of words, HTML-looking tags, entity references, dollars, pipes and backslashes (and
no Markdown syntax) must read exactly as written on Telegram (text + entities) and on Slack
(mrkdwn, which shows `&amp;`, `&lt;`, `&gt;` as the characters they escape).
"""

from __future__ import annotations

import re

from botweave.adapters.slack.format import markdown_to_mrkdwn, unescape
from botweave.adapters.telegram.format import render
from hypothesis import assume, given
from hypothesis import strategies as st
from telegram import Bot

BOT = Bot("123:abc")
PIECES = st.sampled_from([
    "use", "word", "<br>", "<b>", "</p>", "<https://example.org>", "&nbsp;", "&amp;", "&lt;", "&#169;", "&",
    "<", ">", "$5", "$x$", "||", "|", "\\", "\\d", "\\.", "\\(", "\\[", "\\\\", "C:\\Users", "a\\b", "(", ")",
    "x=1;", "?", "!", "'", '"', "1.", "é", "😀",
])
#: Escapes the model means as Markdown (of an emphasis, code, strikethrough or table delimiter).
_MARKDOWN_ESCAPE = re.compile(r"\\[*_`~|]")


@given(st.lists(PIECES, min_size=1, max_size=12), st.lists(st.sampled_from([" ", "  ", ""]), min_size=12, max_size=12))
def test_literal_text_reads_as_written_on_telegram(pieces: list[str], gaps: list[str]) -> None:
    written = "word " + "".join(p + g for p, g in zip(pieces, gaps)).strip()
    assume(_MARKDOWN_ESCAPE.search(written) is None)
    assert render(written, BOT).text == written


@given(st.lists(PIECES, min_size=1, max_size=12), st.lists(st.sampled_from([" ", "  "]), min_size=12, max_size=12))
def test_literal_text_reads_as_written_on_slack(pieces: list[str], gaps: list[str]) -> None:
    written = "word " + "".join(p + g for p, g in zip(pieces, gaps)).strip()
    shown = unescape(markdown_to_mrkdwn(written))
    assert shown == written
