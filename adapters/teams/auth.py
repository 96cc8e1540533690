"""Who may talk to the bot: the Bot Connector's signed requests, checked with PyJWT.

Every request to the messaging endpoint carries `Authorization: Bearer <JWT>` signed by the
Bot Connector. The token is accepted only when all of these hold (Microsoft's "Authenticate
requests from the Bot Connector service to your bot"):

1. it is a JWT whose header names an algorithm the OpenID metadata allows (RS256) — never
   `none` — and a key id (`kid`) found in the metadata's JWKS document;
2. its signature verifies with that key;
3. its issuer is the metadata's `issuer` (`https://api.botframework.com`), its audience the
   bot's app id, and it has not expired (five minutes of clock skew, Microsoft's figure);
4. once the body is read: the key is endorsed for the activity's channel (`msteams`), and the
   token's `serviceurl` claim is the activity's `serviceUrl` — so a token lifted from one
   request cannot send the bot's replies (and its token) somewhere else.

Why not the SDK's `JwtTokenValidator`: it derives the JWKS address from the token's issuer
(hard-coded Microsoft hosts), so it cannot be pointed at `openid_metadata_url`, and it checks
neither the endorsements nor the `serviceurl` claim. The keys come from the metadata named in
the configuration; an unknown `kid` refreshes them, at most once per `KEY_REFRESH_FLOOR_S`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt

log = logging.getLogger(__name__)

#: Clock skew tolerated on `exp` / `nbf` (Microsoft: "industry-standard clock-skew is 5 minutes").
LEEWAY_S = 300
#: The keys are fetched again at least this often (Microsoft rotates them; it asks for a daily refresh).
KEY_MAX_AGE_S = 24 * 3600.0
#: An unknown key id refreshes the keys no more often than this: a rotated key is taken up
#: within a minute, and forged key ids cannot make the bot hammer the metadata host.
KEY_REFRESH_FLOOR_S = 60.0
METADATA_TIMEOUT_S = 10.0


class Unauthorized(Exception):
    """A request the bot must refuse with 401; the message says why (never the token)."""


@dataclass(frozen=True)
class SigningKey:
    key: Any  # the public key PyJWT verifies with
    endorsements: frozenset[str]


@dataclass(frozen=True)
class Verified:
    """A token that passed the checks that need no body: its claims and its key's endorsements."""

    claims: dict[str, Any]
    endorsements: frozenset[str]

    def check_activity(self, channel_id: str, service_url: str) -> None:
        """The checks that need the activity: the key endorsed for its channel, and the
        token issued for its service URL."""
        if self.endorsements and channel_id not in self.endorsements:
            raise Unauthorized(f"the signing key is not endorsed for channel {channel_id[:40]!r}")
        claimed = str(self.claims.get("serviceurl") or self.claims.get("serviceUrl") or "")
        if not claimed:
            raise Unauthorized("the token has no serviceurl claim")
        if claimed.rstrip("/") != service_url.rstrip("/"):
            raise Unauthorized("the token's serviceurl claim is not the activity's serviceUrl")


class OpenIdKeys:
    """The OpenID metadata and its JWKS document, fetched on first use and kept."""

    def __init__(
        self, session: aiohttp.ClientSession, metadata_url: str, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._session = session
        self._metadata_url = metadata_url
        self._clock = clock
        self._lock = asyncio.Lock()
        self._keys: dict[str, SigningKey] = {}
        self._issuer = ""
        self._algorithms: list[str] = ["RS256"]
        self._fetched = 0.0

    async def issuer(self) -> str:
        await self._ensure()
        return self._issuer

    async def algorithms(self) -> list[str]:
        await self._ensure()
        return self._algorithms

    async def key(self, kid: str) -> SigningKey | None:
        await self._ensure()
        found = self._keys.get(kid)
        if found is None and self._clock() - self._fetched > KEY_REFRESH_FLOOR_S:
            await self.refresh()
            found = self._keys.get(kid)
        return found

    async def _ensure(self) -> None:
        if not self._keys or self._clock() - self._fetched > KEY_MAX_AGE_S:
            await self.refresh()

    async def refresh(self) -> None:
        """Fetch the metadata and its keys; on failure the keys held stay (an outage of the
        metadata host does not lock everyone out)."""
        async with self._lock:
            metadata = await self._get_json(self._metadata_url)
            issuer, jwks_uri = metadata.get("issuer"), metadata.get("jwks_uri")
            if not isinstance(issuer, str) or not isinstance(jwks_uri, str):
                raise ValueError("the OpenID metadata names no issuer or jwks_uri")
            algorithms = metadata.get("id_token_signing_alg_values_supported")
            document = await self._get_json(jwks_uri)
            keys: dict[str, SigningKey] = {}
            for entry in document.get("keys") or []:
                if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
                    continue
                try:
                    key = jwt.PyJWK(entry, algorithm="RS256").key
                except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as exc:
                    log.warning("teams: skipped key %s of the JWKS document (%s)", entry["kid"][:40], exc)
                    continue
                endorsements = entry.get("endorsements") or []
                keys[entry["kid"]] = SigningKey(key, frozenset(str(e) for e in endorsements if isinstance(e, str)))
            if not keys:
                raise ValueError("the JWKS document holds no usable key")
            self._issuer, self._keys = issuer, keys
            if isinstance(algorithms, list) and algorithms:
                self._algorithms = [str(a) for a in algorithms if str(a).upper() != "NONE"] or ["RS256"]
            self._fetched = self._clock()

    async def _get_json(self, url: str) -> dict[str, Any]:
        async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=METADATA_TIMEOUT_S)) as response:
            if response.status != 200:
                raise ValueError(f"HTTP {response.status} from the OpenID metadata host")
            try:
                body = json.loads(await response.read())
            except ValueError:
                raise ValueError("the OpenID metadata host answered with something that is not JSON") from None
        if not isinstance(body, dict):
            raise ValueError("the OpenID metadata host answered with something that is not a JSON object")
        return body


class RequestVerifier:
    """Checks a request's bearer token against the keys, the issuer and the bot's app id."""

    def __init__(self, keys: OpenIdKeys, app_id: str) -> None:
        self._keys = keys
        self._app_id = app_id

    async def verify(self, authorization: str | None) -> Verified:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("no bearer token")
        token = token.strip()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise Unauthorized("the bearer token is not a JWT") from None
        algorithms = await self._keys.algorithms()
        if header.get("alg") not in algorithms:
            raise Unauthorized(f"the token's algorithm {str(header.get('alg'))[:20]!r} is not allowed")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthorized("the token names no key id")
        signing = await self._keys.key(kid)
        if signing is None:
            raise Unauthorized("the token is signed with a key the OpenID metadata does not list")
        try:
            claims = jwt.decode(
                token,
                signing.key,
                algorithms=algorithms,
                audience=self._app_id,
                issuer=await self._keys.issuer(),
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized("the token is not addressed to this bot's app id") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized("the token's issuer is not the OpenID metadata's") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("the token's signature does not verify") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"the token is not valid ({type(exc).__name__})") from None
        return Verified(claims, signing.endorsements)
