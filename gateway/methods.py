"""The gateway's own methods: sessions, chat, watching, shares, presence, health. Features
register theirs in the same registry (approvals, pairing, rooms); see botweave.methods.

Chat methods turn a client's request into what a platform would have sent: `chat.send` a
`BotMessage` from the principal in the session, `chat.stop` the `/stop` command (turn
control, so not kept as a message of the session), `chat.edit` and `chat.delete` a
`message_edited` / `message_deleted` event. All of them enter the runtime through the web
adapter's `dispatch`, so the pipeline treats them as it treats the same things on Telegram.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, Any, Optional, Protocol

from botweave.adapter import Adapter
from botweave.events import ConversationEvents
from botweave.methods import Caller, MethodError, MethodRegistry, NoParams, Params
from botweave.types import META_AGENT, META_CONVERSATION, BotChannel, BotMessage, BotUser, PlatformEvent, QuotedRef
from botweave.version import __version__
from pydantic import Field

from .auth import TokenBook
from .config import GatewayConfig
from .connection import Connection
from .files import FileShelf
from .hub import Hub
from .sessions import Session, SessionBook, session_of


class GatewayParts(Protocol):
    """What the methods use of the gateway that serves them (gateway/server.py), named here
    so that the server imports the methods and never the other way round."""

    config: GatewayConfig
    events: ConversationEvents
    sessions: SessionBook
    tokens: TokenBook
    files: FileShelf
    hub: Hub
    agents: list[str]
    web_platform: Callable[[], Adapter | None]
    config_status: Callable[[], dict[str, str]] | None
    about: Callable[[], dict[str, Any]] | None

    async def close_shares(self, share_ids: Iterable[str]) -> None: ...
    def connection(self, caller: Caller) -> Connection: ...
    def count_resume(self) -> None: ...
    async def may_read(self, caller: Caller, conversation: str) -> bool: ...
    async def check_read(self, caller: Caller, conversation: str) -> None: ...
    async def readiness_of_bot(self) -> dict[str, str]: ...

#: How many messages `chat.history` gives at most, and by default.
MAX_HISTORY = 200
#: How many conversations `conversations.list` gives at most.
MAX_CONVERSATIONS = 500
Id = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(max_length=60_000)]


@dataclass(frozen=True, slots=True)
class AndThen:
    """A result, and what to do once it went out (send the events a subscription missed)."""

    result: dict[str, Any]
    then: Callable[[], object]


class SessionRef(Params):
    session: Id


class SessionCreate(Params):
    title: Annotated[str, Field(max_length=200)] = ""
    agent: Optional[Id] = None


class SessionRename(Params):
    session: Id
    title: Annotated[str, Field(min_length=1, max_length=200)]


class HistoryParams(Params):
    conversation: Id
    before: Optional[Id] = None
    limit: Annotated[int, Field(ge=1, le=MAX_HISTORY)] = 50


class SendParams(Params):
    session: Id
    text: Text = ""
    attachments: Annotated[list[Id], Field(max_length=20)] = Field(default_factory=list)
    idempotency_key: Id
    reply_to: Optional[Id] = None


class EditParams(Params):
    session: Id
    message_id: Id
    text: Text


class DeleteParams(Params):
    session: Id
    message_id: Id


class ConversationsParams(Params):
    platform: Optional[Id] = None
    limit: Annotated[int, Field(ge=1, le=MAX_CONVERSATIONS)] = 100


class SubscribeParams(Params):
    conversation: Id
    last_seq: Optional[Annotated[int, Field(ge=0)]] = None


class UnsubscribeParams(Params):
    conversation: Id


class ShareParams(Params):
    session: Id
    expires_seconds: Annotated[float, Field(gt=0)]


class ShareRef(Params):
    share_id: Id


def message_id_for(principal: str, session: str, key: str) -> str:
    """The id of the message a `chat.send` makes: the same for the same key, whoever resends."""
    return "w-" + hashlib.sha256(f"{principal}\0{session}\0{key}".encode()).hexdigest()[:20]


def user_message(message_id: str, caller: Caller, text: str, **more: Any) -> dict[str, Any]:
    record = {
        "id": message_id,
        "author": {"kind": "user", "id": caller.name, "name": caller.name},
        "text": text,
        "at": time.time(),
        "reply_to": None,
        "attachments": [],
        "buttons": [],
        "reactions": [],
        "edited": False,
        "deleted": False,
    }
    return record | more


class GatewayMethods:
    def __init__(self, gateway: GatewayParts) -> None:
        self.gateway = gateway
        self.events = gateway.events
        self.sessions = gateway.sessions

    def register(self, registry: MethodRegistry) -> None:
        add = registry.register
        add("agents.list", self.agents_list, scope="read", help="the agents a session may talk to")
        add("sessions.list", self.sessions_list, scope="read", help="the principal's sessions", shares=True)
        add("sessions.create", self.sessions_create, scope="write", params=SessionCreate)
        add("sessions.rename", self.sessions_rename, scope="write", params=SessionRename)
        add("sessions.delete", self.sessions_delete, scope="write", params=SessionRef)
        add("chat.history", self.chat_history, scope="read", params=HistoryParams, shares=True)
        add("chat.send", self.chat_send, scope="write", params=SendParams)
        add("chat.stop", self.chat_stop, scope="write", params=SessionRef)
        add("chat.edit", self.chat_edit, scope="write", params=EditParams)
        add("chat.delete", self.chat_delete, scope="write", params=DeleteParams)
        add("conversations.list", self.conversations_list, scope="read", params=ConversationsParams)
        add("subscribe", self.subscribe, scope="read", params=SubscribeParams, shares=True)
        add("unsubscribe", self.unsubscribe, scope="read", params=UnsubscribeParams, shares=True)
        add("shares.create", self.shares_create, scope="write", params=ShareParams)
        add("shares.revoke", self.shares_revoke, scope="write", params=ShareRef)
        add("presence", self.presence, scope="read")
        add("health", self.health, scope="read")

    # --- sessions -----------------------------------------------------------------------------

    async def _session(self, caller: Caller, session_id: str, *, write: bool = True) -> Session:
        """The session, when the caller may use it (its owner, an admin; a share reads its own)."""
        session = await self.sessions.get(session_id)
        if session is None:
            raise MethodError("not_found", f"no session {session_id}")
        if caller.conversations is not None:
            if write or session.conversation not in caller.conversations:
                raise MethodError("forbidden", "a share reads its own session only")
        elif session.owner != caller.name and not caller.admin:
            raise MethodError("forbidden", f"session {session_id} is another principal's")
        return session

    async def _listed(self, session: Session) -> dict[str, Any]:
        shown = session.to_dict()
        listing = await self.events.listing(session.conversation)
        if listing is not None:
            shown["updated"] = max(session.updated, float(listing.get("last_at") or 0))
        return shown

    async def agents_list(self, caller: Caller, params: NoParams) -> dict[str, Any]:
        """What `sessions.create` takes as `agent`: a client offers these instead of asking
        for a name it would have to guess."""
        return {"agents": [{"name": name} for name in self.gateway.agents]}

    async def sessions_list(self, caller: Caller, params: NoParams) -> dict[str, Any]:
        if caller.conversations is not None:
            owned = [s for c in caller.conversations if (sid := session_of(c)) and (s := await self.sessions.get(sid))]
        else:
            owned = await self.sessions.owned_by(caller.name)
        shown = [await self._listed(s) for s in owned]
        return {"sessions": sorted(shown, key=lambda s: float(s["updated"]), reverse=True)}

    async def sessions_create(self, caller: Caller, params: SessionCreate) -> dict[str, Any]:
        agents = self.gateway.agents
        if params.agent is not None and params.agent not in agents:
            raise MethodError("bad_request", f"agent: no agent {params.agent!r}; agents: {', '.join(agents) or 'none'}")
        session = await self.sessions.create(caller.name, params.title, params.agent)
        return {"session": session.to_dict()}

    async def sessions_rename(self, caller: Caller, params: SessionRename) -> dict[str, Any]:
        session = await self._session(caller, params.session)
        return {"session": (await self.sessions.rename(session, params.title)).to_dict()}

    async def sessions_delete(self, caller: Caller, params: SessionRef) -> dict[str, Any]:
        session = await self._session(caller, params.session)
        await self.sessions.delete(session)
        await self.events.forget(session.conversation)
        revoked = await self.gateway.tokens.unshare_session(session.id)
        await self.gateway.close_shares(revoked)
        return {}

    # --- chat ---------------------------------------------------------------------------------

    async def chat_history(self, caller: Caller, params: HistoryParams) -> dict[str, Any]:
        await self.gateway.check_read(caller, params.conversation)
        # The seq first: a message appended while the history is read is then sent again
        # after it (a client replaces a message it has), never left behind a seq it is not in.
        seq = await self.events.head(params.conversation)
        messages, more = await self.events.history(params.conversation, before=params.before, limit=params.limit)
        return {"messages": messages, "seq": seq, "more": more}

    async def _dispatch(self, item: BotMessage | PlatformEvent) -> None:
        adapter = self.gateway.web_platform()
        if adapter is None or adapter.outbound is None:
            raise MethodError("unavailable", "the web platform is not running here", retryable=True, retry_after_ms=1000)
        if not await adapter.dispatch(item):
            raise MethodError("unavailable", "the bot could not take the message now", retryable=True, retry_after_ms=1000)

    def _message(self, caller: Caller, session: Session, message_id: str, text: str, **more: Any) -> BotMessage:
        metadata: dict[str, Any] = {META_CONVERSATION: session.conversation}
        if session.agent:
            metadata[META_AGENT] = session.agent
        return BotMessage(
            message_id=message_id,
            content=text,
            sender=BotUser(caller.name, caller.name, caller.name),
            channel=BotChannel(session.id, "dm", session.title),
            platform="web",
            metadata=metadata,
            **more,
        )

    async def _attachments(self, caller: Caller, conversation: str, file_ids: list[str]) -> list[dict[str, Any]]:
        refs = []
        for file_id in file_ids:
            stored = await self.gateway.files.get(file_id)
            if stored is None or (stored.owner != caller.name and not caller.admin):
                raise MethodError("not_found", f"attachments: no upload {file_id} of yours")
            await self.gateway.files.shown_in(stored, conversation)
            refs.append(stored.ref())
        return refs

    async def chat_send(self, caller: Caller, params: SendParams) -> dict[str, Any]:
        session = await self._session(caller, params.session)
        if not params.text.strip() and not params.attachments:
            raise MethodError("bad_request", "text: a message needs text or attachments")
        conversation = session.conversation
        message_id = message_id_for(caller.name, session.id, params.idempotency_key)
        record = await self.events.message(conversation, message_id)
        if record is None:  # the first time this key is sent (a resend finds the record)
            quoted = await self.events.message(conversation, params.reply_to) if params.reply_to else None
            if params.reply_to and quoted is None:
                raise MethodError("not_found", f"reply_to: no message {params.reply_to} in this session")
            refs = await self._attachments(caller, conversation, params.attachments)
            record = user_message(message_id, caller, params.text, reply_to=params.reply_to, attachments=refs)
            await self.events.post(conversation, record, title=session.title, unique=f"evonce:user:{conversation}:{message_id}")
        quoted = await self.events.message(conversation, record["reply_to"]) if record.get("reply_to") else None
        quote = None
        if quoted is not None:
            author = "user" if quoted.get("author", {}).get("kind") == "user" else "bot"
            quote = QuotedRef(str(quoted["id"]), str(quoted.get("text") or ""), author, tuple(quoted.get("attachments") or ()))
        msg = self._message(
            caller, session, message_id, str(record.get("text") or ""),
            attachments=list(record.get("attachments") or []),
            reply_to=record.get("reply_to"),
            quoted=quote,
            timestamp=datetime.fromtimestamp(float(record.get("at") or time.time()), timezone.utc),
        )
        await self._dispatch(msg)
        return {"message_id": message_id, "conversation": conversation}

    async def chat_stop(self, caller: Caller, params: SessionRef) -> dict[str, Any]:
        """Turn control, not something the person said: the pipeline gets a `/stop` as from
        any platform, and the session's transcript does not (the bot's answer to it is the
        session's only trace of it, and that answer names the stop's id as what it replies to)."""
        session = await self._session(caller, params.session)
        message_id = f"w-stop-{uuid.uuid4().hex[:16]}"
        await self._dispatch(self._message(caller, session, message_id, "/stop"))
        return {"message_id": message_id}

    async def _own_message(self, caller: Caller, session: Session, message_id: str) -> dict[str, Any]:
        record = await self.events.message(session.conversation, message_id)
        author = (record or {}).get("author") or {}
        if record is None or record.get("deleted") or author.get("kind") != "user" or author.get("id") != caller.name:
            raise MethodError("not_found", f"no message {message_id} of yours in this session")
        return record

    async def chat_edit(self, caller: Caller, params: EditParams) -> dict[str, Any]:
        session = await self._session(caller, params.session)
        record = await self._own_message(caller, session, params.message_id)
        await self.events.update(session.conversation, record | {"text": params.text, "edited": True})
        await self._dispatch(self._event(caller, session, "message_edited", params.message_id, params.text))
        return {}

    async def chat_delete(self, caller: Caller, params: DeleteParams) -> dict[str, Any]:
        session = await self._session(caller, params.session)
        record = await self._own_message(caller, session, params.message_id)
        await self.events.update(session.conversation, record | {"deleted": True, "text": "", "attachments": []})
        await self._dispatch(self._event(caller, session, "message_deleted", params.message_id, None))
        return {}

    @staticmethod
    def _event(caller: Caller, session: Session, kind: Any, message_id: str, text: str | None) -> PlatformEvent:
        return PlatformEvent(
            kind=kind,
            platform="web",
            chat_id=session.id,
            user_id=caller.name,
            message_id=message_id,
            new_text=text,
            event_id=f"{kind}-{uuid.uuid4().hex}",
        )

    # --- watching -----------------------------------------------------------------------------

    async def conversations_list(self, caller: Caller, params: ConversationsParams) -> dict[str, Any]:
        found = []
        for listing in await self.events.conversations():
            conversation = str(listing.get("conversation"))
            if params.platform is not None and listing.get("platform") != params.platform:
                continue
            if not await self.gateway.may_read(caller, conversation):
                continue
            found.append(listing | {"seq": await self.events.head(conversation)})
            if len(found) >= params.limit:
                break
        return {"conversations": found}

    async def subscribe(self, caller: Caller, params: SubscribeParams) -> AndThen:
        conn = self.gateway.connection(caller)
        await self.gateway.check_read(caller, params.conversation)
        head = await self.events.head(params.conversation)
        after = head if params.last_seq is None else params.last_seq
        if params.last_seq is not None:
            self.gateway.count_resume()
        self.gateway.hub.follow(conn, params.conversation, after)
        cursor = conn.cursors[params.conversation]
        return AndThen(
            {"conversation": params.conversation, "seq": head},
            lambda: conn.tasks.spawn(conn.catch_up(params.conversation, cursor), name="catch up a subscription"),
        )

    async def unsubscribe(self, caller: Caller, params: UnsubscribeParams) -> dict[str, Any]:
        self.gateway.hub.unfollow(self.gateway.connection(caller), params.conversation)
        return {}

    # --- shares -------------------------------------------------------------------------------

    async def shares_create(self, caller: Caller, params: ShareParams) -> dict[str, Any]:
        session = await self._session(caller, params.session)
        most = self.gateway.config.max_share_seconds
        if params.expires_seconds > most:
            raise MethodError("bad_request", f"expires_seconds: at most {most:g} (gateway.max_share_seconds)")
        return await self.gateway.tokens.share(session.id, caller.name, params.expires_seconds)

    async def shares_revoke(self, caller: Caller, params: ShareRef) -> dict[str, Any]:
        record = await self.gateway.tokens.share_record(params.share_id)
        if record is None:
            raise MethodError("not_found", f"no share {params.share_id}")
        if record.get("by") != caller.name and not caller.admin:
            raise MethodError("forbidden", "only who shared a session (or an admin) revokes the share")
        await self.gateway.tokens.unshare(params.share_id)
        await self.gateway.close_shares([params.share_id])
        return {}

    # --- the gateway itself -------------------------------------------------------------------

    async def presence(self, caller: Caller, params: NoParams) -> dict[str, Any]:
        return {"connections": self.gateway.hub.presence()}

    async def health(self, caller: Caller, params: NoParams) -> dict[str, Any]:
        failing = await self.gateway.readiness_of_bot()
        answer: dict[str, Any] = {"status": "unready" if failing else "ok", "failing": failing}
        if self.gateway.config_status is not None:  # the revision that runs, and any drift
            answer["config"] = self.gateway.config_status()
        if self.gateway.about is not None:
            about = self.gateway.about()
            platforms = about.pop("platforms", [])
            answer |= about
            answer["platforms"] = {name: failing.get(name, "connected") for name in platforms}
        answer["version"] = __version__
        return answer

