"""The browser UI in a real headless Chromium against `botweave web` with the Telegram and
OpenAI emulators: sign-in from the printed link, chat with streaming, Stop, a tool approval,
a pairing request, a reconnect that loses and repeats nothing, HTML from a model shown as
text, an image upload reaching the model, a phone-sized screen; screenshots of what a person
sees are written to build/screenshots/."""

from __future__ import annotations

import asyncio
import base64
import re

import pytest
from botweave.gateway import Client, GatewayError

from tests.emulators.telegram import png_bytes
from tests.ui.conftest import GATEWAY_TOKEN, GROUP_ID, OWNER_ID, SLOW_WORDS, XSS, Stack
from tests.ui.harness import screenshot_path, wait_for

# One bot and one browser for the module: under xdist its tests stay on one worker.
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("ui-browser")]

NO_HORIZONTAL_SCROLL = "document.scrollingElement.scrollWidth <= document.scrollingElement.clientWidth"


async def bot_texts(page) -> list[str]:
    return await page.locator(".timeline article.msg[data-kind=bot] .body").all_inner_texts()


async def test_sign_in_from_the_printed_link_once(stack: Stack) -> None:
    requests: list[str] = []
    page = await stack.page()
    page.on("request", lambda r: requests.append(r.url))
    assert "#" not in page.url and "code" not in page.url, page.url
    token = await page.evaluate("sessionStorage.getItem('botweave.token')")
    assert token and token.startswith("bwt_")
    used = stack.bot.links()[-2]
    await page.reload()
    await page.wait_for_selector("#conn[data-state=open]")
    # The link it came from does not sign anyone in again.
    context = await stack.browser.new_context()
    other = await context.new_page()
    await other.goto(used.replace(used.split("/#")[0], stack.relay.base_url))
    await other.wait_for_selector(".signin .notice:has-text('used already')")
    assert await other.evaluate("sessionStorage.getItem('botweave.token')") is None
    await context.close()
    # Sign-out forgets the token and ends it at the gateway.
    await page.click("#signout")
    await page.wait_for_selector(".signin")
    assert await page.evaluate("sessionStorage.getItem('botweave.token')") is None
    logs = stack.bot.logs()
    assert token not in logs and used.split("#code=")[1] not in logs
    assert not any(token in url for url in requests)
    await stack.done(page)


async def test_tab_token_refused_after_sign_out(stack: Stack) -> None:
    page = await stack.page()
    token = await page.evaluate("sessionStorage.getItem('botweave.token')")
    await page.click("#signout")
    await page.wait_for_selector(".signin")
    with pytest.raises(GatewayError) as refused:
        async with Client(stack.ws_url, token) as client:
            await client.call("sessions.list")
    assert refused.value.code == "unauthorized"
    await stack.done(page)


async def test_chat_streams_the_answer_and_stop_cuts_it(stack: Stack) -> None:
    page = await stack.page()
    await stack.new_chat(page)
    await stack.say(page, "hello there")
    await page.wait_for_selector(".timeline article.msg[data-kind=bot]:has-text('You said: hello there')", timeout=60_000)
    assert await page.locator(".timeline article.msg[data-kind=user]").count() == 1  # the echo gave way
    # A long answer: watch it grow word by word, then stop it.
    await stack.say(page, "tell me slowly")
    growing = "article.msg.live[data-kind=bot] .body"
    await page.wait_for_selector(growing, timeout=30_000)
    lengths = []
    for _ in range(3):
        await page.wait_for_function(
            "([sel, n]) => { const el = document.querySelector(sel); return el && el.innerText.length > n; }",
            arg=[growing, lengths[-1] if lengths else 0],
        )
        lengths.append(len(await page.inner_text(growing)))
    assert lengths == sorted(set(lengths)), f"the answer grew: {lengths}"
    await page.click("#stop")
    await page.wait_for_selector(".run[data-status=stopped]", state="attached", timeout=20_000)
    await page.wait_for_selector("#stop", state="hidden")
    await page.wait_for_function(  # the bot says what it did
        "() => [...document.querySelectorAll('article.msg[data-kind=bot] .body')].some((b) => b.innerText.trim() === 'Stopped.')",
        timeout=20_000,
    )
    people = await page.locator(".timeline article.msg[data-kind=user] .body").all_inner_texts()
    assert [t.strip() for t in people] == ["hello there", "tell me slowly"], "stopping is not a message of the person"
    shown = " ".join(await page.locator(".timeline").all_inner_texts())
    words = re.findall(r"\bw(\d+)\b", shown)
    assert words and int(words[-1]) < SLOW_WORDS - 1, "the answer was stopped before its end"
    await page.screenshot(path=screenshot_path("chat-desktop"))
    await page.set_viewport_size({"width": 375, "height": 760})
    assert await page.evaluate(NO_HORIZONTAL_SCROLL)
    await page.screenshot(path=screenshot_path("chat-375"))
    await page.emulate_media(color_scheme="dark")
    await page.screenshot(path=screenshot_path("chat-375-dark"))
    print(f"screenshots: {screenshot_path('chat-desktop')} {screenshot_path('chat-375')} {screenshot_path('chat-375-dark')}")
    await stack.done(page)


async def test_a_new_chat_talks_to_the_agent_picked_from_the_gateways_list(stack: Stack) -> None:
    page = await stack.page()
    picker = page.locator("#new-agent")
    await page.wait_for_function("() => document.querySelectorAll('#new-agent option').length > 1")
    offered = await picker.locator("option").evaluate_all("options => options.map((o) => [o.value, o.textContent])")
    assert offered == [["", "Default agent"], ["alice", "alice"], ["assistant", "assistant"], ["bob", "bob"]]  # bot.yaml's
    assert await page.locator("input#new-agent").count() == 0, "nothing to type a name into"
    await picker.select_option("alice")
    session = await stack.new_chat(page)
    assert await page.inner_text(".conv-sub") == "alice"
    assert "alice" in await page.inner_text(f".item[data-session='{session}'] .item-sub")
    await stack.say(page, "who is there?")
    await page.wait_for_selector("article.msg[data-kind=bot]:has-text('alice on it')", timeout=60_000)
    await stack.done(page)


async def test_deleting_a_sent_message_cancels_its_answer(stack: Stack) -> None:
    page = await stack.page()
    session = await stack.new_chat(page)
    await stack.say(page, "tell me slowly, then forget it")
    await page.wait_for_selector("article.msg.live[data-kind=bot] .body", timeout=30_000)
    mine = page.locator(".timeline article.msg[data-kind=user]")
    await mine.locator("button.delete").click()
    await mine.locator("button.delete:has-text('Delete it?')").click()
    await mine.locator(".deleted:has-text('message deleted')").wait_for(timeout=20_000)
    await page.wait_for_selector(".run[data-status=stopped]", state="attached", timeout=20_000)
    await page.wait_for_selector("#stop", state="hidden")
    shown = " ".join(await page.locator(".timeline").all_inner_texts())
    assert "forget it" not in shown
    words = re.findall(r"\bw(\d+)\b", shown)
    assert not words or int(words[-1]) < SLOW_WORDS - 1, "the answer was cancelled before its end"
    async with Client(stack.ws_url, GATEWAY_TOKEN) as client:
        history = (await client.call("chat.history", {"conversation": f"web:{session}"}))["messages"]
    person = [m for m in history if m["author"]["kind"] == "user"]
    assert [(m["deleted"], m["text"]) for m in person] == [(True, "")]
    await stack.done(page)


async def test_a_chat_shared_read_only_is_followed_live_until_the_share_is_revoked(stack: Stack) -> None:
    page = await stack.page()
    await stack.new_chat(page)
    await stack.say(page, "hello share")
    await page.wait_for_selector("article.msg[data-kind=bot]:has-text('You said: hello share')", timeout=60_000)
    await page.click(".conv-actions button:has-text('Share')")
    await page.select_option("#share-expiry", "3600")
    await page.click("#share-panel button:has-text('Create token')")
    token = await page.locator("#share-panel .share-token").input_value()
    assert token and token != GATEWAY_TOKEN
    assert token not in page.url
    await page.screenshot(path=screenshot_path("share-desktop"))
    await page.set_viewport_size({"width": 375, "height": 760})
    assert await page.evaluate(NO_HORIZONTAL_SCROLL)
    await page.screenshot(path=screenshot_path("share-375"))
    await page.set_viewport_size({"width": 1200, "height": 820})
    # Someone else signs in with it: they read this chat, live, and can do nothing to it.
    reader = await stack.blank_page(width=375)
    await stack.sign_in(reader, token)
    await reader.wait_for_selector("#conn[data-state=open]", timeout=20_000)
    await reader.wait_for_selector("article.msg[data-kind=bot]:has-text('You said: hello share')", timeout=20_000)
    assert await reader.inner_text(".conv-sub") == "read-only"
    for control in ("#composer", ".new-session", ".conv-actions button", "button.edit", "button.delete", "#picker",
                    "[data-view=status]"):  # nor who is connected, nor the bot's health
        assert await reader.locator(control).count() == 0, control
    await stack.say(page, "and more")
    await reader.wait_for_selector("article.msg[data-kind=bot]:has-text('You said: and more')", timeout=60_000)
    assert await reader.evaluate(NO_HORIZONTAL_SCROLL)
    await reader.screenshot(path=screenshot_path("shared-375"))
    print(f"screenshots: {screenshot_path('share-desktop')} {screenshot_path('share-375')} {screenshot_path('shared-375')}")
    await page.click("#share-panel button:has-text('Revoke')")
    await page.wait_for_selector("#share-panel .share[data-revoked=true]")
    await reader.wait_for_selector(".signin .notice:has-text('revoked')", timeout=20_000)
    assert await reader.evaluate("sessionStorage.getItem('botweave.token')") is None
    await stack.done(reader)
    await stack.done(page)


async def test_the_status_view_follows_who_comes_and_goes(stack: Stack) -> None:
    page = await stack.page()
    await page.click("[data-view=status]")
    await page.wait_for_selector("#health.health-ok")
    rows = page.locator(".presence li")
    await rows.first.wait_for()
    before = await rows.count()
    other = await stack.page()
    await page.wait_for_function(f"() => document.querySelectorAll('.presence li').length === {before + 1}", timeout=10_000)
    await page.screenshot(path=screenshot_path("status-desktop"))
    print(f"screenshots: {screenshot_path('status-desktop')}")
    await stack.done(other)
    await page.wait_for_function(f"() => document.querySelectorAll('.presence li').length === {before}", timeout=10_000)
    await stack.done(page)


async def test_model_html_is_shown_as_text_and_runs_nothing(stack: Stack) -> None:
    page = await stack.page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    await stack.new_chat(page)
    await stack.say(page, "html please")
    bubble = page.locator(".timeline article.msg[data-kind=bot] .body").last
    await page.wait_for_selector(".run[data-status=final]", state="attached", timeout=60_000)
    await page.wait_for_selector(".timeline article.msg.live", state="detached")
    assert (await bubble.inner_text()).strip() == XSS
    assert await page.locator(".timeline img[src='x'], .timeline script").count() == 0
    await page.wait_for_timeout(300)
    assert dialogs == []
    await stack.done(page)


async def test_a_tool_approval_clicked_in_the_page_ends_the_waiting_turn(stack: Stack) -> None:
    page = await stack.page()
    await stack.new_chat(page)
    await stack.say(page, "pay bob please")
    await page.wait_for_selector("details.tool[data-tool=transfer][data-status=awaiting_approval]", timeout=60_000)
    card = page.locator(".run .approval").first
    await card.wait_for()
    assert "transfer" in await card.inner_text()
    await page.click("[data-view=approvals]")
    await page.wait_for_selector(".page .approval button.link:has-text('New chat')")
    await page.screenshot(path=screenshot_path("approvals-desktop"))
    await page.set_viewport_size({"width": 375, "height": 760})
    assert await page.evaluate(NO_HORIZONTAL_SCROLL)
    await page.screenshot(path=screenshot_path("approvals-375"))
    print(f"screenshots: {screenshot_path('approvals-desktop')} {screenshot_path('approvals-375')}")
    await page.set_viewport_size({"width": 1200, "height": 820})
    await page.click(".page .approval button:has-text('Approve')")
    await page.wait_for_selector(".page .empty:has-text('Nothing is waiting')")
    await page.click("[data-view=chats]")
    await page.click(".item[aria-current=true]")
    await page.wait_for_selector(".timeline article.msg[data-kind=bot]:has-text('Done: sent 5 to bob')", timeout=30_000)
    await page.wait_for_selector("details.tool[data-tool=transfer][data-status=done]")
    await stack.done(page)


async def test_a_strangers_pairing_request_approved_from_the_page(stack: Stack) -> None:
    page = await stack.page()
    stranger = stack.telegram.user(666, "Mallory")
    stack.telegram.push_message(stack.telegram.private_chat(stranger), stranger, "let me in")
    await page.wait_for_selector("[data-view=pairing] .badge", timeout=30_000)
    await page.click("[data-view=pairing]")
    request = page.locator(".pairing[data-pairing='telegram:666']")
    await request.wait_for()
    assert "Mallory" in await request.inner_text()
    await request.locator("button:has-text('Approve')").click()
    await request.locator(".outcome").wait_for()
    await wait_for(lambda: len(stack.telegram.sent(666)) >= 2, 20, "the welcome on Telegram")
    stack.telegram.push_message(stack.telegram.private_chat(stranger), stranger, "hello now")
    await wait_for(lambda: any("You said: hello now" in t for t in stack.telegram.sent_texts(666)), 60, "an answer")
    await stack.done(page)


async def test_an_image_upload_reaches_the_model_as_an_image(stack: Stack) -> None:
    page = await stack.page()
    await stack.new_chat(page)
    picture = png_bytes(16, 12, (20, 160, 90))
    await page.set_input_files("#picker", files=[{"name": "dot.png", "mimeType": "image/png", "buffer": picture}])
    await page.wait_for_selector("#pending-files .chip[data-state=ready]", timeout=20_000)
    before = len(stack.llm.requests)
    await stack.say(page, "what is in this picture")
    await page.wait_for_selector(".timeline article.msg[data-kind=bot]:has-text('You said')", timeout=60_000)
    images = [
        image
        for index in range(before, len(stack.llm.requests))
        for image in stack.llm.images(index)
    ]
    assert picture in images
    # The sent message shows the picture (fetched with the token, shown from a blob URL).
    thumb = page.locator(".timeline article.msg[data-kind=user] img.thumb")
    await thumb.wait_for()
    await page.wait_for_function("() => document.querySelector('article.msg[data-kind=user] img.thumb').naturalWidth === 16")
    assert (await thumb.get_attribute("src") or "").startswith("blob:")
    await stack.done(page)


async def test_drag_and_drop_attaches_a_file(stack: Stack) -> None:
    page = await stack.page()
    await stack.new_chat(page)
    encoded = base64.b64encode(png_bytes(8, 8)).decode()
    await page.evaluate(
        """(data) => {
            const bytes = Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], "dropped.png", { type: "image/png" }));
            const main = document.getElementById("main");
            for (const type of ["dragenter", "dragover", "drop"]) {
              main.dispatchEvent(new DragEvent(type, { dataTransfer: transfer, bubbles: true, cancelable: true }));
            }
        }""",
        encoded,
    )
    await page.wait_for_selector("#pending-files .chip[data-state=ready]:has-text('dropped.png')", timeout=20_000)
    await stack.done(page)


async def test_edit_a_sent_message_to_run_it_again(stack: Stack) -> None:
    page = await stack.page()
    await stack.new_chat(page)
    await stack.say(page, "first words")
    await page.wait_for_selector("article.msg[data-kind=bot]:has-text('You said: first words')", timeout=60_000)
    await page.click("article.msg[data-kind=user] button.edit")
    await page.fill("textarea.edit-text", "second words")
    await page.press("textarea.edit-text", "Enter")
    await page.wait_for_selector("article.msg[data-kind=bot]:has-text('You said: second words')", timeout=60_000)
    assert "second words" in await page.inner_text("article.msg[data-kind=user] .body")
    await stack.done(page)


async def test_sessions_rename_search_delete(stack: Stack) -> None:
    page = await stack.page()
    session = await stack.new_chat(page)
    await page.click(".conv-actions button:has-text('Rename')")
    await page.fill(".rename input", "Budget talk")
    await page.press(".rename input", "Enter")
    await page.wait_for_selector(f".item[data-session='{session}']:has-text('Budget talk')")
    await page.fill("#search", "budget")
    assert await page.locator(".list .item").count() == 1
    await page.fill("#search", "no such chat")
    await page.wait_for_selector(".panel .empty")
    await page.fill("#search", "")
    # On a phone the list is a drawer behind the menu button.
    await page.set_viewport_size({"width": 375, "height": 760})
    assert not await page.is_visible("#search")
    await page.click("button.menu")
    await page.wait_for_selector("#search", state="visible")
    await page.wait_for_function("() => getComputedStyle(document.getElementById('sidebar')).transform === 'none'")
    await page.wait_for_timeout(200)  # the slide's last frame
    assert await page.evaluate(NO_HORIZONTAL_SCROLL)
    await page.screenshot(path=screenshot_path("drawer-375"))
    print(f"screenshots: {screenshot_path('drawer-375')}")
    await page.click(f".item[data-session='{session}']")
    await page.wait_for_selector("#search", state="hidden")
    await page.click(".conv-actions button:has-text('Delete')")
    await page.click(".conv-actions button:has-text('Delete this chat?')")
    await page.wait_for_selector(f".item[data-session='{session}']", state="detached")
    await stack.done(page)


async def test_a_watched_room_after_a_cut_shows_every_missed_message_once_in_order(stack: Stack) -> None:
    telegram = stack.telegram
    group = telegram.group(GROUP_ID, "Team")
    owner = telegram.user(OWNER_ID, "Olga")
    conversation = f"telegram:{GROUP_ID}"
    telegram.push_message(group, owner, "stand-up: what is new?")
    async with Client(stack.ws_url, GATEWAY_TOKEN) as client:
        async def history() -> list[str]:
            result = await client.call("chat.history", {"conversation": conversation, "limit": 200})
            return [m["id"] for m in result["messages"]]

        for _ in range(600):
            if len(await history()) >= 3:
                break
            await asyncio.sleep(0.1)
        page = await stack.page()
        sockets: list[object] = []
        page.on("websocket", lambda ws: sockets.append(ws))
        await page.click("[data-view=watch]")
        await page.click(f".item[data-conversation='{conversation}']")
        await page.wait_for_selector(".timeline article.msg[data-kind=agent]")
        assert await page.locator(".members .agent").count() == 2
        assert await page.inner_text("#conv-title") == "Team", "the group's name, though the agents spoke last"
        # Cut the page off while the agents answer new messages on Telegram.
        telegram.push_message(group, owner, "one more thing")
        await page.wait_for_selector(".timeline article.msg:has-text('one more thing')", timeout=30_000)
        opened_before = int(await page.get_attribute("#conn", "data-opened") or 0)
        sockets.clear()
        stack.relay.hold()
        await page.wait_for_selector("#conn:not([data-state=open])", timeout=10_000)
        before = len(await history())
        telegram.push_message(group, owner, "and another")
        telegram.push_message(group, owner, "last one")
        for _ in range(600):
            if len(await history()) >= before + 6:
                break
            await asyncio.sleep(0.1)
        missed = (await history())[before:]
        assert len(missed) >= 6
        stack.relay.release()
        await page.wait_for_selector("#conn[data-state=open]", timeout=30_000)
        expected = await history()
        await page.wait_for_function(
            "(ids) => { const shown = [...document.querySelectorAll('.timeline article.msg[data-id]')].map((m) => m.dataset.id);"
            " return ids.every((id) => shown.includes(id)); }",
            arg=expected,
            timeout=30_000,
        )
        shown = await page.eval_on_selector_all(".timeline article.msg[data-id]", "els => els.map((e) => e.dataset.id)")
        assert len(shown) == len(set(shown)), "a message was shown twice"
        assert shown == expected, "the page's order is the conversation's"
        assert sockets, "the page opened a new WebSocket after the cut"
        assert int(await page.get_attribute("#conn", "data-opened") or 0) > opened_before
        await page.screenshot(path=screenshot_path("room-desktop"))
        await page.set_viewport_size({"width": 375, "height": 760})
        assert await page.evaluate(NO_HORIZONTAL_SCROLL)
        await page.screenshot(path=screenshot_path("room-375"))
        print(f"screenshots: {screenshot_path('room-desktop')} {screenshot_path('room-375')}")
        await stack.done(page)


async def test_the_page_is_under_a_strict_content_security_policy(stack: Stack) -> None:
    page = await stack.page()
    response = await page.goto(stack.relay.base_url + "/")
    policy = (await response.all_headers())["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    injected = await page.evaluate(
        """() => new Promise((resolve) => {
            window.ran = false;
            document.addEventListener("securitypolicyviolation", () => resolve(window.ran), { once: true });
            const s = document.createElement("script");
            s.textContent = "window.ran = true";
            document.body.append(s);
        })"""
    )
    assert injected is False
    assert any("Content Security Policy" in e for e in page.errors)
    page.errors.clear()  # that refusal was the point
    await stack.done(page)


async def test_token_sign_in_status_view_and_the_keyboard(stack: Stack) -> None:
    page = await stack.blank_page()
    await stack.sign_in(page, "not-a-token-at-all-0000")
    await page.wait_for_selector(".signin .notice:has-text('refused')", timeout=20_000)
    assert await page.evaluate("sessionStorage.getItem('botweave.token')") is None
    await stack.sign_in(page, GATEWAY_TOKEN)
    await page.wait_for_selector("#conn[data-state=open]")
    assert await page.inner_text("#who") == "tester"
    await page.click("[data-view=status]")
    await page.wait_for_selector("#health.health-ok")
    assert "tester" in await page.inner_text(".presence")
    # Enter sends, Shift+Enter breaks the line.
    await page.click("[data-view=chats]")
    await stack.new_chat(page)
    await page.click("#composer")
    await page.keyboard.type("line one")
    await page.keyboard.press("Shift+Enter")
    await page.keyboard.type("line two")
    assert await page.input_value("#composer") == "line one\nline two"
    assert await page.locator(".timeline article.msg").count() == 0
    await page.keyboard.press("Enter")
    await page.wait_for_selector("article.msg[data-kind=user]:has-text('line two')")
    assert await page.input_value("#composer") == ""
    # Keyboard focus is visible.
    await page.keyboard.press("Shift+Tab")
    outline = await page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("none", ""), outline
    await stack.done(page)


async def test_a_message_sent_while_cut_off_is_sent_on_reconnect_once(stack: Stack) -> None:
    page = await stack.page()
    await stack.new_chat(page)
    stack.relay.hold()
    await page.wait_for_selector("#conn:not([data-state=open])", timeout=10_000)
    await stack.say(page, "sent while away")
    echo = page.locator("article.msg.echo")
    await echo.wait_for()
    assert await echo.get_attribute("data-state") == "queued"
    stack.relay.release()
    await page.wait_for_selector("article.msg[data-kind=bot]:has-text('You said: sent while away')", timeout=60_000)
    assert await page.locator("article.msg.echo").count() == 0
    assert await page.locator("article.msg[data-kind=user]:has-text('sent while away')").count() == 1
    await stack.done(page)
