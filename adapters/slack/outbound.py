"""Outbound Web API calls: posts, room posts under an agent's name, edits, deletions, reactions.

`chat.postMessage` uses its own client, which retries a connection error only when the
connection was never made: a post that may have been delivered is never posted twice. Edits,
deletions and reactions are idempotent and use the default client, which also retries dropped
connections. Both wait out 429 `Retry-After` (a 429 means nothing was done).

Rooms post each agent's turn under the agent's own name and icon (`username`, `icon_emoji` /
`icon_url`), which Slack allows only with the `chat:write.customize` scope. Without it Slack
refuses the post (`missing_scope`, needed `chat:write.customize`); the operator is told once,
the agent's name goes in bold in front of the text for the rest of the process, and the
refused turn is posted again that way (a refused post was not delivered).

Files go up with Slack's external upload flow (`files.getUploadURLExternal`, the bytes to
the upload URL, `files.completeUploadExternal` sharing them with the caption as its comment).
Files people sent are read from their `url_private` with the bot token, which is sent to
Slack's own hosts only; a redirect or a web page instead of the file means Slack did not
accept the token for it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from botweave.adapter import ActionError, ByteLimit, NoIdentity, Outbound, Outcome
from botweave.files import http_chunks
from botweave.types import AgentIdentity, Button, OutboundFile
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ..cache import BoundedCache
from .directory import WEB_API_ERRORS
from .format import emoji_to_reaction, markdown_to_mrkdwn

log = logging.getLogger(__name__)

# Slack error codes -> MessageActionResult status. Anything not listed is "failed".
_NO_ROUTE_ERRORS = frozenset({"channel_not_found", "message_not_found", "thread_not_found"})
_ALREADY_DONE_ERRORS = frozenset({"already_reacted"})
_UNSUPPORTED_ERRORS = frozenset({"method_not_supported_for_channel_type"})
#: The scope that lets a bot token post with its own `username` and icon.
CUSTOMIZE_SCOPE = "chat:write.customize"

#: Told about every post of ours: (channel, ts, thread ts, the text as posted).
PostedHook = Callable[[str, str, str | None, str], None]


#: The message metadata event type of a keyed post; its payload holds the chunk's key.
CHUNK_EVENT = "botweave_chunk"
#: A keyed post is looked for among messages at most this much older than its intent.
LOOKUP_MARGIN_S = 120.0
LOOKUP_PAGES = 5


class SlackOutbound(Outbound):
    def __init__(self, client: AsyncWebClient, post_client: AsyncWebClient, *, posted: PostedHook) -> None:
        self._client = client
        self._post_client = post_client
        self._posted = posted
        self._dm_channels: BoundedCache[str, str] = BoundedCache(1024)
        self._dm_users: BoundedCache[str, str] = BoundedCache(1024)  # DM conversation -> its person ("" none)
        #: Set once Slack refused a custom `username` for want of `chat:write.customize`: the
        #: scope only changes on a reinstall, so asking again per post would only cost a refusal.
        self.identities_refused = False

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str | None:
        """Post one message; into `thread_id` when the conversation is a thread.

        `reply_to` has no Slack equivalent outside threads (and with `reply_in_thread` the
        inbound message already carries its own ts as `thread_id`), so it is not used.
        """
        return await self._post(chat_id, _mrkdwn(text), thread_id)

    async def send_buttons(
        self, chat_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        """A Block Kit message: the text in section blocks, the buttons in an actions block
        (each button's id as its `action_id`); `text` stays as the notification fallback."""
        body = _mrkdwn(text)
        return await self._post(chat_id, body, thread_id, blocks=blocks_for(body, buttons))

    async def edit_buttons(
        self, chat_id: str, message_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None
    ) -> None:
        """chat.update with new blocks: the text, and the buttons only when there are any."""
        body = markdown_to_mrkdwn(text)
        await self._client.chat_update(channel=chat_id, ts=message_id, text=body, blocks=blocks_for(body, buttons))
        self._posted(chat_id, message_id, thread_id, body)

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None) -> str:
        """Slack has no thread objects: a thread is the replies under a message. So a thread
        is opened by posting its name as a new message in the channel, whose ts is the
        thread's id; posts into `slack:<channel>:<ts>` are then replies under it. Replying
        under the message that prompted it would need no post, but could not carry the name,
        so `message_id` is not used."""
        ts = await self._post(chat_id, _mrkdwn(f"🧵 **{name}**"), None)
        if ts is None:
            raise ActionError("failed", "create_thread: Slack gave the thread's first message no ts")
        return ts

    async def send_as(self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None) -> str | None:
        """Post one room turn under the agent's own name and icon.

        Slack shows `username` and `icon_emoji` (or `icon_url`) in place of the app's own, so
        people in the channel see who spoke without a prefix in the text.
        """
        if self.identities_refused:
            raise NoIdentity
        try:
            return await self._post(chat_id, _mrkdwn(text), thread_id, **_identity_params(identity))
        except SlackApiError as exc:
            if not _lacks_customize_scope(exc):
                raise
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
            raise NoIdentity from exc

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        """`send`, with the chunk's key in the message metadata so `find_sent` can tell
        whether an attempt whose answer was lost posted it."""
        metadata = {"event_type": CHUNK_EVENT, "event_payload": {"key": key}}
        return await self._post(chat_id, _mrkdwn(text), thread_id, metadata=metadata)

    async def find_sent(self, chat_id: str, key: str, *, thread_id: str | None, since: float) -> str | None:
        """The ts of our post carrying `key`: the thread's replies, or the channel's newest
        messages back to a little before `since`. Raises when Slack cannot be asked."""
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

    async def _post(self, chat_id: str, body: str, thread_id: str | None, **extra: Any) -> str | None:
        """One `chat.postMessage` of already converted mrkdwn."""
        kwargs: dict[str, Any] = {"channel": chat_id, "text": body, **extra}
        if thread_id:
            kwargs["thread_ts"] = thread_id
        response = await self._post_client.chat_postMessage(**kwargs)
        ts = str(response.get("ts") or "")
        self._posted(chat_id, ts, thread_id, body)
        return ts or None

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        """The external upload flow; the caption is the share's comment. The ts of the message
        that shares the file, when Slack reports it."""
        comment = markdown_to_mrkdwn(caption) if caption.strip() else None
        kwargs: dict[str, Any] = {"channel": chat_id, "filename": file.filename, "content": file.data, "title": file.filename}
        if comment:
            kwargs["initial_comment"] = comment
        if thread_id:
            kwargs["thread_ts"] = thread_id
        response = await self._post_client.files_upload_v2(**kwargs)
        ts = _share_ts(response.get("files") or [], chat_id)
        if ts:
            self._posted(chat_id, ts, thread_id, comment or "")
        return ts

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        url = str(ref.get("url") or "")
        if not url:
            raise ActionError("failed", "the file has no url_private")
        if not self._slack_host(url):
            raise ActionError("failed", "the file is not on a Slack host; the bot token is not sent there")
        headers = {"Authorization": f"Bearer {self._client.token}"}
        async for chunk in http_chunks(url, limit, headers=headers, follow_redirects=False, refuse_html=True):
            yield chunk

    def _slack_host(self, url: str) -> bool:
        """Slack's file hosts, or the host the Web API is configured at (a proxy, a test)."""
        host = (urlsplit(url).hostname or "").lower()
        api_host = (urlsplit(self._client.base_url).hostname or "").lower()
        return bool(host) and (host == api_host or host == "slack.com" or host.endswith(".slack.com"))

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        body = markdown_to_mrkdwn(text)
        await self._client.chat_update(channel=chat_id, ts=message_id, text=body)
        self._posted(chat_id, message_id, thread_id, body)

    async def delete(self, chat_id: str, message_id: str) -> None:
        await self._client.chat_delete(channel=chat_id, ts=message_id)

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        await self._client.reactions_add(channel=chat_id, timestamp=message_id, name=emoji_to_reaction(emoji))

    async def whose_direct_chat(self, chat_id: str) -> str | None:
        """The person of a direct-message conversation (ids starting with D): `conversations.info`,
        once per conversation."""
        if not chat_id.startswith("D"):
            return None
        cached = self._dm_users.get(chat_id)
        if cached is not None:
            return cached or None
        response = await self._client.conversations_info(channel=chat_id)
        channel = response.get("channel") or {}
        user = str(channel.get("user") or "") if channel.get("is_im") else ""
        self._dm_users.put(chat_id, user)
        return user or None

    async def direct_chat(self, user_id: str) -> str:
        """The DM channel with a user: `conversations.open`, once per user."""
        cached = self._dm_channels.get(user_id)
        if cached is not None:
            return str(cached)
        channel = ""
        try:
            response = await self._client.conversations_open(users=user_id)
            channel = str((response.get("channel") or {}).get("id") or "")
        except WEB_API_ERRORS as exc:
            detail = exc.response.get("error") if isinstance(exc, SlackApiError) else type(exc).__name__
            log.warning("slack: conversations.open for %s failed: %s", user_id, detail)
        if not channel:
            raise ActionError("no_route", "cannot open a direct message")
        self._dm_channels.put(user_id, channel)
        return channel

    def retryable(self, exc: Exception) -> bool:
        """An error code is Slack's answer; only a call that got none may go through next time."""
        return not isinstance(exc, SlackApiError)

    def classify(self, exc: Exception, action: str) -> Outcome:
        """Slack's error code as the status it means; any other failure of a post may have
        happened after Slack posted it (delivery looks for it before posting again)."""
        if isinstance(exc, SlackApiError):
            error = str(exc.response.get("error") or "error")
            if error in _ALREADY_DONE_ERRORS:
                return "ok", error
            if error in _NO_ROUTE_ERRORS:
                return "no_route", error
            if error in _UNSUPPORTED_ERRORS:
                return "unsupported", error
            return "failed", error
        log.warning("slack: %s failed: %s", action, type(exc).__name__)
        if action == "send":
            return "failed", f"{type(exc).__name__}; may have been delivered"
        return "failed", type(exc).__name__


def _share_ts(files: list[Any], chat_id: str) -> str | None:
    """The ts of the message that shared an uploaded file into `chat_id` (in its `shares`)."""
    for item in files:
        shares = item.get("shares") if isinstance(item, dict) else None
        for scope in (shares or {}).values():
            for share in (scope or {}).get(chat_id) or []:
                if isinstance(share, dict) and share.get("ts"):
                    return str(share["ts"])
    return None


#: Block Kit limits: a section's text, a button's label.
SECTION_MAX = 3000
LABEL_MAX = 75


def blocks_for(body: str, buttons: Sequence[Button]) -> list[dict[str, Any]]:
    """Sections carrying `body` (mrkdwn, cut at Slack's section limit), then one actions
    block with the buttons when there are any."""
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": body[start : start + SECTION_MAX]}}
        for start in range(0, max(len(body), 1), SECTION_MAX)
    ]
    if buttons:
        elements = []
        for button in buttons:
            element: dict[str, Any] = {
                "type": "button",
                "text": {"type": "plain_text", "text": button.label[:LABEL_MAX]},
                "action_id": button.action_id,
                "value": button.action_id,
            }
            if button.style != "default":
                element["style"] = button.style
            elements.append(element)
        blocks.append({"type": "actions", "block_id": "botweave-buttons", "elements": elements})
    return blocks


def _mrkdwn(text: str) -> str:
    body = markdown_to_mrkdwn(text)
    if not body.strip():
        raise ActionError("failed", "empty message")
    return body


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


def _ts_seconds(message: dict[str, Any]) -> float:
    try:
        return float(message.get("ts") or 0)
    except (TypeError, ValueError):
        return 0.0
