"""A Bot Connector emulator on 127.0.0.1: Microsoft Teams as a bot sees it.

It speaks the wire formats Microsoft documents, so the adapter (PyJWT for inbound tokens,
the Agents SDK's `ConnectorClient` for the REST calls) runs against it unmodified:

* the OpenID metadata (`/v1/.well-known/openidconfiguration`: `issuer`, `jwks_uri`,
  `id_token_signing_alg_values_supported`) and its JWKS document (`/v1/.well-known/keys`): one
  RSA key with a `kid` and the `endorsements` of the channels it signs for (`msteams`);
* the token endpoint (`POST /botframework.com/oauth2/v2.0/token`, form-encoded client
  credentials; `{"token_type": "Bearer", "expires_in": 3599, "access_token": ...}`), which
  refuses a wrong secret with `400 invalid_client` as Entra does;
* the Bot Connector REST API under the service URL (`/amer/`): `POST /v3/conversations`
  (create a conversation), `POST /v3/conversations/{id}/activities` (send),
  `POST /v3/conversations/{id}/activities/{activityId}` (reply), `PUT` of the same (update),
  `DELETE` of the same; every call needs a token the emulator issued, and every call is kept
  in `calls` with its time, so tests see what was posted, updated and when;
* a sender of inbound activities (`deliver`): Teams' message activities (personal chats,
  group chats, channel posts and thread replies, with `<at>` mentions and mention entities,
  Adaptive Card `Action.Submit` presses, file attachments) posted to the bot's endpoint with a
  JWT signed by the emulator's key, carrying the `serviceurl` claim; `sign` makes tokens with
  any claim or header changed, for the refusal tests.

Conversations: `a:` ids are personal chats, `19:…@thread.v2` group chats and
`19:…@thread.tacv2` channels, where a post without `;messageid=` starts a thread of its own
and a post to `<channel>;messageid=<root>` lands in that thread (as Teams does).
"""

from __future__ import annotations

import asyncio
import copy
import html
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
from aiohttp import ClientSession, web
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.emulators.serving import client_gone

APP_ID = "7f3c2a10-0b6e-4d6a-9a51-0c0ffee0b07a"
APP_PASSWORD = "emulator-client-secret"
TENANT_ID = "72f988bf-0000-4000-8000-00000000e0e0"
BOT_ID = f"28:{APP_ID}"
BOT_NAME = "weaver"
ISSUER = "https://api.botframework.com"
KEY_ID = "emulator-key-1"
CARD = "application/vnd.microsoft.card.adaptive"
FILE_DOWNLOAD = "application/vnd.microsoft.teams.file.download.info"

ALICE = {"id": "29:1alice-0000", "name": "Alice Archer", "aadObjectId": "aad-alice"}
BOB = {"id": "29:1bob-0000", "name": "Bob Baker", "aadObjectId": "aad-bob"}
PERSONAL = "a:1personal-alice"
GROUP_CHAT = "19:standup-group@thread.v2"
CHANNEL = "19:general-channel@thread.tacv2"
TEAM = "19:team-root@thread.tacv2"


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class ConnectorCall:
    method: str  # POST, PUT, DELETE
    path: str  # after the service URL: v3/conversations/...
    body: dict[str, Any]
    status: int
    at: float = field(default_factory=time.monotonic)


@dataclass
class Conversation:
    id: str
    kind: str  # personal, groupChat, channel
    members: list[dict[str, Any]]
    name: str | None = None


class TeamsEmulator:
    def __init__(self) -> None:
        self.key = rsa_key()
        self.key_id = KEY_ID
        self.endorsements = ["msteams"]
        self.calls: list[ConnectorCall] = []
        self.token_requests: list[dict[str, str]] = []
        self.key_fetches = 0
        self.issued: set[str] = set()
        #: What each conversation shows: base conversation id -> activity id -> the activity as stored.
        self.activities: dict[str, dict[str, dict[str, Any]]] = {}
        self.typing: list[str] = []
        self.deleted: list[tuple[str, str]] = []
        self.files: dict[str, bytes] = {}
        self.file_fetches: list[str] = []
        self.fail_next: list[tuple[int, dict[str, str]]] = []  # (status, headers) for the next connector calls
        self.conversations: dict[str, Conversation] = {
            PERSONAL: Conversation(PERSONAL, "personal", [ALICE]),
            GROUP_CHAT: Conversation(GROUP_CHAT, "groupChat", [ALICE, BOB], "Stand-up"),
            CHANNEL: Conversation(CHANNEL, "channel", [ALICE, BOB], "General"),
        }
        self._ids = itertools.count(int(time.time() * 1000))
        self._runner: web.AppRunner | None = None
        self._session: ClientSession | None = None
        self.port = 0

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> TeamsEmulator:
        app = web.Application(middlewares=[client_gone])
        app.router.add_get("/v1/.well-known/openidconfiguration", self._metadata)
        app.router.add_get("/v1/.well-known/keys", self._keys)
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)
        app.router.add_post("/amer/v3/conversations", self._create_conversation)
        app.router.add_post("/amer/v3/conversations/{conversation}/activities", self._send)
        app.router.add_post("/amer/v3/conversations/{conversation}/activities/{activity}", self._reply)
        app.router.add_put("/amer/v3/conversations/{conversation}/activities/{activity}", self._update)
        app.router.add_delete("/amer/v3/conversations/{conversation}/activities/{activity}", self._delete)
        app.router.add_get("/files/{file}", self._download)
        app.router.add_get("/amer/v3/attachments/{file}/views/original", self._attachment_view)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._session = ClientSession()
        return self

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def service_url(self) -> str:
        return f"{self.base}/amer/"

    @property
    def metadata_url(self) -> str:
        return f"{self.base}/v1/.well-known/openidconfiguration"

    @property
    def token_url(self) -> str:
        return f"{self.base}/botframework.com/oauth2/v2.0/token"

    def config(self, endpoint_port: int = 0, **overrides: Any) -> dict[str, Any]:
        """A `platforms.teams` section pointing the adapter at this emulator."""
        return {
            "app_id": APP_ID,
            "app_password": APP_PASSWORD,
            "listen": f"127.0.0.1:{endpoint_port}",
            "openid_metadata_url": self.metadata_url,
            "token_url": self.token_url,
            **overrides,
        }

    # --- identity endpoints ----------------------------------------------------------------

    async def _metadata(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": ISSUER,
                "authorization_endpoint": "https://invalid.botframework.com",
                "jwks_uri": f"{self.base}/v1/.well-known/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def _keys(self, request: web.Request) -> web.Response:
        self.key_fetches += 1
        jwk = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        jwk.update({"kid": self.key_id, "use": "sig", "endorsements": list(self.endorsements)})
        return web.json_response({"keys": [jwk]})

    async def _token(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        self.token_requests.append({k: str(v) for k, v in form.items()})
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if form.get("client_id") != APP_ID or form.get("client_secret") != APP_PASSWORD:
            return web.json_response(
                {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."},
                status=401,
            )
        if form.get("scope") != "https://api.botframework.com/.default":
            return web.json_response({"error": "invalid_scope"}, status=400)
        token = "emu-token-" + uuid.uuid4().hex
        self.issued.add(token)
        return web.json_response({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token})

    def rotate_key(self, key_id: str) -> None:
        """Microsoft rolls its signing key: a new key, listed under a new id, signs from now on."""
        self.key, self.key_id = rsa_key(), key_id

    # --- inbound: signed activities to the bot -----------------------------------------------

    def sign(
        self,
        *,
        service_url: str | None = None,
        key: rsa.RSAPrivateKey | None = None,
        headers: dict[str, Any] | None = None,
        algorithm: str = "RS256",
        **claims: Any,
    ) -> str:
        """A Bot Connector token for a request to the bot; any claim can be changed or removed
        (None), the key and header replaced."""
        now = int(time.time())
        body: dict[str, Any] = {
            "serviceurl": service_url or self.service_url,
            "nbf": now - 5,
            "exp": now + 3600,
            "iss": ISSUER,
            "aud": APP_ID,
        }
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        header = {k: v for k, v in {"kid": self.key_id, **(headers or {})}.items() if v is not None}
        if algorithm == "none":
            return jwt.encode(body, None, algorithm="none", headers=header)
        return jwt.encode(body, key or self.key, algorithm=algorithm, headers=header)

    def new_id(self) -> str:
        return str(next(self._ids))

    def message(
        self,
        text: str,
        *,
        conversation: str = PERSONAL,
        sender: dict[str, Any] = ALICE,
        mention_bot: bool = False,
        thread: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
        value: dict[str, Any] | None = None,
        reply_to: str | None = None,
        entities: list[dict[str, Any]] | None = None,
        activity_id: str | None = None,
    ) -> dict[str, Any]:
        """A message activity as Teams posts it: a channel post's conversation id carries
        `;messageid=` of its thread root (its own id for a new post)."""
        conv = self.conversations[conversation]
        activity_id = activity_id or self.new_id()
        conv_id = conversation
        if conv.kind == "channel":
            conv_id = f"{conversation};messageid={thread or activity_id}"
        all_entities = list(entities or [])
        if mention_bot:
            at = f"<at>{BOT_NAME}</at>"
            text = f"{at} {text}"
            all_entities.append({"type": "mention", "text": at, "mentioned": {"id": BOT_ID, "name": BOT_NAME}})
        all_entities.append({"type": "clientInfo", "locale": "en-US", "country": "US", "platform": "Web"})
        conversation_account: dict[str, Any] = {"id": conv_id, "conversationType": conv.kind, "tenantId": TENANT_ID}
        if conv.kind != "personal":
            conversation_account["isGroup"] = True
        if conv.name:
            conversation_account["name"] = conv.name
        channel_data: dict[str, Any] = {"tenant": {"id": TENANT_ID}}
        if conv.kind == "channel":
            channel_data["teamsChannelId"] = conversation
            channel_data["teamsTeamId"] = TEAM
            channel_data["channel"] = {"id": conversation}
            channel_data["team"] = {"id": TEAM}
        activity: dict[str, Any] = {
            "type": "message",
            "id": activity_id,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()),
            "localTimestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000+00:00", time.gmtime()),
            "serviceUrl": self.service_url,
            "channelId": "msteams",
            "from": dict(sender),
            "conversation": conversation_account,
            "recipient": {"id": BOT_ID, "name": BOT_NAME},
            "textFormat": "plain",
            "locale": "en-US",
            "entities": all_entities,
            "channelData": channel_data,
        }
        if text:
            activity["text"] = text
        if attachments:
            activity["attachments"] = attachments
        if value is not None:
            activity["value"] = value
        if reply_to:
            activity["replyToId"] = reply_to
        self.activities.setdefault(conversation, {})[activity_id] = copy.deepcopy(activity)
        return activity

    def installed(self, conversation: str = PERSONAL, *, sender: dict[str, Any] = ALICE) -> dict[str, Any]:
        """The `conversationUpdate` Teams sends when the app is added to a conversation."""
        conv = self.conversations[conversation]
        activity = self.message("", conversation=conversation, sender=sender)
        self.activities[conversation].pop(activity["id"], None)
        activity.pop("text", None)
        activity["type"] = "conversationUpdate"
        activity["conversation"]["id"] = conversation
        activity["membersAdded"] = [{"id": BOT_ID}]
        if conv.kind == "channel":
            activity["channelData"]["eventType"] = "teamMemberAdded"
        return activity

    def edited(self, original: dict[str, Any], text: str) -> dict[str, Any]:
        """The `messageUpdate` Teams sends when a person edits a message (same id, new text)."""
        activity = copy.deepcopy(original)
        activity.update(type="messageUpdate", text=text)
        activity["channelData"]["eventType"] = "editMessage"
        return activity

    def deletion(self, original: dict[str, Any]) -> dict[str, Any]:
        """The `messageDelete` Teams sends when a person deletes a message."""
        activity = copy.deepcopy(original)
        activity.pop("text", None)
        activity["type"] = "messageDelete"
        activity["channelData"]["eventType"] = "softDeleteMessage"
        return activity

    def reacted(self, message_id: str, reaction: str, *, conversation: str = PERSONAL, removed: bool = False,
                sender: dict[str, Any] = ALICE) -> dict[str, Any]:
        """The `messageReaction` Teams sends for a reaction on a message (`replyToId`)."""
        activity = self.message("", conversation=conversation, sender=sender)
        self.activities[conversation].pop(activity["id"], None)
        activity.pop("text", None)
        activity.update(type="messageReaction", replyToId=message_id)
        activity["reactionsRemoved" if removed else "reactionsAdded"] = [{"type": reaction}]
        return activity

    def press(self, card: dict[str, Any], title: str, *, sender: dict[str, Any] = ALICE) -> dict[str, Any]:
        """A person presses the `Action.Submit` button titled `title` on a card the bot posted:
        Teams posts a message activity whose `value` is the button's `data`, replying to the card."""
        (attachment,) = [a for a in card.get("attachments", []) if a.get("contentType") == CARD]
        actions = [a for a in attachment["content"].get("actions", []) if a.get("title") == title]
        assert actions, f"no button {title!r} on the card"
        base = self._base(card["conversation"]["id"])
        thread = self._thread(card["conversation"]["id"])
        activity = self.message(
            "", conversation=base, sender=sender, value=dict(actions[0].get("data") or {}), reply_to=card["id"], thread=thread
        )
        activity.pop("text", None)
        return activity

    def file(self, data: bytes, name: str, *, declared_size: int | None = None) -> dict[str, Any]:
        """A file a person attached in a personal chat: Teams' `file.download.info`
        attachment, whose `downloadUrl` is pre-authorised (no token sent)."""
        file_id = uuid.uuid4().hex
        self.files[file_id] = data
        if declared_size is not None and declared_size != len(data):
            self.files[file_id + ".chunked"] = b""
        return {
            "contentType": FILE_DOWNLOAD,
            "contentUrl": f"https://contoso.sharepoint.com/personal/alice/Documents/Microsoft Teams Chat Files/{name}",
            "name": name,
            "content": {"downloadUrl": f"{self.base}/files/{file_id}", "uniqueId": file_id, "fileType": name.rsplit(".", 1)[-1]},
        }

    async def deliver(self, activity: dict[str, Any], *, url: str, token: str | None = "sign") -> int:
        """POST an activity to the bot's endpoint with a signed token (or `token` as given,
        None for none); the HTTP status the bot answered."""
        assert self._session is not None
        headers = {"Content-Type": "application/json"}
        if token == "sign":
            token = self.sign(service_url=activity.get("serviceUrl"))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with self._session.post(url, data=json.dumps(activity), headers=headers) as response:
            await response.read()
            return response.status

    # --- the connector REST API ------------------------------------------------------------

    @staticmethod
    def _base(conversation_id: str) -> str:
        return conversation_id.split(";", 1)[0]

    @staticmethod
    def _thread(conversation_id: str) -> str | None:
        _, sep, rest = conversation_id.partition(";messageid=")
        return rest or None if sep else None

    async def _authorised(self, request: web.Request, body: dict[str, Any]) -> web.Response | None:
        auth = request.headers.get("Authorization", "")
        path = request.path.removeprefix("/amer/")
        if not auth.startswith("Bearer ") or auth[7:] not in self.issued:
            self.calls.append(ConnectorCall(request.method, path, body, 401))
            return web.json_response({"error": {"code": "Unauthorized", "message": "Authorization has been denied"}}, status=401)
        if self.fail_next:
            status, headers = self.fail_next.pop(0)
            self.calls.append(ConnectorCall(request.method, path, body, status))
            return web.json_response({"error": {"code": "ServiceError", "message": "injected"}}, status=status, headers=headers)
        return None

    async def _json(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            body = None
        return body if isinstance(body, dict) else {}

    def _known(self, conversation_id: str) -> Conversation | None:
        return self.conversations.get(self._base(conversation_id))

    def _store(self, conversation_id: str, body: dict[str, Any], *, reply_to: str | None) -> dict[str, Any]:
        activity_id = self.new_id()
        conv = self._known(conversation_id)
        assert conv is not None
        stored = copy.deepcopy(body)
        stored["id"] = activity_id
        thread = self._thread(conversation_id)
        if conv.kind == "channel":
            thread = thread or (self._thread_of(conv.id, reply_to) if reply_to else None) or activity_id
            stored["conversation"] = {"id": f"{conv.id};messageid={thread}"}
        else:
            stored["conversation"] = {"id": conv.id}
        if reply_to:
            stored["replyToId"] = reply_to
        stored["from"] = {"id": BOT_ID, "name": BOT_NAME}
        stored["_posted_at"] = time.monotonic()
        self.activities.setdefault(conv.id, {})[activity_id] = stored
        return stored

    def _thread_of(self, conversation: str, activity_id: str) -> str | None:
        found = self.activities.get(conversation, {}).get(activity_id)
        return self._thread(found["conversation"]["id"]) if found else None

    async def _send(self, request: web.Request) -> web.Response:
        return await self._post(request, reply_to=None)

    async def _reply(self, request: web.Request) -> web.Response:
        return await self._post(request, reply_to=request.match_info["activity"])

    async def _post(self, request: web.Request, *, reply_to: str | None) -> web.Response:
        body = await self._json(request)
        refused = await self._authorised(request, body)
        if refused is not None:
            return refused
        conversation = request.match_info["conversation"]
        path = request.path.removeprefix("/amer/")
        if self._known(conversation) is None:
            self.calls.append(ConnectorCall("POST", path, body, 404))
            return web.json_response({"error": {"code": "ConversationNotFound", "message": "Conversation not found."}}, status=404)
        if body.get("type") == "typing":
            self.calls.append(ConnectorCall("POST", path, body, 200))
            self.typing.append(conversation)
            return web.json_response({})
        problem = _invalid_message(body)
        if problem:
            self.calls.append(ConnectorCall("POST", path, body, 400))
            return web.json_response({"error": {"code": "BadArgument", "message": problem}}, status=400)
        stored = self._store(conversation, body, reply_to=reply_to)
        self.calls.append(ConnectorCall("POST", path, body, 201))
        return web.json_response({"id": stored["id"]}, status=201)

    async def _update(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        refused = await self._authorised(request, body)
        if refused is not None:
            return refused
        path = request.path.removeprefix("/amer/")
        conversation = self._base(request.match_info["conversation"])
        activity_id = request.match_info["activity"]
        existing = self.activities.get(conversation, {}).get(activity_id)
        if existing is None or existing["from"]["id"] != BOT_ID:
            self.calls.append(ConnectorCall("PUT", path, body, 404))
            return web.json_response({"error": {"code": "ActivityNotFoundInConversation", "message": "Not found"}}, status=404)
        problem = _invalid_message(body)
        if problem:
            self.calls.append(ConnectorCall("PUT", path, body, 400))
            return web.json_response({"error": {"code": "BadArgument", "message": problem}}, status=400)
        for key in ("text", "textFormat", "attachments"):
            existing.pop(key, None)
            if key in body:
                existing[key] = copy.deepcopy(body[key])
        self.calls.append(ConnectorCall("PUT", path, body, 200))
        return web.json_response({"id": activity_id})

    async def _delete(self, request: web.Request) -> web.Response:
        refused = await self._authorised(request, {})
        if refused is not None:
            return refused
        path = request.path.removeprefix("/amer/")
        conversation = self._base(request.match_info["conversation"])
        activity_id = request.match_info["activity"]
        existing = self.activities.get(conversation, {}).get(activity_id)
        if existing is None or existing["from"]["id"] != BOT_ID:
            self.calls.append(ConnectorCall("DELETE", path, {}, 404))
            return web.json_response({"error": {"code": "ActivityNotFoundInConversation", "message": "Not found"}}, status=404)
        del self.activities[conversation][activity_id]
        self.deleted.append((conversation, activity_id))
        self.calls.append(ConnectorCall("DELETE", path, {}, 200))
        return web.Response(status=200)

    async def _create_conversation(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        refused = await self._authorised(request, body)
        if refused is not None:
            return refused
        members = body.get("members") or []
        tenant = body.get("tenantId") or (body.get("channelData") or {}).get("tenant", {}).get("id")
        if body.get("isGroup") or len(members) != 1 or not tenant:
            self.calls.append(ConnectorCall("POST", "v3/conversations", body, 400))
            return web.json_response({"error": {"code": "BadArgument", "message": "one member and a tenant"}}, status=400)
        member = members[0]
        for conv in self.conversations.values():
            if conv.kind == "personal" and conv.members[0]["id"] == member.get("id"):
                break
        else:
            known = next((m for m in (ALICE, BOB) if m["id"] == member.get("id")), None)
            if known is None:
                self.calls.append(ConnectorCall("POST", "v3/conversations", body, 403))
                return web.json_response({"error": {"code": "Forbidden", "message": "user not in tenant"}}, status=403)
            conv = Conversation(f"a:1personal-{known['id']}", "personal", [known])
            self.conversations[conv.id] = conv
        self.calls.append(ConnectorCall("POST", "v3/conversations", body, 201))
        return web.json_response({"id": conv.id}, status=201)

    def inline_image(self, data: bytes, mime: str = "image/png") -> dict[str, Any]:
        """A picture pasted into a chat: an attachment whose `contentUrl` is on the Bot
        Connector, readable only with the bot's token."""
        file_id = uuid.uuid4().hex
        self.files[file_id] = data
        return {"contentType": mime, "contentUrl": f"{self.service_url}v3/attachments/{file_id}/views/original"}

    async def _attachment_view(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[7:] not in self.issued:
            return web.json_response({"error": {"code": "Unauthorized", "message": "no token"}}, status=401)
        file_id = request.match_info["file"]
        if file_id not in self.files:
            return web.Response(status=404)
        self.file_fetches.append(file_id)
        return web.Response(body=self.files[file_id], content_type="image/png")

    async def _download(self, request: web.Request) -> web.StreamResponse:
        file_id = request.match_info["file"]
        if file_id not in self.files:
            return web.Response(status=404)
        data = self.files[file_id]
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if file_id + ".chunked" in self.files:
            response.enable_chunked_encoding()  # the size a person claimed is not what is served
        else:
            response.content_length = len(data)
        await response.prepare(request)
        await asyncio.sleep(0.1)  # time for a bot that refuses the declared size to hang up
        transport = request.transport
        if transport is None or transport.is_closing():
            return response  # the bot hung up on the headers: nothing fetched
        await response.write(data[:1])  # fails once the bot has hung up on the declared size
        await response.drain()
        if transport.is_closing():
            return response
        await response.write(data[1:])
        await response.write_eof()
        self.file_fetches.append(file_id)
        return response

    # --- what people see -------------------------------------------------------------------

    def shown(self, conversation: str, activity_id: str) -> dict[str, Any] | None:
        return self.activities.get(self._base(conversation), {}).get(activity_id)

    def bot_posts(self, conversation: str) -> list[dict[str, Any]]:
        return [a for a in self.activities.get(self._base(conversation), {}).values() if a["from"]["id"] == BOT_ID]

    def posts_in_thread(self, channel: str, root: str) -> list[dict[str, Any]]:
        return [
            a
            for a in self.activities.get(channel, {}).values()
            if self._thread(a["conversation"]["id"]) == root and a["id"] != root
        ]

    def connector(self, method: str | None = None) -> list[ConnectorCall]:
        return [c for c in self.calls if method is None or c.method == method]


def text_shown(activity: dict[str, Any]) -> str:
    """What Teams shows of a message's text: markdown (the default format) with HTML entity
    references read as the characters they stand for."""
    text = str(activity.get("text") or "")
    return html.unescape(text) if activity.get("textFormat", "markdown") != "plain" else text


def card_of(activity: dict[str, Any]) -> dict[str, Any] | None:
    for attachment in activity.get("attachments") or []:
        if attachment.get("contentType") == CARD:
            return dict(attachment["content"])
    return None


def card_text(card: dict[str, Any]) -> str:
    return "\n".join(str(block.get("text", "")) for block in card.get("body", []) if block.get("type") == "TextBlock")


def _invalid_message(body: dict[str, Any]) -> str | None:
    """What Teams refuses in a message: no type, nothing to show, a card that is not one."""
    if body.get("type") != "message":
        return "activity type must be message"
    attachments = body.get("attachments") or []
    if not str(body.get("text") or "").strip() and not attachments:
        return "message has no text and no attachments"
    for attachment in attachments:
        if attachment.get("contentType") == CARD:
            content = attachment.get("content") or {}
            if content.get("type") != "AdaptiveCard" or not content.get("version"):
                return "adaptive card without type or version"
        elif not attachment.get("contentUrl") and not attachment.get("content"):
            return "attachment without content"
    if len(json.dumps(body)) > 100_000:
        return "message too large"
    return None
