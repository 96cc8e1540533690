"""An agent's question (`ask_user`) in a real headless Chromium against `botweave web` and the
OpenAI emulator: the question shows inline with its options as buttons (still there after the
connection was cut and resumed), a click answers it, and a question without options is
answered from the line under it; the model gets each answer as the call's result."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.emulators.openai import OpenAIEmulator, Reply, ToolCall, text_of
from tests.ui.conftest import Stack
from tests.ui.harness import CHROMIUM_ARGS, Bot, Relay, screenshot_path, wait_for

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("ui-asks")]


def answer(body: dict[str, Any]) -> Any:
    messages = body.get("messages", [])
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return Reply(text=f"Done: {text_of(last)}")
    said = text_of(last)
    if "which size" in said:
        return Reply(tool_calls=[ToolCall("ask_user", {"question": "Which size?", "options": ["Small", "Large"]})])
    if "ship it" in said:
        return Reply(tool_calls=[ToolCall("ask_user", {"question": "Where should it go?"})])
    return Reply(text=f"You said: {said}")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def asks_stack(needs_chromium: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    from playwright.async_api import async_playwright

    llm = OpenAIEmulator()
    llm.on_request = answer
    llm_url = await llm.start()
    config = {
        "agents": {"assistant": {"model": "openai/emulated", "api_base": llm_url, "api_key": "sk-emulated",
                                 "tools": ["ask_user"]}},
    }
    bot = await Bot(config, tmp_path_factory.mktemp("ui-asks")).start()
    relay = await Relay(bot.port).start()
    playwright = await async_playwright().start()
    browser = await playwright.chromium.launch(executable_path=needs_chromium, headless=True, args=CHROMIUM_ARGS)
    try:
        yield Stack(llm, None, bot, relay, browser)  # type: ignore[arg-type]  # no Telegram here
    finally:
        await browser.close()
        await playwright.stop()
        await relay.stop()
        await bot.stop()
        await llm.stop()


async def test_options_are_buttons_in_the_chat_that_survive_a_reconnect(asks_stack: Stack) -> None:
    stack = asks_stack
    page = await stack.page()
    await stack.new_chat(page)
    await stack.say(page, "which size should I order?")
    options = ".timeline .ask[data-state=open] button"
    await page.wait_for_selector(f"{options}:has-text('Large')", timeout=30_000)
    assert await page.locator(options).all_inner_texts() == ["Small", "Large"]
    assert "Which size?" in await page.locator(".timeline article.msg[data-kind=bot]").last.inner_text()
    await page.set_viewport_size({"width": 375, "height": 760})
    assert await page.evaluate("document.scrollingElement.scrollWidth <= document.scrollingElement.clientWidth")
    await page.screenshot(path=screenshot_path("ask-375"))
    await page.set_viewport_size({"width": 1200, "height": 820})

    requests_before = len(stack.llm.requests)
    stack.relay.cut()  # the tab's connection drops; it comes back and resumes
    await page.wait_for_selector("#conn:not([data-state=open])", timeout=10_000)
    await page.wait_for_selector("#conn[data-state=open]", timeout=20_000)
    await page.click(f"{options}:has-text('Large')")
    await page.wait_for_selector(".timeline article.msg[data-kind=bot]:has-text('Done: {\"answer\": \"Large\"}')",
                                 timeout=30_000)
    await page.wait_for_selector(".timeline .ask[data-state=answered]")
    assert await page.locator(options).count() == 0
    await wait_for(lambda: len(stack.llm.requests) == requests_before + 1, what="one request for the continuation")
    await stack.done(page)


async def test_a_question_without_options_is_answered_from_its_line(asks_stack: Stack) -> None:
    stack = asks_stack
    page = await stack.page()
    await stack.new_chat(page)
    await stack.say(page, "ship it please")
    line = ".timeline .ask[data-state=open] input.ask-input"
    await page.wait_for_selector(line, timeout=30_000)
    await page.fill(line, "12 Rose Lane")
    await page.click(".timeline .ask[data-state=open] button:has-text('Answer')")
    await page.wait_for_selector(
        ".timeline article.msg[data-kind=bot]:has-text('Done: {\"answer\": \"12 Rose Lane\"}')", timeout=30_000
    )
    assert await page.locator(".timeline .ask[data-state=open]").count() == 0
    await stack.done(page)
