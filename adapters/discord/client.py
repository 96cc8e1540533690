"""The discord.py client behind one DiscordAdapter: its gateway events, intents and mentions policy."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING, Any

import discord
import yarl
from botweave.adapters.discord.http import _RebasedHTTPClient

if TYPE_CHECKING:
    from botweave.adapters.discord.adapter import DiscordAdapter

log = logging.getLogger(__name__)


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
            # same session, same rate-limit buckets); see adapters/discord/http.py.
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
