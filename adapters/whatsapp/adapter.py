"""The WhatsApp adapter: the Cloud API's webhook in, its Graph API out.

Receiving is a webhook server of our own (webhook.py: verification, signatures, the limit on
failed authentications) that hands each signed notification to `inbound.WhatsAppInbound`,
and answers Meta only once the runtime has taken what it held, so nothing acknowledged is
lost. Sending is a thin Graph API client over aiohttp (graph.py, which also says why not
pywa) behind `outbound.WhatsAppOutbound`. What the API cannot tell again (when a person last
wrote, what a quoted message said) lives in the runtime's store (memory.py).
"""

from __future__ import annotations

import logging

import aiohttp
from botweave.adapter import Adapter, Check, PlatformRejected
from botweave.tasks import TaskOwner
from botweave.types import AgentIdentity, BotUser, PlatformCapabilities

from .config import DEFAULT_API_BASE, WhatsAppConfig
from .graph import GraphClient, GraphError
from .inbound import WhatsAppInbound
from .memory import Memory
from .outbound import WhatsAppOutbound
from .webhook import WebhookServer

log = logging.getLogger(__name__)

API_TIMEOUT_S = 30
POOL_SIZE = 64


class WhatsAppAdapter(Adapter):
    platform = "whatsapp"
    capabilities = PlatformCapabilities(
        max_message_length=4096,
        length_unit="chars",
        max_caption_length=1024,
        can_edit=False,  # business messages cannot be edited: a streamed reply is sent once, final
        can_delete=False,
        can_react=True,
        threads=False,
        typing=True,
        markdown="whatsapp",
        buttons=True,
    )
    # Meta reports no edits, deletions or membership of one-to-one chats.
    emits = frozenset({"reaction_added", "reaction_removed", "button_pressed"})
    # The indicator shows for 25 seconds or until the next message.
    typing_interval_s = 20.0
    # A keyed send's key comes back in its statuses, which the inbound side notes (outbound.py).
    idempotency = "lookup"

    def __init__(self, config: WhatsAppConfig | None = None) -> None:
        super().__init__(config or WhatsAppConfig())
        self.config: WhatsAppConfig
        self.outbound: WhatsAppOutbound | None = None
        self.inbound: WhatsAppInbound | None = None
        self.webhook: WebhookServer | None = None
        self.display_phone = ""  # the business number as people see it, known once logged in
        self._session: aiohttp.ClientSession | None = None
        self._graph: GraphClient | None = None
        #: What the adapter remembers in the store (the window, quotes, ids); set by start().
        self.memory = Memory(None)
        self._tasks = TaskOwner("whatsapp")

    @property
    def mode(self) -> str:
        return "webhook"

    def _client(self, session: aiohttp.ClientSession) -> GraphClient:
        return GraphClient(
            session, self.config.api_base_url or DEFAULT_API_BASE, self.secret("access_token"),
            self.config.phone_number_id.strip(),
        )

    async def _whoami(self, graph: GraphClient) -> dict[str, object]:
        try:
            return await graph.phone_number()
        except GraphError as exc:
            if exc.status in (401, 403) or exc.code in (190, 10, 200):
                raise PlatformRejected(
                    f"whatsapp: the Graph API refused the access token ({exc.message}); check "
                    "platforms.whatsapp.access_token"
                ) from None
            if exc.status == 404 or exc.code == 100:
                raise PlatformRejected(
                    f"whatsapp: no phone number {self.config.phone_number_id!r} ({exc.message}); check "
                    "platforms.whatsapp.phone_number_id"
                ) from None
            raise

    async def start(self, *, inbound: bool = True) -> None:
        """Who the bot is (`GET /{phone-number-id}`); with `inbound`, the webhook server too."""
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_S), connector=aiohttp.TCPConnector(limit=POOL_SIZE)
        )
        try:
            graph = self._client(self._session)
            number = await self._whoami(graph)
        except BaseException:
            await self._close_session()
            raise
        self._graph = graph
        self.display_phone = "".join(ch for ch in str(number.get("display_phone_number") or "") if ch.isdigit())
        name = str(number.get("verified_name") or self.display_phone or "botweave")
        self.self_user = BotUser(
            user_id=self.config.phone_number_id.strip(), username=self.display_phone, display_name=name, is_bot=True
        )
        self.memory = memory = Memory(self.store)
        self.inbound = WhatsAppInbound(self, memory, phone_number_id=self.config.phone_number_id.strip())
        self.outbound = WhatsAppOutbound(graph, memory, lambda: self.config)
        if not inbound:
            return
        self.webhook = WebhookServer(
            handle=self.inbound.notification,
            host=self.config.host,
            port=self.config.port,
            path=self.config.path,
            app_secret=self.secret("app_secret"),
            verify_token=self.secret("verify_token"),
            trusted_proxies=self.config.trusted_proxies,
        )
        try:
            await self.webhook.start()
        except OSError as exc:
            await self.stop()
            raise PlatformRejected(
                f"whatsapp: cannot listen on {self.config.listen} ({exc.strerror or exc}); check platforms.whatsapp.listen"
            ) from None
        log.info("whatsapp: webhook listening on %s:%s%s", self.config.host, self.webhook.port, self.config.path)

    async def stop(self) -> None:
        self.outbound = None
        webhook, self.webhook = self.webhook, None
        if webhook is not None:
            await webhook.stop()
        await self._tasks.close()
        await self._close_session()

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def readiness(self) -> str | None:
        problem = await super().readiness()
        if problem is not None:
            return problem
        if self.inbound is not None and self.webhook is not None and not self.webhook.running:
            return "the webhook server is not listening"
        return None

    async def diagnose(self) -> list[Check]:
        """`GET /{phone-number-id}` with the access token: one real call, nothing received."""
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=API_TIMEOUT_S)) as session:
                number = await self._whoami(self._client(session))
        except PlatformRejected as exc:
            fix = str(exc).rpartition("; ")[2]
            return [Check("whatsapp", False, str(exc).partition("; ")[0], fix)]
        except (aiohttp.ClientError, TimeoutError, GraphError) as exc:
            return [Check("whatsapp", False, f"cannot reach the Graph API: {type(exc).__name__}: {exc}",
                          "check the network, or platforms.whatsapp.api_base_url")]
        shown = number.get("verified_name") or number.get("display_phone_number") or "the number"
        checks = [Check("whatsapp", True, f"access token accepted; sending as {shown}")]
        where = f"{self.config.listen}{self.config.path}"
        checks.append(Check("whatsapp webhook", True,
                            f"listens on {where}; the app's callback URL must reach it over https, "
                            "with verify_token as its verify token"))
        if self.config.template is None:
            checks.append(Check("whatsapp template", True,
                                "no template: proactive sends to people silent for 24 hours will fail "
                                "(set platforms.whatsapp.template)"))
        return checks

    def taken(self, chat_id: str, message_id: str) -> None:
        """A person's message is in the runtime's hands: their read receipt (blue ticks)."""
        graph = self._graph
        if not self.config.read_receipts or graph is None:
            return
        self._tasks.spawn(graph.mark_read(message_id, typing=False), name=f"read receipt in {chat_id}",
                          on_failure=_receipt_failed)

    def direct_user(self, chat_id: str) -> str | None:
        return chat_id or None  # one-to-one chats only: the chat is its person

    def name_prefix(self, identity: AgentIdentity) -> str:
        return f"*{identity.name}:* "


def _receipt_failed(exc: BaseException) -> None:
    log.info("whatsapp: a read receipt was not sent (%s)", type(exc).__name__)
