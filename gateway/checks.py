"""What `botweave doctor` checks of the gateway: that its address can be bound here, and that
its tokens are usable (a gateway other machines can reach needs one; a token bound to a
platform identity names a platform that exists)."""

from __future__ import annotations

import socket
from collections.abc import Iterable

from botweave.adapter import Check
from botweave.config import parse_listen
from botweave.store import Store

from .auth import TokenBook
from .config import GatewayConfig, is_loopback


def _bind(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on here, or None."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


async def diagnose(config: GatewayConfig, store: Store | None, platforms: Iterable[str]) -> list[Check]:
    if config.listen is None:
        return [Check("gateway", True, "off (no gateway.listen)", skipped=True)]
    host, port = parse_listen(config.listen)
    checks = []
    problem = _bind(host, port)
    if problem is None:
        checks.append(Check("gateway listen", True, f"{config.listen} can be bound"))
    else:
        checks.append(Check("gateway listen", False, f"{config.listen}: {problem}",
                            "stop what listens there (a running bot?) or choose another gateway.listen"))
    stored: list[str] = []
    if store is not None:
        stored = [t["name"] for t in await TokenBook(store).listed()]
    names = [t.name for t in config.tokens] + stored
    known = set(platforms)
    unknown = [f"{t.name} ({t.user})" for t in config.tokens if t.user and t.user.partition(":")[0] not in known]
    if unknown:
        checks.append(Check("gateway tokens", False, f"bound to a platform that is not installed: {', '.join(unknown)}",
                            f"user: is PLATFORM:USER_ID with PLATFORM one of {', '.join(sorted(known))}"))
    elif not names and not is_loopback(host):
        checks.append(Check("gateway tokens", False, f"{config.listen} is reachable from other machines and no token exists",
                            "add one under gateway.tokens (token: \"${VAR}\") or with `botweave gateway token add NAME`"))
    elif not names:
        checks.append(Check("gateway tokens", True, "none: clients on this machine connect without one (loopback)"))
    else:
        checks.append(Check("gateway tokens", True, f"{len(names)}: {', '.join(names)}"))
    return checks
