"""Who may use the gateway: tokens, shares, origins.

Tokens come from bot.yaml (`gateway.tokens`) and from the store (`botweave gateway token
add`), where only their SHA-256 is kept: the token itself is shown once, when it is made. A
token is looked up by its hash and the hash compared in constant time (`hmac.compare_digest`
against every configured token, so neither the lookup nor the comparison tells how close a
guess came). A share is a token of its own that reads one web session until it expires.

Where no token exists at all and the gateway listens on a loopback address, a client needs
none: it is the person at this machine (`local`, every scope), as the console is. Browsers
are the danger there: any page a person visits may open a WebSocket to 127.0.0.1, so every
request's `Origin` is checked, on loopback too (`origin_allowed`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from botweave.methods import SCOPES, Caller, Scope
from botweave.store import Store

from .config import NAME, TokenConfig, check_user, is_loopback, scopes_of

_TOKEN = "gwtok:"
_TOKEN_BY_HASH = "gwtokhash:"
_SHARE = "gwshare:"
_SHARE_BY_HASH = "gwsharehash:"
_SHARES_OF = "gwshare-of:"
#: Query parameters a token might be put in by mistake; a request carrying one is refused.
TOKEN_PARAMS = frozenset({"token", "access_token", "auth", "key", "api_key"})
LOCAL = "local"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a connection or request stands for."""

    name: str
    kind: str  # token, share or local
    scopes: frozenset[str]
    user: str | None = None  # the platform identity a token speaks for: telegram:123
    session: str | None = None  # a share: the one session it reads
    share_id: str | None = None
    expires_at: float | None = None
    #: How the principal was proven (a store token's or a share's hash), to check again later.
    proof: str | None = None

    def caller(self, conn_id: str = "") -> Caller:
        identities: list[tuple[str, str]] = [] if self.kind == "share" else [("web", self.name)]
        if self.user:
            platform, _, user_id = self.user.partition(":")
            identities.append((platform, user_id))
        conversations = frozenset({f"web:{self.session}"}) if self.session else None
        return Caller(self.name, self.scopes, tuple(identities), self.kind, conversations, conn_id)

    def to_dict(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.user:
            shown["user"] = self.user
        if self.session:
            shown["session"] = self.session
        return shown


def _all_scopes(scopes: Sequence[str]) -> frozenset[str]:
    """`admin` implies every scope."""
    return frozenset(SCOPES) if "admin" in scopes else frozenset({"read", *scopes})


class TokenBook:
    def __init__(self, store: Store, configured: Sequence[TokenConfig] = ()) -> None:
        self.store = store
        self.configure(configured)

    def configure(self, configured: Sequence[TokenConfig]) -> None:
        """bot.yaml's tokens, at start and after each reload: the next authentication sees
        these, and `still_valid` tells a connection made with one that is gone."""
        self._configured = [(digest(t.token.get_secret_value().strip()), t) for t in configured]

    @property
    def configured(self) -> bool:
        return bool(self._configured)

    async def any_token(self) -> bool:
        """Whether any token exists (bot.yaml or the store): without one, only a loopback
        gateway may run, and its clients need none."""
        return self.configured or bool(await self.store.keys(_TOKEN))

    async def authenticate(self, token: str) -> Principal | None:
        """The principal a token stands for, or None."""
        proof = digest(token.strip())
        matched: TokenConfig | None = None
        for known, config in self._configured:  # every one compared: no early exit to time
            if hmac.compare_digest(known, proof):
                matched = config
        if matched is not None:
            return self._from_config(matched, proof)
        return await self._stored(proof) or await self._share(proof)

    async def still_valid(self, principal: Principal) -> bool:
        """Whether a principal proven earlier would still be let in as the same principal
        (not revoked, not expired, not removed from bot.yaml or given other scopes there)."""
        if principal.proof is None:
            return True
        for known, config in self._configured:
            if hmac.compare_digest(known, principal.proof):
                return self._from_config(config, principal.proof) == principal
        again = await self._stored(principal.proof) or await self._share(principal.proof)
        return again is not None and again.name == principal.name

    @staticmethod
    def _from_config(config: TokenConfig, proof: str) -> Principal:
        return Principal(config.name, "token", _all_scopes(config.scopes), config.user, proof=proof)

    async def _stored(self, proof: str) -> Principal | None:
        name = await self.store.get(_TOKEN_BY_HASH + proof)
        raw = await self.store.get(_TOKEN + name) if name else None
        if raw is None:
            return None
        record = json.loads(raw)
        if not hmac.compare_digest(str(record.get("hash", "")), proof):
            return None
        return Principal(record["name"], "token", _all_scopes(record.get("scopes", [])), record.get("user"), proof=proof)

    async def _share(self, proof: str) -> Principal | None:
        share_id = await self.store.get(_SHARE_BY_HASH + proof)
        raw = await self.store.get(_SHARE + share_id) if share_id else None
        if raw is None:
            return None
        record = json.loads(raw)
        if not hmac.compare_digest(str(record.get("hash", "")), proof) or float(record["expires_at"]) <= time.time():
            return None
        return Principal(
            f"share:{record['id']}",
            "share",
            frozenset({"read"}),
            session=record["session"],
            share_id=record["id"],
            expires_at=float(record["expires_at"]),
            proof=proof,
        )

    # --- tokens in the store (the CLI) --------------------------------------------------------

    async def add(self, name: str, scopes: Sequence[str], user: str | None = None) -> str:
        """A new token in the store; the token itself, to be shown once."""
        if not NAME.match(name):
            raise ValueError(f"{name!r}: letters, digits, '.', '_' and '-' (at most 64), starting with a letter or digit")
        if any(config.name == name for _, config in self._configured):
            raise ValueError(f"{name!r} is a token of bot.yaml already; pick another name")
        checked: list[Scope] = scopes_of(list(scopes))
        token = "bwg_" + secrets.token_urlsafe(32)
        proof = digest(token)
        record = {"name": name, "hash": proof, "scopes": checked, "user": check_user(user), "created": time.time()}
        if not await self.store.set_if_absent(_TOKEN + name, json.dumps(record)):
            raise ValueError(f"a token named {name!r} exists; revoke it first")
        await self.store.set(_TOKEN_BY_HASH + proof, name)
        return token

    async def listed(self) -> list[dict[str, Any]]:
        """Every token (never the secret): bot.yaml's and the store's."""
        found = [
            {"name": c.name, "scopes": list(c.scopes), "user": c.user, "source": "bot.yaml"} for _, c in self._configured
        ]
        for key in sorted(await self.store.keys(_TOKEN)):
            raw = await self.store.get(key)
            if raw is not None:
                record = json.loads(raw)
                found.append({
                    "name": record["name"], "scopes": record.get("scopes", []), "user": record.get("user"),
                    "source": "store", "created": record.get("created"),
                })
        return found

    async def revoke(self, name: str) -> bool:
        raw = await self.store.get(_TOKEN + name)
        if raw is None:
            return False
        await self.store.delete(_TOKEN + name, _TOKEN_BY_HASH + str(json.loads(raw).get("hash")))
        return True

    # --- shares -------------------------------------------------------------------------------

    async def share(self, session: str, by: str, seconds: float) -> dict[str, Any]:
        token = "bws_" + secrets.token_urlsafe(32)
        proof = digest(token)
        expires_at = time.time() + seconds
        share_id = f"sh-{uuid.uuid4().hex[:16]}"
        record = {"id": share_id, "session": session, "by": by, "expires_at": expires_at, "hash": proof}
        await self.store.set(_SHARE + share_id, json.dumps(record), ttl=seconds)
        await self.store.set(_SHARE_BY_HASH + proof, share_id, ttl=seconds)
        await self.store.set(f"{_SHARES_OF}{session}:{share_id}", "1", ttl=seconds)
        return {"share_id": share_id, "token": token, "session": session, "expires_at": expires_at}

    async def share_record(self, share_id: str) -> dict[str, Any] | None:
        raw = await self.store.get(_SHARE + share_id)
        return json.loads(raw) if raw is not None else None

    async def unshare(self, share_id: str) -> None:
        record = await self.share_record(share_id)
        if record is None:
            return
        await self.store.delete(
            _SHARE + share_id, _SHARE_BY_HASH + str(record.get("hash")), f"{_SHARES_OF}{record['session']}:{share_id}"
        )

    async def unshare_session(self, session: str) -> list[str]:
        """Every share of a session revoked (the session is deleted); their ids."""
        ids = [key.rpartition(":")[2] for key in await self.store.keys(f"{_SHARES_OF}{session}:")]
        for share_id in ids:
            await self.unshare(share_id)
        return ids


def local_principal() -> Principal:
    return Principal(LOCAL, "local", frozenset(SCOPES))


# --- origins ----------------------------------------------------------------------------------

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def token_in_query(query: Any) -> bool:
    """Whether a request's query string carries something named like a token."""
    return any(str(name).lower() in TOKEN_PARAMS for name in query)


def _host_of(authority: str) -> str:
    return (urlsplit(f"//{authority}").hostname or "").lower()


def origin_allowed(origin: str | None, host_header: str | None, *, listen_host: str, allowed: Sequence[str]) -> bool:
    """Whether a request's `Origin` may use the gateway: none at all (not a browser), an origin
    listed in `gateway.allowed_origins`, or the gateway's own (the page it served) — on a
    loopback listen only when the `Host` it was sent to is a loopback name too, so a DNS name
    rebound to 127.0.0.1 does not pass for the gateway's own origin."""
    if origin is None:
        return True
    origin = origin.strip().lower()
    if origin in allowed:
        return True
    if not host_header or origin not in (f"http://{host_header.lower()}", f"https://{host_header.lower()}"):
        return False
    return not is_loopback(listen_host) or _host_of(host_header) in LOOPBACK_NAMES
