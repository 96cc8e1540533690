"""The `botweave` command: run, chat, check.

Everything heavy (the app, litellm, platform SDKs) is imported inside the subcommands so
`botweave --help` answers instantly.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from typing import Any

from botweave.runtime.app import Role
from botweave.version import __version__

log = logging.getLogger("botweave")


CONFIG_HELP = "bot.yaml (default: ./bot.yaml, then ./bot.yaml.example, then a built-in console config)"


def _common_options(*, on_subcommand: bool) -> argparse.ArgumentParser:
    """Options that may stand before or after the subcommand (`botweave -v run` and
    `botweave run -v`). On subcommands they default to "not given", so they never undo
    what was written before the subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    default = argparse.SUPPRESS if on_subcommand else 0
    common.add_argument("-v", "--verbose", action="count", default=default, help="more logging (-vv for debug)")
    return common


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="botweave", description="Connect chat platforms to LLM agents.", parents=[_common_options(on_subcommand=False)]
    )
    parser.add_argument("--version", action="version", version=f"botweave {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = [_common_options(on_subcommand=True)]
    run = sub.add_parser("run", help="run every enabled platform", parents=common)
    run.add_argument("config", nargs="?", help=CONFIG_HELP)
    run.add_argument(
        "--role",
        choices=("all", "worker", "ingress"),
        default="all",
        help="with a Redis store: hold platform connections (ingress), answer (worker), or both",
    )
    chat = sub.add_parser("chat", help="talk to the agent in this terminal (console platform only)", parents=common)
    chat.add_argument("config", nargs="?", help=CONFIG_HELP)
    check = sub.add_parser("check", help="validate a config and print it with secrets masked", parents=common)
    check.add_argument("config", nargs="?", help=CONFIG_HELP)
    room = sub.add_parser("room", help="list rooms or run a stand-up now", parents=common)
    room_sub = room.add_subparsers(dest="action", required=True)
    room_list = room_sub.add_parser("list", help="rooms, their schedules and next run times", parents=common)
    room_list.add_argument("--config", help=CONFIG_HELP)
    room_run = room_sub.add_parser("run", help="kick a room off now", parents=common)
    room_run.add_argument("name")
    room_run.add_argument("--target", help="where to post, e.g. discord:123456 (default: the room's target)")
    room_run.add_argument("--config", help=CONFIG_HELP)
    schedule = sub.add_parser("schedule", help="list scheduled agents or run one now", parents=common)
    schedule_sub = schedule.add_subparsers(dest="action", required=True)
    schedule_list = schedule_sub.add_parser(
        "list", help="schedules, their agents, targets and next run times", parents=common
    )
    schedule_list.add_argument("--config", help=CONFIG_HELP)
    schedule_run = schedule_sub.add_parser("run", help="run a schedule now and post its answer", parents=common)
    schedule_run.add_argument("name")
    schedule_run.add_argument("--config", help=CONFIG_HELP)
    pair = sub.add_parser("pair", help="approve, deny, list or revoke pairing requests", parents=common)
    pair_sub = pair.add_subparsers(dest="action", required=True)
    for action, args, text in (
        ("approve", ("platform", "code"), "let the user who has this code in"),
        ("deny", ("platform", "code"), "drop a pending request"),
        ("revoke", ("platform", "user"), "remove an approved user"),
        ("list", (), "show pending requests and approved users"),
    ):
        command = pair_sub.add_parser(action, help=text, parents=common)
        for arg in args:
            command.add_argument(arg)
        command.add_argument("--config", help=CONFIG_HELP)
    return parser


def _setup_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "LiteLLM", "litellm", "discord", "telegram", "slack_bolt", "slack_sdk"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def _load(path: str | None) -> Any:
    from botweave.runtime.config import BUILTIN_CONFIG, find_config, load_config

    found = find_config(path)
    if found is None:
        log.info("no bot.yaml found; using the built-in console + offline/echo configuration")
        return load_config(BUILTIN_CONFIG)
    return load_config(found)


async def _serve(config: Any, platforms: list[str] | None, role: Role = "all") -> int:
    from botweave.runtime.app import App

    if role != "all" and config.store.url.startswith("memory://"):
        log.error("--role %s needs a shared store (store: {url: redis://...})", role)
        return 2
    app = App(config, role=role)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # litellm takes seconds to import: done off the loop while the platforms connect, so the
    # first turn does not stall every other conversation for it.
    model_client = asyncio.create_task(asyncio.to_thread(_load_model_client)) if role != "ingress" else None
    await app.start(platforms)
    if model_client is not None:
        await model_client
    _settle_heap()
    if not app.adapters:
        if not app.failed_platforms:
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
    return 1 if app.failed_platforms else 0


def _load_model_client() -> None:
    from botweave.agents import litellm_module

    litellm_module()


def _settle_heap() -> None:
    """Move everything start-up built (litellm alone is hundreds of thousands of objects) out
    of the garbage collector's sight. Those objects live as long as the process, yet every
    full collection walked all of them: a pause of about a quarter of a second, a few times a
    minute under load, with every conversation waiting."""
    gc.collect()
    gc.freeze()


def unroutable_models(config: Any) -> list[str]:
    """Each agent whose model litellm cannot route (an unknown provider prefix, a typo),
    found before the first turn apologises for it."""
    from botweave.agents import litellm_module

    litellm = litellm_module()
    problems = []
    for name, agent in config.agents.items():
        try:
            litellm.get_llm_provider(model=agent.model, api_base=agent.api_base)
        except Exception as exc:
            reason = str(exc).splitlines()[0][:200]
            problems.append(f"agents.{name}.model: litellm cannot route {agent.model!r} ({reason})")
    return problems


def _check(path: str | None) -> int:
    from botweave.config import ConfigError
    from botweave.runtime.dump import dump_config
    from botweave.store import StoreUnavailable, open_store, redact_url

    config = _load(path)
    print(dump_config(config))
    enabled = config.enabled_platforms()
    print(f"# platforms that would start: {', '.join(enabled) or 'none'}")
    unroutable = unroutable_models(config)
    if unroutable:
        raise ConfigError(unroutable)
    if config.store.url.startswith("memory://"):
        return 0

    async def probe() -> None:
        store = open_store(config.store.url, config.store.prefix)
        try:
            await store.connect()
        finally:
            await store.close()

    try:
        asyncio.run(probe())
    except StoreUnavailable as exc:
        print(f"# store: {exc}")
        return 3
    print(f"# store: {redact_url(config.store.url)} is reachable")
    return 0


async def _pair(args: argparse.Namespace) -> int:
    from botweave.policies.pairing import Pairing
    from botweave.store import open_store

    config = _load(args.config)
    if config.store.url.startswith("memory://"):
        print(
            "botweave: the store is memory:// (inside the running bot); pairing from the command "
            "line needs a shared store such as store: {url: redis://...}",
            file=sys.stderr,
        )
        return 2
    store = open_store(config.store.url, config.store.prefix)
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
    room = app.rooms.configs.get(args.name)
    if room is None:
        print(f"botweave: unknown room {args.name!r}; rooms: {', '.join(app.rooms.configs)}", file=sys.stderr)
        return 1
    target = args.target or room.target
    if not target:
        print(f"botweave: room {args.name} has no `target:`; pass one, e.g. --target discord:123456", file=sys.stderr)
        return 1
    await app.start(receive=False)  # post only: the running bot keeps the platform connections
    try:
        if app.targets.resolve(target) is None:
            platform = target.partition(":")[0]
            print(
                f"botweave: target {target!r} does not resolve: platform {platform!r} is not running "
                "(not configured, disabled, missing credentials, or it failed to start)",
                file=sys.stderr,
            )
            return 1
        await app.rooms.scheduler.run_now(args.name, target)
        await app.rooms.scheduler.idle()
    except Exception as exc:
        print(f"botweave: room {args.name} failed: {exc}", file=sys.stderr)
        return 1
    finally:
        await app.stop()
    return 0


async def _schedule(args: argparse.Namespace) -> int:
    from botweave.runtime.app import App

    app = App(_load(args.config))
    if app.schedules is None:
        print("no schedules are configured under `schedules:`", file=sys.stderr)
        return 1
    if args.action == "list":
        for name, config in app.schedules.configs.items():
            when = app.schedules.next_run(name)
            print(f"{name}  agent: {config.agent}  cron: {config.cron} ({config.timezone})  "
                  f"target: {config.target}  next: {when.isoformat() if when else '-'}")
        return 0
    await app.start(receive=False)  # post only: the running bot keeps the platform connections
    try:
        before = len(await app.schedules.failures(args.name)) if args.name in app.schedules.configs else 0
        await app.schedules.run_now(args.name)
        failures = await app.schedules.failures(args.name)
    except ValueError as exc:
        print(f"botweave: {exc}", file=sys.stderr)
        return 1
    finally:
        await app.stop()
    if len(failures) > before:
        print(f"botweave: schedule {args.name} failed: {failures[-1]['detail']}", file=sys.stderr)
        return 1
    return 0


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
        if args.command == "schedule":
            return asyncio.run(_schedule(args))
        config = _load(args.config)
        if args.command == "chat":
            if config.platforms.console is None:
                from botweave.adapters.console.config import ConsoleConfig

                config.platforms.console = ConsoleConfig()
            return asyncio.run(_serve(config, ["console"]))
        return asyncio.run(_serve(config, None, args.role))
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
