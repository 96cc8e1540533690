"""The Slack adapter: slack-bolt's `AsyncApp` over Socket Mode or the HTTP Events API.

Receiving is bolt's job once a request is known to be Slack's and usable: over HTTP our
endpoint (`http.EventsEndpoint`) verifies the signature on the raw bytes and sanitises the
body before bolt sees it; over Socket Mode (authenticated by the app token) each payload is
sanitised the same way (`schema.sanitise_body`). Bolt answers `url_verification`, routes to the
listeners and acknowledges within Slack's 3 seconds; it hands every event to
`inbound.SlackInbound`, which hands each post on once however often Slack delivers it.
Sending goes through slack_sdk's `AsyncWebClient` (`outbound.SlackOutbound`), whose
`AsyncRateLimitErrorRetryHandler` waits out `Retry-After` on HTTP 429. This module builds the
clients, logs in and runs the chosen receiving mode. The clients share one aiohttp session:
without one, slack_sdk opens a session, and a new connection, for every Web API call.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import ClientConnectorError, web
from botweave.adapter import Adapter, Check, PlatformRejected
from botweave.ingress import IngressGuard
from botweave.metrics import RATE_LIMIT_WAIT
from botweave.payload import Dropped
from botweave.tasks import ONE_LINE_FAILURES
from botweave.types import BotUser, PlatformCapabilities
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from .config import SlackConfig
from .directory import WEB_API_ERRORS, SlackDirectory
from .http import EventsEndpoint, Signatures
from .inbound import SlackInbound
from .outbound import SlackOutbound
from .schema import sanitise_body

log = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://slack.com/api/"
SOCKET_CONNECT_TIMEOUT_S = 30.0
RATE_LIMIT_RETRIES = 3
API_TIMEOUT_S = 30
#: Connections kept to the Web API; calls beyond it wait for a free one, first come first served.
POOL_SIZE = 64


class CountedRateLimitRetries(AsyncRateLimitErrorRetryHandler):
    """slack_sdk's wait on HTTP 429 (`Retry-After`), with the time it waited counted."""

    async def prepare_for_next_attempt_async(self, **kwargs: Any) -> None:
        started = time.monotonic()
        try:
            await super().prepare_for_next_attempt_async(**kwargs)
        finally:
            RATE_LIMIT_WAIT.labels("slack").inc(time.monotonic() - started)


class SlackAdapter(Adapter):
    platform = "slack"
    capabilities = PlatformCapabilities(
        max_message_length=4000,
        length_unit="chars",
        can_edit=True,
        can_delete=True,
        can_react=True,
        threads=True,
        typing=False,  # bot tokens have no typing indicator outside the legacy RTM API
        markdown="slack",
        buttons=True,
        edit_floor_ms=1000,  # chat.update is tier 3 (~50/min): one edit a second per stream
    )
    # A post can carry message metadata and be found again by it (conversations.history).
    idempotency = "lookup"
    # Slack has no "thread created" event: a thread exists once someone replies.
    emits = frozenset(
        {
            "message_edited",
            "message_deleted",
            "reaction_added",
            "reaction_removed",
            "member_joined",
            "member_left",
            "button_pressed",
        }
    )

    def __init__(self, config: SlackConfig | None = None) -> None:
        super().__init__(config or SlackConfig())
        self.config: SlackConfig
        self.outbound: SlackOutbound | None = None
        self.inbound: SlackInbound | None = None  # known once logged in
        self._bolt: AsyncApp | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.http_port: int | None = None  # the port the Events API endpoint listens on
        #: Client attribution and the limit on failed signature checks (HTTP mode).
        self.ingress = IngressGuard("slack: events endpoint", self.config.trusted_proxies)
        #: Inbound counters (received, duplicate, dispatched, settled): cheap to keep, and how
        #: an operator or a test tells "Slack never sent it" from "we dropped it".
        self.inbound_stats: Counter[str] = Counter()

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self, *, inbound: bool = True) -> None:
        """Log in with `auth.test`; with `inbound`, also start receiving in the configured mode.

        A send-only instance (a worker answering from the shared stream) opens no Socket Mode
        connection and no HTTP port: one receiving instance per app is what Slack expects.
        """
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_S), connector=aiohttp.TCPConnector(limit=POOL_SIZE)
        )
        client = self._web_client("default")
        bot_id = await self._login(client)
        directory = SlackDirectory(self._web_client("lookup"))
        self.inbound = SlackInbound(
            self, directory, bot_id=bot_id, stats=self.inbound_stats, reply_in_thread=self.config.reply_in_thread
        )
        self.outbound = SlackOutbound(client, self._web_client("post"), posted=self.inbound.note_own_post)
        if not inbound:
            return
        self._bolt = self._build_bolt_app(client, self.inbound)
        if self.config.mode == "socket":
            await self._start_socket_mode(self._bolt, client)
        else:
            await self._start_http(self._bolt)

    async def stop(self) -> None:
        self.outbound = None
        if self.inbound is not None:
            await self.inbound.close()
        if self._socket is not None:
            try:
                await self._socket.close_async()
            except (SlackClientError, aiohttp.ClientError, OSError, ValueError):
                log.exception("slack: closing the Socket Mode connection failed")
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    # --- health --------------------------------------------------------------------------

    async def readiness(self) -> str | None:
        """Socket Mode: the WebSocket is connected and answering pings. HTTP: the Events API
        endpoint is listening. Send-only: logged in."""
        problem = await super().readiness()
        if problem is not None:
            return problem
        if self._socket is not None:
            try:
                connected = await asyncio.wait_for(self._socket.client.is_connected(), 2.0)
            except WEB_API_ERRORS:
                connected = False
            return None if connected else "the Socket Mode connection is not connected"
        if self._bolt is not None and self._runner is None:
            return "the Events API endpoint is not listening"
        return None

    async def diagnose(self) -> list[Check]:
        """auth.test with the bot token; in Socket Mode also apps.connections.open with the app
        token (it only hands out a URL: nothing connects)."""
        client = self._web_client("lookup")
        try:
            auth = await client.auth_test()
        except SlackApiError as exc:
            error = exc.response.get("error")
            return [Check("slack", False, f"auth.test refused the bot token ({error})",
                          "set platforms.slack.bot_token to the xoxb- token from OAuth & Permissions")]
        except WEB_API_ERRORS as exc:
            return [Check("slack", False, f"cannot reach the Slack API: {type(exc).__name__}: {exc}",
                          "check the network, or platforms.slack.api_base_url")]
        checks = [Check("slack", True, f"bot token accepted by auth.test ({auth.get('user')} in {auth.get('team')})")]
        if self.config.mode == "socket":
            try:
                await client.apps_connections_open(app_token=self.secret("app_token"))
                checks.append(Check("slack socket mode", True, "app token accepted by apps.connections.open"))
            except SlackApiError as exc:
                checks.append(Check("slack socket mode", False,
                                    f"apps.connections.open refused the app token ({exc.response.get('error')})",
                                    "set platforms.slack.app_token to an xapp- token with connections:write"))
            except WEB_API_ERRORS as exc:
                checks.append(Check("slack socket mode", False, f"apps.connections.open failed: {exc}",
                                    "check the network"))
        else:
            where = f"{self.config.http_host}:{self.config.http_port}{self.config.http_path}"
            checks.append(Check("slack events api", True,
                                f"listening on {where}; the app's Request URL must reach it over https"))
        return checks

    def _web_client(self, purpose: str) -> AsyncWebClient:
        """A Web API client on `api_base_url`, with retries that suit what it is used for.

        `default` (edits, deletes, reactions, bolt's own calls) waits out 429 `Retry-After`
        and retries dropped connections: those calls are idempotent. `post` waits out 429
        too (a 429 means nothing was posted) but retries only connections that were never
        made. `lookup` (names, thread roots on the inbound path) does not wait out a 429:
        a late turn is worse than a turn without a quote.
        """
        if purpose == "post":
            handlers: list[Any] = [AsyncConnectionErrorRetryHandler(error_types=[ClientConnectorError])]
        else:
            handlers = [AsyncConnectionErrorRetryHandler()]
        if purpose != "lookup":
            handlers.append(CountedRateLimitRetries(max_retry_count=RATE_LIMIT_RETRIES))
        base_url = self.config.api_base_url or DEFAULT_API_BASE
        return AsyncWebClient(
            token=self.secret("bot_token"),
            base_url=base_url if base_url.endswith("/") else base_url + "/",
            timeout=API_TIMEOUT_S,
            retry_handlers=handlers,
            session=self._session,
        )

    async def _login(self, client: AsyncWebClient) -> str | None:
        """`auth.test`: who the bot is; returns its bot id (what its posts under an agent's
        name carry instead of its user)."""
        try:
            auth = await client.auth_test()
        except SlackApiError as exc:
            raise PlatformRejected(
                f"slack: auth.test failed ({exc.response.get('error')}); check platforms.slack.bot_token"
            ) from None
        name = str(auth.get("user") or "")
        self.self_user = BotUser(user_id=str(auth["user_id"]), username=name, display_name=name, is_bot=True)
        bot_id = auth.get("bot_id")
        return str(bot_id) if bot_id else None

    def _build_bolt_app(self, client: AsyncWebClient, inbound: SlackInbound) -> AsyncApp:
        http = self.config.mode == "http"
        app = AsyncApp(
            client=client,
            signing_secret=self.secret("signing_secret") if http else None,
            # HTTP requests are verified on their raw bytes before bolt sees them (http.py);
            # Socket Mode is authenticated by the app token.
            request_verification_enabled=False,
            # The bot's own posts are dropped by the adapter, after noting the threads they
            # are in (so a thread another process of this bot replied in counts as addressed).
            ignoring_self_events_enabled=False,
            # The listener records the event (hands it to the runtime: with Redis, appends it to
            # the inbound stream) and then acknowledges, within ACK_DEADLINE_S.
            process_before_response=True,
            logger=_bolt_logger(),
        )
        app.event(re.compile(".*"))(inbound.on_event)
        app.command(re.compile(".*"))(inbound.on_command)
        app.action(re.compile(".*"))(inbound.on_action)
        return app

    async def _start_socket_mode(self, app: AsyncApp, client: AsyncWebClient) -> None:
        app_token = self.secret("app_token")
        # The SDK retries a failed apps.connections.open forever; a wrong app token should
        # instead fail start() with a message that says which setting to fix. The URL this
        # check obtains is the one the client then connects to.
        try:
            opened = await client.apps_connections_open(app_token=app_token)
        except SlackApiError as exc:
            raise PlatformRejected(
                f"slack: apps.connections.open failed ({exc.response.get('error')}); check "
                "platforms.slack.app_token (an xapp- token with connections:write)"
            ) from None
        self._socket = _SanitisingSocketModeHandler(app, app_token=app_token, web_client=client)
        self._socket.client.wss_uri = str(opened["url"])
        try:
            await asyncio.wait_for(self._socket.connect_async(), SOCKET_CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.stop()
            raise RuntimeError("slack: the Socket Mode connection did not open in time") from None

    async def _start_http(self, app: AsyncApp) -> None:
        endpoint = EventsEndpoint(app, Signatures(self.secret("signing_secret")), self.ingress)
        web_app = web.Application()
        web_app.router.add_post(self.config.http_path, endpoint)
        self._runner = web.AppRunner(web_app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.http_host, self.config.http_port)
        await site.start()
        self.http_port = self.config.http_port
        log.info("slack: Events API listening on %s:%s%s", self.config.http_host, self.http_port, self.config.http_path)


def _quiet_unhandled(record: logging.LogRecord) -> bool:
    """Bolt's "Unhandled request" warning spans lines, suggests code and carries the request
    body (people's messages); the endpoint logs its own line for such a request instead."""
    return not str(record.msg).startswith("Unhandled request")


def _bolt_logger() -> logging.Logger:
    """Bolt's logger: a request bolt could not route (a shape it did not expect) is logged in
    one line, not with a traceback."""
    logger = logging.getLogger("botweave.adapters.slack.bolt")
    logger.addFilter(ONE_LINE_FAILURES)
    logger.addFilter(_quiet_unhandled)
    return logger


class _SanitisingSocketModeHandler(AsyncSocketModeHandler):
    """Socket Mode payloads come from Slack itself, yet are read as carefully as HTTP ones:
    sanitised before bolt sees them; one that is not usable is acknowledged (so Slack does not
    resend it) and skipped with one line."""

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        dropped = Dropped()
        payload = sanitise_body(req.payload, dropped)
        if payload is None:
            log.warning("slack: skipped a Socket Mode %s payload that cannot be used", str(req.type)[:40])
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        if dropped:
            log.warning("slack: Socket Mode payload: ignored malformed field(s) %s", ", ".join(dropped[:8]))
        req.payload = payload
        await super().handle(client, req)
