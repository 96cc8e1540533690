"""`TelegramAdapter`: python-telegram-bot's `Application` wired to the botweave runtime.

Inbound, PTB fetches updates by long polling (the default) and hands each to one handler,
`inbound.TelegramInbound`, that normalises it and dispatches it; dispatch returns at once, so
PTB's loop is never blocked by an agent. In webhook mode our own server (see `webhook`)
receives the updates and runs each through the same handler, answering 200 only once the
runtime has it (500 if the hand-over failed, so Telegram redelivers). Polling likewise sends
the offset that acknowledges an update only after its hand-over finished. Outbound calls go
through `outbound.TelegramOutbound`, which keeps each chat in order under Telegram's limits.

The application is built with `ApplicationBuilder().bot(...)` rather than `.token(...)`
because the bot is `client.TolerantBot`, an `ExtBot` whose polling survives a malformed
update; `api_base_url` / `file_base_url` are passed to it the same way `.base_url()` would.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from botweave.adapter import Adapter, Check, PlatformRejected
from botweave.ingress import IngressGuard
from botweave.tasks import TaskOwner
from botweave.types import BotUser, PlatformCapabilities, PressAnswer
from telegram import Update
from telegram.error import Conflict, InvalidToken, TelegramError
from telegram.ext import Application, ApplicationBuilder, ContextTypes, ExtBot, TypeHandler

from .client import PerChatUpdateProcessor, TolerantBot
from .config import TelegramConfig
from .inbound import HANDOVER_TIMEOUT_S, TelegramInbound
from .outbound import TelegramOutbound
from .pacing import Pacer
from .transport import AiohttpRequest
from .webhook import WebhookServer

log = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://api.telegram.org/bot"
DEFAULT_FILE_BASE = "https://api.telegram.org/file/bot"

#: Update types requested from Telegram; reactions and chat_member are opt-in on its side.
ALLOWED_UPDATES = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "message_reaction",
    "chat_member",
    "my_chat_member",
    "callback_query",
)

# The bot is built here (not by ApplicationBuilder), so its HTTP transport is chosen here:
# aiohttp (transport.py) rather than PTB's httpx default, whose pool rescans every waiting
# call on each start and end of a call. Enough connections that chats never queue behind each
# other within Telegram's ~30 requests/s budget, and exactly one for the long poll. PTB handles
# one update at a time unless told otherwise; updates of different chats run concurrently
# (see client.PerChatUpdateProcessor).
SEND_POOL_SIZE = 32
CONCURRENT_UPDATES = 64
#: Ports Telegram delivers webhooks to.
WEBHOOK_PORTS = (443, 80, 88, 8443)
#: A poll answers within its timeout when nothing happens; readiness allows twice that (and
#: never less than this, so a zero poll timeout does not make every pause an outage).
MIN_POLL_WINDOW_S = 2.0


class _TokenRedactor(logging.Filter):
    """Bot API URLs contain the token; httpx logs each at INFO and PTB's bot at DEBUG."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self._token and self._token in message:
            record.msg, record.args = message.replace(self._token, "***"), None
        return True


def _redacted_loggers() -> list[str]:
    """Loggers that may print a URL: httpx, and python-telegram-bot's (filters are per logger,
    not inherited, so each known one is covered by name)."""
    known = {"httpx", "aiohttp.client", "telegram.Bot", "telegram.ext.ExtBot", "telegram.ext.Updater", "telegram.ext.Application"}
    known.update(name for name in logging.Logger.manager.loggerDict if name.startswith("telegram"))
    return sorted(known)


def _host(url: str) -> str:
    """Where a URL points, without its path (a Bot API path carries the token)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else url


def _file_base(api_base: str) -> str:
    """A self-hosted Bot API server serves files under /file/bot next to /bot."""
    if api_base.rstrip("/").endswith("/bot"):
        return api_base.rstrip("/")[: -len("bot")] + "file/bot"
    return DEFAULT_FILE_BASE


class TelegramAdapter(Adapter):
    """Telegram via python-telegram-bot; see the module docstring for the data flow."""

    platform = "telegram"
    capabilities = PlatformCapabilities(
        max_message_length=4096,
        length_unit="utf16",
        max_caption_length=1024,
        can_edit=True,
        can_delete=True,
        can_react=True,
        threads=True,
        typing=True,
        markdown="telegram",
        buttons=True,
        edit_floor_ms=1100,
        group_edit_floor_ms=3100,
    )
    # Telegram never tells bots about ordinary deletions, so message_deleted is absent.
    emits = frozenset(
        {
            "reaction_added",
            "reaction_removed",
            "message_edited",
            "member_joined",
            "member_left",
            "thread_created",
            "button_pressed",
        }
    )
    typing_interval_s = 4.0

    def __init__(self, config: TelegramConfig | Mapping[str, Any] | None = None) -> None:
        settings = config if isinstance(config, TelegramConfig) else TelegramConfig.model_validate(dict(config or {}))
        super().__init__(settings)
        self.config: TelegramConfig = settings
        self.outbound: TelegramOutbound | None = None
        self.inbound = TelegramInbound(self, answer_callback=self._answer_callback)
        #: Set when the adapter gave up (e.g. another instance polls with the same token).
        self.failure: str | None = None
        self._application: Application | None = None
        self._conflicts = 0
        self._tasks = TaskOwner("telegram")
        self._webhook: WebhookServer | None = None
        #: Client attribution and the limit on failed secret checks (webhook mode).
        self.ingress = IngressGuard("telegram: webhook", settings.trusted_proxies)
        self._redactor: _TokenRedactor | None = None
        #: How this instance receives once started ("polling", "webhook"), None when send-only.
        self._receiving: str | None = None
        #: When getUpdates last answered (time.monotonic()), for readiness.
        self._last_poll = 0.0

    def __repr__(self) -> str:
        return f"TelegramAdapter(mode={self.config.mode!r}, running={self.running})"

    @property
    def running(self) -> bool:
        """True while logged in (receiving or send-only)."""
        return self._application is not None and self.self_user is not None

    @property
    def application(self) -> Application:
        """The PTB application, for users who want to add their own handlers."""
        if self._application is None:
            raise RuntimeError("the Telegram adapter is not started")
        return self._application

    # --- lifecycle -------------------------------------------------------------------------

    def _build(self, token: str) -> Application:
        api_base = self.config.api_base_url or DEFAULT_API_BASE
        bot = TolerantBot(
            token,
            base_url=api_base,
            base_file_url=self.config.file_base_url or _file_base(api_base),
            # A send whose answer never came may have been delivered and is not retried, so give
            # slow answers time rather than turning them into "outcome unknown".
            request=AiohttpRequest(SEND_POOL_SIZE, pool_timeout=10.0, read_timeout=15.0, write_timeout=15.0),
            get_updates_request=AiohttpRequest(1, read_timeout=10.0),
            polled=self._polled,
            before_poll=self.inbound.handed_over,
        )
        return (
            ApplicationBuilder()
            .bot(bot)
            .concurrent_updates(PerChatUpdateProcessor(CONCURRENT_UPDATES))
            .job_queue(None)
            .build()
        )

    async def start(self, *, inbound: bool = True) -> None:
        """Log in (getMe); with `inbound`, also receive updates by polling or webhook.

        A send-only instance (`inbound=False`, a worker of a shared inbound stream) never
        polls, so it cannot collide with the instance that does.
        """
        token = self.secret("token")
        if inbound and self.config.mode == "webhook" and not self.config.webhook_url:
            raise ValueError("platforms.telegram.webhook_url is required when mode is webhook")
        self._redactor = _TokenRedactor(token)
        for name in _redacted_loggers():
            logging.getLogger(name).addFilter(self._redactor)
        application = self._build(token)
        self._application = application
        try:
            await self._launch(application, inbound)
        except InvalidToken:
            await self.stop()
            # PTB's message repeats the token; this one does not.
            raise PlatformRejected("Telegram rejected the bot token (check platforms.telegram.token)") from None
        except BaseException:
            await self.stop()
            raise

    async def _launch(self, application: Application, inbound: bool) -> None:
        await application.initialize()
        me = application.bot.bot
        self.self_user = BotUser(str(me.id), me.username or "", me.full_name, True)
        bot = application.bot
        assert isinstance(bot, TolerantBot)  # built by _build
        self.outbound = TelegramOutbound(
            bot, Pacer(global_limit=(max(1, int(self.config.requests_per_second)), 1.0))
        )
        if not inbound:
            log.debug("telegram: @%s ready to send (not receiving)", me.username)
            return
        application.add_handler(TypeHandler(Update, self.inbound.on_update))
        application.add_error_handler(self._on_error)
        await application.start()
        self._last_poll = time.monotonic()
        await self._receive(application)
        self._receiving = self.config.mode
        log.debug("telegram: @%s receiving updates by %s", me.username, self.config.mode)

    async def _receive(self, application: Application) -> None:
        if self.config.mode == "webhook":
            await self._serve_webhook(application)
            return
        updater = application.updater
        assert updater is not None  # ApplicationBuilder always builds one unless told not to
        await updater.start_polling(
            timeout=self.config.poll_timeout,
            allowed_updates=list(ALLOWED_UPDATES),
            error_callback=self._on_poll_error,
        )

    async def _serve_webhook(self, application: Application) -> None:
        """Start our webhook server, then point Telegram at it (PTB's `Updater` stays idle)."""
        secret = self.config.webhook_secret.get_secret_value() if self.config.webhook_secret else None
        if not secret:
            log.warning("telegram: webhook without webhook_secret accepts updates from anyone")
        server = WebhookServer(
            bot=application.bot,
            handle=self._process_webhook_update,
            listen=self.config.webhook_listen,
            port=self.config.webhook_port,
            path=self.config.webhook_path,
            secret=secret or None,
            guard=self.ingress,
            handle_timeout=HANDOVER_TIMEOUT_S,
        )
        await server.start()
        self._webhook = server
        await application.bot.set_webhook(
            url=self.config.webhook_url or "",
            secret_token=secret or None,
            allowed_updates=list(ALLOWED_UPDATES),
        )

    async def stop(self) -> None:
        """Stop receiving, let PTB finish, and close its HTTP clients; safe to call twice."""
        self.outbound = None
        self._receiving = None
        webhook, self._webhook = self._webhook, None
        if webhook is not None:  # first, so requests in flight still find the application
            await webhook.stop()
        await self._tasks.close(timeout=5.0)  # e.g. a conflict shutting polling down: let it finish, briefly
        application, self._application = self._application, None
        if application is not None:
            try:
                if application.updater is not None and application.updater.running:
                    if isinstance(application.bot, TolerantBot):
                        application.bot.stopping()
                        for _ in range(5):  # a poll that failed just now is seen by PTB's loop first
                            await asyncio.sleep(0)
                    await application.updater.stop()
                if application.running:
                    await application.stop()
                await application.shutdown()
                await application.bot.shutdown()  # in case initialize() failed half-way
            except TelegramError as exc:
                log.warning("telegram: error while shutting down: %s", exc)
        if self._redactor is not None:
            for name in _redacted_loggers():
                logging.getLogger(name).removeFilter(self._redactor)
            self._redactor = None

    # --- inbound ---------------------------------------------------------------------------

    async def _process_webhook_update(self, update: Update) -> None:
        application = self._application
        if application is None:
            raise RuntimeError("the Telegram adapter is stopping")
        await self.inbound.process_webhook_update(application, update)

    async def _answer_callback(self, query_id: str, answer: PressAnswer) -> None:
        """answerCallbackQuery: stops the button's spinner and shows the presser the answer
        (a toast, or an alert they must dismiss)."""
        try:
            await self.application.bot.answer_callback_query(
                query_id, text=answer.text[:200] or None, show_alert=answer.alert and bool(answer.text)
            )
        except TelegramError as exc:
            log.debug("telegram: answerCallbackQuery failed: %s", exc)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        update_id = update.update_id if isinstance(update, Update) else "?"
        log.error("telegram: error while handling update %s: %r", update_id, context.error)

    def _polled(self, updates: Sequence[Update]) -> None:
        self._conflicts = 0
        self._last_poll = time.monotonic()
        self.inbound.polled(updates)

    def _on_poll_error(self, exc: TelegramError) -> None:
        """PTB retries polling errors forever; a 409 conflict is not worth that."""
        if not isinstance(exc, Conflict):
            log.warning("telegram: polling error (will retry): %s", exc)
            return
        self._conflicts += 1
        if self._conflicts <= self.config.conflict_retries:
            log.warning("telegram: 409 conflict while polling (%s); retrying", exc.message)
            return
        self.failure = (
            "Telegram returned 409 Conflict: another process is receiving updates for this bot "
            f"token ({exc.message}). Stop the other instance or delete its webhook; polling stopped."
        )
        log.error("telegram: %s", self.failure)
        self._tasks.spawn(self._stop_polling(), name="stop polling")

    async def _stop_polling(self) -> None:
        application = self._application
        if application is None:
            return
        bot = application.bot
        if isinstance(bot, TolerantBot):
            bot.halt_polling()
        if application.updater is not None and application.updater.running:
            await application.updater.stop()

    def direct_user(self, chat_id: str) -> str | None:
        # A private chat's id is its person's user id; groups and channels have negative ids.
        return chat_id if chat_id.isdigit() else None

    # --- health ----------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return self.config.mode

    async def readiness(self) -> str | None:
        """Polling: a getUpdates answered within twice the poll timeout (a long poll answers
        within the timeout even when nothing happens). Webhook: our server is listening."""
        problem = await super().readiness()
        if problem is not None:
            return problem
        if self._receiving == "polling":
            window = max(2.0 * self.config.poll_timeout, MIN_POLL_WINDOW_S)
            quiet = time.monotonic() - self._last_poll
            if quiet > window:
                return f"getUpdates has not answered for {quiet:.0f}s (poll timeout {self.config.poll_timeout}s)"
        elif self._receiving == "webhook" and self._webhook is None:
            return "the webhook server is not running"
        return None

    async def diagnose(self) -> list[Check]:
        """getMe with the configured token, then the webhook settings (and what Telegram says
        about the webhook it has on record)."""
        token = self.secret("token")
        api_base = self.config.api_base_url or DEFAULT_API_BASE
        # Both of the bot's HTTP sessions are ours to close: a getMe that fails leaves the bot
        # uninitialised, and its shutdown() then closes nothing.
        requests = [AiohttpRequest(1, connect_timeout=5.0, read_timeout=10.0) for _ in range(2)]
        bot: ExtBot[None] = ExtBot(token, base_url=api_base, request=requests[0], get_updates_request=requests[1])
        checks: list[Check] = []
        try:
            await bot.initialize()  # getMe
        except InvalidToken:
            await asyncio.gather(*(request.shutdown() for request in requests))
            return [Check("telegram", False, "getMe refused the token (401 Unauthorized)",
                          "set platforms.telegram.token to the token @BotFather gave you")]
        except TelegramError as exc:
            await asyncio.gather(*(request.shutdown() for request in requests))
            detail = str(exc).replace(token, "***")
            return [Check("telegram", False, f"getMe failed at {_host(api_base)}: {detail}",
                          "check the network, or platforms.telegram.api_base_url")]
        try:
            checks.append(Check("telegram", True, f"token accepted by getMe (@{bot.bot.username})"))
            checks.extend(await self._webhook_checks(bot))
        finally:
            await bot.shutdown()
        return checks

    async def _webhook_checks(self, bot: ExtBot[None]) -> list[Check]:
        name = "telegram webhook"
        if self.config.mode != "webhook":
            return [Check(name, True, "none needed (polling)")]
        url = self.config.webhook_url or ""
        parts = urlsplit(url)
        checks: list[Check] = []
        if not url:
            return [Check(name, False, "mode is webhook but webhook_url is not set",
                          "set platforms.telegram.webhook_url to the public https URL of this bot")]
        if parts.scheme != "https":
            checks.append(Check(name, False, f"{url} is not https; Telegram delivers only to https URLs",
                                "put the bot behind TLS and use an https webhook_url"))
        if (parts.port or 443) not in WEBHOOK_PORTS:
            checks.append(Check(name, False, f"{url} uses port {parts.port}; Telegram delivers only to 443, 80, 88 or 8443",
                                "expose the webhook on one of those ports"))
        if self.config.webhook_secret is None or not self.config.webhook_secret.get_secret_value():
            checks.append(Check(name, False, "no webhook_secret: anyone who finds the URL can post updates",
                                "set platforms.telegram.webhook_secret to a random string"))
        try:
            info = await bot.get_webhook_info()
        except TelegramError as exc:
            checks.append(Check(name, False, f"getWebhookInfo failed: {exc}", "check the network"))
            return checks
        if info.url == url and info.last_error_message:
            checks.append(Check(name, False, f"Telegram reports for {url}: {info.last_error_message}",
                                "check that the URL reaches this host (DNS, port, TLS certificate)"))
        elif not checks:
            registered = "registered" if info.url == url else "registered by botweave at start"
            checks.append(Check(name, True, f"{url} ({registered})"))
        return checks
