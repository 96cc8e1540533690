"""The Matrix adapter: mautrix's `ClientAPI` against the homeserver's Client-Server API.

The SDK is mautrix (asyncio, typed, maintained, used by the mautrix bridges); its `ClientAPI`
makes every call, with the homeserver's address as its base URL. Its higher-level `Client`
is not used for receiving: that syncer stores the next sync position *before* it hands the
events to their handlers, so a crash in between loses them. This module runs the /sync long
poll itself and stores the position only after every event of the batch reached the runtime
(which records it in the store before it returns): a restart reads from the last stored
position, the runtime drops what it has already recorded (its dedup, keyed on the event id),
and nothing is answered twice or lost.

On the very first start there is no stored position; the homeserver then hands over a slice
of each room's recent history, which is not answered (`answer_backlog_on_first_start` turns
that on): a bot connected to an existing account should not answer last week's messages.

Logging in: with `access_token`, `whoami` says who the token belongs to (it must be
`user_id`); with `password`, `/login` on the configured `device_id`, so the device (and with it
the homeserver's memory of sent transaction ids) is the same at every start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
from botweave.adapter import Adapter, Check, PlatformRejected
from botweave.tasks import TaskOwner, failure_line, register_secret
from botweave.types import BotUser, PlatformCapabilities
from mautrix.api import Method, Path
from mautrix.client import ClientAPI
from mautrix.errors import MatrixInvalidToken, MatrixRequestError, MForbidden

from .config import MatrixConfig
from .inbound import ENCRYPTED_NOTICE, MatrixInbound
from .outbound import REQUEST_ERRORS, MatrixOutbound, fresh_txn_id

log = logging.getLogger(__name__)

API_TIMEOUT_S = 30.0
#: Pauses between failed syncs, growing to the last.
SYNC_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
DEVICE_NAME = "botweave"
#: Paging back through what a room's cut-short timeline left out: pages of this many events,
#: at most this many pages (what is older than that after a long downtime is not answered).
PAGE_SIZE = 100
PAGES_BACK = 10


class MatrixAdapter(Adapter):
    platform = "matrix"
    capabilities = PlatformCapabilities(
        # An event may be 64 KiB and an edit carries its text twice (the fallback and
        # m.new_content): at four bytes a character that still leaves room for an HTML body
        # next to each; and a reply longer than this reads better as several messages.
        max_message_length=4000,
        length_unit="chars",
        can_edit=True,
        can_delete=True,
        can_react=True,
        threads=True,
        typing=True,
        markdown="none",
        # Homeservers limit how fast one user sends events (Synapse's default: a burst of 10,
        # then one every 5 s for ordinary accounts): an edit every 1.5 s keeps a stream going
        # without meeting that limit on an account exempted from it, or for most replies.
        edit_floor_ms=1500,
    )
    # A repeated transaction id is dropped by the homeserver: see outbound.py.
    idempotency = "key"
    emits = frozenset({"message_edited", "message_deleted", "reaction_added", "reaction_removed",
                       "member_joined", "member_left"})

    def __init__(self, config: MatrixConfig | None = None) -> None:
        super().__init__(config or MatrixConfig())
        self.config: MatrixConfig
        self.outbound: MatrixOutbound | None = None
        self.inbound: MatrixInbound | None = None
        self.client: ClientAPI | None = None
        self._session: aiohttp.ClientSession | None = None
        self._syncing = TaskOwner("matrix: sync")
        self._last_sync: float | None = None  # monotonic time of the last answered /sync
        self._position: str | None = None  # where this process read up to, kept without a store
        self._told: set[str] = set()  # encrypted rooms told, kept without a store

    @property
    def mode(self) -> str:
        return "sync"

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self, *, inbound: bool = True) -> None:
        self.client = self._client()
        try:
            await self._log_in(self.client)
        except BaseException:
            await self._close_session()
            raise
        self.inbound = MatrixInbound(
            self, fetch_event=self._fetch_event, join=self._join, notice=self._encrypted_room, page_back=self._page_back
        )
        self.outbound = MatrixOutbound(self.client, sent=self.inbound.note_own)
        if inbound:
            self._syncing.spawn(self._sync_forever(), name="sync", on_failure=self._sync_died)

    async def stop(self) -> None:
        self.outbound = None
        await self._syncing.close()
        await self._close_session()

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _client(self) -> ClientAPI:
        base = self.config.api_base_url or self.config.homeserver or ""
        # No total limit (a sync waits on purpose); an answer that stops coming for longer than
        # a long poll plus a margin is a connection gone quiet.
        quiet = self.config.sync_timeout_seconds + API_TIMEOUT_S
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=API_TIMEOUT_S, sock_read=quiet)
        )
        token = self.secret("access_token") if self._has("access_token") else ""
        return ClientAPI(
            str(self.config.user_id or ""),  # type: ignore[arg-type]
            device_id=str(self.config.device_id or ""),  # type: ignore[arg-type]
            base_url=base.rstrip("/"),
            token=token,
            client_session=self._session,
            default_retry_count=0,  # outbound.py retries what may be retried, with the same transaction
            log=_http_logger(),
        )

    def _has(self, field: str) -> bool:
        value = getattr(self.config, field)
        return value is not None and bool(value.get_secret_value().strip())

    async def _log_in(self, client: ClientAPI) -> None:
        """whoami with the token, or /login with the password on the configured device; the
        account must be `user_id`."""
        wanted = str(self.config.user_id or "")
        try:
            if not self._has("access_token"):
                response = await client.login(
                    identifier=wanted,  # type: ignore[arg-type]
                    password=self.secret("password"),
                    device_id=self.config.device_id or None,
                    device_name=DEVICE_NAME,
                )
                register_secret(str(response.access_token))  # masked in logs like the configured ones
                client.device_id = response.device_id
            who = await client.whoami()
        except MatrixInvalidToken:
            raise PlatformRejected("matrix: the homeserver refused the access token; check platforms.matrix.access_token") from None
        except MForbidden:
            raise PlatformRejected("matrix: the homeserver refused the log-in; check platforms.matrix.password") from None
        if str(who.user_id) != wanted:
            raise PlatformRejected(
                f"matrix: the credentials belong to {who.user_id}, not {wanted}; check platforms.matrix.user_id"
            )
        client.device_id = who.device_id or client.device_id
        localpart = wanted[1:].split(":", 1)[0]
        try:
            name = await client.get_displayname(who.user_id) or localpart
        except (MatrixRequestError, aiohttp.ClientError, asyncio.TimeoutError):
            name = localpart  # a name is for recognising mentions; the id does that too
        self.self_user = BotUser(user_id=wanted, username=localpart, display_name=name, is_bot=True)
        log.info("matrix: logged in as %s (device %s)", wanted, client.device_id)

    # --- receiving ------------------------------------------------------------------------

    def _position_key(self) -> str:
        return f"matrix:sync:{self.config.user_id}"

    async def _load_position(self) -> str | None:
        if self.store is None:
            return self._position
        return await self.store.get(self._position_key())

    async def _keep_position(self, token: str) -> None:
        self._position = token
        if self.store is not None:
            await self.store.set(self._position_key(), token)

    async def _sync_forever(self) -> None:
        """Long-poll /sync; each batch is handed on whole before its position is stored."""
        client = self.client
        inbound = self.inbound
        assert client is not None and inbound is not None
        since = await self._load_position()
        if since is None:
            log.info("matrix: first start: %s", "answering the backlog" if self.config.answer_backlog_on_first_start
                     else "what came before now is not answered")
        failures = 0
        while True:
            try:
                data = await client.sync(since=since, timeout=self.config.sync_timeout_seconds * 1000)  # type: ignore[arg-type]
            except MatrixInvalidToken:
                self.failure = "matrix: the homeserver no longer accepts the access token"
                log.error("%s; check platforms.matrix", self.failure)
                return
            except (MatrixRequestError, aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                pause = SYNC_BACKOFF_S[min(failures, len(SYNC_BACKOFF_S) - 1)]
                failures += 1
                log.warning("matrix: sync failed (%s); trying again in %.0fs", type(exc).__name__, pause)
                await asyncio.sleep(pause)
                continue
            failures = 0
            self._last_sync = time.monotonic()
            if not isinstance(data, dict):
                continue
            backlog = since is None and not self.config.answer_backlog_on_first_start
            token = data.get("next_batch")
            try:
                taken = await inbound.read(data, since=since, backlog=backlog)
                if taken and isinstance(token, str) and token:
                    await self._keep_position(token)
                    since = token
            except Exception as exc:  # boundary: matrix's receive loop; the batch is read again
                log.warning("matrix: handling a sync batch failed (%s); reading it again", failure_line(exc))
                await asyncio.sleep(SYNC_BACKOFF_S[0])
                continue
            if not taken:
                log.warning("matrix: not every event of a sync batch was taken; reading it again")
                await asyncio.sleep(SYNC_BACKOFF_S[0])

    def _sync_died(self, exc: BaseException) -> None:
        self.failure = f"matrix: syncing stopped ({type(exc).__name__})"
        log.error("%s: %s", self.failure, exc)

    async def _fetch_event(self, room_id: str, event_id: str) -> dict[str, Any]:
        out = self.outbound
        if out is None:
            raise RuntimeError("not started")
        return await out.fetch_event(room_id, event_id)

    async def _page_back(self, room_id: str, start: str, stop: str) -> list[dict[str, Any]]:
        """A room's events from `start` back to `stop` (`/rooms/{room}/messages`, newest
        first, page by page), oldest first."""
        client = self.client
        if client is None:
            raise RuntimeError("not started")
        found: list[dict[str, Any]] = []
        token: str | None = start
        for _ in range(PAGES_BACK):
            if token is None:
                break
            query = {"from": token, "to": stop, "dir": "b", "limit": str(PAGE_SIZE)}
            page = await client.api.request(Method.GET, Path.v3.rooms[room_id].messages, query_params=query,
                                            metrics_method="getMessages")
            chunk = [e for e in page.get("chunk") or [] if isinstance(e, dict)]
            found.extend(chunk)
            end = page.get("end")
            token = str(end) if chunk and isinstance(end, str) and end != token else None
        if token is not None:
            log.warning("matrix: more than %d messages missed in %s; the oldest are not read",
                        PAGES_BACK * PAGE_SIZE, room_id)
        found.reverse()
        return found

    async def _join(self, room_id: str) -> None:
        client = self.client
        if client is None:
            return
        try:
            await client.api.request(Method.POST, Path.v3.rooms[room_id].join, {}, metrics_method="joinRoom")
        except MatrixRequestError as exc:
            log.warning("matrix: joining %s failed (%s)", room_id, getattr(exc, "errcode", exc.http_status))

    async def _encrypted_room(self, room_id: str) -> None:
        """Say once per room (once ever, with a store) that its encrypted messages are not read."""
        key = f"matrix:e2ee-notice:{room_id}"
        if self.store is not None:
            if not await self.store.set_if_absent(key, "1"):
                return
        elif room_id in self._told:
            return
        self._told.add(room_id)
        log.warning("matrix: room %s is end-to-end encrypted; its messages cannot be read (encryption is "
                    "not supported yet) and a notice says so in the room", room_id)
        out = self.outbound
        if out is not None:
            try:
                await out.put_event(room_id, "m.room.message", {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE},
                                    fresh_txn_id())
            except REQUEST_ERRORS as exc:  # the log line above already says it
                log.warning("matrix: the encryption notice in %s was not posted (%s)", room_id, type(exc).__name__)

    def split_target(self, place: str) -> tuple[str, str | None]:
        """`matrix:!room:example.org` names a room, `matrix:!room:example.org:$event` the thread
        under that event: a room id holds a colon (and its server may hold a port), an event id
        starts with `$`."""
        room, sep, thread = place.partition(":$")
        return room, f"${thread}" if sep and thread else None

    # --- health ---------------------------------------------------------------------------

    async def readiness(self) -> str | None:
        """Ready while the last /sync answered within twice its long-poll time (and a margin)."""
        problem = await super().readiness()
        if problem is not None or not self._syncing:
            return problem
        limit = 2 * self.config.sync_timeout_seconds + 10
        if self._last_sync is None:
            return "the first sync has not answered yet"
        if time.monotonic() - self._last_sync > limit:
            return f"no sync answered for over {limit}s"
        return None

    async def diagnose(self) -> list[Check]:
        """whoami with the token (or /login with the password on the configured device)."""
        try:
            client = self._client()
        except ValueError as exc:
            return [Check("matrix", False, str(exc), "set platforms.matrix.access_token or password")]
        try:
            await self._log_in(client)
        except PlatformRejected as exc:
            return [Check("matrix", False, str(exc).removeprefix("matrix: "), "set the matrix credentials in platforms.matrix")]
        except REQUEST_ERRORS as exc:
            return [Check("matrix", False, f"cannot reach the homeserver: {type(exc).__name__}",
                          "check platforms.matrix.homeserver and the network")]
        finally:
            await self._close_session()
        return [Check("matrix", True, f"whoami: {self.config.user_id} (device {client.device_id})")]


def _no_bodies(record: logging.LogRecord) -> bool:
    """mautrix logs each request with its body and URL at debug level: people's messages and
    room ids have no place in the bot's log, whatever its level."""
    return record.levelno > logging.DEBUG


def _http_logger() -> logging.Logger:
    logger = logging.getLogger("botweave.adapters.matrix.http")
    if _no_bodies not in logger.filters:
        logger.addFilter(_no_bodies)
    return logger
