"""Discord adapter on discord.py.

One `discord.Client` per adapter. Inbound, gateway messages become `BotMessage`s (guild
channels, threads, forum posts, DMs) and the raw gateway events become `PlatformEvent`s
(inbound.py); outbound, replies, edits, deletions, reactions and typing go through discord.py's
REST client, whose own per-route rate limiting and `retry_after` handling we rely on instead of
adding a second layer that would fight it (outbound.py). Rooms post through channel webhooks
(webhooks.py). The client is discord.py's, subclassed where this adapter reads the gateway
differently (client.py), and pointed at another server per instance when configured
(rebase.py); a program's own discord.py client in the same process is left as it ships. This
module holds the configuration, login and the gateway's lifecycle.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord
import yarl
from botweave.adapter import Adapter, Check, PlatformRejected
from botweave.metrics import RATE_LIMIT_WAIT
from botweave.tasks import TaskOwner
from botweave.types import BotUser, PlatformCapabilities

from ..cache import BoundedCache
from .client import AdapterClient
from .inbound import ALL_KINDS, MEMBER_KINDS, DiscordInbound, build_intents
from .outbound import ALLOWED_MENTIONS, EDIT_FLOOR_MS, MAX_MESSAGE_LENGTH, DiscordOutbound
from .rebase import RebasedHTTPClient, rebase
from .webhooks import DiscordWebhooks

log = logging.getLogger(__name__)

#: How long start() waits for the gateway's READY before letting it finish in the background.
CONNECT_TIMEOUT_S = 30.0


class DiscordLoginError(PlatformRejected):
    """Discord refused the bot: bad token, or a privileged intent not enabled for it."""


class _RateLimitWaits(logging.Filter):
    """discord.py waits out Discord's 429s inside its HTTP client and reports each wait only
    in a log record (`... Retrying in %.2f seconds.`); this reads the seconds from there. It
    never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        if "rate limit" in message and message.rstrip().endswith("Retrying in %.2f seconds.") and record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            seconds = args[-1]
            if isinstance(seconds, (int, float)):
                RATE_LIMIT_WAIT.labels("discord").inc(float(seconds))
        return True


_RATE_LIMIT_WAITS = _RateLimitWaits()
logging.getLogger("discord.http").addFilter(_RATE_LIMIT_WAITS)


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
        buttons=True,
        edit_floor_ms=EDIT_FLOOR_MS,
    )
    emits = ALL_KINDS
    typing_interval_s = 8.0  # Discord shows "typing" for 10 s per trigger
    #: A create carrying a nonce Discord has seen (from the same bot, within minutes) is not
    #: created again: discord.py sends `enforce_nonce` with every nonce it is given.
    idempotency = "key"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        member_events = bool(getattr(config, "member_events", False))
        # Member join/leave arrive only with the privileged members intent.
        self.emits = ALL_KINDS if member_events else ALL_KINDS - MEMBER_KINDS
        api_base = getattr(config, "api_base_url", None)
        self.client = AdapterClient(
            intents=build_intents(member_events),
            allowed_mentions=ALLOWED_MENTIONS,
            chunk_guilds_at_startup=False,
            max_messages=1000,
        )
        rebase(self.client, api_base=api_base, gateway=getattr(config, "gateway_url", None))
        # What both directions remember: where each message lives, and which deletions were ours.
        self._message_channels: BoundedCache[str, int] = BoundedCache(4096)
        self._own_deletes: BoundedCache[int, bool] = BoundedCache(512)
        self.webhooks = DiscordWebhooks(self, self.client, api_base=api_base)
        self.inbound = DiscordInbound(
            self,
            self.client,
            self.webhooks,
            message_channels=self._message_channels,
            own_deletes=self._own_deletes,
        )
        #: Set at every gateway READY, so start() can wait for the first one.
        self._connected = asyncio.Event()
        self._connect_task: asyncio.Task[None] | None = None
        self._tasks = TaskOwner("discord")
        self._started = False

        async def on_connect() -> None:
            self._connected.set()

        self.client.event(on_connect)

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, inbound: bool = True) -> None:
        """Log in (REST); with `inbound`, also run the gateway in the background and wait for READY.

        Without `inbound` (a worker answering from the shared stream) no gateway connection is
        made: sending, editing, reacting and typing need only REST.
        """
        token = self.secret("token")
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
        self.outbound = DiscordOutbound(
            self.client, self.webhooks, message_channels=self._message_channels, own_deletes=self._own_deletes
        )
        if not inbound:
            self._started = True
            return
        await self._discover_gateway()
        self._connect_task = self._tasks.spawn(self._run_gateway(), name="gateway", on_failure=self._gateway_ended)
        waiter = self._tasks.spawn(self._connected.wait(), name="wait for READY")
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
        if not isinstance(http, RebasedHTTPClient) or http.botweave_gateway is not None:
            return
        try:
            _, url, _ = await http.get_bot_gateway()
        except discord.GatewayNotFound as exc:
            await self.client.close()
            raise self._login_failed(f"{http.botweave_api_base} did not name a gateway (GET /gateway/bot)") from exc
        http.botweave_gateway = yarl.URL(url)

    def _gateway_ended(self, error: BaseException) -> None:
        """A refusal after start() returned has nobody to raise to: log its one line here
        and keep it as the platform's failure (before, start() raises it)."""
        if self._started:
            self.failure = str(error)
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

    # --- health ----------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        return "gateway" if self._connect_task is not None else ""

    async def readiness(self) -> str | None:
        """Receiving: the gateway WebSocket is open (discord.py replaces it when it
        reconnects; the old one is closed meanwhile). Send-only: logged in."""
        problem = await super().readiness()
        if problem is not None or self._connect_task is None:
            return problem
        ws = self.client.ws
        if self.client.is_closed() or ws is None or not ws.open:
            return "the gateway is not connected"
        return None

    async def diagnose(self) -> list[Check]:
        """users/@me with the configured token (discord.py's login), without opening the gateway."""
        try:
            await self.client.login(self.secret("token"))
            user = self.client.user
        except discord.LoginFailure:
            return [Check("discord", False, "users/@me refused the token (401 Unauthorized)",
                          "set platforms.discord.token to the bot token from the Developer Portal (Bot tab)")]
        except (discord.HTTPException, OSError) as exc:
            return [Check("discord", False, f"cannot reach the Discord API: {type(exc).__name__}: {exc}",
                          "check the network, or platforms.discord.api_base_url")]
        finally:
            await self.client.close()
        return [Check("discord", True, f"token accepted by users/@me ({user.name if user else '?'})")]

    async def stop(self) -> None:
        self.outbound = None
        if not self.client.is_closed():
            await self.client.close()
        task, self._connect_task = self._connect_task, None
        try:
            if task is not None:
                # Waited for, not awaited: its failure was reported once, by its owner.
                await asyncio.wait({task}, timeout=10)
        finally:
            await self.webhooks.close()
            await self._tasks.close()  # a gateway still running after 10 s is cancelled here
