"""The Dockerfile and compose.yaml, checked without a Docker engine: every botweave command
they run parses with the CLI's own parser (so a renamed flag cannot slip by), the image runs as
a non-root user, and its health check asks /healthz on the port the process serves."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml
from botweave.runtime.cli import _parser

ROOT = Path(__file__).resolve().parents[1]


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) for each line of a Dockerfile, continuations joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    return found


def exec_form(arguments: str) -> list[str]:
    """The command of an instruction: JSON (exec form) or a shell line."""
    arguments = arguments.strip()
    return json.loads(arguments) if arguments.startswith("[") else shlex.split(arguments)


def listen_port(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    assert args.ops_listen, argv
    return int(args.ops_listen.rpartition(":")[2])


def test_the_image_runs_a_cli_command_as_a_user_and_checks_healthz_on_its_port() -> None:
    steps = instructions(ROOT / "Dockerfile")
    keywords = [keyword for keyword, _ in steps]
    entrypoint = exec_form(dict(steps)["ENTRYPOINT"])
    command = exec_form(dict(steps)["CMD"])
    assert entrypoint == ["botweave"]
    args = _parser().parse_args(command)  # exits (SystemExit) on any unknown subcommand or flag
    assert args.command == "run" and args.log_format == "json"

    users = [arguments for keyword, arguments in steps if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")

    health = dict(steps)["HEALTHCHECK"]
    check = exec_form(health[health.index("CMD") + len("CMD"):])
    assert f"http://127.0.0.1:{listen_port(command)}/healthz" in " ".join(check)


def test_compose_runs_an_ingress_two_workers_and_redis_with_real_cli_commands() -> None:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"redis", "ingress", "worker"}
    assert services["worker"]["deploy"]["replicas"] == 2
    entrypoint = exec_form(dict(instructions(ROOT / "Dockerfile"))["ENTRYPOINT"])
    roles = {}
    for name in ("ingress", "worker"):
        service = services[name]
        assert service["build"] == "." and "redis" in service["depends_on"]
        argv = entrypoint + service["command"]
        assert argv[0] == "botweave"
        args = _parser().parse_args(argv[1:])
        roles[name] = args.role
        assert listen_port(argv[1:]) == 9464  # where the image's health check asks
        assert service["environment"]["BOTWEAVE_STORE_URL"].startswith("redis://redis:")
    assert roles == {"ingress": "ingress", "worker": "worker"}
