"""Teams outbound: activities through the Agents SDK's `ConnectorClient`.

Every post goes to the `serviceUrl` of its conversation (kept in `References`), with the
SDK's `Activity` types and its connector client (`send_to_conversation`, `reply_to_activity`,
`update_activity`, `delete_activity`, `create_conversation`). The client takes its base URL
from the reference, and each request gets the bot's token from an aiohttp client middleware
(`BearerAndRetry`), so a token renewed mid-run is used by the next request without building
the client again; the same middleware waits out HTTP 429 (`Retry-After`), when Teams
throttles, because a 429 means nothing was posted.

Where a conversation is:
* a personal or group chat: its id; `reply_to` makes the post a reply to that activity;
* a channel: every post belongs to a thread, `<channel>;messageid=<root>`; a post with no
  thread starts a new one (a new channel post, which `create_thread` uses).

Streaming edits the one message in place (`PUT …/activities/{id}`), never posting a second.
Buttons are an Adaptive Card with `Action.Submit` actions; a press comes back as a message
whose `value` holds the button's id (inbound.py). Replacing a card's buttons (a decided
approval) updates the card to its text alone.
"""

from __future__ import annotations

import asyncio
import base64
import html
import logging
import math
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from botweave.adapter import ActionError, ByteLimit, Outbound, Outcome
from botweave.files import http_chunks
from botweave.metrics import RATE_LIMIT_WAIT
from botweave.types import Button, OutboundFile
from microsoft_agents.activity import (
    Activity,
    Attachment,
    ChannelAccount,
    ConversationParameters,
)
from microsoft_agents.hosting.core.connector.client.connector_client import ConnectorClient

from .inbound import ACTION_KEY, CARD
from .references import Reference, References
from .tokens import TokenSource

log = logging.getLogger(__name__)

#: Retries of a request Teams throttled (HTTP 429), each after its `Retry-After`.
THROTTLE_RETRIES = 3
MAX_RETRY_AFTER_S = 30.0
API_TIMEOUT_S = 30.0
_STYLES = {"primary": "positive", "danger": "destructive"}

#: Told about every post of ours: (chat, activity id, thread, text as written).
PostedHook = Callable[[str, str, "str | None", str], None]


class BearerAndRetry:
    """aiohttp client middleware: the bot's current token on every request, and a request
    that Teams throttled sent again after the time it asked for."""

    def __init__(self, tokens: TokenSource) -> None:
        self._tokens = tokens

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        for attempt in range(THROTTLE_RETRIES + 1):
            request.headers["Authorization"] = f"Bearer {await self._tokens.token()}"
            response = await handler(request)
            if response.status != 429 or attempt == THROTTLE_RETRIES:
                return response
            wait = _retry_after(response.headers.get("Retry-After"))
            response.release()
            RATE_LIMIT_WAIT.labels("teams").inc(wait)
            await asyncio.sleep(wait)
        return response


def _retry_after(value: str | None) -> float:
    """Teams' `Retry-After` in seconds, within reason (a date or nonsense reads as one second)."""
    try:
        seconds = float(value or 1)
    except ValueError:
        return 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S) if math.isfinite(seconds) else 1.0


def _same_host(url: str, service_url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return bool(host) and host == (urlsplit(service_url).hostname or "").lower()


def render(text: str) -> str:
    """Markdown for Teams: it also reads HTML in a message, so `&`, `<` and `>` are sent as
    entity references and read as written."""
    return html.escape(text, quote=False)


def card(text: str, buttons: Sequence[Button]) -> dict[str, Any]:
    """An Adaptive Card: the text, then one `Action.Submit` per button carrying its id."""
    content: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.4",
        "body": [{"type": "TextBlock", "text": text, "wrap": True}],
    }
    if buttons:
        actions = []
        for button in buttons:
            action: dict[str, Any] = {"type": "Action.Submit", "title": button.label, "data": {ACTION_KEY: button.action_id}}
            if button.style in _STYLES:
                action["style"] = _STYLES[button.style]
            actions.append(action)
        content["actions"] = actions
    return content


class TeamsOutbound(Outbound):
    def __init__(
        self, tokens: TokenSource, references: References, *, bot_id: str, posted: PostedHook
    ) -> None:
        self._tokens = tokens
        self._references = references
        self._bot_id = bot_id
        self._posted = posted
        self._clients: dict[str, ConnectorClient] = {}

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()

    # --- where -----------------------------------------------------------------------------

    async def _reference(self, chat_id: str) -> Reference:
        ref = await self._references.get(chat_id)
        if ref is None:
            raise ActionError(
                "no_route",
                "Teams has not told the bot where this conversation is yet: the bot must be added to it "
                "(or receive a message there) before it can post",
            )
        return ref

    def _client(self, service_url: str) -> ConnectorClient:
        client = self._clients.get(service_url)
        if client is None:
            base = service_url if service_url.endswith("/") else service_url + "/"
            session = aiohttp.ClientSession(
                base_url=base,
                middlewares=(BearerAndRetry(self._tokens),),
                timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_S),
            )
            client = ConnectorClient(base, "", session=session)
            self._clients[service_url] = client
        return client

    @staticmethod
    def _conversation(ref: Reference, thread_id: str | None) -> str:
        if ref.kind == "channel" and thread_id:
            return f"{ref.conversation_id};messageid={thread_id}"
        return ref.conversation_id

    def _activity(self, **fields: Any) -> Activity:
        return Activity(type="message", from_property=ChannelAccount(id=self._bot_id), **fields)

    async def _post(self, chat_id: str, activity: Activity, *, thread_id: str | None, reply_to: str | None,
                    text: str) -> str | None:
        ref = await self._reference(chat_id)
        client = self._client(ref.service_url)
        conversation = self._conversation(ref, thread_id)
        if reply_to:
            activity.reply_to_id = reply_to
            sent = await client.conversations.reply_to_activity(conversation, reply_to, activity)
        else:
            sent = await client.conversations.send_to_conversation(conversation, activity)
        if not sent.id:
            raise ActionError("failed", "Teams accepted the post without giving it an id")
        # in a channel every post is in a thread: the one named, else the one it starts
        self._posted(chat_id, sent.id, (thread_id or sent.id) if ref.kind == "channel" else None, text)
        return str(sent.id)

    # --- messages --------------------------------------------------------------------------

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str | None:
        activity = self._activity(text=render(text), text_format="markdown")
        return await self._post(chat_id, activity, thread_id=thread_id, reply_to=reply_to, text=text)

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        """Replace the message in place: the one message a streamed reply grows in."""
        await self._update(chat_id, message_id, self._activity(text=render(text), text_format="markdown"), thread_id)
        self._posted(chat_id, message_id, thread_id, text)

    async def send_buttons(
        self, chat_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        activity = self._activity(attachments=[Attachment(content_type=CARD, content=card(text, buttons))])
        return await self._post(chat_id, activity, thread_id=thread_id, reply_to=reply_to, text=text)

    async def edit_buttons(
        self, chat_id: str, message_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None
    ) -> None:
        activity = self._activity(attachments=[Attachment(content_type=CARD, content=card(text, buttons))])
        await self._update(chat_id, message_id, activity, thread_id)
        self._posted(chat_id, message_id, thread_id, text)

    async def _update(self, chat_id: str, message_id: str, activity: Activity, thread_id: str | None) -> None:
        ref = await self._reference(chat_id)
        activity.id = message_id
        await self._client(ref.service_url).conversations.update_activity(
            self._conversation(ref, thread_id), message_id, activity
        )

    async def delete(self, chat_id: str, message_id: str) -> None:
        ref = await self._reference(chat_id)
        await self._client(ref.service_url).conversations.delete_activity(ref.conversation_id, message_id)

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None) -> str:
        """A channel thread is a channel post and the replies under it: the name is posted as a
        new post, whose id is the thread. Chats have no threads."""
        ref = await self._reference(chat_id)
        if ref.kind != "channel":
            raise ActionError("unsupported", "Teams chats have no threads; only channels do")
        posted = await self.send(chat_id, f"🧵 **{name}**", thread_id=None, reply_to=None)
        if not posted:
            raise ActionError("failed", "create_thread: Teams gave the thread's first post no id")
        return posted

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        ref = await self._reference(chat_id)
        activity = Activity(type="typing", from_property=ChannelAccount(id=self._bot_id))
        await self._client(ref.service_url).conversations.send_to_conversation(self._conversation(ref, thread_id), activity)

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        """The file inline, as a `data:` URL attachment (how Teams takes a bot's picture
        without a SharePoint upload); the caption is the message's text."""
        encoded = base64.b64encode(file.data).decode("ascii")
        attachment = Attachment(content_type=file.mime, content_url=f"data:{file.mime};base64,{encoded}", name=file.filename)
        fields: dict[str, Any] = {"attachments": [attachment]}
        if caption.strip():
            fields.update(text=render(caption), text_format="markdown")
        return await self._post(chat_id, self._activity(**fields), thread_id=thread_id, reply_to=reply_to, text=caption)

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        url = str(ref.get("url") or "")
        if not url.startswith(("https://", "http://")):
            raise ActionError("failed", "the attachment has no download URL")
        headers: dict[str, str] = {}
        if ref.get("auth") == "bot":
            if not _same_host(url, str(ref.get("service_url") or "")):
                raise ActionError("failed", "the image is not on the Bot Connector's host; the bot token is not sent there")
            headers["Authorization"] = f"Bearer {await self._tokens.token()}"
        async for chunk in http_chunks(url, limit, headers=headers, follow_redirects=not headers, refuse_html=True):
            yield chunk

    # --- people ----------------------------------------------------------------------------

    async def direct_chat(self, user_id: str) -> str:
        """The person's personal chat with the bot: the one Teams already told of, else a new
        one (`POST /v3/conversations`) at the service URL and tenant the person was seen with."""
        person = await self._references.person(user_id)
        if person is None:
            raise ActionError("no_route", "Teams has not shown the bot this person yet, so it cannot reach them privately")
        if person.personal_chat:
            return person.personal_chat
        client = self._client(person.service_url)
        wire: dict[str, Any] = {"isGroup": False, "bot": {"id": self._bot_id}, "members": [{"id": user_id}]}
        if person.tenant_id:
            wire.update(tenantId=person.tenant_id, channelData={"tenant": {"id": person.tenant_id}})
        parameters = ConversationParameters.model_validate(wire)
        created = await client.conversations.create_conversation(parameters)
        if not created.id:
            raise ActionError("no_route", "Teams opened no personal chat")
        await self._references.remember(
            Reference(created.id, person.service_url, "personal", person.tenant_id, user_id), person_id=user_id
        )
        return str(created.id)

    async def whose_direct_chat(self, chat_id: str) -> str | None:
        ref = await self._references.get(chat_id)
        return ref.person or None if ref is not None and ref.kind == "personal" else None

    # --- failures --------------------------------------------------------------------------

    def retryable(self, exc: Exception) -> bool:
        """Teams failed on its side (5xx, still throttled) or no answer came; a 4xx is its refusal."""
        if isinstance(exc, aiohttp.ClientResponseError):
            return exc.status == 429 or exc.status >= 500
        return not isinstance(exc, ActionError)

    def classify(self, exc: Exception, action: str) -> Outcome:
        if isinstance(exc, aiohttp.ClientResponseError):
            if exc.status == 404:
                return "no_route" if action == "send" else "failed", "not found (HTTP 404)"
            if exc.status == 403:
                return "no_route", "the bot is not allowed in this conversation (HTTP 403)"
            if exc.status == 401:
                return "failed", "the Bot Connector refused the bot's token (HTTP 401)"
            return "failed", f"HTTP {exc.status}"
        if isinstance(exc, ValueError):
            return "failed", "not an id Teams can read"
        log.warning("teams: %s failed: %s", action, type(exc).__name__)
        if action == "send":
            return "failed", f"{type(exc).__name__}; may have been delivered"
        return "failed", type(exc).__name__
