"""The Microsoft Teams adapter: a Bot Framework messaging endpoint and the Bot Connector API.

Receiving: the Bot Connector POSTs activities to `listen` + `path`. `endpoint.MessagingEndpoint`
verifies each request's JWT against the keys of `openid_metadata_url` (auth.py) before the
body is parsed, parses it into the Agents SDK's `Activity`, and hands it to
`inbound.TeamsInbound`, which keeps the conversation's reference (references.py) and hands
the message or event to the runtime once.

Sending: `outbound.TeamsOutbound` posts through the SDK's `ConnectorClient` to each
conversation's `serviceUrl`, with a token from `token_url` (tokens.py).

Why parts of the SDK are left out (and the decision in full: docs/getting-started/teams.md):
its `JwtTokenValidator` finds the signing keys from the token's issuer (Microsoft's hosts,
fixed) and so cannot read `openid_metadata_url`, nor does it check the key's endorsements or
the `serviceurl` claim; and its `MsalAuth` goes through MSAL, which accepts only an https
authority it can discover, so it cannot use `token_url`. Both jobs are small and specified by
Microsoft, so they are done with PyJWT and one form POST; the SDK's `Activity` schema and its
connector client carry everything else.
"""

from __future__ import annotations

import logging
import re
from collections import Counter

import aiohttp
from aiohttp import web
from botweave.adapter import Adapter, Check, PlatformRejected
from botweave.config import parse_listen
from botweave.ingress import IngressGuard
from botweave.types import BotUser, PlatformCapabilities, QuotedRef

from .auth import OpenIdKeys, RequestVerifier
from .config import TeamsConfig
from .endpoint import MessagingEndpoint
from .inbound import Seen, TeamsInbound, split_conversation
from .outbound import TeamsOutbound
from .references import References
from .tokens import TokenRefused, TokenSource

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 30.0
#: A channel thread written as a target: `<channel id>:<root message id>`.
_CHANNEL_THREAD = re.compile(r"^(19:[^:;]+@thread\.[a-z0-9]+):(\d+)$")


class TeamsAdapter(Adapter):
    platform = "teams"
    capabilities = PlatformCapabilities(
        # Teams refuses an activity over about 28 KB: 4,000 characters stay under it even
        # when every one takes 5 bytes (an escaped `&`, an emoji), with room for the envelope.
        max_message_length=4000,
        length_unit="chars",
        can_edit=True,
        can_delete=True,
        can_react=False,  # the Bot Connector has no call for a bot to react
        threads=True,  # channel threads
        typing=True,
        markdown="teams",
        buttons=True,
        edit_floor_ms=1500,  # Teams throttles a bot's updates of one message; 1.5 s between edits
    )
    # The Bot Connector has no idempotency key and no way to read a conversation back.
    idempotency = "none"
    emits = frozenset(
        {"message_edited", "message_deleted", "reaction_added", "reaction_removed", "member_joined", "member_left",
         "button_pressed"}
    )
    typing_interval_s = 3.0  # Teams shows a typing activity for about three seconds

    def __init__(self, config: TeamsConfig | None = None) -> None:
        super().__init__(config or TeamsConfig())
        self.config: TeamsConfig
        self.outbound: TeamsOutbound | None = None
        self.inbound: TeamsInbound | None = None
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None  # the port the messaging endpoint listens on
        self.ingress = IngressGuard("teams: messaging endpoint", self.config.trusted_proxies)
        self.inbound_stats: Counter[str] = Counter()
        self.seen = Seen()
        self._receiving = False

    @property
    def mode(self) -> str:
        return "webhook"

    @property
    def bot_id(self) -> str:
        """The bot's id in Teams conversations: `28:` and its app id."""
        return f"28:{self.config.app_id}"

    def split_target(self, place: str) -> tuple[str, str | None]:
        """Teams' conversation ids hold colons (`19:…@thread.tacv2`, `a:1…`), so a target's
        thread is told by its shape: `<channel>;messageid=<root>` as Teams writes it, or
        `<channel>:<root>` where the root is a message id (digits) after a channel's id."""
        base, root = split_conversation(place)
        if root is not None:
            return base, root
        match = _CHANNEL_THREAD.match(place)
        return (match.group(1), match.group(2)) if match else (place, None)

    async def start(self, *, inbound: bool = True) -> None:
        """Get a token (which proves the app id and password); with `inbound`, also listen."""
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S))
        tokens = TokenSource(
            self._session, self.config.effective_token_url, self.config.app_id, self.secret("app_password")
        )
        try:
            await tokens.token()
        except TokenRefused:
            await self._close_session()
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            await self._close_session()
            raise RuntimeError(f"teams: cannot reach the token endpoint ({type(exc).__name__})") from None
        self.self_user = BotUser(user_id=self.bot_id, username=self.config.app_id, display_name="", is_bot=True)
        references = References(self.store)
        self.inbound = TeamsInbound(self, references, self.seen, stats=self.inbound_stats)
        self.outbound = TeamsOutbound(tokens, references, bot_id=self.bot_id, posted=self._note_post)
        self._receiving = inbound
        if inbound:
            await self._listen()

    def _note_post(self, chat_id: str, message_id: str, thread_id: str | None, text: str) -> None:
        self.seen.note(chat_id, message_id, QuotedRef(message_id, text, "bot"), thread_id)

    async def _listen(self) -> None:
        assert self._session is not None and self.inbound is not None
        verifier = RequestVerifier(OpenIdKeys(self._session, self.config.openid_metadata_url), self.config.app_id)
        app = web.Application()
        app.router.add_post(self.config.path, MessagingEndpoint(verifier, self.inbound, self.ingress))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        host, port = parse_listen(self.config.listen)
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise PlatformRejected(f"teams: cannot listen on {self.config.listen} ({exc.strerror}); "
                                   "change platforms.teams.listen") from None
        sockets = getattr(site._server, "sockets", None) or []  # the port chosen for port 0
        self.port = sockets[0].getsockname()[1] if sockets else port
        log.info("teams: messaging endpoint listening on %s:%s%s", host, self.port, self.config.path)

    async def stop(self) -> None:
        outbound, self.outbound = self.outbound, None
        if outbound is not None:
            await outbound.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self._close_session()

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def readiness(self) -> str | None:
        problem = await super().readiness()
        if problem is not None:
            return problem
        if self._receiving and self._runner is None:
            return "the messaging endpoint is not listening"
        return None

    async def diagnose(self) -> list[Check]:
        """A token from `token_url` (the credentials), then the OpenID metadata and its keys
        (what inbound requests are checked with); nothing starts listening."""
        checks: list[Check] = []
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            try:
                tokens = TokenSource(session, self.config.effective_token_url, self.config.app_id,
                                     self.secret("app_password"))
                await tokens.fetch()
                checks.append(Check("teams", True, f"a token for app {self.config.app_id} from the token endpoint"))
            except (TokenRefused, ValueError) as exc:
                checks.append(Check("teams", False, str(exc), "set platforms.teams.app_id and app_password "
                                    "(and tenant_id for a single-tenant bot)"))
            except (aiohttp.ClientError, OSError, TimeoutError, RuntimeError) as exc:
                checks.append(Check("teams", False, f"cannot get a token: {type(exc).__name__}: {exc}",
                                    "check the network, or platforms.teams.token_url"))
            keys = OpenIdKeys(session, self.config.openid_metadata_url)
            try:
                await keys.refresh()
                checks.append(Check("teams openid metadata", True,
                                    f"signing keys of issuer {await keys.issuer()} from the OpenID metadata"))
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                checks.append(Check("teams openid metadata", False, f"cannot read the OpenID metadata: {exc}",
                                    "check the network, or platforms.teams.openid_metadata_url"))
        checks.append(Check("teams messaging endpoint", True,
                            f"listens on {self.config.listen}{self.config.path}; the Azure Bot's messaging "
                            "endpoint must reach it over https"))
        return checks
