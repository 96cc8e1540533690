"""`botweave web [CONFIG]`: the bot with its gateway and browser UI, the quickest way in.

It is `botweave run` with the gateway always on: on `--gateway-listen` when given, else on
`gateway.listen` from bot.yaml, else on 127.0.0.1:8787, or a free port when that one is
taken. With no bot.yaml at all it runs the built-in agent on `offline/echo` (no key, no
network) with the web platform only. Once the gateway listens it prints a sign-in link whose
one-time code sits in the URL fragment (see botweave.gateway.ui): printed on the terminal
only, never logged; after each use (or a use too late) the next link is printed, for another
tab or browser.
"""

from __future__ import annotations

import socket
import sys
from typing import Any, TextIO

from botweave.config import ConfigError, parse_listen
from botweave.gateway.ui import CODE_TTL_S, SignIn
from botweave.runtime.config import BUILTIN_CONFIG, Config

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
#: With no bot.yaml: the built-in agent, and no console (the terminal shows the link).
BUILTIN_WEB_CONFIG: dict[str, Any] = {**BUILTIN_CONFIG, "platforms": {}}


def port_free(host: str, port: int) -> bool:
    """Whether `port` can be listened on now (the gateway binds it a moment later)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def choose_listen(config: Config, given: str | None) -> None:
    """Settle `gateway.listen` for `botweave web` (see the module docstring)."""
    if given is not None:
        try:
            parse_listen(given)
        except ValueError as exc:
            raise ConfigError([f"--gateway-listen: {exc}"]) from None
        config.gateway.listen = given
    elif config.gateway.listen is None:
        port = DEFAULT_PORT if port_free(DEFAULT_HOST, DEFAULT_PORT) else 0
        config.gateway.listen = f"{DEFAULT_HOST}:{port}"


def announcer(out: TextIO = sys.stdout) -> Any:
    """Print each sign-in link on the terminal (not through logging: logs are collected and
    kept, a terminal is the person who started the bot)."""
    state = {"first": True}

    def announce(link: str) -> None:
        minutes = int(CODE_TTL_S // 60)
        if state["first"]:
            state["first"] = False
            text = f"\nbotweave web: open this link to sign in (it works once, for {minutes} minutes):\n    {link}\n"
        else:
            text = f"botweave web: a new sign-in link, for another tab or browser:\n    {link}\n"
        try:
            out.write(text)
            out.flush()
        except (OSError, ValueError):
            pass  # no terminal any more: nobody to show it to

    return announce


def attach_signin(app: Any, out: TextIO = sys.stdout) -> SignIn:
    """Give the app's gateway one-time sign-in links, printed to `out`."""
    if app.gateway is None:
        raise ConfigError(["botweave web: the gateway did not start (is this process a worker? use --role all)"])
    signin = SignIn(announcer(out))
    app.gateway.signin = signin
    return signin
