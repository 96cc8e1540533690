"""Fixtures of the browser tests: one bot process, one set of emulators, one relay and one
browser for a whole test module (each test gets a fresh browser context: a tab of its own,
signed in from a fresh link)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.emulators.openai import OpenAIEmulator, Reply, ToolCall, text_of
from tests.emulators.telegram import TelegramEmulator
from tests.ui.harness import CHROMIUM_ARGS, Bot, Relay, chromium, through, wait_for

GATEWAY_TOKEN = "ui-tests-admin-token-0123456789"
OWNER_ID = 1
GROUP_ID = -1001
XSS = "<img src=x onerror=alert(1)><script>alert(2)</script>"
SLOW_WORDS = 80


def answer(body: dict[str, Any]) -> Any:
    """The model, by what it was asked: the room's agents say who they are; the assistant
    streams slowly, calls a tool, answers with HTML, or echoes."""
    messages = body.get("messages", [])
    system = text_of(messages[0]) if messages and messages[0].get("role") == "system" else ""
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Reply(text=f"Done: {text_of(last)}")
    said = text_of(last)
    for agent in ("alice", "bob"):
        if f"You are {agent}." in system:
            return Reply(text=f"{agent} on it", chunks=2, chunk_delay=0.3)
    if "slowly" in said:
        return Reply(text=" ".join(f"w{i}" for i in range(SLOW_WORDS)), chunks=SLOW_WORDS, chunk_delay=0.1)
    if "html please" in said:
        return Reply(text=XSS)
    if "pay bob" in said:
        return Reply(tool_calls=[ToolCall("transfer", {"amount": 5, "to": "bob"})])
    return Reply(text=f"You said: {said.splitlines()[-1] if said else ''}", chunks=4, chunk_delay=0.05)


def bot_config(llm_url: str, telegram: TelegramEmulator) -> dict[str, Any]:
    model = {"model": "openai/emulated", "api_base": llm_url, "api_key": "sk-emulated"}
    return {
        "agents": {
            "assistant": {
                **model,
                "instructions": "You are the assistant.",
                "vision": True,
                "tools": [{"python": "tests.approvaldemo:transfer", "approval": "required"}],
            },
            "alice": {**model, "instructions": "You are alice."},
            "bob": {**model, "instructions": "You are bob."},
        },
        "rooms": {"standup": {"roster": ["alice", "bob"], "max_rounds": 1}},
        "routes": [
            {"match": {"platform": "telegram", "chat_id": str(GROUP_ID)}, "room": "standup"},
            {"match": {}, "agent": "assistant"},
        ],
        "platforms": {
            "telegram": {
                "token": telegram.token,
                "api_base_url": telegram.api_base_url,
                "poll_timeout": 1,
                "unknown_user_policy": "pair",
                "owner_user_id": str(OWNER_ID),
                "group_policy": "respond_all",
            },
        },
        "gateway": {"tokens": [{"name": "tester", "token": GATEWAY_TOKEN, "scopes": ["admin"]}]},
    }


class Stack:
    def __init__(self, llm: OpenAIEmulator, telegram: TelegramEmulator, bot: Bot, relay: Relay, browser: Any) -> None:
        self.llm = llm
        self.telegram = telegram
        self.bot = bot
        self.relay = relay
        self.browser = browser
        self.used_links = 0

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.bot.port}/ws"

    async def page(self, *, width: int = 1200, height: int = 820, dark: bool = False) -> Any:
        """A new tab, signed in from the newest printed link (through the relay)."""
        context = await self.browser.new_context(
            viewport={"width": width, "height": height}, color_scheme="dark" if dark else "light"
        )
        page = await context.new_page()
        # What a person would not see but must not happen: an uncaught error in the page's
        # code, or anything the Content-Security-Policy refused.
        page.errors = []  # type: ignore[attr-defined]
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        page.on("console", lambda m: page.errors.append(m.text) if "Content Security Policy" in m.text else None)
        link = await self.bot.next_link(after=self.used_links)
        self.used_links = len(self.bot.links())
        await page.goto(through(self.relay, link))
        await page.wait_for_selector("#conn[data-state=open]", timeout=20_000)
        return page

    async def blank_page(self, *, width: int = 1000, height: int = 760) -> Any:
        """A new tab on the sign-in form (no link used), its errors collected."""
        context = await self.browser.new_context(viewport={"width": width, "height": height})
        page = await context.new_page()
        page.errors = []  # type: ignore[attr-defined]
        page.on("pageerror", lambda error: page.errors.append(str(error)))
        await page.goto(self.relay.base_url + "/")
        return page

    async def sign_in(self, page: Any, token: str) -> None:
        await page.fill("#token", token)
        await page.press("#token", "Enter")

    async def done(self, page: Any) -> None:
        """Close the tab; it must have had no error."""
        errors = list(page.errors)
        await page.context.close()
        assert not errors, errors

    async def new_chat(self, page: Any) -> str:
        await page.click("button:has-text('New chat')")
        await page.wait_for_selector("#composer")
        return str(await page.get_attribute(".item[aria-current=true]", "data-session"))

    async def say(self, page: Any, text: str) -> None:
        await page.fill("#composer", text)
        await page.press("#composer", "Enter")


@pytest.fixture(scope="module")
def needs_chromium() -> str:
    path = chromium()
    if path is None:
        pytest.skip("Debian's chromium is not installed here (apt-get install -y chromium; .ci/run installs it)")
    return path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(needs_chromium: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    from playwright.async_api import async_playwright

    llm = OpenAIEmulator()
    llm.on_request = answer
    llm_url = await llm.start()
    telegram = await TelegramEmulator().start()
    bot = await Bot(bot_config(llm_url, telegram), tmp_path_factory.mktemp("ui-bot")).start()
    relay = await Relay(bot.port).start()
    playwright = await async_playwright().start()
    browser = await playwright.chromium.launch(executable_path=needs_chromium, headless=True, args=CHROMIUM_ARGS)
    try:
        yield Stack(llm, telegram, bot, relay, browser)
    finally:
        await browser.close()
        await playwright.stop()
        await relay.stop()
        await bot.stop()
        await telegram.stop()
        await llm.stop()


__all__ = ["GATEWAY_TOKEN", "GROUP_ID", "OWNER_ID", "SLOW_WORDS", "XSS", "Stack", "wait_for"]
