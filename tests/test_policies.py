"""Pure policy decisions: the loop guard, pairing codes, admission."""

import asyncio
import logging

import pytest
from botweave.policies import BotLoopGuard, BotLoopPolicy
from botweave.policies.admission import Admission, AdmissionLimits, decide_admission
from botweave.policies.pairing import ALPHABET, CODE_LENGTH, Pairing, new_code
from botweave.runtime.config import load_config
from botweave.store import MemoryStore

# --- bot-loop guard ---------------------------------------------------------------------------


async def test_twenty_events_pass_and_the_twenty_first_trips():
    guard = BotLoopGuard()
    assert all([await guard.observe("me", "other", float(t)) for t in range(20)])
    assert await guard.observe("me", "other", 20.0) is False


async def test_cooldown_drops_without_recording_then_forgets_history():
    guard = BotLoopGuard(BotLoopPolicy(max_events_per_window=2, window_seconds=10, cooldown_seconds=30))
    assert await guard.observe("a", "b", 0)
    assert await guard.observe("a", "b", 1)
    assert not await guard.observe("a", "b", 2)  # trips: cooldown until 32
    assert not await guard.observe("a", "b", 31.9)
    assert await guard.cooldown_left("a", "b", 31.0) == pytest.approx(1.0)
    assert await guard.observe("a", "b", 32)  # over: history forgotten, budget fresh
    assert await guard.observe("a", "b", 33)
    assert not await guard.observe("a", "b", 34)


async def test_window_slides():
    guard = BotLoopGuard(BotLoopPolicy(max_events_per_window=2, window_seconds=10))
    assert await guard.observe("a", "b", 0)
    assert await guard.observe("a", "b", 5)
    assert await guard.observe("a", "b", 10.5)  # the event at 0 left the window


async def test_pairs_are_symmetric_and_independent():
    guard = BotLoopGuard(BotLoopPolicy(max_events_per_window=1))
    assert await guard.observe("a", "b", 0)
    assert not await guard.observe("b", "a", 1)  # same unordered pair
    assert await guard.observe("a", "c", 1)  # another pair has its own budget


async def test_disabled_guard_passes_everything():
    guard = BotLoopGuard(BotLoopPolicy(enabled=False, max_events_per_window=1))
    assert all([await guard.observe("a", "b", float(t)) for t in range(5)])


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, BotLoopPolicy()),
        ({}, BotLoopPolicy()),
        ({"max_events_per_window": "lots", "window_seconds": None, "colour": "red"}, BotLoopPolicy()),
        ({"max_events_per_window": 0}, BotLoopPolicy(max_events_per_window=1)),
        ({"max_events_per_window": -3}, BotLoopPolicy(max_events_per_window=1)),
        ({"max_events_per_window": "5", "cooldown_seconds": "2.5"}, BotLoopPolicy(max_events_per_window=5, cooldown_seconds=2.5)),
        ({"enabled": "yes"}, BotLoopPolicy()),
        ({"enabled": False}, BotLoopPolicy(enabled=False)),
        ({"max_events_per_window": 2.7, "window_seconds": "30"}, BotLoopPolicy(max_events_per_window=2, window_seconds=30.0)),
        ({"window_seconds": 0, "cooldown_seconds": -5}, BotLoopPolicy()),
        ({"window_seconds": "nan", "cooldown_seconds": float("inf")}, BotLoopPolicy()),
        ({"max_events_per_window": True}, BotLoopPolicy()),
        ({"cooldown_seconds": 0}, BotLoopPolicy(cooldown_seconds=0.0)),
        (["max_events_per_window", 3], BotLoopPolicy()),
        ("off", BotLoopPolicy()),
    ],
)
def test_policy_from_malformed_config_falls_back_to_defaults(data, expected):
    assert BotLoopPolicy.model_validate(data) == expected


def test_a_loop_protection_typo_loads_with_a_warning_naming_the_field(caplog):
    with caplog.at_level(logging.WARNING, logger="botweave.config"):
        config = load_config(
            {
                "agents": {"a": {"model": "offline/echo"}},
                "bot": {"bot_loop_protection": {"max_events_per_window": "lots", "window_secs": 5}},
                "platforms": {"discord": {"token": "t", "bot_loop_protection": {"cooldown_seconds": 5}}},
            }
        )
    assert config.bot_config_for("telegram").bot_loop_protection == BotLoopPolicy()
    assert config.bot_config_for("discord").bot_loop_protection == BotLoopPolicy(cooldown_seconds=5.0)
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "bot_loop_protection.max_events_per_window: 'lots' is not a number; using the default 20" in warnings
    assert "ignoring unknown key(s) window_secs" in warnings


async def test_guard_state_is_shared_through_the_store():
    store = MemoryStore()
    worker_a = BotLoopGuard(BotLoopPolicy(max_events_per_window=2), store)
    worker_b = BotLoopGuard(BotLoopPolicy(max_events_per_window=2), store)
    assert await worker_a.observe("x", "y", 0)
    assert await worker_b.observe("x", "y", 1)
    assert not await worker_a.observe("x", "y", 2)
    assert not await worker_b.observe("x", "y", 3)  # b sees a's cooldown


# --- pairing -----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_codes_use_the_unambiguous_alphabet():
    codes = {new_code() for _ in range(500)}
    assert len(codes) == 500
    assert all(len(c) == CODE_LENGTH and set(c) <= set(ALPHABET) for c in codes)
    assert not set("0O1I") & set(ALPHABET)


async def test_a_code_is_stored_hashed_and_approves_its_user():
    store = MemoryStore()
    pairing = Pairing(store)
    result = await pairing.request("telegram", "42", "Ann", "42")
    assert result.status == "issued"
    dumped = [await store.get(k) for k in await store.keys("")]
    assert not any(result.code in (v or "") for v in dumped)
    assert not any(result.code in k for k in await store.keys(""))
    approved = await pairing.approve("telegram", result.code.lower())  # case-insensitive
    assert approved.status == "approved" and approved.request.user_id == "42"
    assert await pairing.is_approved("telegram", "42")
    assert (await pairing.approve("telegram", result.code)).status == "wrong_code"  # used up


async def test_codes_expire_after_an_hour():
    store_clock = Clock()
    store = MemoryStore(clock=lambda: store_clock.now)
    pairing = Pairing(store, clock=store_clock)
    code = (await pairing.request("slack", "U1", "Ann", "D1")).code
    store_clock.now += 3601
    assert (await pairing.approve("slack", code)).status == "wrong_code"


async def test_at_most_three_pending_per_platform_and_one_per_user():
    pairing = Pairing(MemoryStore())
    for user in ("1", "2", "3"):
        assert (await pairing.request("telegram", user, user, user)).status == "issued"
    assert (await pairing.request("telegram", "1", "1", "1")).status == "already_pending"
    assert (await pairing.request("telegram", "4", "4", "4")).status == "too_many_pending"
    assert (await pairing.request("discord", "4", "4", "4")).status == "issued"


async def test_five_wrong_codes_in_a_minute_lock_approval_for_five_minutes():
    clock = Clock()
    store = MemoryStore(clock=lambda: clock.now)
    pairing = Pairing(store, clock=clock)
    code = (await pairing.request("telegram", "42", "Ann", "42")).code
    statuses = [(await pairing.approve("telegram", "WRONGCDE")).status for _ in range(5)]
    assert statuses == ["wrong_code"] * 4 + ["locked"]
    assert (await pairing.approve("telegram", code)).status == "locked"  # even the right one
    clock.now += 301
    assert (await pairing.approve("telegram", code)).status == "approved"


async def test_fifty_strangers_racing_for_a_code_get_three_on_every_store(store):
    pairing = Pairing(store)
    results = await asyncio.gather(*(pairing.request("telegram", str(n), f"u{n}", str(n)) for n in range(50)))
    assert [r.status for r in results].count("issued") == 3
    assert len(await pairing.pending("telegram")) == 3


async def test_fifty_guesses_at_once_check_no_more_than_five_codes_on_every_store(store):
    """Each guess first takes one of five attempt places: concurrent guesses cannot all be
    checked before the lock lands, and the right code is locked out with the rest."""
    pairing = Pairing(store)
    code = (await pairing.request("telegram", "42", "Ann", "42")).code
    checked: list[str] = []
    take = pairing._take

    async def counting_take(platform: str, guess: str):  # type: ignore[no-untyped-def]
        checked.append(guess)
        return await take(platform, guess)

    pairing._take = counting_take  # type: ignore[method-assign]
    results = await asyncio.gather(*(pairing.approve("telegram", "WRONGCDE") for _ in range(50)))
    statuses = [r.status for r in results]
    assert len(checked) <= 5
    assert statuses.count("wrong_code") <= 4 and statuses.count("locked") >= 45
    assert (await pairing.approve("telegram", code)).status == "locked"


async def test_a_right_code_gives_its_attempt_place_back():
    pairing = Pairing(MemoryStore())
    for user in ("1", "2", "3"):
        code = (await pairing.request("telegram", user, user, user)).code
        assert (await pairing.approve("telegram", code)).status == "approved"
    for _ in range(4):
        assert (await pairing.approve("telegram", "WRONGCDE")).status == "wrong_code"
    code = (await pairing.request("telegram", "4", "4", "4")).code
    assert (await pairing.approve("telegram", code)).status == "approved"


async def test_wrong_codes_spread_over_more_than_a_minute_do_not_lock():
    clock = Clock()
    pairing = Pairing(MemoryStore(clock=lambda: clock.now), clock=clock)
    for _ in range(8):
        assert (await pairing.approve("telegram", "WRONGCDE")).status == "wrong_code"
        clock.now += 20


async def test_first_cli_approval_claims_ownership_once():
    pairing = Pairing(MemoryStore())
    first = (await pairing.request("telegram", "1", "Ann", "1")).code
    second = (await pairing.request("telegram", "2", "Bob", "2")).code
    assert (await pairing.approve("telegram", first, claim_owner=True)).became_owner
    assert not (await pairing.approve("telegram", second, claim_owner=True)).became_owner
    assert await pairing.owner("telegram") == "1"


async def test_deny_and_revoke():
    pairing = Pairing(MemoryStore())
    code = (await pairing.request("telegram", "1", "Ann", "1")).code
    assert (await pairing.deny("telegram", code)).user_id == "1"
    assert await pairing.pending() == []
    code = (await pairing.request("telegram", "1", "Ann", "1")).code
    await pairing.approve("telegram", code)
    assert await pairing.approved() == [("telegram", "1")]
    assert await pairing.revoke("telegram", "1")
    assert not await pairing.is_approved("telegram", "1")


# --- admission ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "total", "scope", "queued", "action"),
    [
        (AdmissionLimits(), 1000, 1000, 0, "run"),  # unlimited
        (AdmissionLimits(2, overflow="reject"), 1, 1, 0, "run"),
        (AdmissionLimits(2, overflow="reject"), 2, 0, 0, "reject"),
        (AdmissionLimits(2, overflow="queue", queue_depth=2), 2, 0, 1, "wait"),
        (AdmissionLimits(2, overflow="queue", queue_depth=2), 2, 0, 2, "reject"),
        (AdmissionLimits(2, overflow="shed_oldest", queue_depth=2), 2, 0, 1, "wait"),
        (AdmissionLimits(2, overflow="shed_oldest", queue_depth=2), 2, 0, 2, "shed_oldest"),
        # per-scope limit alone
        (AdmissionLimits(0, 1, overflow="reject"), 5, 0, 0, "run"),
        (AdmissionLimits(0, 1, overflow="reject"), 5, 1, 0, "reject"),
        (AdmissionLimits(0, 1, overflow="queue"), 5, 1, 0, "wait"),
        # both: the global limit binds even when the scope has room
        (AdmissionLimits(3, 2, overflow="reject"), 3, 0, 0, "reject"),
        (AdmissionLimits(3, 2, overflow="reject"), 2, 2, 0, "reject"),
        (AdmissionLimits(3, 2, overflow="reject"), 2, 1, 0, "run"),
    ],
)
def test_admission_decisions(limits, total, scope, queued, action):
    assert decide_admission(limits, total, scope, queued) == action


async def test_queue_admits_in_arrival_order_when_slots_free():
    admission = Admission(AdmissionLimits(1, overflow="queue", queue_depth=5))
    order = []

    async def turn(name):
        async with admission.slot("s") as ok:
            order.append((name, ok))
            await asyncio.sleep(0.01)

    await asyncio.gather(*(turn(n) for n in "abcd"))
    assert order == [("a", True), ("b", True), ("c", True), ("d", True)]
    assert admission.running == 0 and admission.queued == 0


async def test_shed_oldest_drops_the_oldest_waiter_for_the_newest():
    admission = Admission(AdmissionLimits(1, overflow="shed_oldest", queue_depth=1))
    assert await admission.acquire("s")
    oldest = asyncio.create_task(admission.acquire("s"))
    await asyncio.sleep(0)
    newest = asyncio.create_task(admission.acquire("s"))
    await asyncio.sleep(0)
    assert await oldest is False
    admission.release("s")
    assert await newest is True


async def test_per_scope_limit_lets_other_scopes_run():
    admission = Admission(AdmissionLimits(0, 1, overflow="queue"))
    assert await admission.acquire("guild-1")
    waiting = asyncio.create_task(admission.acquire("guild-1"))
    await asyncio.sleep(0)
    assert await admission.acquire("guild-2")  # not starved by guild-1's queue
    assert not waiting.done()
    admission.release("guild-1")
    assert await waiting is True
