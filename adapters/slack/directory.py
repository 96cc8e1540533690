"""Cached Web API look-ups the inbound path needs: user names, channel kinds, thread roots.

A busy channel would otherwise cost one `users.info` per mention and one
`conversations.replies` per thread reply; Slack rate-limits those methods (tier 3/4), so each
answer is kept in a bounded cache. A failed look-up degrades (the raw id, no quote) instead of
dropping the message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from botweave.types import ChannelType
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from ..cache import BoundedCache

log = logging.getLogger(__name__)

# What a Web API call can raise: Slack's answer or the SDK refusing (SlackClientError and its
# SlackApiError), no answer (aiohttp's errors, a timeout), or a body that is not JSON.
WEB_API_ERRORS: tuple[type[Exception], ...] = (SlackClientError, aiohttp.ClientError, asyncio.TimeoutError, ValueError)

_MISSING = object()
_TRANSIENT_ERRORS = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable"})
_CHANNEL_TYPES: dict[str, ChannelType] = {"channel": "channel", "group": "group", "mpim": "group", "im": "dm"}


def channel_type_from_slack(slack_type: str | None) -> ChannelType | None:
    """Map the Events API `channel_type` onto botweave's channel types."""
    return _CHANNEL_TYPES.get(slack_type or "")


def _channel_type_from_info(info: dict[str, Any]) -> ChannelType:
    if info.get("is_im"):
        return "dm"
    if info.get("is_mpim") or info.get("is_private") or info.get("is_group"):
        return "group"
    return "channel"


class SlackDirectory:
    def __init__(self, client: AsyncWebClient, max_entries: int = 2048) -> None:
        self._client = client
        self._users: BoundedCache[str, dict[str, Any] | None] = BoundedCache(max_entries)
        self._channels: BoundedCache[str, ChannelType] = BoundedCache(max_entries)
        self._roots: BoundedCache[tuple[str, str], dict[str, Any] | None] = BoundedCache(max_entries)

    async def user(self, user_id: str) -> dict[str, Any] | None:
        """`users.info`, once per user; a user that cannot be looked up is remembered as None."""
        cached = self._users.get(user_id, _MISSING)
        if cached is not _MISSING:
            return cached
        profile: dict[str, Any] | None = None
        try:
            response = await self._client.users_info(user=user_id)
            profile = response.get("user")
        except SlackApiError as exc:
            log.info("slack: users.info for %s failed: %s", user_id, exc.response.get("error"))
            if exc.response.get("error") in _TRANSIENT_ERRORS:
                return None
        except WEB_API_ERRORS as exc:  # network trouble: do not cache, try again next time
            log.warning("slack: users.info for %s failed: %s", user_id, type(exc).__name__)
            return None
        self._users.put(user_id, profile)
        return profile

    async def display_name(self, user_id: str) -> str:
        """The name people see in Slack: display name, else real name, else handle, else id."""
        profile = await self.user(user_id)
        if not profile:
            return user_id
        details = profile.get("profile") or {}
        return (
            details.get("display_name")
            or profile.get("real_name")
            or details.get("real_name")
            or profile.get("name")
            or user_id
        )

    def remember_channel(self, channel_id: str, channel_type: ChannelType) -> None:
        self._channels.put(channel_id, channel_type)

    async def channel_type(self, channel_id: str) -> ChannelType:
        """For events that carry no `channel_type` (app_mention, slash commands)."""
        cached = self._channels.get(channel_id)
        if cached is not None:
            return cached
        try:
            response = await self._client.conversations_info(channel=channel_id)
            kind = _channel_type_from_info(response.get("channel") or {})
        except WEB_API_ERRORS as exc:
            log.info("slack: conversations.info for %s failed (%s); guessing from the id", channel_id, exc)
            return "dm" if channel_id.startswith("D") else "group" if channel_id.startswith("G") else "channel"
        self._channels.put(channel_id, kind)
        return kind

    def remember_root(self, channel_id: str, ts: str, message: dict[str, Any]) -> None:
        self._roots.put((channel_id, ts), message)

    async def thread_root(self, channel_id: str, thread_ts: str) -> dict[str, Any] | None:
        """The first message of a thread via `conversations.replies`, cached per thread.

        Slack rate-limits this method hard for some apps (down to 1 call a minute), so the
        client used here does not wait out a 429: the message goes on without its quote and
        the next message of the thread tries again.
        """
        key = (channel_id, thread_ts)
        cached = self._roots.get(key, _MISSING)
        if cached is not _MISSING:
            return cached
        try:
            response = await self._client.conversations_replies(
                channel=channel_id, ts=thread_ts, limit=1, inclusive=True
            )
        except SlackApiError as exc:
            error = exc.response.get("error")
            log.info("slack: conversations.replies failed: %s", error)
            if error not in _TRANSIENT_ERRORS:
                self._roots.put(key, None)
            return None
        except WEB_API_ERRORS as exc:
            log.warning("slack: conversations.replies failed: %s", type(exc).__name__)
            return None
        messages = response.get("messages") or []
        root = next((m for m in messages if m.get("ts") == thread_ts), None)
        self._roots.put(key, root)
        return root
