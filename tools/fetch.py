"""`fetch_url`: read a web page, as text, within the network egress policy.

Every hop is checked before it is made: the URL the model gave, and each redirect's target,
since a permitted host can redirect anywhere. Redirects are therefore followed here, one at a
time, never by the HTTP client. The page is read up to a size cap, however many pieces it
arrives in, and HTML becomes readable text (tools/text.py), so the model gets words, not
markup; where the cap cut the page, the text ends in a marker that says so. Proxies from the
environment are not used: the policy is about where connections go, and a proxy would hide
that.

A URL that carries credentials (`https://user:password@host/`) is refused, the model's and
every redirect's: the HTTP client would send them as an Authorization header, and whatever
the model read or was told could put someone's password there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from botweave.files import MAX_REDIRECTS, HopFailed, HopRefused, TooManyRedirects, checked_get
from botweave.tooling import Egress, ToolContext, ToolError, ToolRefused
from botweave.tools.text import html_to_text
from yarl import URL

MAX_BYTES = 2 * 1024 * 1024
MAX_CHARS = 20_000
CREDENTIALS_REFUSED = "the URL carries credentials (user:password@host); they are never sent"
USER_AGENT = "botweave-fetch/1"
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/ld+json")


class FetchUrl:
    """The `fetch_url` tool of one agent, bound to that agent's egress policy."""

    name = "fetch_url"
    description = (
        "Fetch a web page (http or https) and return its readable text. Hosts outside the network "
        "policy are refused."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"url": {"type": "string", "description": "The absolute http(s) URL to fetch."}},
        "required": ["url"],
        "additionalProperties": False,
    }

    def __init__(self, egress: Egress, *, timeout_seconds: float | None = None, max_chars: int = MAX_CHARS) -> None:
        self.egress = egress
        self.timeout_seconds = timeout_seconds
        self.max_chars = max_chars

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> str:
        url = arguments.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ToolError("fetch_url needs a `url`")
        return await self.fetch(url.strip())

    async def fetch(self, url: str) -> str:
        if has_credentials(url):
            raise ToolRefused(f"fetch_url: {safe_host(url)} refused: {CREDENTIALS_REFUSED}")
        headers = {"User-Agent": USER_AGENT, "Accept": "text/html, text/plain;q=0.9, */*;q=0.5"}
        try:
            async with aiohttp.ClientSession(headers=headers, trust_env=False) as session:
                async with checked_get(session, url, without_credentials(self.egress.refusal)) as (response, url):
                    if response.status >= 400:
                        reason = f"HTTP {response.status} {response.reason or ''}".strip()
                        raise ToolError(f"fetch_url: {url} answered {reason}")
                    return await self._read(response, url)
        except HopRefused as exc:
            raise ToolRefused(f"fetch_url: {safe_host(exc.url)} refused: {exc.reason}") from None
        except HopFailed as exc:
            error = exc.error
            raise ToolError(f"fetch_url: {safe_host(exc.url)} could not be read: {type(error).__name__}: {error}") from None
        except TooManyRedirects:
            raise ToolError(f"fetch_url: more than {MAX_REDIRECTS} redirects") from None

    async def _read(self, response: aiohttp.ClientResponse, url: str) -> str:
        # aiohttp reports application/octet-stream when there is no header; sniff instead.
        kind = response.content_type if "Content-Type" in response.headers else ""
        if kind and not kind.startswith(_TEXT_TYPES):
            raise ToolError(f"fetch_url: {url} is {kind}, not text")
        body = bytearray()
        async for piece in response.content.iter_chunked(64 * 1024):
            body += piece
            if len(body) > MAX_BYTES:
                break
        cut = len(body) > MAX_BYTES
        charset = response.charset or "utf-8"
        try:
            raw = body[:MAX_BYTES].decode(charset, errors="replace")
        except LookupError:
            raw = body[:MAX_BYTES].decode("utf-8", errors="replace")
        if "html" in kind or (not kind and raw.lstrip()[:1] == "<"):
            title, text = html_to_text(raw)
            if title:
                text = f"# {title}\n\n{text}"
        else:
            text = raw.strip()
        if len(text) > self.max_chars:
            text, cut = text[: self.max_chars], True
        if cut:
            text += f"\n[… cut: the page goes on past the first {MAX_BYTES // 1024} KB or {self.max_chars} characters]"
        return text


def has_credentials(url: str) -> bool:
    """Whether `url` names a user or password (an empty `@` included), as either parser reads it."""
    try:
        parsed = URL(url)
        authority = urlsplit(url).netloc
    except ValueError:
        return "@" in url.split("/", 3)[2] if url.count("/") >= 2 else False
    return parsed.raw_user is not None or parsed.raw_password is not None or "@" in authority


def without_credentials(refusal: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """`refusal`, refusing first every URL that carries credentials."""

    def check(url: str) -> str | None:
        return CREDENTIALS_REFUSED if has_credentials(url) else refusal(url)

    return check


def safe_host(url: str) -> str:
    """The host a URL names, for messages; never the URL itself, which may carry a password."""
    try:
        return urlsplit(url).hostname or "the URL"
    except ValueError:
        return "the URL"
