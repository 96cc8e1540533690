"""The browser UI's side of the gateway: the page and its files at `/`, under a strict
Content-Security-Policy, and the one-time sign-in codes that `botweave web` prints.

The page is static (ES modules and a stylesheet shipped inside the package, nothing to
build); everything it shows comes over the WebSocket. Its policy allows scripts, styles and
connections from the gateway's own origin only, images from there and from blob: URLs (files
are fetched with the tab's token and shown from a blob, never through a URL carrying it), and
nothing inline: the page has no inline script or handler, so an injected one cannot run.

Sign-in without any token. A gateway on a loopback address with no token anywhere lets the
person at this machine in as `local` (see gateway/auth.py); `GET /session` says so
(`{"token_needed": false}`) and the page then connects without a token instead of showing
its sign-in form.

Sign-in without a token to copy. `botweave web` prints `http://HOST:PORT/#code=…`. A fragment
never leaves the browser in a request line, so no access log, proxy or `Referer` sees the
code. The page takes it out of the address bar and sends it once in the body of
`POST /session`; the answer is a token for that tab (`bwt_…`), kept in the tab's
sessionStorage and accepted by the gateway like a configured token with every scope (whoever
holds the terminal that started the bot owns it). A code:

* is 256 random bits, kept only as its SHA-256 and compared in constant time;
* works once: the first exchange consumes it, whatever happens next;
* expires after `CODE_TTL_S` (10 minutes) unused;
* is exchanged only from a page on the gateway's own origin (the `Origin` check every
  gateway request goes through), so another site cannot trade a code it guessed or saw for a
  token in your browser.

A tab signed in this way is the person at this machine (the gateway's `local` principal,
every scope): its sessions are the same in every tab so signed in. Tab tokens live in this
process only (gone when the bot stops) and end at sign-out (`DELETE /session` with the token
as Bearer). Each time a code is used, the next one is announced (`botweave web` prints a new
link), so another tab or browser can sign in too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
#: How long a printed sign-in code may wait to be used.
CODE_TTL_S = 600.0
#: The largest `POST /session` body read.
MAX_SESSION_BODY = 4096
CODE_PREFIX = "bwc_"
TAB_TOKEN_PREFIX = "bwt_"

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' blob: data:",
        "connect-src 'self'",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

#: Whether a request's origin may use the gateway (the gateway's own check).
OriginCheck = Callable[[web.Request], bool]
#: Shown each sign-in link, outside any log (`botweave web` prints it).
Announce = Callable[[str], None]


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class TabSession:
    """A tab signed in from a link: when, and its token's name in presence and logs."""

    name: str
    created: float


class SignIn:
    """One-time sign-in codes and the tab tokens they were exchanged for (see the module
    docstring). One code is valid at a time: issuing another replaces it."""

    def __init__(
        self, announce: Announce | None = None, *, code_ttl: float = CODE_TTL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.announce = announce
        self.code_ttl = code_ttl
        self._clock = clock
        self._code: tuple[bytes, float] | None = None
        self._tabs: dict[bytes, TabSession] = {}
        self._serial = 0
        self.base_url: str | None = None

    def listening(self, host: str, port: int) -> None:
        """The gateway listens: announce the first link (to a wildcard listen, through this
        machine's loopback address)."""
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else host
        self.base_url = f"http://[{shown}]:{port}" if ":" in shown and not shown.startswith("[") else f"http://{shown}:{port}"
        self.announce_next()

    def announce_next(self) -> None:
        if self.announce is not None and self.base_url is not None:
            self.announce(f"{self.base_url}/#code={self.issue()}")

    def issue(self) -> str:
        """A new code (shown once, to whoever started the bot); the previous one stops working."""
        code = CODE_PREFIX + secrets.token_urlsafe(32)
        self._code = (_digest(code), self._clock() + self.code_ttl)
        return code

    def exchange(self, code: str) -> str | None:
        """The tab token for a valid code (which is used up), else None."""
        current = self._code
        if current is None or not code:
            return None
        digest, expires = current
        if not hmac.compare_digest(digest, _digest(code)):
            return None
        self._code = None
        if self._clock() > expires:
            self.announce_next()  # whoever holds the terminal gets a fresh link
            return None
        self._serial += 1
        token = TAB_TOKEN_PREFIX + secrets.token_urlsafe(32)
        self._tabs[_digest(token)] = TabSession(f"web-tab-{self._serial}", time.time())
        self.announce_next()
        return token

    def lookup(self, token: str) -> TabSession | None:
        """The tab a token belongs to. Looked up by the token's SHA-256, so the comparison
        never runs over the secret itself."""
        if not token.startswith(TAB_TOKEN_PREFIX):
            return None
        return self._tabs.get(_digest(token))

    def end(self, token: str) -> bool:
        return self._tabs.pop(_digest(token), None) is not None

    @property
    def tabs(self) -> int:
        return len(self._tabs)


def _error(status: int, code: str, message: str) -> web.Response:
    body = {"error": {"code": code, "message": message, "retryable": False}}
    return web.json_response(body, status=status, headers=SECURITY_HEADERS)


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


class UI:
    """The page's routes on the gateway's application."""

    def __init__(
        self, signin: SignIn | None, origin_ok: OriginCheck, *, open_now: Callable[[], bool] = lambda: False,
        static: Path = STATIC,
    ) -> None:
        self.signin = signin
        self.origin_ok = origin_ok
        self.open_now = open_now
        self.static = static.resolve()

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self.index)
        app.router.add_get("/static/{path:.+}", self.asset)
        app.router.add_get("/session", self.how_to_sign_in)
        app.router.add_post("/session", self.start_session)
        app.router.add_delete("/session", self.end_session)

    async def index(self, request: web.Request) -> web.StreamResponse:
        return self._file(self.static / "index.html", cache="no-store")

    async def asset(self, request: web.Request) -> web.StreamResponse:
        path = (self.static / request.match_info["path"]).resolve()
        if not path.is_relative_to(self.static) or not path.is_file() or path.suffix not in _TYPES:
            return _error(404, "not_found", "no such file")
        return self._file(path, cache="no-cache")

    def _file(self, path: Path, *, cache: str) -> web.StreamResponse:
        headers = {**SECURITY_HEADERS, "Content-Type": _TYPES[path.suffix], "Cache-Control": cache}
        return web.Response(body=path.read_bytes(), headers=headers)

    async def how_to_sign_in(self, request: web.Request) -> web.StreamResponse:
        """What the page needs to know before it shows a sign-in form: whether this gateway
        lets the person at this machine in without a token (loopback, no token anywhere, no
        sign-in links), and whether it prints sign-in links. Nothing secret: a client that
        connects without a token learns the same."""
        if request.headers.get("Origin") is not None and not self.origin_ok(request):
            return _error(403, "forbidden", "refused origin")
        body = {"token_needed": not self.open_now(), "links": self.signin is not None}
        return web.json_response(body, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})

    async def start_session(self, request: web.Request) -> web.StreamResponse:
        """Trade a one-time code (in the JSON body, never the URL) for a tab token."""
        if request.headers.get("Origin") is None or not self.origin_ok(request):
            return _error(403, "forbidden", "sign-in links work only from the gateway's own page")
        if self.signin is None:
            return _error(404, "not_found", "this gateway gives no sign-in links (botweave web does); sign in with a token")
        if request.content_length is not None and request.content_length > MAX_SESSION_BODY:
            return _error(413, "too_large", "the sign-in request is too large")
        try:
            raw = await request.content.read(MAX_SESSION_BODY + 1)
            body = json.loads(raw) if len(raw) <= MAX_SESSION_BODY else None
        except (ValueError, UnicodeDecodeError):
            body = None
        code = body.get("code") if isinstance(body, dict) else None
        if not isinstance(code, str):
            return _error(400, "bad_request", 'send {"code": "..."} as JSON')
        token = self.signin.exchange(code)
        if token is None:
            log.info("gateway: a sign-in code was refused (wrong, used or expired)")
            return _error(401, "unauthorized", "this sign-in link was used already or has expired; botweave web prints a new one")
        log.info("gateway: a browser tab signed in with a one-time link")
        return web.json_response({"token": token}, status=201, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})

    async def end_session(self, request: web.Request) -> web.StreamResponse:
        """Sign-out: a tab token stops working (other tokens are not ended from a page)."""
        if request.headers.get("Origin") is not None and not self.origin_ok(request):
            return _error(403, "forbidden", "refused origin")
        token = _bearer(request)
        if token is None:
            return _error(401, "unauthorized", "send the tab's token as Authorization: Bearer")
        ended = self.signin.end(token) if self.signin is not None else False
        return web.json_response({"ended": ended}, headers=SECURITY_HEADERS)
