"""The `botweave` command: run, chat, check.

Everything heavy (the app, litellm, platform SDKs) is imported inside the subcommands so
`botweave --help` answers instantly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any, NoReturn

from botweave.runtime.app import Role
from botweave.version import __version__

log = logging.getLogger("botweave")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="botweave", description="Connect chat platforms to LLM agents.")
    parser.add_argument("--version", action="version", version=f"botweave {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run every enabled platform")
    run.add_argument("config", nargs="?", help="bot.yaml (default: ./bot.yaml, then ./bot.yaml.example)")
    run.add_argument(
        "--role",
        choices=("all", "worker", "ingress"),
        default="all",
        help="with a Redis store: hold platform connections (ingress), answer (worker), or both",
    )
    chat = sub.add_parser("chat", help="talk to the agent in this terminal (console platform only)")
    chat.add_argument("config", nargs="?", help="bot.yaml (default: ./bot.yaml, then ./bot.yaml.example)")
    for command in (run, chat):
        command.add_argument(
            "--ephemeral",
            action="store_true",
            help="keep all state in memory for this run (default: the configured store, or a SQLite file per config)",
        )
    check = sub.add_parser("check", help="validate a config and print it with secrets masked")
    check.add_argument("config", help="bot.yaml to check")
    room = sub.add_parser("room", help="list rooms or run a stand-up now")
    room_sub = room.add_subparsers(dest="action", required=True)
    room_list = room_sub.add_parser("list", help="rooms, their schedules and next run times")
    room_list.add_argument("--config", help="bot.yaml")
    room_run = room_sub.add_parser("run", help="kick a room off now")
    room_run.add_argument("name")
    room_run.add_argument("--target", help="where to post, e.g. discord:123456 (default: the room's target)")
    room_run.add_argument("--config", help="bot.yaml")
    pair = sub.add_parser("pair", help="approve, deny, list or revoke pairing requests")
    pair_sub = pair.add_subparsers(dest="action", required=True)
    for action, args, text in (
        ("approve", ("platform", "code"), "let the user who has this code in"),
        ("deny", ("platform", "code"), "drop a pending request"),
        ("revoke", ("platform", "user"), "remove an approved user"),
        ("list", (), "show pending requests and approved users"),
    ):
        command = pair_sub.add_parser(action, help=text)
        for arg in args:
            command.add_argument(arg)
        command.add_argument("--config", help="bot.yaml whose store holds the pairing state")
    return parser


def _setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "LiteLLM", "litellm", "discord", "telegram", "slack_bolt", "slack_sdk"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def _load(path: str | None, *, ephemeral: bool = False) -> Any:
    """The configuration, with its store settled: the one bot.yaml names, memory with
    `--ephemeral`, else the SQLite file that belongs to this configuration file."""
    from botweave.runtime.config import BUILTIN_CONFIG, default_store_url, find_config, load_config

    found = find_config(path)
    if found is None:
        log.info("no bot.yaml found; using the built-in console + offline/echo configuration")
        config = load_config(BUILTIN_CONFIG)
    else:
        config = load_config(found)
    if ephemeral:
        config.store.url = "memory://"
    elif config.store.url is None:
        config.store.url = default_store_url(config)
    return config


async def _serve(config: Any, platforms: list[str] | None, role: Role = "all") -> int:
    from botweave.runtime.app import App
    from botweave.store import is_shared

    if role != "all" and not is_shared(config.store.url):
        log.error("--role %s needs a store shared by several processes (store: {url: redis://...})", role)
        return 2
    app = App(config, role=role)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await app.start(platforms)
    if not app.adapters:
        log.error("no platform is running; enable one under `platforms:` in bot.yaml")
        await app.stop()
        return 1
    console = app.adapters.get("console")
    waiters = [asyncio.create_task(stop.wait())]
    if console is not None and len(app.adapters) == 1:
        waiters.append(asyncio.create_task(console.finished.wait()))  # type: ignore[attr-defined]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    if not stop.is_set():
        await app.drain()  # end of input: answer what was asked, then leave
    await app.stop()
    return 0


def _check(path: str) -> int:
    from botweave.runtime.dump import dump_config
    from botweave.store import StoreUnavailable, open_store, redact_url

    config = _load(path)
    print(dump_config(config))
    enabled = config.enabled_platforms()
    print(f"# platforms that would start: {', '.join(enabled) or 'none'}")
    if config.store.url.startswith("memory://"):
        print("# store: memory:// (state is lost when the bot stops)")
        return 0
    store = open_store(config.store.url, config.store.prefix, base=config.base_dir)

    async def probe() -> None:
        try:
            await store.connect()
        finally:
            await store.close()

    try:
        asyncio.run(probe())
    except StoreUnavailable as exc:
        print(f"# store: {exc}")
        return 3
    print(f"# store: {redact_url(store.describe())} is reachable")
    return 0


async def _pair(args: argparse.Namespace) -> int:
    from botweave.policies.pairing import Pairing
    from botweave.store import open_store

    config = _load(args.config)
    if config.store.url.startswith("memory://"):
        print(
            "botweave: the store is memory:// (inside the running bot); pairing from the command "
            "line needs a store on disk or on a server: leave store.url out (a SQLite file) or use redis://",
            file=sys.stderr,
        )
        return 2
    store = open_store(config.store.url, config.store.prefix, base=config.base_dir)
    await store.connect()
    pairing = Pairing(store)
    try:
        if args.action == "approve":
            owner_configured = bool(config.bot_config_for(args.platform).owner_user_id)
            result = await pairing.approve(args.platform, args.code, claim_owner=not owner_configured)
            if result.status == "locked":
                print("too many wrong codes: approval is locked for 5 minutes", file=sys.stderr)
                return 1
            if result.request is None:
                print("no pending request has that code (codes expire after 1 hour)", file=sys.stderr)
                return 1
            owner = " and made them the owner" if result.became_owner else ""
            print(f"approved {result.request.name} (id {result.request.user_id}) on {args.platform}{owner}")
            return 0
        if args.action == "deny":
            denied = await pairing.deny(args.platform, args.code)
            print("request denied" if denied else "no pending request has that code")
            return 0 if denied else 1
        if args.action == "revoke":
            revoked = await pairing.revoke(args.platform, args.user)
            print(f"revoked {args.user}" if revoked else f"{args.user} was not approved on {args.platform}")
            return 0 if revoked else 1
        for request in await pairing.pending():
            print(f"pending  {request.platform}  {request.user_id}  {request.name}")
        for platform, user in await pairing.approved():
            print(f"approved {platform}  {user}")
        return 0
    finally:
        await store.close()


async def _room(args: argparse.Namespace) -> int:
    from botweave.runtime.app import App

    app = App(_load(args.config))
    if app.rooms is None:
        print("no rooms are configured under `rooms:`", file=sys.stderr)
        return 1
    if args.action == "list":
        for row in app.rooms.scheduler.describe():
            roster = ", ".join(app.rooms.configs[row.room].roster)
            when = row.next_run.isoformat() if row.next_run else "-"
            print(f"{row.room}  [{roster}]  schedule: {row.schedule or '-'}  next: {when}")
        return 0
    await app.start(receive=False)  # post only: the running bot keeps the platform connections
    try:
        await app.rooms.scheduler.run_now(args.name, args.target)
        await app.rooms.scheduler.idle()
    except ValueError as exc:
        print(f"botweave: {exc}", file=sys.stderr)
        return 1
    finally:
        await app.stop()
    return 0


def _exit_now(code: int) -> NoReturn:
    """Leave a stopped bot without the interpreter's own teardown. Everything that matters
    (turns, the store, platform connections) was closed by App.stop; finalising the modules
    of litellm and three platform SDKs would only add seconds to every SIGTERM."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _setup_logging(args.verbose)
    from botweave.config import ConfigError
    from botweave.store import StoreUnavailable

    try:
        if args.command == "check":
            return _check(args.config)
        if args.command == "pair":
            return asyncio.run(_pair(args))
        if args.command == "room":
            return asyncio.run(_room(args))
        config = _load(args.config, ephemeral=args.ephemeral)
        if args.command == "chat":
            if config.platforms.console is None:
                from botweave.adapters.console.config import ConsoleConfig

                config.platforms.console = ConsoleConfig()
            _exit_now(asyncio.run(_serve(config, ["console"])))
        _exit_now(asyncio.run(_serve(config, None, args.role)))
    except ConfigError as exc:
        print(f"botweave: {exc}", file=sys.stderr)
        return 2
    except StoreUnavailable as exc:
        print(f"botweave: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
