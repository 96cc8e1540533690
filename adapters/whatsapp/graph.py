"""A thin client of the WhatsApp Cloud API (Graph API) over aiohttp.

Why not pywa, the field's maintained SDK: its client fixes the base URL to
graph.facebook.com (the only way to point it elsewhere is an httpx transport that rewrites
every request behind its back), its webhook server drops repeats by a hash of the raw body
(Meta re-delivers a message in a new envelope, so the body differs and the repeat passes),
and its user type reads `contacts[].user_id` as required, which payloads from before the
business-scoped ids do not carry. What botweave needs of the API is six calls; they are here,
with `api_base_url` honoured as given, and docs/getting-started/whatsapp.md says the same.

Every call carries the access token as a bearer header and nothing else: the token never
appears in a URL, so no log line or error can show it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

#: Graph error codes that mean "too many requests, try later" (throughput, pair and app limits).
RATE_LIMIT_CODES = frozenset({4, 80007, 130429, 131048, 131056})
#: Graph error codes that mean the message can only go out as a template: the person has not
#: written within the customer-service window (Meta's own clock said so).
WINDOW_CODES = frozenset({131047})
#: Graph error codes for an id that names nothing (a message, media or recipient).
NOT_FOUND_CODES = frozenset({100, 131009, 131026, 131051, 131052})


class GraphError(Exception):
    """The Graph API refused a call: HTTP status, Meta's error code and its message (safe to
    log: Meta never echoes the token)."""

    def __init__(self, status: int, code: int | None, message: str, *, details: str = "") -> None:
        super().__init__(f"HTTP {status}, code {code}: {message}" + (f" ({details})" if details else ""))
        self.status = status
        self.code = code
        self.message = message
        self.details = details

    @property
    def transient(self) -> bool:
        """Whether the same call may succeed later: Meta failed on its side or asked to slow down."""
        return self.status >= 500 or self.status == 429 or self.code in RATE_LIMIT_CODES

    @property
    def outside_window(self) -> bool:
        return self.code in WINDOW_CODES


class GraphClient:
    """The calls botweave makes, each one request on a shared session."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str, phone_number_id: str) -> None:
        self._session = session
        self.base_url = base_url.rstrip("/")
        self._auth = {"Authorization": f"Bearer {token}"}
        self.phone_number_id = phone_number_id

    @property
    def auth_header(self) -> Mapping[str, str]:
        """The bearer header, for the media download (Meta's media URLs require it)."""
        return self._auth

    async def _call(
        self, method: str, path: str, *, payload: Mapping[str, Any] | None = None, form: aiohttp.FormData | None = None
    ) -> dict[str, Any]:
        url = f"{self.base_url}/{path.lstrip('/')}"
        async with self._session.request(method, url, json=payload, data=form, headers=self._auth) as response:
            body = await response.read()
            try:
                data = json.loads(body) if body else {}
            except ValueError:
                data = {}
            if response.status >= 400 or not isinstance(data, dict) or "error" in data:
                error = data.get("error") if isinstance(data, dict) else None
                error = error if isinstance(error, dict) else {}
                code = error.get("code")
                details = error.get("error_data", {}).get("details", "") if isinstance(error.get("error_data"), dict) else ""
                raise GraphError(
                    response.status if response.status >= 400 else 400,
                    code if isinstance(code, int) else None,
                    str(error.get("message") or body[:200].decode("utf-8", "replace") or "no error message"),
                    details=str(details)[:300],
                )
            return data

    async def send_message(self, payload: Mapping[str, Any]) -> str:
        """POST /{phone-number-id}/messages; the new message's id (wamid.…)."""
        body = {"messaging_product": "whatsapp", **payload}
        data = await self._call("POST", f"{self.phone_number_id}/messages", payload=body)
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages or not isinstance(messages[0], dict):
            raise GraphError(200, None, "the answer named no message id")
        return str(messages[0].get("id") or "")

    async def mark_read(self, message_id: str, *, typing: bool) -> None:
        """The read receipt for a person's message; with `typing`, the typing indicator too
        (it shows until the next message, at most 25 seconds)."""
        body: dict[str, Any] = {"messaging_product": "whatsapp", "status": "read", "message_id": message_id}
        if typing:
            body["typing_indicator"] = {"type": "text"}
        await self._call("POST", f"{self.phone_number_id}/messages", payload=body)

    async def media(self, media_id: str) -> dict[str, Any]:
        """GET /{media-id}: where the file can be downloaded from (`url`, valid five
        minutes), its `mime_type` and `file_size`."""
        return await self._call("GET", media_id)

    async def upload(self, data: bytes, filename: str, mime: str) -> str:
        """POST /{phone-number-id}/media (multipart); the uploaded file's media id."""
        form = aiohttp.FormData()
        form.add_field("messaging_product", "whatsapp")
        form.add_field("type", mime)
        form.add_field("file", data, filename=filename, content_type=mime)
        answer = await self._call("POST", f"{self.phone_number_id}/media", form=form)
        media_id = answer.get("id")
        if not media_id:
            raise GraphError(200, None, "the upload answered no media id")
        return str(media_id)

    async def phone_number(self) -> dict[str, Any]:
        """GET /{phone-number-id}: the number's display form and verified name (who the bot is)."""
        return await self._call("GET", f"{self.phone_number_id}?fields=display_phone_number,verified_name")
