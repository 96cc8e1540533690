"""The adapter contract: the same cases against every platform (see platforms.py for the drivers).

Whatever the platform, an outbound action returns a typed result and never raises; the shared
rules (not started, empty text, a capability the platform lacks, the name in front of a room
post where the author cannot change) read the same everywhere. Cutting long text to the
platform's limit is the runtime's job before an adapter is called, so it is not part of this
contract (the runtime's tests and each platform's end-to-end tests cover it).
"""

from __future__ import annotations

from botweave.types import AgentIdentity, BotMessage

from tests.adapters.platforms import PlatformDriver

PLANNER = AgentIdentity("Planner", avatar_url="https://cdn.example.test/planner.png", icon_emoji=":calendar:")


async def test_send_returns_an_id_and_the_platform_shows_the_text(platform: PlatformDriver) -> None:
    sent = await platform.adapter.send(platform.chat, "hello from the contract")
    assert sent.ok and sent.message_id and sent.target == platform.chat
    assert platform.text_of(sent.message_id) == "hello from the contract"
    assert platform.said(sent.message_id)[1] == "hello from the contract"


async def test_text_outside_markdown_syntax_reads_as_written(platform: PlatformDriver) -> None:
    """Markdown rendering never loses what the model wrote as text: HTML-looking tags, entity
    references, dollars, pipes and backslashes read exactly so on every platform."""
    written = r"use <br> or &nbsp; in HTML: &amp; &lt;b&gt; R&D, $5 a || b, C:\Users\ann and \d+\.\d+"
    sent = await platform.adapter.send(platform.chat, written)
    assert sent.ok and sent.message_id
    assert platform.text_of(sent.message_id) == written


async def test_edit_replaces_the_text_or_is_unsupported(platform: PlatformDriver) -> None:
    sent = await platform.adapter.send(platform.chat, "draft")
    assert sent.message_id
    edited = await platform.adapter.edit(platform.chat, sent.message_id, "final")
    if not platform.adapter.capabilities.can_edit:
        assert edited.status == "unsupported" and platform.text_of(sent.message_id) == "draft"
        return
    assert edited.ok and edited.message_id == sent.message_id
    assert platform.text_of(sent.message_id) == "final"


async def test_delete_removes_the_message_or_is_unsupported(platform: PlatformDriver) -> None:
    sent = await platform.adapter.send(platform.chat, "oops")
    assert sent.message_id
    deleted = await platform.adapter.delete(platform.chat, sent.message_id)
    if not platform.adapter.capabilities.can_delete:
        assert deleted.status == "unsupported" and platform.text_of(sent.message_id) == "oops"
        return
    assert deleted.ok and platform.text_of(sent.message_id) is None
    again = await platform.adapter.delete(platform.chat, sent.message_id)  # gone: reported, not raised
    assert again.status in ("failed", "no_route") and again.detail


async def test_react_is_shown_or_unsupported_as_the_platform_declares(platform: PlatformDriver) -> None:
    sent = await platform.adapter.send(platform.chat, "react to me")
    assert sent.message_id
    reacted = await platform.adapter.react(platform.chat, sent.message_id, "👍")
    if platform.adapter.capabilities.can_react:
        assert reacted.ok and platform.reactions_on(sent.message_id) == ["👍"]
    else:
        assert reacted.status == "unsupported" and platform.reactions_on(sent.message_id) == []


async def test_actions_on_unknown_or_malformed_ids_report_instead_of_raising(platform: PlatformDriver) -> None:
    adapter = platform.adapter
    caps = adapter.capabilities
    for message_id in (platform.unknown_id, "not-an-id"):
        for capable, result in (
            (caps.can_edit, await adapter.edit(platform.chat, message_id, "x")),
            (caps.can_delete, await adapter.delete(platform.chat, message_id)),
        ):
            expected = ("failed", "no_route") if capable else ("unsupported",)
            assert result.status in expected and result.detail and result.message_id is None
        reacted = await adapter.react(platform.chat, message_id, "👍")
        expected = ("failed", "no_route") if adapter.capabilities.can_react else ("unsupported",)
        assert reacted.status in expected and reacted.detail


async def test_a_not_started_adapter_reports_no_route_for_every_action(platform: PlatformDriver) -> None:
    adapter = platform.make_adapter()
    results = [
        await adapter.send(platform.chat, "hi"),
        await adapter.edit(platform.chat, "1", "hi"),
        await adapter.delete(platform.chat, "1"),
        await adapter.react(platform.chat, "1", "👍"),
        await adapter.send_as(PLANNER, platform.chat, "hi"),
        await adapter.send_direct(platform.person, "hi"),
    ]
    assert [r.status for r in results] == ["no_route"] * 6
    assert all("not started" in r.detail for r in results)
    await adapter.typing(platform.chat)  # quietly nothing
    await platform.adapter.stop()  # and once stopped, nothing is routable either (stopping twice is fine)
    assert (await platform.adapter.send(platform.chat, "after stop")).status == "no_route"
    assert (await platform.adapter.send_direct(platform.person, "after stop")).status == "no_route"


async def test_empty_text_is_failed_and_never_reaches_the_platform(platform: PlatformDriver) -> None:
    adapter = platform.adapter
    sent = await adapter.send(platform.chat, "something to edit")
    assert sent.message_id
    before = platform.sent_so_far()
    results = [
        await adapter.send(platform.chat, "   "),
        await adapter.edit(platform.chat, sent.message_id, ""),
        await adapter.send_as(PLANNER, platform.chat, "\n"),
        await adapter.send_direct(platform.person, " \t"),
    ]
    empty = ("failed", "empty message")
    no_edits = (  # a platform without edits says so first
        "unsupported", f"{platform.name} cannot edit"
    )
    edited = empty if adapter.capabilities.can_edit else no_edits
    assert [(r.status, r.detail) for r in results] == [empty, edited, empty, empty]
    assert platform.sent_so_far() == before
    assert platform.text_of(sent.message_id) == "something to edit"


async def test_send_as_posts_under_the_agents_name_or_with_the_name_in_front(platform: PlatformDriver) -> None:
    posted = await platform.adapter.send_as(PLANNER, platform.chat, "the plan is ready")
    assert posted.ok and posted.message_id
    assert platform.said(posted.message_id) == ("Planner", "the plan is ready")


async def test_send_direct_reaches_the_person(platform: PlatformDriver) -> None:
    result = await platform.adapter.send_direct(platform.person, "your pairing code is ABCD2345")
    assert result.ok and result.message_id
    assert "your pairing code is ABCD2345" in platform.direct_messages(platform.person)


async def test_typing_never_raises(platform: PlatformDriver) -> None:
    await platform.adapter.typing(platform.chat)
    await platform.adapter.typing("not-a-chat")  # the platform refuses it: nothing to tell anyone
    sent = await platform.adapter.send(platform.chat, "still here")
    assert sent.ok and platform.said(sent.message_id)[1] == "still here"


async def test_a_post_of_our_own_is_recognised_as_ours_and_a_persons_is_not(platform: PlatformDriver) -> None:
    adapter = platform.adapter
    assert adapter.self_user is not None and adapter.is_self(adapter.self_user.user_id)
    echoed = await platform.own_post_comes_back("talking to myself")
    if platform.drops_own_posts:
        assert echoed == []
    else:  # handed on, but as ours: the runtime never starts a turn for it
        assert [i.text for i in echoed if isinstance(i, BotMessage)] == ["talking to myself"]
        assert all(isinstance(i, BotMessage) and adapter.is_self(i.sender.user_id) for i in echoed)
    person = await platform.person_says("hello bot")
    assert person.text == "hello bot" and person.sender.user_id == platform.person
    assert not adapter.is_self(person.sender.user_id)


async def test_a_started_adapter_is_ready_and_a_stopped_one_says_why_not(platform: PlatformDriver) -> None:
    assert await platform.adapter.readiness() is None
    fresh = platform.make_adapter()
    assert await fresh.readiness() == "not started"


async def test_diagnose_accepts_the_credentials_with_one_real_call(platform: PlatformDriver) -> None:
    checks = await platform.make_adapter().diagnose()
    assert checks and all(check.ok for check in checks), checks
    assert checks[0].name == platform.name
