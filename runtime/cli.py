"""The `botweave` command: run, chat, web, check, doctor, reload, init, room, pair, gateway.

Everything beyond the standard library (the app, pydantic and the kernel, litellm, the MCP
SDK, platform SDKs) is imported inside the subcommand that needs it, so `botweave --help`
and `--version` answer as fast as Python starts (tests/test_cli.py checks what they load).
`run` and `chat` are `App.serve`, the same life of a bot process that `App.run()` gives a
Python program.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

from botweave.runtime.exits import EXIT_CONFIG, EXIT_STORE
from botweave.runtime.logs import FORMATS, LogFormat, setup_logging
from botweave.version import __version__

if TYPE_CHECKING:
    from collections.abc import Callable

    from botweave.runtime.lifecycle import Role

log = logging.getLogger("botweave")


CONFIG_HELP = "bot.yaml (default: ./bot.yaml, then ./bot.yaml.example, then a built-in console config)"


def _common_options(*, on_subcommand: bool) -> argparse.ArgumentParser:
    """Options that may stand before or after the subcommand (`botweave -v run` and
    `botweave run -v`). On subcommands they default to "not given", so they never undo
    what was written before the subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    unset = argparse.SUPPRESS if on_subcommand else None
    common.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS if on_subcommand else 0,
        help="more logging (-vv also shows the SDKs' own)",
    )
    common.add_argument(
        "--log-format", choices=FORMATS, default=unset if on_subcommand else "text",
        help="text (default) or json: one JSON object per line, for log collectors",
    )
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
    run.add_argument(
        "--ops-listen",
        metavar="HOST:PORT",
        help="serve /metrics, /healthz and /readyz here (overrides ops.listen; one port per process)",
    )
    run.add_argument(
        "--gateway-listen",
        metavar="HOST:PORT",
        help="serve the WebSocket gateway and the web platform here (overrides gateway.listen)",
    )
    chat = sub.add_parser("chat", help="talk to the agent in this terminal (console platform only)", parents=common)
    chat.add_argument("config", nargs="?", help=CONFIG_HELP)
    web = sub.add_parser(
        "web", help="run the bot with its browser UI and print a one-time sign-in link", parents=common
    )
    web.add_argument("config", nargs="?", help=CONFIG_HELP)
    web.add_argument(
        "--gateway-listen",
        metavar="HOST:PORT",
        help="where the gateway and the page listen (default: gateway.listen, else 127.0.0.1:8787 or a free port)",
    )
    for command in (run, chat, web):
        command.add_argument(
            "--ephemeral",
            action="store_true",
            help="keep all state in memory for this run (default: the configured store, or a SQLite file per config)",
        )
    check = sub.add_parser("check", help="validate a config and print it with secrets masked", parents=common)
    check.add_argument("config", nargs="?", help=CONFIG_HELP)
    doctor = sub.add_parser(
        "doctor", help="try the config: platform credentials, webhook settings, store, model", parents=common
    )
    doctor.add_argument("config", nargs="?", help=CONFIG_HELP)
    doctor.add_argument("--no-model", action="store_true", help="skip the one-token request to each model")
    reload = sub.add_parser(
        "reload", help="make the running bot read its configuration again (checked first; nothing changes if invalid)",
        parents=common,
    )
    reload.add_argument("config", nargs="?", help=CONFIG_HELP)
    reload.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS",
        help="how long to wait for every process of the bot to answer (default: 30)",
    )
    init = sub.add_parser("init", help="write a commented bot.yaml for chosen platforms and model", parents=common)
    init.add_argument("path", nargs="?", default="bot.yaml", help="where to write it (default: ./bot.yaml; never overwritten)")
    init.add_argument(
        "--platform", "-p", action="append", dest="platforms", metavar="NAME",
        help="console, telegram, discord, slack, web, email, whatsapp or matrix (repeat for several; asked on a terminal when left out)",
    )
    init.add_argument("--model", help="the agent's model as litellm names it, e.g. openai/gpt-4o-mini")
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
    gateway = sub.add_parser("gateway", help="the gateway's tokens", parents=common)
    gateway_sub = gateway.add_subparsers(dest="action", required=True)
    token = gateway_sub.add_parser("token", help="add, list or revoke gateway tokens (kept hashed in the store)",
                                   parents=common)
    token_sub = token.add_subparsers(dest="token_action", required=True)
    add = token_sub.add_parser("add", help="make a token and print it once", parents=common)
    add.add_argument("name")
    add.add_argument("--scopes", default="read", help="comma-separated: read, write, approvals, pairing, admin")
    add.add_argument("--user", help="the platform identity the token speaks for, e.g. telegram:123456")
    revoke = token_sub.add_parser("revoke", help="a token stops working", parents=common)
    revoke.add_argument("name")
    listed = token_sub.add_parser("list", help="every token (names and scopes, never the tokens)", parents=common)
    for command in (add, revoke, listed):
        command.add_argument("--config", help=CONFIG_HELP)
    return parser


def _setup_logging(verbosity: int, fmt: LogFormat, command: str) -> None:
    """`run` talks at INFO (each platform connecting, each turn), since nobody watches it
    otherwise; everything else, the chat above all, only warns. Each -v goes one level down."""
    base = logging.INFO if command in ("run", "web") else logging.WARNING
    setup_logging(max(logging.DEBUG, base - 10 * verbosity), fmt, libraries=verbosity >= 2)


def _load(path: str | None, *, ephemeral: bool = False, builtin: dict[str, Any] | None = None) -> Any:
    """The configuration, with its store settled: the one bot.yaml names (else `builtin`),
    memory with `--ephemeral`, else the SQLite file that belongs to this configuration file."""
    from botweave.runtime.config import BUILTIN_CONFIG, default_store_url, find_config, load_config

    found = find_config(path)
    if found is None:
        log.info("no bot.yaml found; using the built-in offline/echo configuration")
        config = load_config(BUILTIN_CONFIG if builtin is None else builtin)
    else:
        config = load_config(found)
    if ephemeral:
        config.store.url = "memory://"
    elif config.store.url is None:
        config.store.url = default_store_url(config)
    return config


async def _serve(
    config: Any,
    platforms: list[str] | None,
    role: Role = "all",
    *,
    banner: bool = False,
    signin: bool = False,
    loader: Callable[[], Any] | None = None,
    watchdogs: Any = None,
    hangup: _EarlyHangup | None = None,
) -> int:
    import asyncio

    from botweave.runtime.app import App
    from botweave.store import is_shared

    if role != "all" and not is_shared(config.store.url):
        log.error("--role %s needs a store shared by several processes (store: {url: redis://...})", role)
        return EXIT_CONFIG
    from botweave.runtime.own_process import tune_own_process

    app = App.from_config(config, role=role)
    if loader is not None:
        app.reloads.read_with(loader)
    if banner:
        print(chat_banner(app), flush=True)
    if signin:
        from botweave.runtime.web import attach_signin

        attach_signin(app)
    if hangup is not None:  # runs at serve's first pause, once its own SIGHUP handler is in place
        asyncio.get_running_loop().call_soon(hangup.hand_on)
    return await app.serve(platforms, on_started=tune_own_process, watchdogs=watchdogs)


def _reloaded(
    path: str | None,
    ephemeral: bool,
    *,
    ops: str | None = None,
    gateway: str | None = None,
    chat: bool = False,
    builtin: dict[str, Any] | None = None,
) -> Any:
    """The configuration a reload reads: the file `run` (`chat`, `web`) was given, read the
    way it read it, with the same addresses from the command line."""
    config = _load(path, ephemeral=ephemeral, builtin=builtin)
    _listen(config, "ops", ops)
    _listen(config, "gateway", gateway)
    return _for_chat(config) if chat else config


def _for_chat(config: Any) -> Any:
    """`chat` talks through the console whether or not bot.yaml configures it, and has no
    control plane beside it."""
    config.gateway.listen = None
    if config.platforms.console is None:
        from botweave.adapters.console.config import ConsoleConfig

        config.platforms.console = ConsoleConfig()
    return config


def chat_banner(app: Any) -> str:
    """One line naming who answers in the console (the agent or room its route picks)."""
    from botweave.adapters.console.inbound import CHAT_ID
    from botweave.types import BotChannel, BotMessage, BotUser

    probe = BotMessage("0", "", sender=BotUser("local", "local"), channel=BotChannel(CHAT_ID, "dm"), platform="console")
    target = app.router.resolve(probe)
    if target is None:
        who = "no agent (no route matches the console)"
    elif target.kind == "agent":
        who = f"{target.name} · {app.agents[target.name].model}"
    else:
        who = f"room {target.name}"
    return f"botweave {__version__} · {who} · /help for commands, Ctrl-D to leave"


def _listen(config: Any, section: str, listen: str | None) -> None:
    """`--ops-listen` replaces `ops.listen` (`--gateway-listen` `gateway.listen`), checked the
    same way."""
    if listen is None:
        return
    from botweave.config import ConfigError, parse_listen

    try:
        parse_listen(listen)
    except ValueError as exc:
        raise ConfigError([f"--{section}-listen: {exc}"]) from None
    getattr(config, section).listen = listen


def _check(path: str | None) -> int:
    """The verdict first (what would start, whether the store answers), then the effective
    configuration it judged, secrets masked: a reader sees the answer without scrolling."""
    import asyncio

    from botweave.config import ConfigError
    from botweave.runtime.config import unroutable_models
    from botweave.runtime.dump import dump_config
    from botweave.runtime.usage import unpriced_models
    from botweave.store import StoreUnavailable, open_store, redact_url

    config = _load(path)
    unroutable = unroutable_models(config)
    if unroutable:
        raise ConfigError(unroutable)
    enabled = config.enabled_platforms()
    verdict = [f"# platforms that would start: {', '.join(enabled) or 'none'}"]
    unpriced = unpriced_models(config)
    if unpriced:
        verdict.append(f"# no known price (budgets count their tokens only; give the agent a `price:`): {', '.join(unpriced)}")
    code = 0
    if config.store.url.startswith("memory://"):
        verdict.append("# store: memory:// (state is lost when the bot stops)")
    else:
        store = open_store(config.store.url, config.store.prefix, base=config.base_dir)

        async def probe() -> None:
            try:
                await store.connect()
            finally:
                await store.close()

        try:
            asyncio.run(probe())
            verdict.append(f"# store: {redact_url(store.describe())} is reachable")
        except StoreUnavailable as exc:
            verdict.append(f"# store: {exc}")
            code = EXIT_STORE
    print("\n".join(verdict))
    print("# the effective configuration, secrets masked:")
    print(dump_config(config))
    return code


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


async def _gateway(args: argparse.Namespace) -> int:
    """`botweave gateway token add|list|revoke`: tokens kept hashed in the bot's store."""
    from botweave.gateway.auth import TokenBook
    from botweave.store import open_store

    config = _load(args.config)
    if config.store.url.startswith("memory://"):
        print("botweave: the store is memory:// (inside the running bot); gateway tokens need a store on disk "
              "or on a server: leave store.url out (a SQLite file) or use redis://", file=sys.stderr)
        return 2
    store = open_store(config.store.url, config.store.prefix, base=config.base_dir)
    await store.connect()
    book = TokenBook(store, config.gateway.tokens)
    try:
        if args.token_action == "add":
            try:
                token = await book.add(args.name, [s.strip() for s in args.scopes.split(",") if s.strip()], args.user)
            except ValueError as exc:
                print(f"botweave: {exc}", file=sys.stderr)
                return 2
            print(token)
            print(f"# the token for {args.name}: shown this once, kept only as a hash", file=sys.stderr)
            return 0
        if args.token_action == "revoke":
            if await book.revoke(args.name):
                print(f"revoked {args.name}")
                return 0
            print(f"botweave: no token named {args.name!r} in the store (bot.yaml's are removed there)", file=sys.stderr)
            return 1
        for entry in await book.listed():
            user = f"  user: {entry['user']}" if entry.get("user") else ""
            print(f"{entry['name']}  scopes: {','.join(entry['scopes'])}{user}  ({entry['source']})")
        return 0
    finally:
        await store.close()


async def _room(args: argparse.Namespace) -> int:
    from botweave.runtime.app import App

    app = App.from_config(_load(args.config))
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
    except Exception as exc:  # boundary: the command's own: whatever the room's kickoff raised is its answer
        print(f"botweave: room {args.name} failed: {exc}", file=sys.stderr)
        return 1
    finally:
        await app.stop()
    return 0


async def _schedule(args: argparse.Namespace) -> int:
    from botweave.runtime.app import App

    app = App.from_config(_load(args.config))
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


async def _reload(args: argparse.Namespace) -> int:
    """Ask every process running on this configuration's state to reload, and say how each
    did; 2 when the file was refused (with `check`'s message), 1 when no bot runs or one
    did not answer."""
    from botweave.config import ConfigError
    from botweave.runtime.config import find_config, store_settings
    from botweave.runtime.presence import answers, request_reload, running, state_of
    from botweave.store import redact_url

    refused: ConfigError | None = None
    try:
        settings = _load(args.config).store
    except ConfigError as exc:
        refused = exc  # the running bots are still told, so each logs it and reports the drift
        settings = store_settings(find_config(args.config))
    if settings.url.startswith("memory://"):
        if refused is not None:
            raise refused
        print(
            "botweave: the bot keeps its state in memory (memory://, or started with --ephemeral), where no other "
            "process can reach it; send its process SIGHUP to reload", file=sys.stderr,
        )
        return 1
    config_path = find_config(args.config)
    store = state_of(settings.url, settings.prefix, config_path.resolve().parent if config_path else None)
    processes, found = [], {}
    if store is not None:
        await store.connect()
        try:
            processes = await running(store)
            if processes:
                found = await answers(store, await request_reload(store), processes, args.timeout)
        finally:
            await store.close()
    if not processes:
        if refused is not None:
            raise refused
        print(f"botweave: no bot is running on {redact_url(settings.url)}; nothing to reload", file=sys.stderr)
        return 1
    code, problems = 0, []
    for process in processes:
        result = found[process.id]
        if result is None:
            print(f"{process.who()}: no answer within {args.timeout:g}s", file=sys.stderr)
            code = 1
        elif result.status == "invalid":
            print(f"{process.who()}: refused the file; still running revision {result.before}", file=sys.stderr)
            if result.error not in problems:
                problems.append(result.error)
        else:
            print(f"{process.who()}: {result.summary()}")
            code = max(code, 1 if result.failed else 0)
    if problems or refused is not None:
        for problem in problems or [str(refused)]:
            print(f"botweave: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    return code


def _doctor(args: argparse.Namespace) -> int:
    import asyncio

    from botweave.runtime.doctor import doctor

    return asyncio.run(doctor(args.config, model=not args.no_model, out=sys.stdout))


def _init(args: argparse.Namespace) -> int:
    from botweave.runtime.scaffold import init

    return init(args.path, args.platforms, args.model, out=sys.stdout, err=sys.stderr)


def _exit_now(code: int) -> NoReturn:
    """Leave a stopped bot without the interpreter's own teardown. Everything that matters
    (turns, the store, platform connections) was closed by App.stop; finalising the modules
    of litellm and three platform SDKs would only add seconds to every SIGTERM."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _import_next_to_config(path: str | None) -> None:
    """Modules that sit next to bot.yaml (its Python tools, its plugins) import the way a
    module next to a script does for `python script.py`: the configuration's folder goes
    first on this process's import path. Only the CLI does this; a program embedding the App
    keeps its own path."""
    from botweave.runtime.config import find_config

    found = find_config(path)
    if found is not None:
        folder = str(found.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)


class _EarlyHangup:
    """SIGHUP from the first line of `main`: while the bot still starts (the configuration and
    its tools' imports can take seconds) a SIGHUP must not end the process by the signal's
    default action, silently, where a supervisor such as systemd's `Restart=on-failure` sees
    a death it does not restart. For `run` and `web`, where SIGHUP asks for a reload, one that
    arrived this early is handed to the serving bot, which applies it once it serves; every
    other command gets the default action back (a closed terminal ends `chat`), taken at once
    if the signal already came."""

    def __init__(self) -> None:
        self.arrived = False
        self._signal = getattr(signal, "SIGHUP", None)  # not on Windows
        if self._signal is not None:
            try:
                signal.signal(self._signal, self._record)
            except ValueError:  # not the main thread (main() called from a program's thread)
                self._signal = None

    def _record(self, signum: int, frame: Any) -> None:
        self.arrived = True

    def default(self) -> None:
        """This command leaves SIGHUP to its default action, as if it had been all along."""
        if self._signal is None:
            return
        signal.signal(self._signal, signal.SIG_DFL)
        if self.arrived:
            os.kill(os.getpid(), self._signal)

    def hand_on(self) -> None:
        """The serving bot has its own handler by now (installed as `App.serve` begins): the
        one that came early reaches it the way a new one would."""
        if self._signal is not None and self.arrived:
            log.info("SIGHUP arrived while the configuration was loading")
            os.kill(os.getpid(), self._signal)


def main(argv: list[str] | None = None) -> int:
    hangup = _EarlyHangup()
    args = _parser().parse_args(argv)
    if args.command not in ("run", "web"):
        hangup.default()
    watchdogs = None
    if args.command in ("run", "web"):  # the deadline counts from here: loading the configuration is starting
        from botweave.runtime.watchdog import Watchdogs

        watchdogs = Watchdogs().arm()
    _setup_logging(args.verbose, args.log_format, args.command)
    if args.command != "init":
        _import_next_to_config(getattr(args, "config", None))
    import asyncio

    from botweave.config import ConfigError
    from botweave.store import StoreUnavailable

    try:
        if args.command == "check":
            return _check(args.config)
        if args.command == "doctor":
            return _doctor(args)
        if args.command == "init":
            return _init(args)
        if args.command == "pair":
            return asyncio.run(_pair(args))
        if args.command == "reload":
            return asyncio.run(_reload(args))
        if args.command == "room":
            return asyncio.run(_room(args))
        if args.command == "schedule":
            return asyncio.run(_schedule(args))
        if args.command == "gateway":
            return asyncio.run(_gateway(args))
        if args.command == "web":
            from botweave.runtime.web import BUILTIN_WEB_CONFIG, choose_listen

            config = _load(args.config, ephemeral=args.ephemeral, builtin=BUILTIN_WEB_CONFIG)
            choose_listen(config, args.gateway_listen)
            assert watchdogs is not None
            watchdogs.configure(config.ops)
            loader = partial(
                _reloaded, args.config, args.ephemeral, gateway=config.gateway.listen, builtin=BUILTIN_WEB_CONFIG
            )
            _exit_now(asyncio.run(_serve(config, None, signin=True, loader=loader, watchdogs=watchdogs, hangup=hangup)))
        config = _load(args.config, ephemeral=args.ephemeral)
        if args.command == "chat":
            from botweave.adapters.console.inbound import is_terminal

            config = _for_chat(config)
            loader = partial(_reloaded, args.config, args.ephemeral, chat=True)
            _exit_now(asyncio.run(_serve(config, ["console"], banner=is_terminal(sys.stdin), loader=loader)))
        assert watchdogs is not None
        watchdogs.configure(config.ops)
        _listen(config, "ops", args.ops_listen)
        _listen(config, "gateway", args.gateway_listen)
        loader = partial(_reloaded, args.config, args.ephemeral, ops=args.ops_listen, gateway=args.gateway_listen)
        _exit_now(asyncio.run(_serve(config, None, args.role, loader=loader, watchdogs=watchdogs, hangup=hangup)))
    except ConfigError as exc:
        print(f"botweave: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StoreUnavailable as exc:
        print(f"botweave: {exc}", file=sys.stderr)
        return EXIT_STORE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
