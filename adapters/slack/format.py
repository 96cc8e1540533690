"""Text conversions between Slack's wire formats and what agents read and write.

Inbound, Slack encodes mentions, channel links and URLs as `<...>` tokens and HTML-escapes
`&`, `<` and `>`; an agent should read `@Alice` and plain text instead. Outbound, models write
CommonMark, which Slack does not render: it is converted to mrkdwn with the maintained
`markdown-to-mrkdwn` converter and the three characters Slack reserves are escaped, except
inside the `<...>` tokens the converter produced (links) or the model wrote (mentions). What
the model wrote outside Markdown syntax reads as written: `<br>`, `&nbsp;` and `&amp;` are
escaped like any other text, and mrkdwn has no backslash escapes, so backslashes stay.
Reaction names are Slack short names; people and hooks prefer the emoji character itself.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import emoji as emoji_lib
from markdown_to_mrkdwn import SlackMarkdownConverter

# `<@U123>`, `<@U123|name>`, `<#C123|general>`, `<!here>`, `<!subteam^S1|@team>`, `<url|label>`
_TOKEN = re.compile(r"<([^<>]+)>")
_SLACK_CONSTRUCT = re.compile(r"<(?:[@#!]|https?://|mailto:|tel:)[^<>\s|]*(?:\|[^<>]*)?>")
_SPACES = re.compile(r"[ \t]{2,}")
_SKIN_TONE = re.compile(r"::skin-tone-([2-6])$")
_SKIN_MODIFIERS = {"2": "\U0001f3fb", "3": "\U0001f3fc", "4": "\U0001f3fd", "5": "\U0001f3fe", "6": "\U0001f3ff"}
_MODIFIER_TONES = {v: k for k, v in _SKIN_MODIFIERS.items()}

UserNameLookup = Callable[[str], Awaitable[str]]

_converter = SlackMarkdownConverter()


def unescape(text: str) -> str:
    """Undo Slack's HTML escaping of the three reserved characters."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def mentioned_user_ids(text: str) -> set[str]:
    """User ids `<@U…>`-mentioned in raw Slack text."""
    ids = set()
    for match in _TOKEN.finditer(text):
        body = match.group(1)
        if body.startswith("@"):
            ids.add(body[1:].split("|", 1)[0])
    return ids


async def to_plain_text(text: str, bot_user_id: str | None, user_name: UserNameLookup) -> str:
    """Render raw Slack text for an agent: the bot's own mention removed, others as `@name`."""
    parts: list[str] = []
    last = 0
    for match in _TOKEN.finditer(text):
        parts.append(text[last : match.start()])
        parts.append(await _render_token(match.group(1), bot_user_id, user_name))
        last = match.end()
    parts.append(text[last:])
    rendered = "".join(parts)
    lines = [_SPACES.sub(" ", line).strip() for line in rendered.split("\n")]
    return unescape("\n".join(lines).strip())


async def _render_token(body: str, bot_user_id: str | None, user_name: UserNameLookup) -> str:
    target, _, label = body.partition("|")
    if target.startswith("@"):
        user_id = target[1:]
        if bot_user_id and user_id == bot_user_id:
            return ""
        return "@" + (label or await user_name(user_id))
    if target.startswith("#"):
        return "#" + (label or target[1:])
    if target.startswith("!"):
        return _render_special(target[1:], label)
    if not label or label == target or target.endswith("//" + label) or target == "mailto:" + label:
        return target.removeprefix("mailto:")
    return f"{label} ({target})"


def _render_special(command: str, label: str) -> str:
    """`<!here>`, `<!channel>`, user groups and dates: what a reader of the channel sees."""
    if label:
        return label
    name = command.split("^", 1)[0]
    return f"@{name}" if name in ("here", "channel", "everyone") else ""


def markdown_to_mrkdwn(text: str) -> str:
    """Convert model markdown to Slack mrkdwn and escape what Slack would misread."""
    converted = _converter.convert(text)
    return escape_mrkdwn(converted)


def escape_mrkdwn(text: str) -> str:
    """Escape `&`, `<`, `>` outside Slack's own `<...>` tokens and leading `>` quote markers."""
    out: list[str] = []
    last = 0
    for match in _SLACK_CONSTRUCT.finditer(text):
        out.append(_escape_plain(text[last : match.start()], at_line_start=last == 0 or text[last - 1] == "\n"))
        out.append(match.group(0))
        last = match.end()
    out.append(_escape_plain(text[last:], at_line_start=last == 0 or text[last - 1] == "\n"))
    return "".join(out)


def _escape_plain(segment: str, *, at_line_start: bool) -> str:
    """Every `&`, `<` and `>` escaped, entities the model wrote included: `&amp;` written by
    the model reads `&amp;` in Slack, not `&`."""
    lines = segment.split("\n")
    escaped = []
    for i, line in enumerate(lines):
        quote = ""
        if (i > 0 or at_line_start) and line.startswith(">"):
            quote, line = ">", line[1:]
        escaped.append(quote + line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
    return "\n".join(escaped)


def reaction_to_emoji(name: str) -> str:
    """A Slack reaction name as its unicode character where one exists, else the name."""
    tone = ""
    match = _SKIN_TONE.search(name)
    if match:
        tone = _SKIN_MODIFIERS[match.group(1)]
        name = name[: match.start()]
    for language in ("alias", "en"):
        rendered = emoji_lib.emojize(f":{name}:", language=language)
        if rendered != f":{name}:" and emoji_lib.is_emoji(rendered):
            return rendered + tone
    return name


def emoji_to_reaction(value: str) -> str:
    """The Slack reaction name for a unicode emoji, `:name:` or a bare name."""
    value = value.strip()
    if value.startswith(":") and value.endswith(":") and len(value) > 2:
        return value[1:-1]
    tone = ""
    if value and value[-1] in _MODIFIER_TONES:
        tone = f"::skin-tone-{_MODIFIER_TONES[value[-1]]}"
        value = value[:-1]
    if emoji_lib.is_emoji(value) or emoji_lib.is_emoji(value.rstrip("\ufe0f")):
        name = emoji_lib.demojize(value, language="alias", delimiters=("", ""))
        if name != value:
            return name + tone
    return value
