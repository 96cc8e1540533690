"""examples/6-web-ui as its README tells a person to use it: `botweave run` in the example's
folder, then http://HOST:PORT/ in a browser, no token typed. Headless Chromium, at a desktop
width and at 375 px: the page signs in by itself (the gateway is on loopback with no token),
lands on a new chat with the composer focused, and the first message starts the chat and is
answered. The Status view names the agent, model, platforms, store, uptime and revision; a
link in a message stops at its address. Screenshots go to build/screenshots/ (example6-*)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.conftest import free_port
from tests.ui.harness import CHROMIUM_ARGS, ROOT, chromium, screenshot_path

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("ui-example6")]

EXAMPLE = ROOT / "examples" / "6-web-ui"
WIDTHS = (1280, 375)


class Run:
    """`botweave run` in the example's folder, its gateway on a free loopback port."""

    def __init__(self, state: Path) -> None:
        self.port = free_port()
        self.state = state
        self.out = state / "run.out"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    async def start(self) -> Run:
        env = {k: v for k, v in os.environ.items() if k != "BOTWEAVE_MODEL"}
        env |= {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(self.state),
            "GATEWAY_LISTEN": f"127.0.0.1:{self.port}",
        }
        binary = Path(sys.executable).with_name("botweave")
        command = [str(binary)] if binary.exists() else [sys.executable, "-m", "botweave.runtime.cli"]
        self.proc = subprocess.Popen(
            [*command, "run"], cwd=EXAMPLE, env=env, stdout=self.out.open("wb"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 90
        while "gateway: listening on" not in self.output():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"botweave run did not start the gateway:\n{self.output()[-3000:]}")
            await asyncio.sleep(0.2)
        return self

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                await asyncio.to_thread(self.proc.wait, 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def example(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Run, Any]]:
    path = chromium()
    if path is None:
        pytest.skip("Debian's chromium is not installed here (apt-get install -y chromium)")
    from playwright.async_api import async_playwright

    run = await Run(tmp_path_factory.mktemp("example6")).start()
    playwright = await async_playwright().start()
    browser = await playwright.chromium.launch(executable_path=path, headless=True, args=["--headless", *CHROMIUM_ARGS])
    try:
        yield run, browser
    finally:
        await browser.close()
        await playwright.stop()
        await run.stop()


async def open_page(browser: Any, url: str, width: int) -> Any:
    context = await browser.new_context(viewport={"width": width, "height": 800 if width > 600 else 740})
    page = await context.new_page()
    page.errors = []  # type: ignore[attr-defined]
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("console", lambda m: page.errors.append(m.text) if "Content Security Policy" in m.text else None)
    await page.goto(url)
    await page.wait_for_selector("#conn[data-state=open]", timeout=20_000)
    return page


def shot(name: str) -> str:
    path = screenshot_path(f"example6-{name}")
    return str(path)


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_readme_is_true_signed_in_and_chatting_without_a_token(example, width: int) -> None:
    run, browser = example
    assert "http://127.0.0.1:8787/" in (EXAMPLE / "README.md").read_text() and "no token is needed" in (EXAMPLE / "README.md").read_text()
    assert f"(no token needed (loopback, none configured)); the web chat is at {run.url}" in run.output()
    page = await open_page(browser, run.url, width)
    assert await page.locator("#token").count() == 0, "no token form"
    assert await page.inner_text("#who") == "local"
    # A new chat, ready: the composer is on screen and has the focus, before anything is clicked.
    composer = page.locator("#composer")
    assert await composer.is_visible()
    assert await page.evaluate("document.activeElement && document.activeElement.id") == "composer"
    box = await composer.bounding_box()
    assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= width and box["y"] + box["height"] <= 800
    assert await page.inner_text("#conv-title") == "New chat"
    await page.wait_for_timeout(300)  # the chats listed at connect are drawn
    chats = await page.locator(".item[data-session]").count()  # the earlier width's chat, at 375 px
    await page.wait_for_timeout(500)
    assert await page.locator(".item[data-session]").count() == chats, "no session before the first message"
    await page.screenshot(path=shot(f"landing-{width}"))
    # The first message creates the chat and is answered (offline/echo repeats it).
    said = f"hello from {width} px"
    await page.keyboard.type(said)
    await page.keyboard.press("Enter")
    await page.wait_for_selector(f".timeline article.msg[data-kind=bot]:has-text('{said}')", timeout=60_000)
    assert await page.locator(".timeline article.msg[data-kind=user] .body").all_inner_texts() == [said]
    session = await page.get_attribute(".item[aria-current=true]", "data-session", timeout=10_000)
    assert session and session.startswith("s-")
    assert await page.evaluate("document.activeElement && document.activeElement.id") == "composer"
    # A second message goes to the same chat.
    await page.keyboard.type('see "https://example.com"} now')
    await page.keyboard.press("Enter")
    link = page.locator(".timeline article.msg[data-kind=bot] a[href='https://example.com']").first
    await link.wait_for(timeout=60_000)
    assert await link.inner_text() == "https://example.com"
    assert await page.locator(".item[data-session]").count() == chats + 1, "one new chat, both messages in it"
    await page.wait_for_selector("#stop", state="hidden", timeout=60_000)  # the answer is complete
    await page.screenshot(path=shot(f"chat-{width}"))
    errors = list(page.errors)
    await page.context.close()
    assert not errors, errors


async def test_the_status_view_names_agent_model_platforms_store_uptime_and_revision(example) -> None:
    run, browser = example
    page = await open_page(browser, run.url, 1280)
    await page.click(".tab[data-view=status]")
    await page.wait_for_selector("#about")
    facts = {key: (await page.inner_text(f"#about dd[data-about={key}]")).strip()
             for key in ("agents", "platforms", "store", "uptime", "config", "version")}
    assert await page.inner_text("#health") == "Health: ok"
    assert facts["agents"] == "assistant (offline/echo)"
    assert facts["platforms"] == "web: connected"
    assert facts["store"].startswith("sqlite:///") and str(run.state) in facts["store"]
    assert facts["uptime"].endswith("s") and facts["config"] and facts["version"]
    assert re.fullmatch(r"[0-9a-f]{6,}", facts["config"]), facts["config"]
    await page.screenshot(path=shot("status-1280"))
    await page.set_viewport_size({"width": 375, "height": 740})
    assert await page.evaluate("document.scrollingElement.scrollWidth <= document.scrollingElement.clientWidth")
    await page.screenshot(path=shot("status-375"))
    errors = list(page.errors)
    await page.context.close()
    assert not errors, errors
