"""Who is knocking at a webhook server, and how often they may fail to prove who they are.

A webhook server sees the TCP peer. Behind a reverse proxy that peer is the proxy, and the
client is in `X-Forwarded-For` (or RFC 7239 `Forwarded`) — but those headers are written by
whoever sends the request, so they are believed only from a peer listed in `trusted_proxies`.
From such a peer the chain is read right to left, each hop vouched for by the one to its
right, and the client is the rightmost hop that is not itself a trusted proxy: what a client
writes into the header itself sits further left and is never reached. From any other peer
the headers are ignored. When a proxy writes both headers, `X-Forwarded-For` is read (the
one nginx, Caddy, Traefik and the cloud load balancers append to).

The attributed address is what these servers log and what `FailedAuthLimit` counts: an
address whose requests keep failing authentication (a flood of unsigned junk) is refused for a
while. The limit only ever makes failing requests cheaper; it never refuses an authentic one.
Each server checks the credential first (a constant-time compare of a secret, or an HMAC over
a body bounded by the server's body limit), so a request that passes it is served whoever sent
it, and only one that fails it is counted or, while its client is refused, answered 429
without a log line. Behind a proxy that is not listed in `trusted_proxies` every client is one
address, and a stranger's junk must not take the bot off the air for everyone else.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Protocol

from aiohttp import web
from pydantic import BeforeValidator

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_HOPS = 32  # a forwarded chain longer than this is cut to its rightmost hops


def parse_networks(value: Any) -> tuple[IPNetwork, ...]:
    """Addresses and CIDR ranges (`10.0.0.0/8`, `192.0.2.7`, `2001:db8::/32`) as networks; a
    single string is one entry. An entry that is neither is an error naming it."""
    if value is None:
        return ()
    entries = [value] if isinstance(value, (str, ipaddress.IPv4Network, ipaddress.IPv6Network)) else value
    if not isinstance(entries, Iterable):
        raise ValueError("must be a list of IP addresses or CIDR ranges")
    networks = []
    for entry in entries:
        if isinstance(entry, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            networks.append(entry)
            continue
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} is not an IP address or CIDR range (e.g. 10.0.0.0/8)") from None
    return tuple(networks)


#: The `trusted_proxies` setting of a platform section that runs a webhook server.
TrustedProxies = Annotated[tuple[IPNetwork, ...], BeforeValidator(parse_networks)]


def parse_address(text: str | None) -> IPAddress | None:
    """An address as a header or a socket names it (`1.2.3.4`, `1.2.3.4:80`, `[::1]:80`,
    `"[::1]"`, `::ffff:1.2.3.4`); None for anything else (`unknown`, `_hidden`, garbage)."""
    if not text:
        return None
    text = text.strip().strip('"')
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _forwarded_for(values: Sequence[str]) -> list[str]:
    """The `for=` of each element of RFC 7239 `Forwarded` headers, in order."""
    hops = []
    for element in ",".join(values).split(","):
        found = ""
        for pair in element.split(";"):
            name, _, value = pair.partition("=")
            if name.strip().lower() == "for":
                found = value.strip()
        hops.append(found)
    return hops


def client_address(
    peer: str | None,
    trusted: Sequence[IPNetwork],
    *,
    forwarded_for: Sequence[str] = (),
    forwarded: Sequence[str] = (),
) -> str:
    """The address a request is attributed to; see the module docstring for the rules."""
    current = parse_address(peer)
    if current is None:
        return peer or "unknown"
    if not trusted or not _is_trusted(current, trusted):
        return str(current)
    hops = ",".join(forwarded_for).split(",") if forwarded_for else _forwarded_for(forwarded) if forwarded else []
    for hop in reversed(hops[-MAX_HOPS:]):
        address = parse_address(hop)
        if address is None:
            return str(current)  # a hop nobody can vouch for: the last address that is known
        if not _is_trusted(address, trusted):
            return str(address)
        current = address
    return str(current)


def _is_trusted(address: IPAddress, trusted: Sequence[IPNetwork]) -> bool:
    return any(address.version == network.version and address in network for network in trusted)


class _Request(Protocol):
    """The part of an aiohttp request that attribution reads."""

    @property
    def remote(self) -> str | None: ...

    @property
    def headers(self) -> Any: ...


def request_client(request: _Request, trusted: Sequence[IPNetwork]) -> str:
    """`client_address` for an aiohttp request."""
    headers = request.headers
    return client_address(
        request.remote,
        trusted,
        forwarded_for=headers.getall("X-Forwarded-For", ()),
        forwarded=headers.getall("Forwarded", ()),
    )


class FailedAuthLimit:
    """Per client address: `max_failures` failed authentications within `window` seconds,
    and the address is refused for `block` seconds.

    Memory is bounded: at most `max_tracked` addresses are remembered, the least recently
    seen forgotten first.
    """

    def __init__(
        self,
        *,
        max_failures: int = 20,
        window: float = 60.0,
        block: float = 60.0,
        max_tracked: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max(1, max_failures)
        self.window = window
        self.block = block
        self._max_tracked = max_tracked
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._blocked: OrderedDict[str, float] = OrderedDict()

    def refused_for(self, client: str) -> float:
        """Seconds `client` is still refused; 0 when it is not."""
        until = self._blocked.get(client)
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            del self._blocked[client]
            return 0.0
        return left

    def failed(self, client: str) -> bool:
        """Count one failed authentication; True when it starts a block."""
        now = self._clock()
        recent = self._failures.pop(client, None) or deque(maxlen=self.max_failures)
        while recent and recent[0] <= now - self.window:
            recent.popleft()
        recent.append(now)
        if len(recent) < self.max_failures:
            self._failures[client] = recent
            _trim(self._failures, self._max_tracked)
            return False
        self._blocked[client] = now + self.block
        _trim(self._blocked, self._max_tracked)
        return True


def _trim(table: OrderedDict[str, Any], size: int) -> None:
    while len(table) > size:
        table.popitem(last=False)


class IngressGuard:
    """What both webhook servers do with a request's origin: attribute it to a client, and
    count and log the client's failed authentications until it is refused for a while."""

    def __init__(
        self, name: str, trusted: Sequence[IPNetwork] = (), *, limit: FailedAuthLimit | None = None
    ) -> None:
        self.name = name
        self.trusted = tuple(trusted)
        self.limit = limit or FailedAuthLimit()

    def client(self, request: _Request) -> str:
        return request_client(request, self.trusted)

    def failed(self, client: str, reason: str) -> float:
        """A request from `client` failed authentication for `reason` (never a secret).

        Returns the seconds the client is still refused for: 0 means the failure is answered
        with its own status (and was counted and logged); more means a 429 with that
        `Retry-After`, neither counted nor logged, so a flood costs one line per block.
        """
        refused = self.limit.refused_for(client)
        if refused:
            return refused
        if self.limit.failed(client):
            log.warning(
                "%s: %d requests from %s failed authentication within %.0fs (last: %s); refusing its "
                "failing requests for %.0fs",
                self.name, self.limit.max_failures, client, self.limit.window, reason, self.limit.block,
            )
        else:
            log.warning("%s: request from %s rejected: %s", self.name, client, reason)
        return 0.0


def too_many_failures(refused_for: float) -> web.Response:
    """The answer to a failing request from a client that is refused for `refused_for` seconds."""
    return web.Response(
        status=429, text="too many failed requests", headers={"Retry-After": str(max(1, math.ceil(refused_for)))}
    )
