"""The network egress policy: which hosts agents' tools may reach.

`network: {allow_hosts, deny_hosts}` globally, or per agent (which then replaces the global
one). The rules, in order:

1. Only http and https URLs with a host are reachable.
2. Hosts are compared normalised: lower case, no trailing dot, international names in their
   IDNA (punycode) form, IP addresses in their canonical form (so `0x7f.1` and `127.1` are
   `127.0.0.1`, and an IPv4-mapped IPv6 address is the IPv4 address).
3. A deny entry that matches refuses, whatever the allow list says (deny wins).
4. A non-empty allow list means default deny: the host must match one of its entries.
5. Loopback, private, link-local (and unspecified) addresses, and `localhost`, are refused
   unless an allow entry names them: the address itself, a network containing it
   (`10.0.0.0/8`), or the name. A wildcard never counts, so `allow_hosts: ["*"]` still keeps
   tools off the bot's own network.

Entries: `example.com` is that host only; `*.example.com` any subdomain of it (not
example.com itself); `*` any host; an IP address or a CIDR network; a URL is read as its host.

Hosts are matched as written in the URL; names are not resolved (no DNS), so a public name
that resolves to a private address is not caught here.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna
from botweave.policies.config import NetworkConfig

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOCAL_NAMES = ("localhost", "localhost.localdomain")


def _canonical_ip(host: str) -> IPAddress | None:
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        # The legacy IPv4 spellings every C library (and so every HTTP client) accepts:
        # 127.1, 2130706433, 0x7f.0.0.1, 0177.0.0.1.
        if not text or not all(c in "0123456789abcdefxABCDEFX." for c in text) or not text[0].isdigit():
            return None
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def normalise_host(host: str) -> str:
    """A host as the policy compares it (see the module docstring); ValueError when it is
    not a valid host name or address."""
    text = host.strip().rstrip(".").lower()
    if not text:
        raise ValueError("empty host")
    address = _canonical_ip(text)
    if address is not None:
        return str(address)
    try:
        return idna.encode(text, uts46=True).decode("ascii")
    except idna.IDNAError:
        try:
            return text.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"{host!r} is not a valid host name") from None


def _special(address: IPAddress) -> bool:
    return address.is_loopback or address.is_private or address.is_link_local or address.is_unspecified


@dataclass(frozen=True)
class HostRule:
    """One allow or deny entry."""

    text: str  # as written, for messages
    host: str | None = None  # exact host
    suffix: str | None = None  # `*.example.com` → `example.com`
    network: IPNetwork | None = None
    anything: bool = False

    @classmethod
    def parse(cls, entry: str) -> HostRule:
        text = entry.strip()
        if text == "*":
            return cls(text, anything=True)
        if "://" in text:
            text = urlsplit(text).hostname or ""
        if "/" in text:
            try:
                return cls(entry, network=ipaddress.ip_network(text.strip("[]"), strict=False))
            except ValueError:
                raise ValueError(f"{entry!r} is not a host, *.domain, IP address or network") from None
        if text.startswith("*."):
            return cls(entry, suffix=normalise_host(text[2:]))
        if "*" in text:
            raise ValueError(f"{entry!r}: a wildcard may only start an entry, as in *.example.com")
        return cls(entry, host=normalise_host(text))

    def matches(self, host: str, address: IPAddress | None) -> bool:
        if self.anything:
            return True
        if self.network is not None:
            return address is not None and address.version == self.network.version and address in self.network
        if self.suffix is not None:
            return host.endswith("." + self.suffix)
        return host == self.host

    def names(self, host: str, address: IPAddress | None) -> bool:
        """Whether the entry names this host explicitly (what special addresses need)."""
        return not self.anything and self.suffix is None and self.matches(host, address)


class EgressPolicy:
    """The rules of one `network:` block; `refusal(url)` says why a URL is refused, or None."""

    def __init__(self, allow_hosts: Iterable[str] = (), deny_hosts: Iterable[str] = ()) -> None:
        self.allow = [HostRule.parse(entry) for entry in allow_hosts]
        self.deny = [HostRule.parse(entry) for entry in deny_hosts]

    @classmethod
    def from_config(cls, config: NetworkConfig | None) -> EgressPolicy:
        if config is None:
            return cls()
        return cls(config.allow_hosts, config.deny_hosts)

    def refusal(self, url: str) -> str | None:
        try:
            parts = urlsplit(url.strip())
            hostname = parts.hostname
        except ValueError:
            return "not a valid URL"
        if parts.scheme not in ("http", "https"):
            return f"only http and https URLs may be fetched (got {parts.scheme or 'no scheme'})"
        if not hostname:
            return "the URL has no host"
        return self.host_refusal(hostname)

    def host_refusal(self, raw_host: str) -> str | None:
        try:
            host = normalise_host(raw_host)
        except ValueError as exc:
            return str(exc)
        address = _canonical_ip(host)
        for rule in self.deny:
            if rule.matches(host, address):
                return f"host {host} is denied by the network policy ({rule.text})"
        if self.allow and not any(rule.matches(host, address) for rule in self.allow):
            return f"host {host} is not in the network policy's allow_hosts"
        local = (address is not None and _special(address)) or host in LOCAL_NAMES or host.endswith(".localhost")
        if local and not any(rule.names(host, address) for rule in self.allow):
            return f"host {host} is a local or private address; allow it by name in allow_hosts to reach it"
        return None
