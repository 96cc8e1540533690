"""Discord adapter on discord.py (issue 4; SPEC §3, §6, §9).

One `discord.Client` per adapter. Inbound, gateway messages become `BotMessage`s (guild
channels, threads, forum posts, DMs) and the raw gateway events become `PlatformEvent`s;
outbound, replies, edits, deletions, reactions and typing go through discord.py's REST client,
whose own per-route rate limiting and `retry_after` handling we rely on instead of adding a
second layer that would fight it.

Rooms post each agent's turn through one channel webhook per channel (`send_as`), with the
agent's name and avatar per message, so a channel reads like a conversation between agents.
The webhook is found (ours, from an earlier run) or created once and cached; a bot without
Manage Webhooks gets a 403 there, and that channel falls back to the bold name prefix for good.
Messages those webhooks post come back over the gateway like any other; they are recognised by
webhook id (or, for a webhook another worker created, by asking Discord once who owns it) and
dropped, so a room never hears its own posts.

Pointing discord.py elsewhere (an emulator in tests, or a proxy): discord.py builds every REST
URL from the process-wide class attribute `discord.http.Route.BASE` and connects its gateway to
the process-wide `DiscordWebSocket.DEFAULT_GATEWAY`. Changing those would move every client in
the process, so each adapter instead gives its own client's HTTPClient a subclass that rewrites
URLs just before use (`_RebasedHTTPClient`, installed by re-classing that one HTTPClient
instance, so the connection state, aiohttp session and rate-limit buckets discord.py already
wired to it stay as they are). Nothing process-wide is modified. With `gateway_url` set, every
main-gateway connection of the client (resumes included) goes there; with only `api_base_url`
set, the gateway URL is asked from that server (GET /gateway/bot), as a proxy would answer.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections import OrderedDict
from typing import Any, Generic, TypeVar

import discord
import yarl
from discord.http import HTTPClient, Route
from discord.webhook.async_ import AsyncWebhookAdapter, async_context

from adapters.base import Adapter
from bots.replies import chunk_text
from bots.types import (
    META_MENTIONS_BOT,
    META_REPLY_TO_BOT,
    META_SCOPE,
    AgentIdentity,
    BotChannel,
    BotMessage,
    BotUser,
    MessageActionResult,
    MessageType,
    PlatformCapabilities,
    PlatformEvent,
    QuotedRef,
)

log = logging.getLogger(__name__)

#: Discord's message limit, counted in characters (code points).
MAX_MESSAGE_LENGTH = 2000
#: Discord tolerates roughly 5 edits per 5 s per channel; one per second keeps streams smooth.
EDIT_FLOOR_MS = 1000
#: How long start() waits for the gateway's READY before letting it finish in the background.
CONNECT_TIMEOUT_S = 30.0
#: The name of the channel webhook rooms post through (users see it in Integrations).
WEBHOOK_NAME = "botweave"
#: Discord's limit on a webhook message's username.
MAX_WEBHOOK_USERNAME = 80

# A mention and the blanks after it: removing our own mention takes its blanks along, so
# "<@bot> hi" reads "hi" while the rest of the text (code indentation too) stays untouched.
_MENTION = re.compile(r"(?:<@!?(?P<user>\d+)>|<@&(?P<role>\d+)>|<#(?P<channel>\d+)>)(?P<trail>[ \t]*)")
# Message types that carry a person's (or bot's) words; joins, pins, boosts etc. are skipped.
_CHAT_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})
_ALL_KINDS = frozenset(
    {
        "reaction_added",
        "reaction_removed",
        "message_edited",
        "message_deleted",
        "member_joined",
        "member_left",
        "thread_created",
    }
)
_MEMBER_KINDS = frozenset({"member_joined", "member_left"})

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A small bounded mapping, so long-running bots do not grow caches without limit."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, default: V | None = None) -> V | None:
        if key not in self._data:
            return default
        self._data.move_to_end(key)
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def discard(self, key: K) -> None:
        self._data.pop(key, None)

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._size:
            self._data.popitem(last=False)


# --- pointing discord.py at another server ---------------------------------------------------


def _rebase_gateway(url: str, gateway: yarl.URL) -> str:
    """Move a main-gateway URL onto `gateway`, keeping discord.py's query (v, encoding, compress).

    Voice gateways are left alone: only the main gateway's URL carries an `encoding` parameter.
    """
    original = yarl.URL(url)
    if "encoding" not in original.query:
        return url
    return str(gateway.with_query(original.query))


class _RebasedHTTPClient(HTTPClient):
    """discord.py's HTTPClient with this client's REST base and gateway URL replaced.

    Only URLs change; routes, rate-limit buckets (keyed on method + path), retries and the
    aiohttp session stay discord.py's own.
    """

    botweave_api_base: str | None = None
    botweave_gateway: yarl.URL | None = None

    async def request(self, route: Route, **kwargs: Any) -> Any:
        base = self.botweave_api_base
        if base and route.url.startswith(Route.BASE):
            route.url = base + route.url[len(Route.BASE) :]
        return await super().request(route, **kwargs)

    async def ws_connect(self, url: str, *, compress: int = 0) -> Any:
        if self.botweave_gateway is not None:
            url = _rebase_gateway(url, self.botweave_gateway)
        return await super().ws_connect(url, compress=compress)


class _RebasedWebhookAdapter(AsyncWebhookAdapter):
    """discord.py's webhook REST adapter with the REST base replaced, like `_RebasedHTTPClient`.

    Webhook calls do not go through the client's HTTPClient: discord.py takes its webhook
    adapter from the `async_context` context variable and builds URLs from `Route.BASE`. The
    adapter sets this one into the context only around its own webhook calls (a context
    variable is per task), so nothing process-wide moves.
    """

    def __init__(self, api_base: str) -> None:
        super().__init__()
        self._api_base = api_base

    async def request(self, route: Route, session: Any, **kwargs: Any) -> Any:
        if route.url.startswith(Route.BASE):
            route.url = self._api_base + route.url[len(Route.BASE) :]
        return await super().request(route, session, **kwargs)


def _guard_parsers(state: Any) -> None:
    """Make a malformed gateway dispatch cost one event, not the connection.

    discord.py lets a parser exception (say a MESSAGE_CREATE without `author`) escape its
    receive loop, which ends `Client.connect`. Each parser of this client's connection state is
    wrapped to log and skip such a payload instead.
    """

    def guarded(event: str, parser: Any) -> Any:
        def run(data: Any) -> None:
            try:
                parser(data)
            except Exception as exc:  # noqa: BLE001 - any malformed payload must be skipped
                log.warning("discord: skipped a malformed %s dispatch (%s: %s)", event, type(exc).__name__, exc)

        return run

    for event, parser in list(state.parsers.items()):
        state.parsers[event] = guarded(event, parser)


def build_intents(member_events: bool) -> discord.Intents:
    """The gateway intents the adapter needs; `members` is privileged, so only on request."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    intents.guild_reactions = True
    intents.dm_reactions = True
    intents.members = member_events
    return intents


#: Replies may ping the people they answer, never @everyone/@here or roles.
ALLOWED_MENTIONS = discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True)


class _GatewayClient(discord.Client):
    """A discord.Client whose events feed one DiscordAdapter."""

    def __init__(
        self, adapter: DiscordAdapter, *, api_base: str | None, gateway: str | None, **options: Any
    ) -> None:
        super().__init__(**options)
        self._adapter = adapter
        if api_base or gateway:
            # Per-instance: swap this client's HTTPClient to the rebasing subclass (same state,
            # same session, same rate-limit buckets); see the module docstring.
            self.http.__class__ = _RebasedHTTPClient
            http: _RebasedHTTPClient = self.http  # type: ignore[assignment]
            http.botweave_api_base = api_base.rstrip("/") if api_base else None
            http.botweave_gateway = yarl.URL(gateway) if gateway else None
        _guard_parsers(self._connection)
        #: Set at every gateway READY, so start() can wait for the first one.
        self.connected = asyncio.Event()

    async def on_connect(self) -> None:
        self.connected.set()

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        """A handler that failed on an odd payload costs that event only; say so in one line."""
        error = sys.exc_info()[1]
        log.warning("discord: %s skipped an unexpected payload (%s: %s)", event_method, type(error).__name__, error)

    async def on_message(self, message: discord.Message) -> None:
        await self._adapter._on_message(message)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        await self._adapter._on_raw_edit(payload)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        cached = [payload.cached_message] if payload.cached_message else []
        await self._adapter._on_raw_delete(payload.channel_id, [payload.message_id], cached)

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        await self._adapter._on_raw_delete(payload.channel_id, sorted(payload.message_ids), payload.cached_messages)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        await self._adapter._on_reaction("reaction_added", payload)

    async def on_raw_reaction_remove(self, payload: discord.RawReactionActionEvent) -> None:
        await self._adapter._on_reaction("reaction_removed", payload)

    async def on_member_join(self, member: discord.Member) -> None:
        await self._adapter._on_member("member_joined", member.guild.id, member.id)

    async def on_raw_member_remove(self, payload: discord.RawMemberRemoveEvent) -> None:
        await self._adapter._on_member("member_left", payload.guild_id, payload.user.id)

    async def on_thread_create(self, thread: discord.Thread) -> None:
        await self._adapter._on_thread_create(thread)


class DiscordLoginError(RuntimeError):
    """Discord refused the bot: bad token, or a privileged intent not enabled for it."""


class DiscordAdapter(Adapter):
    platform = "discord"
    capabilities = PlatformCapabilities(
        max_message_length=MAX_MESSAGE_LENGTH,
        length_unit="chars",
        can_edit=True,
        can_delete=True,
        can_react=True,
        threads=True,
        typing=True,
        markdown="discord",
        edit_floor_ms=EDIT_FLOOR_MS,
    )
    emits = _ALL_KINDS
    typing_interval_s = 8.0  # Discord shows "typing" for 10 s per trigger

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        member_events = bool(getattr(config, "member_events", False))
        # Member join/leave arrive only with the privileged members intent.
        self.emits = _ALL_KINDS if member_events else _ALL_KINDS - _MEMBER_KINDS
        # discord.py warns once per process that voice needs PyNaCl/davey; botweave never uses
        # voice, so consume those one-shot flags instead of printing two alarming lines.
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        self.client = _GatewayClient(
            self,
            api_base=getattr(config, "api_base_url", None),
            gateway=getattr(config, "gateway_url", None),
            intents=build_intents(member_events),
            allowed_mentions=ALLOWED_MENTIONS,
            chunk_guilds_at_startup=False,
            max_messages=1000,
        )
        self.application_id: int | None = None
        self._connect_task: asyncio.Task[None] | None = None
        self._started = False
        self._quotes: _Lru[int, QuotedRef | None] = _Lru(512)  # referenced message -> quote
        self._message_channels: _Lru[str, int] = _Lru(4096)  # message id -> channel/thread id
        self._own_deletes: _Lru[int, bool] = _Lru(512)  # deletions we made ourselves
        # Rooms: channel -> the webhook we post through; channels where we may not have one.
        self._webhooks: _Lru[int, discord.Webhook] = _Lru(1024)
        self._webhook_locks: dict[int, asyncio.Lock] = {}
        self._no_webhooks: _Lru[int, bool] = _Lru(4096)
        # Webhook id -> whether our application owns it (ours are dropped inbound).
        self._webhook_owner: _Lru[int, bool] = _Lru(4096)
        self._webhook_lookups: dict[int, asyncio.Future[bool]] = {}
        api_base = getattr(config, "api_base_url", None)
        self._webhook_adapter: AsyncWebhookAdapter | None = (
            _RebasedWebhookAdapter(api_base.rstrip("/")) if api_base else None
        )

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, inbound: bool = True) -> None:
        """Log in (REST); with `inbound`, also run the gateway in the background and wait for READY.

        Without `inbound` (a worker answering from the shared stream) no gateway connection is
        made: sending, editing, reacting and typing need only REST.
        """
        token = self._token()
        try:
            await self.client.login(token)
        except discord.LoginFailure:
            await self.client.close()
            raise self._login_failed("the bot token was rejected (HTTP 401); check DISCORD_BOT_TOKEN") from None
        except (discord.HTTPException, OSError) as exc:
            await self.client.close()
            raise self._login_failed(f"could not reach the Discord API ({type(exc).__name__}: {exc})") from None
        user = self.client.user
        assert user is not None  # login() sets it
        self.self_user = BotUser(str(user.id), user.name, user.display_name, True)
        self.application_id = self.client.application_id
        if not inbound:
            self._started = True
            return
        await self._discover_gateway()
        self._connect_task = asyncio.create_task(self._run_gateway(), name="discord-gateway")
        self._connect_task.add_done_callback(self._gateway_ended)
        waiter = asyncio.create_task(self.client.connected.wait())
        done, _ = await asyncio.wait(
            {waiter, self._connect_task}, timeout=CONNECT_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        waiter.cancel()
        if self._connect_task in done:
            error = self._connect_task.exception()
            if error is not None:
                raise error
        if not done:
            log.warning("discord: gateway not ready after %.0fs; still connecting in the background", CONNECT_TIMEOUT_S)
        self._started = True

    async def _discover_gateway(self) -> None:
        """With only `api_base_url` set, ask that server where its gateway is (GET /gateway/bot).

        discord.py 2.x always dials Discord's default gateway; a proxy or emulator that serves
        the REST API also names its gateway, so one setting is enough.
        """
        http = self.client.http
        if not isinstance(http, _RebasedHTTPClient) or http.botweave_gateway is not None:
            return
        try:
            _, url, _ = await http.get_bot_gateway()
        except discord.GatewayNotFound as exc:
            await self.client.close()
            raise self._login_failed(f"{http.botweave_api_base} did not name a gateway (GET /gateway/bot)") from exc
        http.botweave_gateway = yarl.URL(url)

    def _gateway_ended(self, task: asyncio.Task[None]) -> None:
        """A refusal after start() returned has nobody to raise to: log its one line here."""
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self._started:
            log.error("%s", error)

    async def _run_gateway(self) -> None:
        """discord.py's connect loop (it reconnects and resumes itself); fatal refusals end it."""
        try:
            await self.client.connect(reconnect=True)
        except discord.PrivilegedIntentsRequired:
            raise self._login_failed(
                "the gateway refused the Server Members intent (member_events: true); enable it "
                "for the bot in the Developer Portal or turn member_events off"
            ) from None
        except discord.ConnectionClosed as exc:
            if exc.code == 4004:
                raise self._login_failed("the gateway rejected the bot token (close code 4004)") from None
            raise self._login_failed(f"the gateway closed the connection (close code {exc.code})") from None
        finally:
            if not self.client.is_closed():
                await self.client.close()

    @staticmethod
    def _login_failed(reason: str) -> DiscordLoginError:
        """The one line a user sees; start() raises it (the runtime logs it), later it is logged."""
        return DiscordLoginError(f"discord: login failed: {reason}")

    def _token(self) -> str:
        secret = getattr(self.config, "token", None)
        token = secret.get_secret_value() if secret is not None else ""
        if not token.strip():
            raise self._login_failed("no bot token configured (platforms.discord.token / DISCORD_BOT_TOKEN)")
        return token

    async def stop(self) -> None:
        if not self.client.is_closed():
            await self.client.close()
        task, self._connect_task = self._connect_task, None
        if task is not None:
            try:
                await asyncio.wait_for(task, timeout=10)
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - already reported
                pass

    # --- inbound messages --------------------------------------------------------------------

    def _is_self(self, user_id: int | None) -> bool:
        return self.self_user is not None and user_id is not None and str(user_id) == self.self_user.user_id

    def _is_own(self, message: discord.Message) -> bool:
        """Ours: sent by the bot user, or by a webhook of our application (interaction replies,
        room posts through the channel webhooks this adapter uses)."""
        if self._is_self(message.author.id):
            return True
        if message.webhook_id is None:
            return False
        if self._webhook_owner.get(message.webhook_id):
            return True
        if self.application_id is not None:
            return message.webhook_id == self.application_id or message.application_id == self.application_id
        return False

    async def _is_own_webhook_message(self, message: discord.Message) -> bool:
        """Whether a webhook message comes from a webhook of ours that this process did not set up.

        A room's posts may come from a webhook another worker (or an earlier run) created; its
        echo must be dropped here too. `GET /webhooks/{id}` answers for webhooks our application
        owns even without Manage Webhooks; a 403/404 means someone else's. The verdict is cached
        per webhook, so each foreign webhook costs one call.
        """
        webhook_id = message.webhook_id
        if webhook_id is None or self.application_id is None or webhook_id == self.application_id:
            return False
        known = self._webhook_owner.get(webhook_id)
        if known is not None:
            return known
        # discord.py handles each message in its own task: a burst from one webhook shares a lookup
        lookup = self._webhook_lookups.get(webhook_id)
        if lookup is None:
            lookup = asyncio.ensure_future(self._look_up_webhook(webhook_id))
            self._webhook_lookups[webhook_id] = lookup
            lookup.add_done_callback(lambda _: self._webhook_lookups.pop(webhook_id, None))
        return await asyncio.shield(lookup)

    async def _look_up_webhook(self, webhook_id: int) -> bool:
        """One `GET /webhooks/{id}`; a transient failure is not cached, so a later message asks again."""
        try:
            data = await self.client.http.get_webhook(webhook_id)
        except (discord.Forbidden, discord.NotFound):
            self._webhook_owner.put(webhook_id, False)
            return False
        except (discord.HTTPException, OSError, asyncio.TimeoutError) as exc:
            log.info("discord: could not look up webhook %s (%s); treating it as foreign", webhook_id, exc)
            return False
        ours = self._owns_webhook(data)
        self._webhook_owner.put(webhook_id, ours)
        return ours

    def _owns_webhook(self, data: Any) -> bool:
        """A webhook payload created by our application (or by our bot user)."""
        app = data.get("application_id")
        if app is not None and self.application_id is not None and str(app) == str(self.application_id):
            return True
        creator = data.get("user") or {}
        return self.self_user is not None and str(creator.get("id")) == self.self_user.user_id

    async def _on_message(self, message: discord.Message) -> None:
        try:
            item = await self.normalize(message)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # discord.py tolerates some missing fields (no `author`) that we cannot do without
            log.warning("discord: skipped malformed message %s (%s: %s)", message.id, type(exc).__name__, exc)
            return
        except Exception:
            log.exception("discord: could not read message %s", message.id)
            return
        if item is not None:
            await self.dispatch(item)

    async def normalize(self, message: discord.Message) -> BotMessage | None:
        """Turn a gateway message into a BotMessage; None for ours, system and empty messages."""
        if self._is_own(message) or message.type not in _CHAT_TYPES:
            return None
        if message.webhook_id is not None and await self._is_own_webhook_message(message):
            return None
        chat_id, thread_id, channel = self._place(message.channel)
        self._message_channels.put(str(message.id), message.channel.id)
        text, mentions_bot = self._clean_text(message)
        attachments = [_attachment(a) for a in message.attachments]
        if not text and not attachments and not message.stickers:
            return None
        quoted, reply_to, reply_to_bot = await self._reference(message)
        bot_authored = message.author.bot or message.webhook_id is not None
        sender = BotUser(str(message.author.id), message.author.name, message.author.display_name, bot_authored)
        metadata: dict[str, Any] = {META_MENTIONS_BOT: mentions_bot, META_REPLY_TO_BOT: reply_to_bot}
        if message.guild is not None:
            metadata[META_SCOPE] = str(message.guild.id)
        if message.webhook_id is not None:
            metadata["webhook_id"] = str(message.webhook_id)
        if thread_id is not None:
            metadata["thread_name"] = getattr(message.channel, "name", "")
            if isinstance(getattr(message.channel, "parent", None), discord.ForumChannel):
                metadata["forum_post"] = True
        result = BotMessage(
            message_id=str(message.id),
            content=text,
            sender=sender,
            channel=channel,
            message_type=_message_type(text, attachments, bool(message.stickers)),
            timestamp=message.created_at,
            reply_to=reply_to,
            thread_id=thread_id,
            attachments=attachments,
            quoted=quoted,
            metadata=metadata,
            allow_control=not bot_authored,
            platform=self.platform,
        )
        if result.is_command and result.message_type is MessageType.TEXT:
            result.message_type = MessageType.COMMAND
        return result

    def _place(self, channel: Any) -> tuple[str, str | None, BotChannel]:
        """(chat id, thread id, BotChannel): a thread's chat is its parent channel."""
        if isinstance(channel, discord.Thread):
            parent = channel.parent
            title = parent.name if parent is not None else channel.name
            chat_id = str(channel.parent_id)
            return chat_id, str(channel.id), BotChannel(chat_id, "thread", title)
        if isinstance(channel, discord.DMChannel):
            recipient = channel.recipient
            return str(channel.id), None, BotChannel(str(channel.id), "dm", recipient.name if recipient else "")
        if isinstance(channel, discord.GroupChannel):
            return str(channel.id), None, BotChannel(str(channel.id), "group", channel.name or "")
        return str(channel.id), None, BotChannel(str(channel.id), "channel", getattr(channel, "name", "") or "")

    def _own_role_ids(self, guild: discord.Guild | None) -> set[int]:
        """The bot's managed role(s) in this guild: mentioning one addresses the bot."""
        if guild is None or self.self_user is None:
            return set()
        own = int(self.self_user.user_id)
        return {role.id for role in guild.roles if role.tags is not None and role.tags.bot_id == own}

    def _clean_text(self, message: discord.Message) -> tuple[str, bool]:
        """Drop our own mention, spell other mentions as @name / #channel; report if we were addressed."""
        users = {u.id: u for u in message.mentions}
        own_roles = self._own_role_ids(message.guild)
        guild = message.guild
        mentioned = False

        def name_of(match: re.Match[str]) -> str | None:
            """`@name` / `#name` for a mention, "" for ours, None when it cannot be resolved."""
            nonlocal mentioned
            if match.group("user"):
                user_id = int(match.group("user"))
                if self._is_self(user_id):
                    mentioned = True
                    return ""
                user = users.get(user_id)
                return f"@{user.name}" if user is not None else None
            if match.group("role"):
                role_id = int(match.group("role"))
                if role_id in own_roles:
                    mentioned = True
                    return ""
                role = guild.get_role(role_id) if guild is not None else None
                return f"@{role.name}" if role is not None else None
            channel_id = int(match.group("channel"))
            channel = guild.get_channel_or_thread(channel_id) if guild is not None else None
            return f"#{channel.name}" if channel is not None else None

        def replace(match: re.Match[str]) -> str:
            name = name_of(match)
            if name is None:
                return match.group(0)
            return name + match.group("trail") if name else ""

        text = _MENTION.sub(replace, message.content).strip()
        if self.self_user is not None and any(self._is_self(u) for u in message.raw_mentions):
            mentioned = True
        if own_roles & set(message.raw_role_mentions):
            mentioned = True
        return text, mentioned

    async def _reference(self, message: discord.Message) -> tuple[QuotedRef | None, str | None, bool]:
        """The replied-to message: from the gateway when included, else fetched once and cached."""
        ref = message.reference
        if ref is None or ref.message_id is None or ref.type is not discord.MessageReferenceType.default:
            return None, None, False
        reply_to = str(ref.message_id)
        target = ref.resolved if ref.resolved is not None else ref.cached_message
        if isinstance(target, discord.DeletedReferencedMessage):
            quoted = None
        elif isinstance(target, discord.Message):
            quoted = self._quote(target)
        elif ref.message_id in self._quotes:
            quoted = self._quotes.get(ref.message_id)
        else:
            quoted = await self._fetch_quote(ref.channel_id, ref.message_id)
        self._quotes.put(ref.message_id, quoted)
        return quoted, reply_to, quoted is not None and quoted.author == "bot"

    async def _fetch_quote(self, channel_id: int, message_id: int) -> QuotedRef | None:
        channel = self.client.get_channel(channel_id) or self.client.get_partial_messageable(channel_id)
        try:
            fetched = await channel.fetch_message(message_id)  # type: ignore[union-attr]
        except (discord.HTTPException, OSError, asyncio.TimeoutError) as exc:
            log.info("discord: replied-to message %s not available (%s)", message_id, exc)
            return None
        return self._quote(fetched)

    def _quote(self, target: discord.Message) -> QuotedRef:
        text, _ = self._clean_text(target)
        return QuotedRef(str(target.id), text, "bot" if self._is_own(target) else "user")

    # --- inbound platform events -------------------------------------------------------------

    def _event_place(self, channel_id: int) -> tuple[str, str | None]:
        """Events name the thread as their channel; report it like messages (parent + thread)."""
        channel = self.client.get_channel(channel_id)
        if isinstance(channel, discord.Thread):
            return str(channel.parent_id), str(channel.id)
        return str(channel_id), None

    async def _emit(self, event: PlatformEvent) -> None:
        if event.kind in self.emits:
            await self.dispatch(event)

    async def _on_reaction(self, kind: str, payload: discord.RawReactionActionEvent) -> None:
        if self._is_self(payload.user_id):
            return
        chat_id, thread_id = self._event_place(payload.channel_id)
        emoji = str(payload.emoji)  # unicode as is; custom as <:name:id> (<a:name:id> animated)
        await self._emit(
            PlatformEvent(
                kind=kind,  # type: ignore[arg-type]
                platform=self.platform,
                chat_id=chat_id,
                user_id=str(payload.user_id),
                message_id=str(payload.message_id),
                emoji=emoji,
                thread_id=thread_id,
                raw=payload,
            )
        )

    async def _on_raw_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """Only real content edits count; embed unfurls re-send the message without editing it."""
        message = payload.message
        self._quotes.discard(message.id)  # a later reply must quote the new text
        if self._is_own(message):
            return
        cached = payload.cached_message
        if cached is not None:
            if cached.content == message.content:
                return
        elif message.edited_at is None:
            return
        text, _ = self._clean_text(message)
        chat_id, thread_id = self._event_place(payload.channel_id)
        stamp = message.edited_at.isoformat() if message.edited_at else ""
        await self._emit(
            PlatformEvent(
                kind="message_edited",
                platform=self.platform,
                chat_id=chat_id,
                user_id=str(message.author.id),
                message_id=str(message.id),
                new_text=text,
                thread_id=thread_id,
                event_id=f"edit:{message.id}:{stamp}",
                raw=payload.data,
            )
        )

    async def _on_raw_delete(self, channel_id: int, message_ids: list[int], cached: list[discord.Message]) -> None:
        chat_id, thread_id = self._event_place(channel_id)
        # Ours (e.g. a silenced stream's placeholder) is not news, whichever process deleted it.
        ours = {m.id for m in cached if self._is_own(m)}
        for message_id in message_ids:
            self._quotes.discard(message_id)
            if message_id in self._own_deletes or message_id in ours:
                continue
            await self._emit(
                PlatformEvent(
                    kind="message_deleted",
                    platform=self.platform,
                    chat_id=chat_id,
                    user_id="",  # Discord does not say who deleted a message
                    message_id=str(message_id),
                    thread_id=thread_id,
                    event_id=f"delete:{message_id}",
                )
            )

    async def _on_member(self, kind: str, guild_id: int, user_id: int) -> None:
        if self._is_self(user_id):
            return
        await self._emit(PlatformEvent(kind=kind, platform=self.platform, chat_id=str(guild_id), user_id=str(user_id)))  # type: ignore[arg-type]

    async def _on_thread_create(self, thread: discord.Thread) -> None:
        if self._is_self(thread.owner_id):
            return
        await self._emit(
            PlatformEvent(
                kind="thread_created",
                platform=self.platform,
                chat_id=str(thread.parent_id),
                user_id=str(thread.owner_id or ""),
                thread_id=str(thread.id),
                new_text=thread.name,
                event_id=f"thread:{thread.id}",
            )
        )

    # --- outbound ----------------------------------------------------------------------------

    def _channel(self, channel_id: int) -> Any:
        """A sendable channel: the cached one, or a partial handle that needs no cache."""
        return self.client.get_channel(channel_id) or self.client.get_partial_messageable(channel_id)

    def _target_id(self, chat_id: str, message_id: str | None = None, thread_id: str | None = None) -> int:
        """Where a message lives: the thread if given, else where we saw/sent it, else the chat."""
        if thread_id:
            return int(thread_id)
        known = self._message_channels.get(message_id) if message_id else None
        return known if known is not None else int(chat_id)

    async def send(
        self, chat_id: str, text: str, *, thread_id: str | None = None, reply_to: str | None = None
    ) -> MessageActionResult:
        try:
            target = self._target_id(chat_id, thread_id=thread_id)
            reference = None
            if reply_to:
                reference = discord.MessageReference(
                    message_id=int(reply_to), channel_id=target, fail_if_not_exists=False
                )
            sent = await self._channel(target).send(text, reference=reference, allowed_mentions=ALLOWED_MENTIONS)
        except Exception as exc:  # noqa: BLE001 - outbound actions report, never raise
            return _failure(chat_id, "send", exc)
        self._message_channels.put(str(sent.id), target)
        return MessageActionResult("ok", chat_id, message_id=str(sent.id))

    async def send_as(
        self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        """Post as the agent itself: the channel's webhook with the agent's name and avatar.

        Without Manage Webhooks (403), or where a channel cannot have webhooks (a DM), the
        channel falls back to the bold name prefix from then on. A webhook deleted behind our
        back (404 on execute: nothing was posted) is replaced once.
        """
        try:
            channel_id = int(chat_id)
            thread = discord.Object(id=int(thread_id)) if thread_id else None
        except ValueError as exc:
            return _failure(chat_id, "send", exc)
        if channel_id in self._no_webhooks:
            return await self._send_named(identity, chat_id, text, thread_id)
        for attempt in range(2):
            try:
                webhook = await self._channel_webhook(channel_id)
            except discord.HTTPException as exc:
                if exc.status not in (400, 403):  # 404: no such channel, reported by send
                    return await self._prefixed(identity, chat_id, text, thread_id, exc)
                # 403 Missing Permissions, or 400 for a channel without webhooks (a DM): for good
                self._no_webhooks.put(channel_id, True)
                log.warning(
                    "discord: no channel webhook in %s (HTTP %s %s); room posts there use a name "
                    "prefix. Give the bot Manage Webhooks to post under each agent's own name.",
                    chat_id, exc.status, exc.text,
                )
                return await self._send_named(identity, chat_id, text, thread_id)
            except Exception as exc:  # noqa: BLE001 - outbound actions report, never raise
                return _failure(chat_id, "send", exc)
            try:
                sent = await self._execute(webhook, identity, text, thread)
            except discord.NotFound as exc:
                self._webhooks.discard(channel_id)
                if attempt == 0 and exc.code == 10015:  # Unknown Webhook (deleted): nothing posted
                    continue
                return await self._prefixed(identity, chat_id, text, thread_id, exc)
            except discord.Forbidden as exc:
                self._webhooks.discard(channel_id)
                self._no_webhooks.put(channel_id, True)
                return await self._prefixed(identity, chat_id, text, thread_id, exc)
            except discord.HTTPException as exc:
                if exc.status == 400:  # refused before posting (e.g. a username Discord rejects)
                    return await self._prefixed(identity, chat_id, text, thread_id, exc)
                return _failure(chat_id, "send", exc)
            except Exception as exc:  # noqa: BLE001
                return _failure(chat_id, "send", exc)
            self._message_channels.put(str(sent.id), sent.channel.id)
            return MessageActionResult("ok", chat_id, message_id=str(sent.id))
        return MessageActionResult("failed", chat_id, "send: the channel webhook kept disappearing")

    async def _prefixed(
        self, identity: AgentIdentity, chat_id: str, text: str, thread_id: str | None, exc: discord.HTTPException
    ) -> MessageActionResult:
        """This post goes out with the name prefix (the webhook refused it, so nothing was posted)."""
        log.info("discord: webhook post in %s refused (HTTP %s %s); using a name prefix", chat_id, exc.status, exc.text)
        return await self._send_named(identity, chat_id, text, thread_id)

    async def _send_named(
        self, identity: AgentIdentity, chat_id: str, text: str, thread_id: str | None
    ) -> MessageActionResult:
        """The bold-name fallback (`Adapter.send_as`), kept within Discord's 2000 characters.

        The runtime cuts a turn at the full limit before it reaches us, and the name in front
        would push a full piece over it (Discord refuses such a message outright). So the first
        piece leaves room for the name and the rest is posted as continuation messages.
        """
        room_left = MAX_MESSAGE_LENGTH - len(f"**{identity.name}:** ")
        if len(text) <= room_left or room_left < 1:
            return await super().send_as(identity, chat_id, text, thread_id=thread_id)
        first, *rest = chunk_text(text, room_left, "chars")
        result = await super().send_as(identity, chat_id, first, thread_id=thread_id)
        for piece in rest:
            if not result.ok:
                break
            result = await self.send(chat_id, piece, thread_id=thread_id)
        return result

    async def _channel_webhook(self, channel_id: int) -> discord.Webhook:
        """The channel's webhook for room posts: cached, else ours from before, else a new one.

        Raw routes rather than `TextChannel.webhooks()`, so a send-only worker without a
        channel cache can post too. One lock per channel keeps concurrent posts from creating
        two webhooks.
        """
        cached = self._webhooks.get(channel_id)
        if cached is not None:
            return cached
        lock = self._webhook_locks.setdefault(channel_id, asyncio.Lock())
        async with lock:
            cached = self._webhooks.get(channel_id)
            if cached is not None:
                return cached
            http = self.client.http
            existing = [
                h for h in await http.channel_webhooks(channel_id)
                if h.get("type") == 1 and h.get("token") and self._owns_webhook(h)
            ]
            existing.sort(key=lambda h: h.get("name") != WEBHOOK_NAME)  # ours by name first
            data = existing[0] if existing else await http.create_webhook(channel_id, name=WEBHOOK_NAME)
            webhook = discord.Webhook.from_state(data, self.client._connection)  # type: ignore[arg-type]
            self._webhooks.put(channel_id, webhook)
            self._webhook_owner.put(webhook.id, True)
            return webhook

    async def _execute(
        self, webhook: discord.Webhook, identity: AgentIdentity, text: str, thread: discord.Object | None
    ) -> discord.WebhookMessage:
        """Execute the webhook with `wait=true` (we need the message id), through our REST base."""
        token = async_context.set(self._webhook_adapter) if self._webhook_adapter is not None else None
        try:
            return await webhook.send(
                text,
                username=identity.name[:MAX_WEBHOOK_USERNAME] or discord.utils.MISSING,
                avatar_url=identity.avatar_url or discord.utils.MISSING,
                thread=thread if thread is not None else discord.utils.MISSING,
                allowed_mentions=ALLOWED_MENTIONS,
                wait=True,
            )
        finally:
            if token is not None:
                async_context.reset(token)

    async def edit(
        self, chat_id: str, message_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        try:
            channel = self._channel(self._target_id(chat_id, message_id, thread_id))
            await channel.get_partial_message(int(message_id)).edit(content=text, allowed_mentions=ALLOWED_MENTIONS)
        except Exception as exc:  # noqa: BLE001
            return _failure(chat_id, "edit", exc)
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def delete(self, chat_id: str, message_id: str) -> MessageActionResult:
        try:
            channel = self._channel(self._target_id(chat_id, message_id))
            self._own_deletes.put(int(message_id), True)
            await channel.get_partial_message(int(message_id)).delete()
        except Exception as exc:  # noqa: BLE001
            return _failure(chat_id, "delete", exc)
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def react(self, chat_id: str, message_id: str, emoji: str) -> MessageActionResult:
        try:
            channel = self._channel(self._target_id(chat_id, message_id))
            await channel.get_partial_message(int(message_id)).add_reaction(emoji)
        except Exception as exc:  # noqa: BLE001
            return _failure(chat_id, "react", exc)
        return MessageActionResult("ok", chat_id, message_id=message_id)

    async def typing(self, chat_id: str, *, thread_id: str | None = None) -> None:
        try:
            await self._channel(self._target_id(chat_id, thread_id=thread_id)).typing()
        except Exception as exc:  # noqa: BLE001 - a missed typing indicator is harmless
            log.debug("discord: typing in %s failed: %s", chat_id, exc)


def _failure(chat_id: str, action: str, exc: Exception) -> MessageActionResult:
    """Map discord.py's errors onto the SPEC §9 statuses, with a short reason."""
    if isinstance(exc, ValueError):
        return MessageActionResult("no_route", chat_id, f"{action}: not a Discord id ({exc})")
    if isinstance(exc, discord.NotFound):
        status = "no_route" if action == "send" else "failed"
        return MessageActionResult(status, chat_id, f"{action}: not found ({exc.text or exc.status})")
    if isinstance(exc, discord.HTTPException):
        return MessageActionResult("failed", chat_id, f"{action}: HTTP {exc.status} {exc.text}".strip())
    log.warning("discord: %s in %s failed: %s: %s", action, chat_id, type(exc).__name__, exc)
    return MessageActionResult("failed", chat_id, f"{action}: {type(exc).__name__}: {exc}")


def _attachment(attachment: discord.Attachment) -> dict[str, Any]:
    return {
        "url": attachment.url,
        "mime": attachment.content_type or "",
        "size": attachment.size,
        "filename": attachment.filename,
        "file_id": str(attachment.id),
    }


def _message_type(text: str, attachments: list[dict[str, Any]], sticker: bool) -> MessageType:
    """TEXT when there are words; otherwise the kind of the first attachment (or a sticker)."""
    if text:
        return MessageType.TEXT
    if attachments:
        mime = attachments[0]["mime"]
        for prefix, kind in (("image/", MessageType.IMAGE), ("audio/", MessageType.AUDIO), ("video/", MessageType.VIDEO)):
            if mime.startswith(prefix):
                return kind
        return MessageType.FILE
    return MessageType.STICKER if sticker else MessageType.TEXT
