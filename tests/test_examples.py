"""Every folder under examples/ runs as its README says, against the platform emulators (and
the OpenAI emulator where the example needs a model that calls tools), so an example that
drifts from the code fails here.

Each test loads the example's own bot.yaml with botweave's loader, with the environment its
README names (tokens, a model) and the folder set up the way `botweave run` sets it up when
started there (the folder is the working directory and first on the import path). The
only thing changed in the loaded configuration is where the platform's and the model's
servers are: the emulators on 127.0.0.1 instead of the internet.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest
import yaml
from aiohttp import web
from botweave import Config, load_config
from pydantic import SecretStr

from tests.adapters.test_discord import eventually
from tests.conftest import free_port
from tests.emulators.discord import ALICE_ID, BOT_ID, CHANNEL_ID, DiscordEmulator
from tests.emulators.discord import BOB_DM_CHANNEL_ID as BOB_DM
from tests.emulators.discord import DM_CHANNEL_ID as ALICE_DM
from tests.emulators.openai import OpenAIEmulator, tool_call
from tests.emulators.slack import APP_TOKEN as SLACK_APP_TOKEN
from tests.emulators.slack import BOT_TOKEN as SLACK_BOT_TOKEN
from tests.emulators.slack import IdentitySlackEmulator
from tests.emulators.telegram import TelegramEmulator, wait_until

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
EMULATED_MODEL = "openai/gpt-emulated"

LoadExample = Callable[..., Config]


@pytest.fixture
def load_example(monkeypatch: pytest.MonkeyPatch) -> LoadExample:
    """`load_example(folder, VAR=value, ...)`: the example's bot.yaml as `botweave run` reads
    it from inside the folder, with exactly the environment given (plus PATH, so that
    `python` is this interpreter for MCP servers the example starts)."""

    def load(folder: str, **env: str) -> Config:
        where = EXAMPLES / folder
        monkeypatch.chdir(where)
        monkeypatch.syspath_prepend(str(where))
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        monkeypatch.setenv("PATH", path)
        return load_config(where / "bot.yaml", env={"PATH": path, **env})

    return load


def on_emulated_model(config: Config, llm: OpenAIEmulator) -> Config:
    """Every agent's model calls go to the OpenAI emulator instead of api.openai.com."""
    for agent in config.agents.values():
        assert agent.model == EMULATED_MODEL, "the example reads its model from BOTWEAVE_MODEL"
        agent.api_base = llm.base_url
        agent.api_key = SecretStr("sk-emulated")
    return config


def examples_with_readme() -> list[Path]:
    return sorted(p for p in EXAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("folder", examples_with_readme(), ids=lambda p: p.name)
def test_every_example_has_a_bot_yaml_and_a_five_line_readme(folder: Path) -> None:
    assert (folder / "bot.yaml").is_file()
    lines = [line for line in (folder / "README.md").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(lines) == 5, f"{folder.name}/README.md has {len(lines)} lines"
    assert lines[0].startswith("# ")
    assert "offline" in (folder / "bot.yaml").read_text(encoding="utf-8"), "runs offline unless a key is set"


@pytest.mark.parametrize("folder", examples_with_readme(), ids=lambda p: p.name)
def test_every_example_loads_offline_with_no_environment(folder: Path, load_example: LoadExample) -> None:
    config = load_example(folder.name)
    assert {agent.model for agent in config.agents.values()} == {"offline/echo"}


# --- 1: a Telegram assistant with a Python tool and web search through MCP -------------------


@pytest.fixture
async def searxng() -> AsyncIterator[list[str]]:
    """A search engine answering SearXNG's JSON API on 127.0.0.1; yields [base URL, *queries]."""
    seen: list[str] = []

    async def search(request: web.Request) -> web.Response:
        assert request.query["format"] == "json"
        seen.append(request.query["q"])
        hit = {"title": "Lisbon: sunny, 20 °C", "url": "https://weather.example/lisbon", "content": "Clear sky."}
        return web.json_response({"query": request.query["q"], "results": [hit]})

    app = web.Application()
    app.router.add_get("/search", search)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    seen.insert(0, f"http://127.0.0.1:{port}")
    yield seen
    await runner.cleanup()


async def test_telegram_assistant_answers_with_its_python_tool_and_a_web_search(
    load_example, telegram_emulator, llm, searxng, start_app
):
    emu = telegram_emulator
    ann = TelegramEmulator.user(7, "Ann", "ann")
    config = load_example(
        "1-telegram-assistant", TELEGRAM_BOT_TOKEN=emu.token, BOTWEAVE_MODEL=EMULATED_MODEL, SEARXNG_URL=searxng[0]
    )
    config.platforms.telegram.api_base_url = emu.api_base_url
    config.platforms.telegram.poll_timeout = 2
    config.platforms.telegram.allowed_users = [str(ann["id"])]
    on_emulated_model(config, llm)
    llm.queue_tool_calls(
        tool_call("convert_temperature", {"value": 20, "to": "F"}, id="convert"),
        tool_call("search__web_search", {"query": "Lisbon weather"}, id="search"),
    )
    llm.queue_text("Lisbon is sunny: 20 °C, which is 68 °F (https://weather.example/lisbon).")
    await start_app(config)

    chat = emu.private_chat(ann)
    emu.push_message(chat, ann, "What's the weather in Lisbon, in Fahrenheit?")
    await wait_until(lambda: emu.sent_texts(chat["id"]), timeout=30, what="the assistant's answer")

    answer = emu.sent_texts(chat["id"])[-1]
    assert answer.startswith("Lisbon is sunny: 20 °C, which is 68 °F")
    assert "tools: convert_temperature, search__web_search" in answer  # the footer bot.yaml turns on
    assert llm.tool_output("convert") == {"value": 68.0, "unit": "F"}
    assert "weather.example/lisbon" in json.dumps(llm.tool_output("search"))
    assert searxng[1:] == ["Lisbon weather"]
    assert {"convert_temperature", "search__web_search"} <= set(llm.tools_offered(0))


def test_telegram_assistant_without_searxng_says_so_in_one_line(tmp_path):
    """No SEARXNG_URL: the search fails as one log line naming the server and the cause, the
    model reads the same cause, and none of the server's traceback reaches the terminal."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {key: value for key, value in os.environ.items() if key != "SEARXNG_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "botweave", "chat", "--ephemeral"], input='call search__web_search {"query": "x"}\n',
        capture_output=True, text=True, cwd=EXAMPLES / "1-telegram-assistant", timeout=120,
        env={**env, "PATH": path, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    cause = "MCP server search: web_search failed: Error executing tool web_search: no search engine configured: " \
            "set SEARXNG_URL to a SearXNG instance"
    assert f'search__web_search returned {{"error": "{cause}"}}' in done.stdout
    assert done.stderr.splitlines() == [line for line in done.stderr.splitlines() if cause in line]
    assert len(done.stderr.splitlines()) == 1


# --- 2: a Slack stand-up room ----------------------------------------------------------------

STANDUP, OWNER, OWNER_DM = "C0STANDUP", "U0OWNER", "D0OWNER"


@pytest.fixture
async def slack() -> AsyncIterator[IdentitySlackEmulator]:
    emu = IdentitySlackEmulator()
    await emu.start()
    emu.add_user(OWNER, "Olga")
    emu.add_channel(STANDUP, "channel", name="standup")
    emu.add_channel(OWNER_DM, "im")
    yield emu
    await emu.stop()


def slack_env(**more: str) -> dict[str, str]:
    return {"SLACK_BOT_TOKEN": SLACK_BOT_TOKEN, "SLACK_APP_TOKEN": SLACK_APP_TOKEN, **more}


async def test_slack_standup_posts_each_agent_under_its_identity_and_dms_the_owner_a_digest(
    load_example, slack, llm, start_app
):
    env = slack_env(BOTWEAVE_MODEL=EMULATED_MODEL, STANDUP_CHANNEL=STANDUP, OWNER_DM=OWNER_DM, OWNER_USER_ID=OWNER)
    config = on_emulated_model(load_example("2-slack-standup", **env), llm)
    config.platforms.slack.api_base_url = slack.api_base_url
    assert config.rooms["standup"].schedule == "0 9 * * 1-5" and config.rooms["standup"].target == f"slack:{STANDUP}"
    llm.queue_text("1. Ship the login page 2. Fix the flaky test 3. Plan the demo")
    llm.queue_text("Done: the API. Today: the login page. Blocked: nothing.")
    digest = "Digest: login page ships today; API done; no blockers."
    llm.queue_tool_calls(tool_call("send_message", {"target": f"slack:{OWNER_DM}", "text": digest}, id="digest"))
    llm.queue_text("The digest is in the owner's DMs.")
    app = await start_app(config)
    assert [row.next_run is not None for row in app.rooms.scheduler.describe()] == [True]

    await app.rooms.scheduler.run_now("standup", f"slack:{STANDUP}")  # what `botweave room run standup` does
    await app.rooms.scheduler.idle()

    posts = slack.identity_posts(STANDUP)
    assert [(p["username"], p["icons"]) for p in posts] == [
        ("Pia (planner)", {"emoji": ":spiral_calendar_pad:"}),
        ("Bo (builder)", {"emoji": ":hammer_and_wrench:"}),
        ("Sam (scribe)", {"emoji": ":memo:"}),
    ]
    assert posts[0]["text"].startswith("1. Ship the login page") and posts[2]["text"] == "The digest is in the owner's DMs."
    assert "Stand-up: what did you finish" in llm.last_user_text(0)  # the kickoff starts it
    assert [m["text"] for m in slack.messages[OWNER_DM]] == [digest]
    assert "Done: the API" in llm.last_user_text(2), "the scribe read what the others said"


# --- 3: a Discord community bot --------------------------------------------------------------


@pytest.fixture
async def discord() -> AsyncIterator[DiscordEmulator]:
    emu = await DiscordEmulator().start()
    yield emu
    await emu.stop()


def contents(emu: DiscordEmulator, channel: str) -> list[str]:
    return [m["content"] for m in emu.bot_messages(channel)]


async def test_discord_community_gates_pairs_rate_limits_and_pushes_reports_to_the_moderator(
    load_example, discord, start_app
):
    emu = discord
    config = load_example(
        "3-discord-community", DISCORD_BOT_TOKEN=emu.token, MODERATOR_ID=ALICE_ID, COMMUNITY_CHANNEL=CHANNEL_ID
    )
    config.platforms.discord.api_base_url = emu.api_base
    config.platforms.discord.gateway_url = emu.gateway_url
    await start_app(config)
    await emu.wait_ready()

    # A stranger's DM gets a pairing code; the moderator approves it in their own DM.
    await emu.dispatch("MESSAGE_CREATE", emu.message("hi, can I ask something?", channel_id=BOB_DM, author=emu.bob))
    await eventually(lambda: contents(emu, BOB_DM), timeout=20)
    prompt = contents(emu, BOB_DM)[0]
    code = re.search(r"pairing code is ([A-Z0-9]{8})", prompt)
    assert code is not None, prompt
    await eventually(lambda: contents(emu, ALICE_DM), timeout=20)  # the moderator is asked
    assert contents(emu, ALICE_DM) == [f"Pairing request on discord from Bob (id 7002). Approve with /pair approve {code[1]} here."]
    await emu.dispatch("MESSAGE_CREATE", emu.message(f"/pair approve {code[1]}", channel_id=ALICE_DM))
    await eventually(lambda: any("approved" in t.lower() for t in contents(emu, ALICE_DM)), timeout=20)
    await eventually(lambda: len(contents(emu, BOB_DM)) >= 2, timeout=20)
    assert "approved" in contents(emu, BOB_DM)[1]
    await emu.dispatch("MESSAGE_CREATE", emu.message("how do I install it?", channel_id=BOB_DM, author=emu.bob))
    await eventually(lambda: len(contents(emu, BOB_DM)) >= 3, timeout=20)
    assert "heard: how do I install it?" in contents(emu, BOB_DM)[-1]

    # In the community channel it answers only when @-mentioned.
    await emu.dispatch("MESSAGE_CREATE", emu.message("anyone around?", author=emu.bob))
    mention = f"<@{BOT_ID}> where are the docs?"
    await emu.dispatch("MESSAGE_CREATE", emu.message(mention, author=emu.bob, mentions=[emu.bot]))
    await eventually(lambda: contents(emu, CHANNEL_ID), timeout=20)
    assert len(contents(emu, CHANNEL_ID)) == 1 and "where are the docs?" in contents(emu, CHANNEL_ID)[0]

    # Three answers a minute per person (the DM above was one of them): then one notice, then silence.
    for n in range(3):
        await emu.dispatch("MESSAGE_CREATE", emu.message(f"<@{BOT_ID}> question {n}", author=emu.bob, mentions=[emu.bot]))
    await eventually(lambda: len(contents(emu, CHANNEL_ID)) >= 3, timeout=20)
    await asyncio.sleep(0.5)  # a fourth answer, if the limit were not kept, would have arrived by now
    answered = contents(emu, CHANNEL_ID)
    assert len(answered) == 3 and answered[1].endswith("heard: [Bob] question 0"), answered
    assert answered[2] == "You're sending messages faster than I can answer; please wait a moment."

    # /report reaches the moderator by DM, naming who reported and where.
    before = len(contents(emu, ALICE_DM))
    await emu.dispatch("MESSAGE_CREATE", emu.message("/report spam links in general", author=emu.bob))
    await eventually(lambda: len(contents(emu, ALICE_DM)) > before, timeout=20)
    pushed = contents(emu, ALICE_DM)[-1]
    assert "Report from Bob" in pushed and f"<#{CHANNEL_ID}>" in pushed and "spam links in general" in pushed
    await eventually(lambda: any("moderator has been told" in t for t in contents(emu, CHANNEL_ID)), timeout=20)


# --- 4: a tool that needs the owner's approval -----------------------------------------------


async def test_approval_example_asks_the_owner_in_a_dm_and_refunds_only_after_approve(
    load_example, telegram_emulator, start_app
):
    emu = telegram_emulator
    customer, owner = TelegramEmulator.user(7, "Ann", "ann"), TelegramEmulator.user(8, "Olga", "olga")
    config = load_example("4-approval", TELEGRAM_BOT_TOKEN=emu.token, OWNER_ID=str(owner["id"]))
    config.platforms.telegram.api_base_url = emu.api_base_url
    config.platforms.telegram.poll_timeout = 2
    config.platforms.console.enabled = False  # the test has no terminal to type in
    app = await start_app(config)
    assert sorted(app.adapters) == ["telegram"]  # Discord and Slack have no token: skipped
    refunds = sys.modules["refunds"]
    refunds.ORDERS["A-1001"]["refunded"] = 0.0

    chat, owner_chat = emu.private_chat(customer), emu.private_chat(owner)
    emu.push_message(chat, customer, 'call refund {"order_id": "A-1001", "amount": 25}')
    await wait_until(lambda: any(m.get("reply_markup") for m in emu.sent(owner_chat["id"])), timeout=20, what="the request")
    request = next(m for m in emu.sent(owner_chat["id"]) if m.get("reply_markup"))
    assert "refund" in request["text"] and '"order_id": "A-1001"' in request["text"]
    assert [b["text"] for b in emu.buttons(owner_chat["id"], request["message_id"])] == ["Approve", "Deny"]
    assert not any(m.get("reply_markup") for m in emu.sent(chat["id"])), "the customer cannot approve"
    assert refunds.ORDERS["A-1001"]["refunded"] == 0.0  # nothing ran before the press

    emu.press((owner_chat["id"], request["message_id"]), owner, "Approve")
    await wait_until(lambda: any("refund returned" in t for t in emu.sent_texts(chat["id"])), timeout=20, what="the answer")
    assert any("refunded 25.00 on A-1001" in t for t in emu.sent_texts(chat["id"]))
    assert refunds.ORDERS["A-1001"]["refunded"] == 25.0
    assert "Approved by the owner" in emu.current(owner_chat["id"], request["message_id"])["text"]


# --- 5: a bot inside someone's own program ---------------------------------------------------


async def read_until(stream: asyncio.StreamReader, fragment: str, seen: list[str], timeout: float = 30) -> None:
    async def scan() -> None:
        while not any(fragment in line for line in seen):
            line = await stream.readline()
            if not line:
                raise AssertionError(f"the program's output ended before {fragment!r}: {seen}")
            seen.append(line.decode().rstrip("\n"))

    await asyncio.wait_for(scan(), timeout)


async def test_embedded_example_serves_its_web_app_and_the_bot_in_one_process(tmp_path):
    port = free_port()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "SHOP_PORT": str(port)}
    program = await asyncio.create_subprocess_exec(
        sys.executable, "shop.py", cwd=EXAMPLES / "5-embedded", env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert program.stdin is not None and program.stdout is not None and program.stderr is not None
    seen: list[str] = []
    try:
        program.stdin.write(b"/order 2 coffee\n")
        await program.stdin.drain()
        await read_until(program.stdout, "Order #1", seen)
        assert seen[-1] == "Order #1: 2 × coffee. It will be ready in 5 minutes."
        await read_until(program.stdout, "— Corner Coffee", seen)  # the message_sending hook signed it

        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/orders") as response:
                assert await response.json() == [{"who": "you", "quantity": 2, "item": "coffee", "chat": "console:console"}]
            async with http.post(f"http://127.0.0.1:{port}/announce", data="Closing at 6") as response:
                assert await response.json() == {"sent": 1}
        await read_until(program.stdout, "📣 Closing at 6", seen)

        program.stdin.close()  # the console's input ends: the bot stops, then the program
        assert await asyncio.wait_for(program.wait(), 30) == 0, (await program.stderr.read()).decode()
    finally:
        if program.returncode is None:
            program.kill()
            await program.wait()


# --- 7: scale-out: an ingress, two workers and Redis -----------------------------------------


def test_scale_out_compose_file_runs_an_ingress_two_workers_and_redis_on_the_example_bot_yaml():
    folder = EXAMPLES / "7-scale-out"
    compose = yaml.safe_load((folder / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert set(services) == {"redis", "ingress", "worker"}
    assert services["worker"]["deploy"]["replicas"] == 2
    for role in ("ingress", "worker"):
        service = services[role]
        command = service["command"]
        assert command[:2] == ["run", "/config/bot.yaml"] and command[command.index("--role") + 1] == role
        assert "./bot.yaml:/config/bot.yaml:ro" in service["volumes"]
        assert service["environment"]["BOTWEAVE_STORE_URL"] == "redis://redis:6379/0"
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert (folder / service["build"] / "Dockerfile").is_file()
    assert "healthcheck" in services["redis"]


async def test_scale_out_ingress_and_two_workers_answer_every_chat_through_redis(telegram_emulator, redis_url, tmp_path):
    emu = telegram_emulator
    store = redis_url.rsplit("/", 1)[0] + "/3"  # a database of its own on the session's redis-server
    env = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "XDG_STATE_HOME": str(tmp_path), "BOTWEAVE_STORE_URL": store,
        "TELEGRAM_BOT_TOKEN": emu.token, "TELEGRAM_API_BASE_URL": emu.api_base_url,
    }
    roles = ["ingress", "worker", "worker"]
    ports = [free_port() for _ in roles]
    logs = [tmp_path / f"{role}-{n}.log" for n, role in enumerate(roles)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "botweave", "run", "bot.yaml", "--role", role, "--ops-listen", f"127.0.0.1:{port}"],
            cwd=EXAMPLES / "7-scale-out", env=env, stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )
        for role, port, log in zip(roles, ports, logs)
    ]

    def logged() -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in logs)

    async def ready(port: int) -> bool:
        try:
            async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/readyz") as response:
                return response.status == 200
        except aiohttp.ClientError:
            return False

    try:
        for port in ports:
            deadline = asyncio.get_running_loop().time() + 60
            while not await ready(port):
                assert asyncio.get_running_loop().time() < deadline, f"a process never got ready\n{logged()}"
                await asyncio.sleep(0.2)
        people = [TelegramEmulator.user(100 + n, f"User{n}") for n in range(12)]
        for person in people:
            emu.push_message(emu.private_chat(person), person, f"hello from {person['first_name']}")
        try:
            await wait_until(lambda: all(emu.sent_texts(p["id"]) for p in people), timeout=60, what="every answer")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logged()}") from None
        for person in people:
            assert emu.sent_texts(person["id"]) == [f"assistant (offline echo) heard: hello from {person['first_name']}"]
    finally:
        for proc in processes:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=30) for proc in processes]
    assert codes == [0, 0, 0], logged()
    turns = [log.read_text(errors="replace").count("outcome=replied") for log in logs]  # complete once they stopped
    assert turns[0] == 0 and sum(turns) == len(people), f"the workers answer every chat, the ingress none: {turns}"


# --- 6: the web UI and a script on the gateway's Python client -------------------------------


async def test_web_ui_example_serves_the_page_and_answers_the_client_script(load_example, start_app, tmp_path):
    config = load_example("6-web-ui", GATEWAY_LISTEN="127.0.0.1:0")
    assert config.gateway.listen == "127.0.0.1:0"
    app = await start_app(config)
    assert app.gateway is not None and sorted(app.adapters) == ["web"]
    ws_url = app.gateway.url
    page_url = ws_url.replace("ws://", "http://").removesuffix("/ws") + "/"
    async with aiohttp.ClientSession() as http, http.get(page_url) as response:
        assert response.status == 200 and "text/html" in response.headers["Content-Type"]
        assert "<html" in (await response.text()).lower()

    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    script = await asyncio.create_subprocess_exec(
        sys.executable, "ask.py", "What can you do?", "--url", ws_url, cwd=EXAMPLES / "6-web-ui", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(script.communicate(), 60)
    assert script.returncode == 0, err.decode()
    assert out.decode().strip() == "assistant (offline echo) heard: What can you do?"
