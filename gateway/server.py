"""The gateway's aiohttp application: the WebSocket at `/ws`, `POST /uploads`, `GET
/files/<id>` (docs/gateway.md describes all of it for people writing clients).

Every request is checked before anything of it is read, cheapest first: a token in the query
string is refused (400), then the `Origin` (403); a WebSocket reads at most 64 KiB per frame,
and its first frame must be `connect` within 10 seconds. A client that fails to authenticate
is counted against its address; once over the budget, its failures are answered "too many
failures", but a valid token is let in whatever its address did before. A connection that
has not sent a whole request's headers within `HEADER_TIMEOUT_S` is closed; an upload is read
as it arrives, its bytes and parts counted against the limits (gateway/uploads.py).

Requests on one connection run concurrently (a slow `chat.history` does not hold up a
`chat.stop`), each answered when done; whatever a method raises is answered as a structured
error, never a traceback, and the connection goes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import PurePath
from typing import Any

from aiohttp import WSMsgType, web
from botweave.adapter import Adapter
from botweave.config import ConfigError, parse_listen
from botweave.events import EVENT_NAMES, ConversationEvents
from botweave.files import guess_mime, sniff_mime
from botweave.ingress import FailedAuthLimit, IngressGuard
from botweave.methods import Caller, MethodError, MethodRegistry, Params
from botweave.mime import UNKNOWN, base_mime, mime_allowed
from botweave.store import StoreOutage
from botweave.tasks import TaskOwner
from botweave.version import __version__
from pydantic import Field, ValidationError

from . import metrics
from .auth import Principal, TokenBook, local_principal, origin_allowed, token_in_query
from .config import GatewayConfig, is_loopback
from .connection import Connection
from .files import FileShelf
from .hub import Hub
from .methods import AndThen, GatewayMethods
from .protocol import (
    CLOSE_HANDSHAKE_TIMEOUT,
    CLOSE_NOT_CONNECTED,
    CLOSE_PROTOCOL,
    CLOSE_REVOKED,
    CLOSE_UNAUTHORIZED,
    HANDSHAKE_TIMEOUT_S,
    MAX_FRAME_BYTES,
    PROTOCOL,
    BadFrame,
    Request,
    RequestId,
    error_frame,
    event_frame,
    read_request,
    result_frame,
)
from .sessions import SessionBook, session_of
from .ui import UI, SignIn
from .uploads import OVERHEAD_BYTES, UploadRefused, boundary_of, read_multipart, read_raw

log = logging.getLogger(__name__)

#: The bot's readiness (`App.readiness`): failing parts, each with why.
Readiness = Callable[[], Awaitable[dict[str, str]]]
#: The `ask` events of the questions still open in a conversation, as a caller may see them.
OpenAsks = Callable[[Caller, str], Awaitable[list[dict[str, Any]]]]
#: Requests one connection may have running at once; more wait for one to finish.
MAX_RUNNING = 16
#: How long a connection may take to send a request's headers (from when it opened, or from
#: its last answer) and stay idle between requests before it is closed; aiohttp's keep-alive
#: timer, which it starts when a connection opens and closes it by if no request came whole.
HEADER_TIMEOUT_S = 10.0
#: How often connections are checked for a token revoked or a share expired meanwhile.
RECHECK_S = 30.0


class ClientInfo(Params):
    name: str = Field(default="", max_length=100)
    version: str = Field(default="", max_length=50)


class Auth(Params):
    token: str | None = Field(default=None, max_length=500)


class ConnectParams(Params):
    min_protocol: int = 1
    max_protocol: int = 1
    client: ClientInfo = Field(default_factory=ClientInfo)
    auth: Auth = Field(default_factory=Auth)
    resume: dict[str, int] = Field(default_factory=dict, max_length=1000)


def _error(
    status: int, code: str, message: str, *, retry_after_ms: int | None = None, retryable: bool = False
) -> web.Response:
    error = MethodError(code, message, retryable=retryable or retry_after_ms is not None, retry_after_ms=retry_after_ms)
    return web.json_response({"error": error.to_dict()}, status=status)


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        events: ConversationEvents,
        methods: MethodRegistry,
        *,
        web_platform: Callable[[], Adapter | None],
        agents: Sequence[str] = (),
        readiness: Readiness | None = None,
        config_status: Callable[[], dict[str, str]] | None = None,
        about: Callable[[], dict[str, Any]] | None = None,
        max_upload_bytes: int = 20_000_000,
        allow_mime: Sequence[str] = ("*/*",),
        open_asks: OpenAsks | None = None,
    ) -> None:
        if config.listen is None:
            raise ValueError("the gateway needs gateway.listen")
        self.config = config
        self.host, self._port = parse_listen(config.listen)
        self.port = self._port
        self.events = events
        self.methods = methods
        #: The running web adapter, through which chat methods enter the runtime.
        self.web_platform = web_platform
        self.agents = list(agents)
        self._readiness = readiness
        #: The configuration revision that runs, and how the file differs (the health method).
        self.config_status = config_status
        #: The bot's agents, platforms, store and uptime (the health method).
        self.about = about
        self.max_upload_bytes = max_upload_bytes
        self.allow_mime = tuple(allow_mime)
        #: The questions still open in a conversation, sent again to a client that resumes it.
        self.open_asks = open_asks
        self.tokens = TokenBook(events.store, config.tokens)
        self.sessions = SessionBook(events.store)
        self.files = FileShelf(events.store)
        self.hub = Hub(events)
        self.guard = IngressGuard("gateway", config.trusted_proxies, limit=FailedAuthLimit())
        self._open = False  # no token anywhere and a loopback listen: clients need none
        #: One-time sign-in links for browser tabs (`botweave web` sets it before the start).
        self.signin: SignIn | None = None
        self._runner: web.AppRunner | None = None
        self._tasks = TaskOwner("gateway")
        GatewayMethods(self).register(methods)

    # --- life ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}/ws"

    @property
    def page_url(self) -> str:
        """The browser UI's address (through this machine's loopback on a wildcard listen)."""
        host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        return f"http://[{host}]:{self.port}/" if ":" in host else f"http://{host}:{self.port}/"

    async def start(self) -> None:
        """Listen. A non-loopback address with no token anywhere is a configuration error;
        an address that cannot be bound is an OSError naming it."""
        any_token = await self.tokens.any_token()
        if not any_token and not is_loopback(self.host):
            raise ConfigError([
                f"gateway.listen: {self.config.listen} is reachable from other machines and no gateway token exists; "
                "add one under gateway.tokens (token: \"${VAR}\") or with `botweave gateway token add NAME`, "
                "or listen on 127.0.0.1"
            ])
        self._open = not any_token and self.signin is None  # a sign-in link is a token too
        app = web.Application(client_max_size=self.max_upload_bytes + 1024 * 1024)
        app.router.add_get("/ws", self._websocket)
        app.router.add_post("/uploads", self._upload)
        app.router.add_get("/files/{file_id}", self._file)
        UI(self.signin, lambda request: self._refusal(request) is None, open_now=lambda: self._open).add_routes(app)
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=1.0, keepalive_timeout=HEADER_TIMEOUT_S
        )
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(f"gateway: cannot listen on {self.config.listen} ({exc.strerror or exc})") from None
        self._runner = runner
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self.hub.start()
        self._tasks.spawn(self._recheck(), name="recheck principals")
        how = "no token needed (loopback, none configured)" if self._open else "tokens required"
        log.info("gateway: listening on %s (%s); the web chat is at %s", self.url, how, self.page_url)
        if self.signin is not None:
            self.signin.listening(self.host, self.port)

    async def stop(self) -> None:
        await self._tasks.close(0.0, grace=1.0)
        await self.hub.stop()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def configure(
        self, config: GatewayConfig, *, agents: Sequence[str], max_upload_bytes: int, allow_mime: Sequence[str]
    ) -> None:
        """Settings a reloaded configuration gives a running gateway (all but `listen`, which
        it keeps): tokens, origins and limits apply to the next request and connection, and
        a connection whose token is gone from bot.yaml (or whose scopes changed) is closed."""
        self.config = config.model_copy(update={"listen": self.config.listen})
        self.tokens.configure(config.tokens)
        self.guard.trusted = tuple(config.trusted_proxies)
        self.agents = list(agents)
        self.max_upload_bytes, self.allow_mime = max_upload_bytes, tuple(allow_mime)
        if self._runner is not None:
            self._tasks.spawn(self._reconfigured(), name="recheck principals after a reload")

    async def _reconfigured(self) -> None:
        was_open = self._open
        self._open = not await self.tokens.any_token() and self.signin is None
        if was_open and not self._open:  # tokens now exist: a connection without one is let go
            for conn in list(self.hub.connections.values()):
                if conn.principal.kind == "local":
                    log.info("gateway: a token is needed now; closing %s", conn.conn_id)
                    await conn.close(CLOSE_REVOKED, "revoked")
        await self._recheck_once()

    def readiness(self) -> str | None:
        return None if self._runner is not None else "not listening"

    async def readiness_of_bot(self) -> dict[str, str]:
        return await self._readiness() if self._readiness is not None else {}

    async def _recheck(self) -> None:
        """Close connections whose token was revoked or whose share expired meanwhile."""
        while True:
            await asyncio.sleep(RECHECK_S)
            await self._recheck_once()

    async def _recheck_once(self) -> None:
        for conn in list(self.hub.connections.values()):
            principal = conn.principal
            expired = principal.expires_at is not None and principal.expires_at <= time.time()
            try:
                valid = not expired and await self.tokens.still_valid(principal)
            except StoreOutage:
                continue
            if not valid:
                log.info("gateway: %s's token is no longer valid; closing %s", principal.name, conn.conn_id)
                await conn.close(CLOSE_REVOKED, "revoked")

    async def close_shares(self, share_ids: Iterable[str]) -> None:
        for conn in self.hub.by_share(share_ids):
            await conn.close(CLOSE_REVOKED, "revoked")

    # --- who may do what ----------------------------------------------------------------------

    def connection(self, caller: Caller) -> Connection:
        conn = self.hub.connections.get(caller.conn_id)
        if conn is None:
            raise MethodError("bad_request", "this method needs a WebSocket connection")
        return conn

    def count_resume(self) -> None:
        metrics.RESUMES.inc()

    async def may_read(self, caller: Caller, conversation: str) -> bool:
        """Shares read their session; web sessions are their owner's (and admins'); any other
        conversation is for whoever holds `read`."""
        if caller.conversations is not None:
            return conversation in caller.conversations
        session_id = session_of(conversation)
        if session_id is None:
            return caller.has("read")
        if caller.admin:
            return True
        session = await self.sessions.get(session_id)
        return session is not None and session.owner == caller.name

    async def check_read(self, caller: Caller, conversation: str) -> None:
        if not await self.may_read(caller, conversation):
            raise MethodError("forbidden", f"{conversation} is not yours to read")

    async def _principal(self, token: str | None, client: str) -> tuple[Principal | None, MethodError | None]:
        """Who presents `token` from `client`, or the error to answer (see the module docstring)."""
        if not token:
            if self._open:
                return local_principal(), None
            error = MethodError("unauthorized", "a token is needed: connect with auth.token")
        else:
            if self.signin is not None and self.signin.lookup(token) is not None:
                return local_principal(), None  # a tab signed in from the terminal's link
            principal = await self.tokens.authenticate(token)
            if principal is not None:
                return principal, None
            error = MethodError("unauthorized", "the token is not valid (unknown, revoked or expired)")
        refused = self.guard.failed(client, error.message)  # counted and logged unless already refused
        if refused > 0:
            return None, MethodError(
                "too_many_failures", "too many failed attempts from this address; try again later",
                retryable=True, retry_after_ms=int(refused * 1000),
            )
        return None, error

    def _refusal(self, request: web.Request) -> web.Response | None:
        if token_in_query(request.query):
            return _error(400, "token_in_url", "tokens are never read from a URL; send it in connect (or Authorization)")
        origin = request.headers.get("Origin")
        if not origin_allowed(origin, request.headers.get("Host"), listen_host=self.host, allowed=self.config.allowed_origins):
            log.warning("gateway: refused a request from origin %r (not the gateway's own, not in allowed_origins)", origin)
            return _error(403, "forbidden", "this origin may not use the gateway (gateway.allowed_origins)")
        return None

    # --- the WebSocket ------------------------------------------------------------------------

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES, heartbeat=self.config.heartbeat_seconds)
        await ws.prepare(request)
        conn = await self._handshake(ws, request)
        if conn is None:
            return ws
        try:
            await self._serve(conn)
        finally:
            self.hub.remove(conn)
            metrics.CONNECTIONS.dec()
            await conn.finish()
        return ws

    @staticmethod
    async def _turn_away(ws: web.WebSocketResponse, request_id: RequestId | None, error: MethodError, code: int) -> None:
        try:
            await ws.send_str(error_frame(request_id, error))
            metrics.FRAMES.labels("out").inc()
            await ws.close(code=code, message=error.code.encode())
        except (ConnectionError, RuntimeError):
            pass

    async def _handshake(self, ws: web.WebSocketResponse, request: web.Request) -> Connection | None:
        try:
            msg = await ws.receive(timeout=HANDSHAKE_TIMEOUT_S)
        except asyncio.TimeoutError:
            error = MethodError("handshake_timeout", f"no connect within {HANDSHAKE_TIMEOUT_S:.0f} seconds")
            await self._turn_away(ws, None, error, CLOSE_HANDSHAKE_TIMEOUT)
            return None
        if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
            return None
        metrics.FRAMES.labels("in").inc()
        if msg.type != WSMsgType.TEXT:
            await self._turn_away(ws, None, MethodError("bad_frame", "frames are JSON text"), CLOSE_NOT_CONNECTED)
            return None
        try:
            req = read_request(msg.data)
        except BadFrame as exc:
            await self._turn_away(ws, exc.request_id, exc, CLOSE_NOT_CONNECTED)
            return None
        if req.method != "connect":
            error = MethodError("not_connected", "the first frame must be a connect request")
            await self._turn_away(ws, req.id, error, CLOSE_NOT_CONNECTED)
            return None
        try:
            params = ConnectParams.model_validate(req.params if isinstance(req.params, dict) else {})
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
            await self._turn_away(ws, req.id, MethodError("bad_request", problem), CLOSE_NOT_CONNECTED)
            return None
        if not params.min_protocol <= PROTOCOL <= params.max_protocol:
            error = MethodError(
                "protocol_unsupported",
                f"this server speaks protocol {PROTOCOL}; the client asked for {params.min_protocol}..{params.max_protocol}",
            )
            await self._turn_away(ws, req.id, error, CLOSE_PROTOCOL)
            return None
        principal, refused = await self._principal(params.auth.token, self.guard.client(request))
        if principal is None:
            assert refused is not None
            await self._turn_away(ws, req.id, refused, CLOSE_UNAUTHORIZED)
            return None
        conn = Connection(
            ws, request, principal, f"c-{uuid.uuid4().hex[:12]}", params.client.model_dump(),
            self.events, self.config.max_buffered, time.time(),
        )
        conn.start()
        try:
            result, resumed = await self._connected(conn, params)
        except MethodError as exc:
            conn.send(error_frame(req.id, exc))
            await conn.flush()
            await conn.close(CLOSE_UNAUTHORIZED, exc.code)
            self.hub.remove(conn)
            await conn.finish()
            return None
        conn.send(result_frame(req.id, result))  # the first frame a connection gets is its answer
        self.hub.add(conn)
        metrics.CONNECTIONS.inc()
        for conversation in resumed:
            conn.tasks.spawn(self._resume(conn, conversation), name="catch up a resume")
        return conn

    async def _resume(self, conn: Connection, conversation: str) -> None:
        """What a resuming client missed, then every question still open there, again: its
        `ask` may lie before the client's cursor, and the question is still waiting."""
        await conn.catch_up(conversation, conn.cursors[conversation])
        if self.open_asks is None or conn.closed:
            return
        for asked in await self.open_asks(conn.caller, conversation):
            conn.send(event_frame("ask", asked, conversation=conversation))

    async def _connected(self, conn: Connection, params: ConnectParams) -> tuple[dict[str, Any], list[str]]:
        caller = conn.caller
        resumed: dict[str, int] = {}
        refused: dict[str, str] = {}
        for conversation, last_seq in params.resume.items():
            if last_seq < 0 or not await self.may_read(caller, conversation):
                refused[conversation] = "forbidden" if last_seq >= 0 else "bad_request"
                continue
            resumed[conversation] = await self.events.head(conversation)
            self.hub.follow(conn, conversation, last_seq)
            metrics.RESUMES.inc()
        result = {
            "protocol": PROTOCOL,
            "server": {"version": __version__, "conn_id": conn.conn_id},
            "principal": conn.principal.to_dict(),
            "scopes": sorted(caller.scopes),
            "methods": self.methods.allowed(caller),
            "events": list(EVENT_NAMES),
            "policy": {
                "max_frame_bytes": MAX_FRAME_BYTES,
                "heartbeat_ms": int(self.config.heartbeat_seconds * 1000),
                "max_upload_bytes": self.max_upload_bytes,
                "max_buffered": self.config.max_buffered,
            },
            "resumed": resumed,
            "refused": refused,
            "snapshot": await self._snapshot(caller),
        }
        return result, list(resumed)

    async def _snapshot(self, caller: Caller) -> dict[str, Any]:
        snapshot: dict[str, Any] = {"sessions": [], "approvals": [], "pairing": [], "asks": []}
        allowed = set(self.methods.allowed(caller))  # a share's are few: it reads its session only
        for name, key, field in (("sessions.list", "sessions", "sessions"), ("approvals.list", "approvals", "approvals"),
                                 ("pairing.list", "pairing", "requests"), ("ask.list", "asks", "asks")):
            if name in allowed:
                answer = await self.methods.call(caller, name, {})
                snapshot[key] = answer.get(field, [])
        return snapshot

    async def _serve(self, conn: Connection) -> None:
        ws = conn.ws
        async for msg in ws:
            metrics.FRAMES.labels("in").inc()
            if msg.type == WSMsgType.TEXT:
                await self._request(conn, msg.data)
            elif msg.type == WSMsgType.BINARY:
                conn.send(error_frame(None, MethodError("bad_frame", "frames are JSON text, not binary")))
            elif msg.type == WSMsgType.ERROR:
                break
            if conn.closed:
                break

    async def _request(self, conn: Connection, text: str) -> None:
        try:
            req = read_request(text)
        except BadFrame as exc:
            conn.send(error_frame(exc.request_id, exc))
            return
        if req.method == "connect":
            conn.send(error_frame(req.id, MethodError("bad_request", "already connected")))
            return
        if len(conn.tasks) > MAX_RUNNING:
            await self._call(conn, req)  # the client waits for its earlier requests
            return
        conn.tasks.spawn(self._call(conn, req), name=f"request {req.method}")

    async def _call(self, conn: Connection, req: Request) -> None:
        try:
            result = await self.methods.call(conn.caller, req.method, req.params)
        except MethodError as exc:
            conn.send(error_frame(req.id, exc))
            return
        except StoreOutage:
            conn.send(error_frame(req.id, MethodError("unavailable", "the store is not answering", retryable=True)))
            return
        except Exception:  # boundary: a gateway connection's request: logged, and the client told
            log.exception("gateway: %s failed", req.method)
            conn.send(error_frame(req.id, MethodError("internal", f"{req.method} failed; the server logged why", retryable=True)))
            return
        if isinstance(result, AndThen):
            conn.send(result_frame(req.id, result.result))
            result.then()
            return
        conn.send(result_frame(req.id, result))

    # --- files --------------------------------------------------------------------------------

    async def _http_principal(self, request: web.Request) -> Principal | web.Response:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        given = token.strip() if scheme.lower() == "bearer" else None
        if header and given is None:
            return _error(401, "unauthorized", "send the token as Authorization: Bearer <token>")
        principal, refused = await self._principal(given, self.guard.client(request))
        if principal is not None:
            return principal
        assert refused is not None
        if refused.code == "too_many_failures":
            return _error(429, refused.code, refused.message, retry_after_ms=refused.retry_after_ms)
        return _error(401, refused.code, refused.message)

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        principal = await self._http_principal(request)
        if isinstance(principal, web.Response):
            return principal
        if not principal.caller().has("write"):
            return _error(403, "forbidden", "uploads need the write scope")
        limit = self.max_upload_bytes
        if request.content_length is not None and request.content_length > limit + OVERHEAD_BYTES:
            return _error(413, "too_large", f"the file is over the limit of {limit} bytes (media.max_bytes)")
        try:
            if request.content_type.startswith("multipart/"):
                boundary = boundary_of(request.headers.get("Content-Type", ""))
                upload = await read_multipart(request.content, boundary, max_file=limit)
                data, filename, declared = upload.data, upload.filename, upload.content_type
            else:
                filename, declared = request.headers.get("X-Filename", "file"), request.content_type
                data = await read_raw(request.content, max_file=limit)
        except UploadRefused as refused:
            log.info("gateway: an upload from %s was refused: %s", principal.name, refused.message)
            return _unread(_error(refused.status, refused.code, refused.message, retryable=refused.status == 408))
        if not data:
            return _error(400, "bad_request", "the file is empty")
        name = _safe_name(filename)
        mime = base_mime(declared)  # the browser's to declare: a MIME type, or unknown
        if not mime or mime == UNKNOWN:
            mime = sniff_mime(data) or base_mime(guess_mime(name)) or UNKNOWN
        if not mime_allowed(mime, self.allow_mime):
            return _error(415, "bad_request", f"{mime} files are not taken here (media.allow_mime)")
        stored = await self.files.put(data, name, mime, owner=principal.name)
        return web.json_response(stored.ref(), status=201)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        principal = await self._http_principal(request)
        if isinstance(principal, web.Response):
            return principal
        caller = principal.caller()
        stored = await self.files.get(request.match_info["file_id"])
        allowed = stored is not None and (
            (stored.owner is not None and stored.owner == principal.name and principal.kind != "share")
            or caller.admin
            or any([await self.may_read(caller, c) for c in stored.conversations])
        )
        data = await self.files.data(stored.file_id) if stored is not None and allowed else None
        if stored is None or data is None:
            return _error(404, "not_found", "no such file (or not yours to see)")
        quoted = stored.filename.replace("\\", "_").replace('"', "_")
        return web.Response(
            body=data,
            content_type=stored.mime,
            headers={
                "Content-Disposition": f'attachment; filename="{quoted}"',
                "X-Content-Type-Options": "nosniff",
                "Content-Security-Policy": "default-src 'none'; sandbox",
                "Cache-Control": "private, no-store",
            },
        )


def _unread(response: web.Response) -> web.Response:
    """An answer given before the body was read to its end: the connection closes after it
    (aiohttp reads and drops what follows for a few seconds, so the client gets to read the
    answer), and nothing more of the body is taken for the upload or for a next request."""
    response.force_close()
    return response


def _safe_name(name: str) -> str:
    """A file name as people gave it, without a path or control characters."""
    base = PurePath(name.replace("\\", "/")).name
    cleaned = "".join(ch for ch in base if ch.isprintable()).strip()
    return cleaned[:200] or "file"
