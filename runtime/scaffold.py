"""`botweave init`: a first bot.yaml for the chosen platforms and model.

The file it writes is meant to be read: each section says what it is for and where its
credentials come from. Credentials are `${VARIABLE:-}` references, never values, so the file
can be committed; a platform whose variable is not set yet is skipped with a message naming
the variable (and `botweave doctor` reports it as skipped). An existing file is never
overwritten.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

DEFAULT_MODEL = "offline/echo"
DEFAULT_PLATFORMS = ("console",)

HEADER = """\
# botweave configuration, written by `botweave init`.
# Check it with `botweave doctor`, run it with `botweave run`.
# ${NAME} is read from the environment when the bot starts; ${NAME:-} means "empty if unset".
"""

BOT = """\
bot:
  # Strangers on a chat platform get a pairing code, which you approve with
  # `botweave pair approve <platform> <code>` (the console admits its one user). To change
  # that: unknown_user_policy: allow (anyone) | deny (ignore strangers) | pair.
  # In groups, answer only when mentioned (respond_all, mention_only, command_only, observe).
  group_policy: mention_only
"""

PLATFORMS: dict[str, str] = {
    "console": """\
  # This terminal (`botweave chat` talks to it).
  console: {}
""",
    "telegram": """\
  # Telegram: create a bot with @BotFather and export TELEGRAM_BOT_TOKEN.
  telegram:
    token: "${TELEGRAM_BOT_TOKEN:-}"
    mode: polling            # or webhook (then set webhook_url and webhook_secret)
""",
    "discord": """\
  # Discord: Developer Portal > your application > Bot > token; enable the Message Content
  # intent there, and export DISCORD_BOT_TOKEN.
  discord:
    token: "${DISCORD_BOT_TOKEN:-}"
""",
    "slack": """\
  # Slack: a bot token (xoxb-, OAuth & Permissions) and, for Socket Mode, an app token
  # (xapp-, Basic Information > App-Level Tokens, scope connections:write).
  slack:
    bot_token: "${SLACK_BOT_TOKEN:-}"
    app_token: "${SLACK_APP_TOKEN:-}"
    mode: socket             # or http (then set signing_secret and expose http_port)
""",
    "web": """  # A web chat in the browser, served by the gateway below: `botweave web` prints a sign-in
  # link; on this machine's loopback address nobody else can reach it.
  web:
    bot_name: Assistant      # the name the bot's messages are shown under
""",
    "email": """\
  # Email: a mailbox the bot reads (IMAP) and a server it replies through (SMTP); TLS on
  # both by default. Only mail your server vouches for (SPF/DKIM/DMARC) is answered.
  email:
    address: "${EMAIL_ADDRESS:-}"
    imap: {host: "${IMAP_HOST:-}", user: "${EMAIL_ADDRESS:-}", password: "${IMAP_PASSWORD:-}"}
    smtp: {host: "${SMTP_HOST:-}", user: "${EMAIL_ADDRESS:-}", password: "${SMTP_PASSWORD:-}"}
    allowed_senders: []      # addresses or @domains answered; empty: nobody unless allowed below
""",
    "whatsapp": """\
  # WhatsApp (Cloud API): WhatsApp Manager > API Setup gives the phone number id; a system
  # user's token (whatsapp_business_messaging); the Meta app's secret (App settings > Basic);
  # verify_token is any phrase you also type into the app's webhook settings. Meta posts to
  # https://<your host>/whatsapp, proxied to listen.
  whatsapp:
    phone_number_id: "${WHATSAPP_PHONE_NUMBER_ID:-}"
    access_token: "${WHATSAPP_ACCESS_TOKEN:-}"
    app_secret: "${WHATSAPP_APP_SECRET:-}"
    verify_token: "${WHATSAPP_VERIFY_TOKEN:-}"
    listen: "0.0.0.0:8443"
    path: /whatsapp
    # Messages to someone silent for 24 hours (schedules, rooms, notifications) must be an
    # approved template; without one they fail with an error that says so.
    # template: {name: my_update, language: en_US}
""",
    "matrix": """\
  # Matrix (pip install 'botweave[matrix]'): the bot's account on your homeserver and its
  # access token (or password); invite the bot to a room or start a direct chat with it.
  matrix:
    homeserver: "${MATRIX_HOMESERVER:-}"       # https://matrix.example.org
    user_id: "${MATRIX_USER_ID:-}"          # @assistant:example.org
    access_token: "${MATRIX_ACCESS_TOKEN:-}"
    device_id: botweave      # keep it fixed: the homeserver drops a repeated send per device
""",
    "teams": """\
  # Microsoft Teams (pip install 'botweave[teams]'): an Azure Bot's Microsoft App ID and a
  # client secret of its app registration; its messaging endpoint is https://<host>/api/messages.
  teams:
    app_id: "${TEAMS_APP_ID:-}"
    app_password: "${TEAMS_APP_PASSWORD:-}"
    # tenant_id: "${TEAMS_TENANT_ID:-}"   # a single-tenant bot's tenant
    listen: "0.0.0.0:3978"
""",
}

#: With the web platform: where the gateway serves the page (and its WebSocket protocol).
GATEWAY = """# The gateway: the browser UI at http://127.0.0.1:8787/ and its protocol at /ws. To listen
# beyond this machine, list tokens (see the gateway documentation).
gateway:
  listen: "127.0.0.1:8787"
"""

OPS = """\
# Metrics (/metrics), liveness (/healthz) and readiness (/readyz) for your monitoring.
# ops:
#   listen: "127.0.0.1:9464"

# Python modules whose setup(app) adds commands, hooks and tools.
# plugins: [my_plugin]
"""


def render(platforms: Sequence[str], model: str, key_variables: Sequence[str] = ()) -> str:
    """The commented bot.yaml for these platforms and this model."""
    problem = unknown_platforms(platforms)
    if problem:
        raise ValueError(problem)
    if model == DEFAULT_MODEL:
        model_note = "  # offline/echo repeats what it hears: swap in a real model, e.g. openai/gpt-4o-mini"
    elif key_variables:
        model_note = f"  # the provider's key is read from {' and '.join(key_variables)}"
    else:
        model_note = "  # any model litellm knows: provider/model"
    agents = (
        "agents:\n"
        "  assistant:\n"
        f"    model: {model}{model_note}\n"
        '    instructions: "You are a helpful assistant. Answer briefly."\n'
    )
    chosen = "".join(PLATFORMS[name] for name in platforms)
    gateway = [GATEWAY] if "web" in platforms else []
    return "\n".join([HEADER, BOT, agents, *gateway, "platforms:\n" + chosen, OPS])


def unknown_platforms(platforms: Sequence[str]) -> str | None:
    """What is wrong with a choice of platforms, or None: checked before anything else is
    asked, so a typo costs one question, not the whole dialogue."""
    unknown = [name for name in platforms if name not in PLATFORMS]
    if unknown:
        return f"unknown platform(s) {', '.join(unknown)}; choose from {', '.join(PLATFORMS)}"
    if not platforms:
        return f"no platform chosen; choose from {', '.join(PLATFORMS)}"
    return None


def key_variables(model: str) -> list[str]:
    """The environment variables the model's provider needs that are not set here (litellm
    knows them per provider); none when it cannot tell."""
    if model == DEFAULT_MODEL:
        return []
    try:
        from botweave.model_calls import litellm_module

        found = litellm_module().validate_environment(model=model)
    except (ImportError, ValueError):  # litellm missing or broken: no advice
        return []
    return [str(name) for name in found.get("missing_keys") or []]


def _ask(question: str, default: str, read: Callable[[str], str]) -> str:
    try:
        answer = read(f"{question} [{default}]: ").strip()
    except EOFError:
        return default
    return answer or default


def init(
    path: str,
    platforms: Sequence[str] | None,
    model: str | None,
    *,
    out: TextIO,
    err: TextIO,
    interactive: bool | None = None,
    read: Callable[[str], str] = input,
) -> int:
    """Write the file (asking what was not given, on a terminal); 1 when it exists already."""
    target = Path(path)
    if target.exists():
        print(f"botweave: {target} exists; not overwritten (name another file: botweave init other.yaml)", file=err)
        return 1
    ask = sys.stdin.isatty() if interactive is None else interactive
    if platforms is None:
        platforms = DEFAULT_PLATFORMS
        while ask:  # asked again until the answer names platforms there are
            chosen = _ask(f"Platforms ({', '.join(PLATFORMS)})", ",".join(DEFAULT_PLATFORMS), read)
            platforms = [name.strip() for name in chosen.replace(" ", ",").split(",") if name.strip()]
            problem = unknown_platforms(platforms)
            if problem is None:
                break
            print(f"botweave: {problem}", file=err)
    problem = unknown_platforms(platforms)
    if problem:
        print(f"botweave: {problem}", file=err)
        return 2
    if model is None:
        model = _ask("Model (litellm provider/model)", DEFAULT_MODEL, read) if ask else DEFAULT_MODEL
    variables = key_variables(model)
    text = render(platforms, model, variables)
    try:
        with target.open("x", encoding="utf-8") as handle:  # "x": never replaces a file that appeared meanwhile
            handle.write(text)
    except FileExistsError:
        print(f"botweave: {target} exists; not overwritten", file=err)
        return 1
    print(f"wrote {target}", file=out)
    needed = [variable for name in platforms for variable in _platform_variables(name)] + variables
    if needed:
        print(f"next: export {', '.join(needed)}", file=out)
    print(f"then: botweave doctor {target} && botweave run {target}", file=out)
    return 0


def _platform_variables(name: str) -> list[str]:
    section = PLATFORMS.get(name, "")
    return [part.split(":-")[0] for part in section.split("${")[1:]]
