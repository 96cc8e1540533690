import asyncio

import pytest
from botweave.hooks import HookEvent, HookRegistry


async def test_lower_priority_runs_first_and_ties_keep_registration_order():
    hooks, calls = HookRegistry(), []
    hooks.register("message_sent", lambda e: calls.append("b100"), priority=100)
    hooks.register("message_sent", lambda e: calls.append("a10"), priority=10)
    hooks.register("message_sent", lambda e: calls.append("c100"), priority=100)
    await hooks.run(HookEvent("message_sent"))
    assert calls == ["a10", "b100", "c100"]


async def test_sequential_deny_stops_everything_after_it():
    hooks, calls = HookRegistry(), []
    hooks.register("message_received", lambda e: calls.append(1), priority=1)
    hooks.register("message_received", lambda e: False, priority=2)
    hooks.register("message_received", lambda e: calls.append(3), priority=3)
    hooks.register("message_received", lambda e: calls.append(4), priority=4, mode="parallel")
    event = await hooks.run(HookEvent("message_received"))
    assert event.denied and calls == [1]


async def test_parallel_group_runs_concurrently_and_groups_run_in_priority_order():
    hooks, log = HookRegistry(), []

    async def slow(name):
        log.append(f"start {name}")
        await asyncio.sleep(0.05)
        log.append(f"end {name}")

    hooks.register("message_sent", lambda e: slow("p1"), priority=1, mode="parallel")
    hooks.register("message_sent", lambda e: slow("p2"), priority=2, mode="parallel")
    hooks.register("message_sent", lambda e: log.append("seq"), priority=3)
    hooks.register("message_sent", lambda e: slow("p4"), priority=4, mode="parallel")
    await hooks.run(HookEvent("message_sent"))
    assert log == ["start p1", "start p2", "end p1", "end p2", "seq", "start p4", "end p4"]


async def test_a_failing_hook_is_logged_and_the_rest_still_run(caplog):
    hooks, calls = HookRegistry(), []

    def broken(event):
        raise RuntimeError("boom")

    hooks.register("message_sending", broken)
    hooks.register("message_sending", lambda e: calls.append("after"))
    event = await hooks.run(HookEvent("message_sending", text="hi"))
    assert calls == ["after"] and not event.denied
    assert "hook broken for message_sending failed" in caplog.text


async def test_async_hooks_can_rewrite():
    hooks = HookRegistry()

    async def shout(event):
        event.text = event.text.upper()

    hooks.register("message_sending", shout)
    assert (await hooks.run(HookEvent("message_sending", text="hi"))).text == "HI"


def test_unknown_event_and_mode_are_rejected():
    hooks = HookRegistry()
    with pytest.raises(ValueError, match="unknown hook event 'message_exploded'"):
        hooks.register("message_exploded", print)
    with pytest.raises(ValueError, match="hook mode"):
        hooks.register("message_sent", print, mode="sometimes")  # type: ignore[arg-type]
