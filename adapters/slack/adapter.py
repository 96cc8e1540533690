"""The Slack adapter: slack-bolt's `AsyncApp` over Socket Mode or the HTTP Events API.

Receiving is bolt's job (signature and timestamp checks, `url_verification`, acknowledging
within Slack's 3 seconds before any listener runs); this adapter adds what Slack leaves to
apps: one turn per post although Slack may deliver it several times (retries with
`X-Slack-Retry-Num`, Socket Mode redeliveries, and the `message` + `app_mention` pair of one
post), keyed on (channel, ts) for posts and on the Events API `event_id` for other events.
The bot's own posts are read (to learn which threads it is in) and then dropped.

Sending goes through slack_sdk's `AsyncWebClient`, whose `AsyncRateLimitErrorRetryHandler`
waits out `Retry-After` on HTTP 429 (a 429 means nothing was posted, so retrying is safe).
`chat.postMessage` gets its own client that retries a connection error only when the
connection was never made: a reply that may have been delivered is never posted twice.

Rooms post each agent's turn under the agent's own name and icon (`username`, `icon_emoji` /
`icon_url`), which Slack allows only with the `chat:write.customize` scope. Without it Slack
refuses the post (`missing_scope`, needed `chat:write.customize`); the adapter then tells the
operator once, shows the agent's name in bold in front of the text for the rest of the
process, and posts the refused turn again that way (a refused post was not delivered).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Awaitable
from typing import Any

from aiohttp import ClientConnectorError, web
from botweave.adapter import Adapter
from botweave.adapters.cache import BoundedCache
from botweave.adapters.slack.config import SlackConfig
from botweave.types import (
    AgentIdentity,
    BotMessage,
    BotUser,
    MessageActionResult,
    PlatformCapabilities,
    PlatformEvent,
)
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from .directory import SlackDirectory
from .format import emoji_to_reaction, markdown_to_mrkdwn
from .inbound import MESSAGE_SUBTYPES, SelfIdentity, SlackInbound

log = logging.getLogger(__name__)

DEFAULT_API_BASE = "https://slack.com/api/"
ACK_DEADLINE_S = 2.0  # Slack wants an ack within 3 s
SOCKET_CONNECT_TIMEOUT_S = 30.0
RATE_LIMIT_RETRIES = 3
API_TIMEOUT_S = 30

# Slack error codes -> MessageActionResult status. Anything not listed is "failed".
_NO_ROUTE_ERRORS = frozenset({"channel_not_found", "message_not_found", "thread_not_found"})
_ALREADY_DONE_ERRORS = frozenset({"already_reacted"})
_UNSUPPORTED_ERRORS = frozenset({"method_not_supported_for_channel_type"})
#: The scope that lets a bot token post with its own `username` and icon.
CUSTOMIZE_SCOPE = "chat:write.customize"
#: The message metadata event type of a keyed post; its payload holds the chunk's key.
CHUNK_EVENT = "botweave_chunk"
#: A keyed post is looked for among messages at most this much older than its intent.
LOOKUP_MARGIN_S = 120.0
LOOKUP_PAGES = 5


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
        edit_floor_ms=1000,  # chat.update is tier 3 (~50/min): one edit a second per stream
    )
    # A post can carry message metadata and be found again by it (conversations.history).
    idempotency = "lookup"
    # Slack has no "thread created" event: a thread exists once someone replies.
    emits = frozenset(
        {"message_edited", "message_deleted", "reaction_added", "reaction_removed", "member_joined", "member_left"}
    )

    def __init__(self, config: SlackConfig | None = None) -> None:
        super().__init__(config or SlackConfig())
        self.config: SlackConfig
        self._client: AsyncWebClient | None = None
        self._post_client: AsyncWebClient | None = None
        self._bolt: AsyncApp | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._runner: web.AppRunner | None = None
        self._inbound: SlackInbound | None = None
        self._directory: SlackDirectory | None = None
        self._seen: BoundedCache[tuple[str, ...], bool] = BoundedCache(4096)
        self._bot_threads: BoundedCache[tuple[str, str], bool] = BoundedCache(4096)
        self._dm_channels: BoundedCache[str, str] = BoundedCache(1024)
        self.http_port: int | None = None  # the port the Events API endpoint listens on
        #: Inbound counters (received, duplicate, dispatched, settled): cheap to keep, and how
        #: an operator or a test tells "Slack never sent it" from "we dropped it".
        self.inbound_stats: Counter[str] = Counter()
        self._accepting: set[asyncio.Task[None]] = set()  # events still being recorded after their ack
        #: Set once Slack refused a custom `username` for want of `chat:write.customize`: the
        #: scope only changes on a reinstall, so asking again per post would only cost a refusal.
        self.identities_refused = False

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self, *, inbound: bool = True) -> None:
        """Log in with `auth.test`; with `inbound`, also start receiving in the configured mode.

        A send-only instance (a worker answering from the shared stream) opens no Socket Mode
        connection and no HTTP port: one receiving instance per app is what Slack expects.
        """
        self._client = self._web_client("default")
        self._post_client = self._web_client("post")
        identity = await self._login(self._client)
        self._directory = SlackDirectory(self._web_client("lookup"))
        self._inbound = SlackInbound(
            self._directory, identity, self._bot_threads, reply_in_thread=self.config.reply_in_thread
        )
        if not inbound:
            return
        self._bolt = self._build_bolt_app(self._client)
        if self.config.mode == "socket":
            await self._start_socket_mode(self._bolt)
        else:
            await self._start_http(self._bolt)

    async def stop(self) -> None:
        if self._socket is not None:
            try:
                await self._socket.close_async()
            except Exception:
                log.exception("slack: closing the Socket Mode connection failed")
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

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
            handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES))
        base_url = self.config.api_base_url or DEFAULT_API_BASE
        return AsyncWebClient(
            token=_secret(self.config.bot_token),
            base_url=base_url if base_url.endswith("/") else base_url + "/",
            timeout=API_TIMEOUT_S,
            retry_handlers=handlers,
        )

    async def _login(self, client: AsyncWebClient) -> SelfIdentity:
        try:
            auth = await client.auth_test()
        except SlackApiError as exc:
            raise RuntimeError(
                f"slack: auth.test failed ({exc.response.get('error')}); check platforms.slack.bot_token"
            ) from None
        identity = SelfIdentity(
            user_id=str(auth["user_id"]), bot_id=auth.get("bot_id"), team_id=auth.get("team_id")
        )
        name = str(auth.get("user") or "")
        self.self_user = BotUser(user_id=identity.user_id, username=name, display_name=name, is_bot=True)
        return identity

    def _build_bolt_app(self, client: AsyncWebClient) -> AsyncApp:
        http = self.config.mode == "http"
        app = AsyncApp(
            client=client,
            signing_secret=_secret(self.config.signing_secret) if http else None,
            request_verification_enabled=http,  # Socket Mode is authenticated by the app token
            # The bot's own posts are dropped by the adapter, after noting the threads they
            # are in (so a thread another process of this bot replied in counts as addressed).
            ignoring_self_events_enabled=False,
            # The listener records the event (hands it to the runtime: with Redis, appends it to
            # the inbound stream) and then acknowledges, within ACK_DEADLINE_S.
            process_before_response=True,
            logger=logging.getLogger("botweave.adapters.slack.bolt"),
        )
        app.event(re.compile(".*"))(self._on_event)
        app.command(re.compile(".*"))(self._on_command)
        return app

    async def _start_socket_mode(self, app: AsyncApp) -> None:
        app_token = _secret(self.config.app_token)
        # The SDK retries a failed apps.connections.open forever; a wrong app token should
        # instead fail start() with a message that says which setting to fix. The URL this
        # check obtains is the one the client then connects to.
        assert self._client is not None
        try:
            opened = await self._client.apps_connections_open(app_token=app_token)
        except SlackApiError as exc:
            raise RuntimeError(
                f"slack: apps.connections.open failed ({exc.response.get('error')}); check "
                "platforms.slack.app_token (an xapp- token with connections:write)"
            ) from None
        self._socket = AsyncSocketModeHandler(app, app_token=app_token, web_client=self._client)
        self._socket.client.wss_uri = str(opened["url"])
        try:
            await asyncio.wait_for(self._socket.connect_async(), SOCKET_CONNECT_TIMEOUT_S)
        except asyncio.TimeoutError:
            await self.stop()
            raise RuntimeError("slack: the Socket Mode connection did not open in time") from None

    async def _start_http(self, app: AsyncApp) -> None:
        web_app = web.Application()
        web_app.router.add_post(self.config.http_path, self._handle_http)
        self._runner = web.AppRunner(web_app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.http_host, self.config.http_port)
        await site.start()
        self.http_port = self.config.http_port
        log.info("slack: Events API listening on %s:%s%s", self.config.http_host, self.http_port, self.config.http_path)

    async def _handle_http(self, request: web.Request) -> web.Response:
        """One Events API request through bolt (which verifies and acknowledges it)."""
        assert self._bolt is not None
        bolt_response = await self._bolt.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    # --- inbound -------------------------------------------------------------------------

    async def _on_event(self, ack: AsyncAck, body: dict[str, Any], event: dict[str, Any]) -> None:
        """Every Events API event: dedup, normalise, dispatch, then acknowledge."""
        self.inbound_stats["received"] += 1
        await self._record_then_ack(self._accept(event, body), ack)

    async def _record_then_ack(self, accept: Awaitable[None], ack: AsyncAck) -> None:
        """Acknowledge once the event reached the runtime, so Slack redelivers anything a
        crash lost; but never later than ACK_DEADLINE_S (slow look-ups finish after it)."""

        async def settle() -> None:
            try:
                await accept
            finally:
                self.inbound_stats["settled"] += 1

        task = asyncio.create_task(settle())
        self._accepting.add(task)
        task.add_done_callback(self._accepting.discard)
        await asyncio.wait({task}, timeout=ACK_DEADLINE_S)
        await ack()

    async def _accept(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        key = _dedup_key(event, body)
        if key is not None and not self._seen.add_if_new(key, True):
            self.inbound_stats["duplicate"] += 1
            log.debug("slack: duplicate delivery of %s dropped", key)
            return
        try:
            item = await self._normalise(event, body)
        except Exception:
            if key is not None:
                self._seen.discard(key)  # let Slack's retry have another go
            log.exception("slack: could not read a %s event", event.get("type"))
            return
        if item is not None:
            self.inbound_stats["dispatched"] += 1
            await self.dispatch(item)

    async def _normalise(self, event: dict[str, Any], body: dict[str, Any]) -> BotMessage | PlatformEvent | None:
        assert self._inbound is not None
        kind = event.get("type")
        if kind == "message":
            return await self._inbound.message_event(event, body)
        if kind == "app_mention":
            return await self._inbound.message(event, body, via_mention=True)
        if kind in ("reaction_added", "reaction_removed"):
            return self._inbound.reaction(event, body)
        if kind in ("member_joined_channel", "member_left_channel"):
            return self._inbound.membership(event, body)
        return None

    async def _on_command(self, ack: AsyncAck, body: dict[str, Any]) -> None:
        """Slash commands: recorded, acknowledged, then run as a turn."""
        self.inbound_stats["received"] += 1
        await self._record_then_ack(self._accept_command(body), ack)

    async def _accept_command(self, body: dict[str, Any]) -> None:
        assert self._inbound is not None
        trigger = str(body.get("trigger_id") or "")
        if trigger and not self._seen.add_if_new(("command", trigger), True):
            self.inbound_stats["duplicate"] += 1
            return
        self.inbound_stats["dispatched"] += 1
        await self.dispatch(await self._inbound.command(body))

    # --- outbound ------------------------------------------------------------------------

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        reply_to: str | None = None,
    ) -> MessageActionResult:
        """Post one message; into `thread_id` when the conversation is a thread.

        `reply_to` has no Slack equivalent outside threads (and with `reply_in_thread` the
        inbound message already carries its own ts as `thread_id`), so it is not used.
        """
        body = markdown_to_mrkdwn(text)
        if not body.strip():
            return MessageActionResult("failed", chat_id, "empty message")
        try:
            return await self._post_message(chat_id, body, thread_id)
        except SlackApiError as exc:
            return _api_error_result(exc, chat_id)

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None = None, reply_to: str | None = None
    ) -> MessageActionResult:
        """`send`, with the chunk's key in the message metadata so `find_sent` can tell
        whether an attempt whose answer was lost posted it."""
        body = markdown_to_mrkdwn(text)
        if not body.strip():
            return MessageActionResult("failed", chat_id, "empty message")
        metadata = {"event_type": CHUNK_EVENT, "event_payload": {"key": key}}
        try:
            return await self._post_message(chat_id, body, thread_id, metadata=metadata)
        except SlackApiError as exc:
            return _api_error_result(exc, chat_id)

    async def find_sent(self, chat_id: str, key: str, *, thread_id: str | None = None, since: float) -> str | None:
        """The ts of our post carrying `key`: the thread's replies, or the channel's newest
        messages back to a little before `since`. Raises when Slack cannot be asked."""
        assert self._client is not None
        oldest_wanted = since - LOOKUP_MARGIN_S
        cursor: str | None = None
        for _ in range(LOOKUP_PAGES):
            if thread_id:
                response = await self._client.conversations_replies(
                    channel=chat_id, ts=thread_id, include_all_metadata=True, limit=200, cursor=cursor
                )
            else:
                response = await self._client.conversations_history(
                    channel=chat_id, include_all_metadata=True, limit=100, cursor=cursor
                )
            messages = list(response.get("messages") or [])
            for message in messages:
                metadata = message.get("metadata") or {}
                if metadata.get("event_type") == CHUNK_EVENT and (metadata.get("event_payload") or {}).get("key") == key:
                    return str(message["ts"])
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
            if cursor is None:
                return None
            if not thread_id and messages and _ts_seconds(messages[-1]) < oldest_wanted:
                return None  # newest first: every later page is older still
        return None

    async def send_as(
        self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        """Post one room turn under the agent's own name and icon.

        Slack shows `username` and `icon_emoji` (or `icon_url`) in place of the app's own, so
        people in the channel see who spoke without a prefix in the text. Without the
        `chat:write.customize` scope the name goes in front of the text in bold instead.
        """
        if self.identities_refused:
            return await super().send_as(identity, chat_id, text, thread_id=thread_id)
        body = markdown_to_mrkdwn(text)
        if not body.strip():
            return MessageActionResult("failed", chat_id, "empty message")
        try:
            return await self._post_message(chat_id, body, thread_id, **_identity_params(identity))
        except SlackApiError as exc:
            if not _lacks_customize_scope(exc):
                return _api_error_result(exc, chat_id)
        # Slack answered with a refusal, so nothing was posted: posting the turn again with
        # the name in the text cannot show it twice.
        if not self.identities_refused:
            self.identities_refused = True
            log.warning(
                "slack: the app lacks the %s scope, so room agents cannot post under their own "
                "names; their names are shown in bold in the text instead. Add %s under OAuth & "
                "Permissions and reinstall the app to post as each agent.",
                CUSTOMIZE_SCOPE,
                CUSTOMIZE_SCOPE,
            )
        return await super().send_as(identity, chat_id, text, thread_id=thread_id)

    async def _post_message(
        self, chat_id: str, body: str, thread_id: str | None, **extra: Any
    ) -> MessageActionResult:
        """One `chat.postMessage` of already converted mrkdwn.

        A `SlackApiError` is raised to the caller: Slack answered and refused, so the post
        provably did not happen and the caller may decide to post differently. Any other
        failure may have happened after Slack posted it, so it is reported, never retried.
        """
        assert self._post_client is not None
        kwargs: dict[str, Any] = {"channel": chat_id, "text": body, **extra}
        if thread_id:
            kwargs["thread_ts"] = thread_id
        try:
            response = await self._post_client.chat_postMessage(**kwargs)
        except SlackApiError:
            raise
        except Exception as exc:
            log.warning("slack: chat.postMessage to %s failed: %s", chat_id, type(exc).__name__)
            return MessageActionResult("failed", chat_id, f"{type(exc).__name__}; not resent (may have been delivered)")
        ts = str(response.get("ts") or "")
        self._remember_own(chat_id, ts, thread_id, body)
        return MessageActionResult("ok", chat_id, message_id=ts or None)

    async def send_direct(self, user_id: str, text: str) -> MessageActionResult:
        """A DM to a user: `conversations.open` gives the DM channel, then a normal post."""
        channel = await self._dm_channel(user_id)
        if channel is None:
            return MessageActionResult("no_route", user_id, "cannot open a direct message")
        return await self.send(channel, text)

    async def _dm_channel(self, user_id: str) -> str | None:
        cached = self._dm_channels.get(user_id)
        if cached is not None:
            return cached
        assert self._client is not None
        try:
            response = await self._client.conversations_open(users=user_id)
        except Exception as exc:
            detail = exc.response.get("error") if isinstance(exc, SlackApiError) else type(exc).__name__
            log.warning("slack: conversations.open for %s failed: %s", user_id, detail)
            return None
        channel = str((response.get("channel") or {}).get("id") or "")
        if channel:
            self._dm_channels.put(user_id, channel)
        return channel or None

    async def edit(
        self, chat_id: str, message_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        body = markdown_to_mrkdwn(text)
        result = await self._call("chat_update", chat_id, channel=chat_id, ts=message_id, text=body)
        if result.ok:
            self._remember_own(chat_id, message_id, thread_id, body)
        return result

    async def delete(self, chat_id: str, message_id: str) -> MessageActionResult:
        return await self._call("chat_delete", chat_id, channel=chat_id, ts=message_id)

    async def react(self, chat_id: str, message_id: str, emoji: str) -> MessageActionResult:
        name = emoji_to_reaction(emoji)
        return await self._call("reactions_add", chat_id, channel=chat_id, timestamp=message_id, name=name)

    async def _call(self, method: str, chat_id: str, **kwargs: Any) -> MessageActionResult:
        """An idempotent Web API call reported as a MessageActionResult, never raised."""
        assert self._client is not None
        try:
            await getattr(self._client, method)(**kwargs)
        except SlackApiError as exc:
            return _api_error_result(exc, chat_id)
        except Exception as exc:
            log.warning("slack: %s in %s failed: %s", method, chat_id, type(exc).__name__)
            return MessageActionResult("failed", chat_id, type(exc).__name__)
        return MessageActionResult("ok", chat_id, message_id=kwargs.get("ts") or kwargs.get("timestamp"))

    def _remember_own(self, chat_id: str, ts: str, thread_id: str | None, text: str) -> None:
        """Remember threads the bot posted in (they address it) and its messages as roots."""
        if thread_id:
            self._bot_threads.put((chat_id, thread_id), True)
        if ts and self._directory is not None and self.self_user is not None:
            self._directory.remember_root(chat_id, ts, {"ts": ts, "text": text, "user": self.self_user.user_id})


def _dedup_key(event: dict[str, Any], body: dict[str, Any]) -> tuple[str, ...] | None:
    """One key per post (shared by its `message` and `app_mention`), else per event id."""
    kind = event.get("type")
    is_post = kind == "app_mention" or (kind == "message" and event.get("subtype") in MESSAGE_SUBTYPES)
    if is_post and event.get("channel") and event.get("ts"):
        return ("post", str(event["channel"]), str(event["ts"]))
    event_id = body.get("event_id")
    return ("event", str(event_id)) if event_id else None


def _identity_params(identity: AgentIdentity) -> dict[str, str]:
    """`chat.postMessage` authorship fields for an agent: its name and one icon.

    Slack lets `icon_emoji` override `icon_url`, so only one is sent; an emoji configured as
    a character or as `name` is given as the `:name:` Slack expects.
    """
    params = {"username": identity.name}
    if identity.icon_emoji and identity.icon_emoji.strip():
        params["icon_emoji"] = f":{emoji_to_reaction(identity.icon_emoji)}:"
    elif identity.avatar_url:
        params["icon_url"] = identity.avatar_url
    return params


def _lacks_customize_scope(exc: SlackApiError) -> bool:
    """Slack's refusal of a custom username: `missing_scope` naming `chat:write.customize`."""
    response = exc.response
    if response.get("error") != "missing_scope":
        return False
    needed = str(response.get("needed") or "")
    return CUSTOMIZE_SCOPE in {scope.strip() for scope in needed.split(",")}


def _api_error_result(exc: SlackApiError, chat_id: str) -> MessageActionResult:
    error = str(exc.response.get("error") or "error")
    if error in _ALREADY_DONE_ERRORS:
        return MessageActionResult("ok", chat_id, error)
    if error in _NO_ROUTE_ERRORS:
        return MessageActionResult("no_route", chat_id, error)
    if error in _UNSUPPORTED_ERRORS:
        return MessageActionResult("unsupported", chat_id, error)
    return MessageActionResult("failed", chat_id, error)


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None


def _ts_seconds(message: dict[str, Any]) -> float:
    try:
        return float(message.get("ts") or 0)
    except ValueError:
        return 0.0
