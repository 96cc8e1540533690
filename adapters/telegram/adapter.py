"""`TelegramAdapter`: python-telegram-bot's `Application` wired to the botweave runtime.

Inbound, PTB fetches updates by long polling (the default) and hands each to one handler that
normalises it (see `inbound`) and dispatches it; dispatch returns at once, so PTB's loop is
never blocked by an agent. In webhook mode our own server (see `webhook`) receives the updates
and runs each through the same handlers, answering 200 only once the runtime has it (500 if
the hand-over failed, so Telegram redelivers). Polling likewise sends the offset that
acknowledges an update only after its hand-over finished. Outbound calls go through
`outbound.Outbound`, which keeps each chat in order under Telegram's rate limits.

The application is built with `ApplicationBuilder().bot(...)` rather than `.token(...)`
because the bot is `client.TolerantBot`, an `ExtBot` whose polling survives a malformed
update; `api_base_url` / `file_base_url` are passed to it the same way `.base_url()` would.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from botweave.adapter import Adapter
from botweave.adapters.telegram.client import PerChatUpdateProcessor, TolerantBot
from botweave.adapters.telegram.config import TelegramConfig
from botweave.adapters.telegram.inbound import Me, normalise
from botweave.adapters.telegram.outbound import Formatted, Outbound, failure, not_modified
from botweave.adapters.telegram.webhook import WebhookServer
from botweave.types import BotUser, MessageActionResult, PlatformCapabilities
from telegram import Message, ReactionTypeCustomEmoji, ReactionTypeEmoji, ReplyParameters, Update
from telegram.constants import ReactionEmoji
from telegram.error import ChatMigrated, Conflict, InvalidToken, TelegramError
from telegram.ext import Application, ApplicationBuilder, ContextTypes, TypeHandler
from telegram.request import HTTPXRequest

log = logging.getLogger(__name__)

T = TypeVar("T")

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

# The bot is built here (not by ApplicationBuilder), so its HTTP pools are set here: enough
# connections that chats never queue behind each other within Telegram's ~30 requests/s
# budget, and exactly one for the long poll. PTB handles one update at a time unless told
# otherwise; updates of different chats run concurrently (see client.PerChatUpdateProcessor).
SEND_POOL_SIZE = 32
HANDOVER_TIMEOUT_S = 30.0  # longest a poll, or a webhook answer, waits for the runtime to take updates
CONCURRENT_UPDATES = 64
REACTION_EMOJI = {str(e.value) for e in ReactionEmoji}


class _Handover:
    """The outcome of handing one webhook update to the runtime."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: BaseException | None = None


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
    known = {"httpx", "telegram.Bot", "telegram.ext.ExtBot", "telegram.ext.Updater", "telegram.ext.Application"}
    known.update(name for name in logging.Logger.manager.loggerDict if name.startswith("telegram"))
    return sorted(known)


def _as_chat(chat_id: str) -> int | str:
    """Numeric ids go out as ints; `@channelname` targets are passed through."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


def _as_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _file_base(api_base: str) -> str:
    """A self-hosted Bot API server serves files under /file/bot next to /bot."""
    if api_base.rstrip("/").endswith("/bot"):
        return api_base.rstrip("/")[: -len("bot")] + "file/bot"
    return DEFAULT_FILE_BASE


def _reaction(emoji: str) -> ReactionTypeEmoji | ReactionTypeCustomEmoji | None:
    """Telegram accepts only its fixed reaction set (and custom emoji by id)."""
    if emoji.startswith("custom:") and len(emoji) > len("custom:"):
        return ReactionTypeCustomEmoji(emoji[len("custom:"):])
    if emoji in REACTION_EMOJI:
        return ReactionTypeEmoji(emoji)
    bare = emoji.replace("\ufe0f", "")
    for allowed in REACTION_EMOJI:
        if allowed.replace("\ufe0f", "") == bare:
            return ReactionTypeEmoji(allowed)
    return None


class TelegramAdapter(Adapter):
    """Telegram via python-telegram-bot; see the module docstring for the data flow."""

    platform = "telegram"
    capabilities = PlatformCapabilities(
        max_message_length=4096,
        length_unit="utf16",
        can_edit=True,
        can_delete=True,
        can_react=True,
        threads=True,
        typing=True,
        markdown="telegram",
        edit_floor_ms=1100,
        group_edit_floor_ms=3100,
    )
    # Telegram never tells bots about ordinary deletions, so message_deleted is absent.
    emits = frozenset(
        {"reaction_added", "reaction_removed", "message_edited", "member_joined", "member_left", "thread_created"}
    )
    typing_interval_s = 4.0

    def __init__(self, config: TelegramConfig | Mapping[str, Any] | None = None) -> None:
        if config is None or isinstance(config, Mapping):
            config = TelegramConfig.model_validate(dict(config or {}))
        super().__init__(config)
        self.config: TelegramConfig = config
        self.outbound = Outbound(global_limit=(max(1, int(config.requests_per_second)), 1.0))
        #: Set when the adapter gave up (e.g. another instance polls with the same token).
        self.failure: str | None = None
        self._application: Application | None = None
        self._me: Me | None = None
        self._conflicts = 0
        self._migrated: dict[str, str] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._unhanded: set[int] = set()  # fetched update ids not yet handed to the runtime
        self._all_handed = asyncio.Event()
        self._webhook: WebhookServer | None = None
        self._handovers: dict[int, _Handover] = {}  # id(update) → outcome, for webhook updates
        self._redactor: _TokenRedactor | None = None

    def __repr__(self) -> str:
        return f"TelegramAdapter(mode={self.config.mode!r}, running={self.running})"

    @property
    def running(self) -> bool:
        """True while logged in (receiving or send-only)."""
        return self._application is not None and self._me is not None

    @property
    def application(self) -> Application:
        """The PTB application, for users who want to add their own handlers."""
        if self._application is None:
            raise RuntimeError("the Telegram adapter is not started")
        return self._application

    # --- lifecycle -------------------------------------------------------------------------

    def _token(self) -> str:
        token = self.config.token.get_secret_value().strip() if self.config.token else ""
        if not token:
            raise ValueError("platforms.telegram.token is not set (e.g. token: ${TELEGRAM_BOT_TOKEN})")
        return token

    def _build(self, token: str) -> Application:
        api_base = self.config.api_base_url or DEFAULT_API_BASE
        bot = TolerantBot(
            token,
            base_url=api_base,
            base_file_url=self.config.file_base_url or _file_base(api_base),
            # A send whose answer never came may have been delivered and is not retried, so give
            # slow answers time rather than turning them into "outcome unknown".
            request=HTTPXRequest(
                connection_pool_size=SEND_POOL_SIZE, pool_timeout=10.0, read_timeout=15.0, write_timeout=15.0
            ),
            get_updates_request=HTTPXRequest(connection_pool_size=1, read_timeout=10.0),
            polled=self._polled,
            before_poll=self._handed_over,
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
        token = self._token()
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
            raise RuntimeError("Telegram rejected the bot token (check platforms.telegram.token)") from None
        except BaseException:
            await self.stop()
            raise

    async def _launch(self, application: Application, inbound: bool) -> None:
        await application.initialize()
        me = application.bot.bot
        self._me = Me(user_id=me.id, username=me.username or "")
        self.self_user = BotUser(str(me.id), me.username or "", me.full_name, True)
        if not inbound:
            log.info("telegram: @%s ready to send (not receiving)", me.username)
            return
        application.add_handler(TypeHandler(Update, self._on_update))
        application.add_error_handler(self._on_error)
        await application.start()
        await self._receive(application)
        log.info("telegram: @%s receiving updates by %s", me.username, self.config.mode)

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
        webhook, self._webhook = self._webhook, None
        if webhook is not None:  # first, so requests in flight still find the application
            await webhook.stop()
        if self._tasks:  # e.g. a conflict shutting polling down: let it finish, briefly
            _, pending = await asyncio.wait(set(self._tasks), timeout=5.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        application, self._application = self._application, None
        if application is not None:
            try:
                if application.updater is not None and application.updater.running:
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

    async def _handed_over(self) -> None:
        """Wait (bounded) until every fetched update reached the runtime, so the offset that
        acknowledges them to Telegram is sent only once they are recorded (SPEC §12)."""
        if not self._unhanded:
            return
        self._all_handed.clear()
        try:
            await asyncio.wait_for(self._all_handed.wait(), timeout=HANDOVER_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("telegram: %d update(s) still not handed over; polling on", len(self._unhanded))
            self._unhanded.clear()

    async def _process_webhook_update(self, update: Update) -> None:
        """Run a webhook update through the application's handlers (via the update processor,
        so a chat's updates stay in order while other chats run concurrently) and return once
        the runtime has it; raise if the hand-over failed, so Telegram is answered 500."""
        application = self._application
        if application is None:
            raise RuntimeError("the Telegram adapter is stopping")
        handover = self._handovers[id(update)] = _Handover()
        try:
            await application.update_processor.process_update(update, application.process_update(update))
        finally:
            self._handovers.pop(id(update), None)
        if handover.error is not None:
            raise RuntimeError(f"hand-over failed: {handover.error!r}") from handover.error

    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        handover = self._handovers.get(id(update))
        try:
            await self._handle_update(update, strict=handover is not None)
        except Exception as exc:
            if handover is not None:  # PTB passes it to the error handlers; the webhook answers 500
                handover.error = exc
            raise
        finally:
            self._unhanded.discard(update.update_id)
            if not self._unhanded:
                self._all_handed.set()

    async def _handle_update(self, update: Update, *, strict: bool = False) -> None:
        """Normalise and dispatch. `strict` (webhook updates) raises when the runtime did not
        accept an item, so the webhook answers with an error and Telegram redelivers."""
        if self._me is None:
            if strict:
                raise RuntimeError("the Telegram adapter is not logged in")
            return
        if update.callback_query is not None:
            self._background(self._answer_callback(update.callback_query.id))
        try:
            items = normalise(update, self._me)
        except Exception:
            log.exception("telegram: skipped update %s that could not be normalised", update.update_id)
            return
        for item in items:
            if not await self.dispatch(item) and strict:
                raise RuntimeError("the runtime did not accept the update")

    async def _answer_callback(self, query_id: str) -> None:
        """Stop the button's spinner; the agent's answer arrives as a normal message."""
        try:
            await self.application.bot.answer_callback_query(query_id)
        except TelegramError as exc:
            log.debug("telegram: answerCallbackQuery failed: %s", exc)

    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        update_id = update.update_id if isinstance(update, Update) else "?"
        log.error("telegram: error while handling update %s: %r", update_id, context.error)

    def _polled(self, updates: Sequence[Update]) -> None:
        self._conflicts = 0
        self._unhanded.update(update.update_id for update in updates)

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
        self._background(self._stop_polling())

    async def _stop_polling(self) -> None:
        application = self._application
        if application is None:
            return
        bot = application.bot
        if isinstance(bot, TolerantBot):
            bot.halt_polling()
        if application.updater is not None and application.updater.running:
            await application.updater.stop()

    def _background(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- outbound --------------------------------------------------------------------------

    def _target(self, chat_id: str) -> str:
        return self._migrated.get(chat_id, chat_id)

    async def _with_migration(self, chat_id: str, action: Callable[[str], Awaitable[T]]) -> T:
        """A group that became a supergroup has a new id; follow it once and remember it."""
        target = self._target(chat_id)
        try:
            return await action(target)
        except ChatMigrated as exc:
            new_id = str(exc.new_chat_id)
            log.info("telegram: chat %s migrated to %s", chat_id, new_id)
            self._migrated[chat_id] = new_id
            return await action(new_id)

    async def send(
        self, chat_id: str, text: str, *, thread_id: str | None = None, reply_to: str | None = None
    ) -> MessageActionResult:
        """Post one chunk; rendered markdown first, plain text if Telegram rejects the entities."""
        if self._application is None:
            return MessageActionResult("no_route", chat_id, "send: the Telegram adapter is not started")
        if not text.strip():
            return MessageActionResult("failed", chat_id, "send: empty message")
        bot = self._application.bot
        formatted = Formatted(text, bot)
        reply_id = _as_int(reply_to)
        reply = ReplyParameters(message_id=reply_id, allow_sending_without_reply=True) if reply_id else None

        async def post(target: str) -> Message:
            return await formatted.apply(
                lambda body, entities: bot.send_message(
                    chat_id=_as_chat(target),
                    text=body,
                    entities=entities,
                    message_thread_id=_as_int(thread_id),
                    reply_parameters=reply,
                )
            )

        try:
            message = await self._with_migration(
                chat_id,
                lambda target: self.outbound.call(target, lambda: post(target), idempotent=False, new_message=True),
            )
        except TelegramError as exc:
            return failure(exc, chat_id, "send")
        return MessageActionResult("ok", chat_id, message_id=str(message.message_id))

    async def edit(
        self, chat_id: str, message_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        """Replace a message's text; 'not modified' counts as success (the text is there)."""
        if self._application is None:
            return MessageActionResult("no_route", chat_id, "edit: the Telegram adapter is not started")
        if not text.strip():
            return MessageActionResult("failed", chat_id, "edit: empty message")
        bot = self._application.bot
        formatted = Formatted(text, bot)

        async def change(target: str) -> Any:
            return await formatted.apply(
                lambda body, entities: bot.edit_message_text(
                    chat_id=_as_chat(target), message_id=int(message_id), text=body, entities=entities
                )
            )

        return await self._act(chat_id, message_id, "edit", change)

    async def delete(self, chat_id: str, message_id: str) -> MessageActionResult:
        if self._application is None:
            return MessageActionResult("no_route", chat_id, "delete: the Telegram adapter is not started")
        bot = self._application.bot

        async def remove(target: str) -> Any:
            return await bot.delete_message(chat_id=_as_chat(target), message_id=int(message_id))

        return await self._act(chat_id, message_id, "delete", remove)

    async def react(self, chat_id: str, message_id: str, emoji: str) -> MessageActionResult:
        """setMessageReaction; emoji outside Telegram's reaction set are `unsupported`."""
        if self._application is None:
            return MessageActionResult("no_route", chat_id, "react: the Telegram adapter is not started")
        reaction = _reaction(emoji)
        if reaction is None:
            detail = f"react: Telegram does not allow {emoji!r} as a reaction"
            return MessageActionResult("unsupported", chat_id, detail)
        bot = self._application.bot

        async def set_reaction(target: str) -> Any:
            return await bot.set_message_reaction(
                chat_id=_as_chat(target), message_id=int(message_id), reaction=reaction
            )

        return await self._act(chat_id, message_id, "react", set_reaction)

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None = None) -> MessageActionResult:
        """A forum topic (createForumTopic). Only forum supergroups have topics, so anywhere
        else this is `unsupported`; Telegram does not start topics from a message, so
        `message_id` is not used."""
        if self._application is None:
            return MessageActionResult("no_route", chat_id, "create_thread: the Telegram adapter is not started")
        bot = self._application.bot
        title = name.strip()[:128] or "Thread"

        async def create(target: str) -> Any:
            return await bot.create_forum_topic(chat_id=_as_chat(target), name=title)

        try:
            topic = await self._with_migration(
                chat_id,
                lambda target: self.outbound.call(target, lambda: create(target), idempotent=False, new_message=True),
            )
        except TelegramError as exc:
            if "not a forum" in exc.message.lower() or "chat_not_forum" in exc.message.lower():
                return MessageActionResult("unsupported", chat_id, f"create_thread: {exc.message}")
            return failure(exc, chat_id, "create_thread")
        return MessageActionResult("ok", chat_id, "forum topic created", thread_id=str(topic.message_thread_id))

    async def _act(
        self, chat_id: str, message_id: str, action: str, call: Callable[[str], Awaitable[Any]]
    ) -> MessageActionResult:
        """Edits, deletes and reactions: idempotent, so transient failures are retried."""
        if _as_int(message_id) is None:
            return MessageActionResult("no_route", chat_id, f"{action}: {message_id!r} is not a Telegram message id")
        try:
            await self._with_migration(
                chat_id, lambda target: self.outbound.call(target, lambda: call(target), idempotent=True)
            )
        except TelegramError as exc:
            if action == "edit" and not_modified(exc):
                return MessageActionResult("ok", chat_id, "edit: message is not modified", message_id=message_id)
            return failure(exc, chat_id, action)
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def typing(self, chat_id: str, *, thread_id: str | None = None) -> None:
        """Best effort; skipped while the chat is cooling down from a 429."""
        if self._application is None:
            return
        target = self._target(chat_id)
        if self.outbound.gate.cooling(target):
            return
        try:
            await self._application.bot.send_chat_action(
                chat_id=_as_chat(target), action="typing", message_thread_id=_as_int(thread_id)
            )
        except TelegramError as exc:
            log.debug("telegram: typing indicator failed in %s: %s", chat_id, exc)

    async def file_url(self, file_id: str) -> str | None:
        """A download URL for an attachment's `file_id` (getFile), or None if unavailable."""
        if self._application is None:
            return None
        try:
            file = await self._application.bot.get_file(file_id)
        except TelegramError as exc:
            log.warning("telegram: getFile failed: %s", exc)
            return None
        return file.file_path
