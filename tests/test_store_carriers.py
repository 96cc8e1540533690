"""The inbound carrier belongs to the store contract: every store hands out its own (memory's
and SQLite's journal, Redis's shared stream), and each one records an item before the
platform is acknowledged, recognises a platform's retry, hands every conversation's items to
their turns in order and each once, forgets an item whose turn is done, and keeps what a
crash cut off for whoever runs next. The `store` fixture runs these against memory, a SQLite
file and a real Redis server alike.

And since every store says what it is, the runtime never asks which one it was given: the
last tests read every runtime module for a check of a store's type."""

import ast
import asyncio
import sys
import time
import uuid
from pathlib import Path

import pytest
from botweave.store import MemoryStore, PatientStore, StoreOutage
from botweave.store.carrier import InboundCarrier
from botweave.types import META_REVISION, PlatformEvent

from tests.support import message

ROOT = Path(__file__).resolve().parent.parent

#: What each backend says of itself: (shared by workers, lives outside the process).
STATED = {"memory": (False, False), "sqlite": (False, True), "redis": (True, True)}


def carrier_of(store) -> InboundCarrier:
    return store.inbound_carrier(dedup_ttl=60, lease=0.5, lock_ttl=0.5)


async def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def answer(carrier: InboundCarrier, expected: int) -> list[str]:
    """Answer what the carrier holds, as a process does, and say what was answered (message
    ids, in the order the turns started): a shared carrier's `run` reads it, in whichever
    worker; otherwise the process answers what is `pending` and marks each `done`."""
    answered: list[str] = []
    if not carrier.shared:
        for entry, item in await carrier.pending():
            answered.append(item.message_id)
            await carrier.done(entry)
        return answered

    async def handle(item) -> None:
        answered.append(item.message_id)

    stop = asyncio.Event()
    running = asyncio.create_task(carrier.run(handle, stop, lambda: 1.0))
    try:

        async def finished() -> bool:
            return len(answered) >= expected and await carrier.backlog() == 0

        await wait_until(finished)
        await asyncio.sleep(0.3)  # a second delivery would show up now
    finally:
        stop.set()
        await running
    return answered


def of(chat: str, answered: list[str]) -> list[str]:
    return [mid for mid in answered if mid.startswith(chat)]


async def test_each_store_hands_out_its_own_carrier_and_says_what_it_is(store, request):
    shared, external = STATED[request.node.callspec.params["store"]]
    assert (store.shared, store.external) == (shared, external)
    assert carrier_of(store).shared is shared
    wrapped = PatientStore(store)  # what the App holds: a wrapper says what its backend says
    assert (wrapped.shared, wrapped.external) == (shared, external)
    assert carrier_of(wrapped).shared is shared


class Away(MemoryStore):
    """A store that is away (every write an outage) until `back` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.back = False

    async def incr(self, key, amount=1, *, ttl=None):
        if not self.back:
            raise StoreOutage("Timeout reading from socket")
        return await super().incr(key, amount, ttl=ttl)


async def test_a_journal_behind_the_apps_wrapper_waits_out_an_outage_like_a_turn():
    inner = Away()
    journal = PatientStore(inner, grace=10).inbound_carrier(dedup_ttl=60, lease=0.5, lock_ttl=0.5)
    recording = asyncio.create_task(journal.record(message("hi", message_id="m1")))
    await asyncio.sleep(0.4)
    assert not recording.done(), "the platform is not acknowledged while the store is away"
    inner.back = True
    assert await asyncio.wait_for(recording, 10) is not None
    assert [item.message_id for _, item in await carrier_of(inner).pending()] == ["m1"]


async def test_an_item_is_recorded_once_however_often_the_platform_retries_it(store):
    carrier = carrier_of(store)
    await carrier.open()
    assert await carrier.record(message("hi", message_id="m1")) is not None
    assert await carrier.record(message("hi", message_id="m1")) is None  # the platform's retry
    edited = message("hi, edited", message_id="m1", metadata={META_REVISION: 2})  # answered anew
    reaction = PlatformEvent(kind="reaction_added", platform="test", chat_id="c1", user_id="u1", emoji="+1", event_id="e1")
    anonymous = PlatformEvent(kind="reaction_added", platform="test", chat_id="c1", user_id="u1", emoji="+1")
    assert await carrier.record(reaction, ordered=False) is not None
    assert await carrier.record(reaction, ordered=False) is None
    # an event without an id cannot be told from its repeat: each is kept
    assert await carrier.record(anonymous, ordered=False) is not None
    assert await carrier.record(anonymous, ordered=False) is not None
    assert await carrier.record(edited) is not None
    assert await carrier.record(edited) is None
    assert await carrier.backlog() == 5


async def test_recorded_items_are_answered_each_once_in_their_conversations_order(store):
    carrier = carrier_of(store)
    await carrier.open()
    for mid in ("a1", "b1", "a2", "b2", "a3", "c1"):
        chat = mid[0]
        await carrier.record(message(f"turn {mid}", message_id=mid, chat_id=chat, user_id=chat))
    answered = await answer(carrier, 6)
    assert sorted(answered) == ["a1", "a2", "a3", "b1", "b2", "c1"], "each once"
    assert of("a", answered) == ["a1", "a2", "a3"] and of("b", answered) == ["b1", "b2"]
    # done is done: nothing is left for this run or the next
    assert await carrier.backlog() == 0
    again = carrier_of(store)
    assert await again.backlog() == 0 and await again.pending() == []


async def test_what_a_run_recorded_and_did_not_answer_is_answered_by_the_next_in_order(store):
    first = carrier_of(store)
    await first.open()
    for mid in ("a1", "b1", "a2"):
        await first.record(message(f"turn {mid}", message_id=mid, chat_id=mid[0], user_id=mid[0]))
    # the first run stops right after acknowledging the platform: nothing of it is answered
    if not first.shared:
        assert [item.message_id for _, item in await first.pending()] == ["a1", "b1", "a2"]
    successor = carrier_of(store)  # the next start, or another worker
    await successor.open()
    answered = await answer(successor, 3)
    assert sorted(answered) == ["a1", "a2", "b1"] and of("a", answered) == ["a1", "a2"]
    assert await carrier_of(store).backlog() == 0


_CRASHING = """
import asyncio, os, sys
from botweave.store import open_store
from botweave.types import BotChannel, BotMessage, BotUser

async def main(url, prefix):
    store = open_store(url, prefix)
    await store.connect()
    carrier = store.inbound_carrier(dedup_ttl=60, lease=0.5, lock_ttl=0.5)
    await carrier.open()
    for mid in ("a1", "a2", "b1"):
        chat = mid[0]
        item = BotMessage(mid, "turn " + mid, BotUser(chat, chat, chat), BotChannel(chat, "dm"), platform="test")
        await carrier.record(item)

    async def handle(item):
        print(item.message_id, flush=True)
        if item.message_id == "a2":
            os._exit(9)  # the process dies in the middle of this turn

    if carrier.shared:
        await carrier.run(handle, asyncio.Event())
    for entry, item in await carrier.pending():
        await handle(item)
        await carrier.done(entry)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_a_process_that_dies_mid_turn_leaves_that_turn_and_the_rest_to_the_next(backend, tmp_path, request):
    """A real crash: the turn it cut off runs again, the one it finished does not."""
    from botweave.store import open_store

    url = f"sqlite:///{tmp_path / 'state.db'}" if backend == "sqlite" else request.getfixturevalue("redis_url")
    prefix = f"crash-{uuid.uuid4().hex[:8]}:"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CRASHING, url, prefix, stdout=asyncio.subprocess.PIPE, cwd=str(tmp_path)
    )
    out, _ = await asyncio.wait_for(child.communicate(), timeout=60)
    assert child.returncode == 9, "the process died mid-turn"
    before = out.decode().split()
    assert "a1" in before and before.index("a1") < before.index("a2")
    store = open_store(url, prefix)
    await store.connect()
    try:
        successor = carrier_of(store)
        await successor.open()
        if not successor.shared:
            # The journal's removal of a finished entry is queued, not awaited (Store.later): a
            # crash may lose it, and then the finished turn is offered again, first and once;
            # its turn's marker keeps it from answering twice (tests/test_deferred_writes.py).
            left = [item.message_id for _, item in await successor.pending()]
            assert left in (["a2", "b1"], ["a1", "a2", "b1"])
            again = await answer(successor, len(left))
            assert "a2" in again, "the turn the crash cut off runs again"
            assert again.count("a1") <= 1
        else:
            # b1 ran to its end before the crash only on a stream (another conversation, at once)
            again = await answer(successor, 2 if "b1" not in before else 1)
            assert "a2" in again, "the turn the crash cut off runs again"
            assert "a1" not in again, "the finished turn does not"
        assert set(before) | set(again) == {"a1", "a2", "b1"}
        assert await carrier_of(store).backlog() == 0
    finally:
        await store.close()


# --- the runtime never asks which store it was given ------------------------------------------


def _class_names(node: ast.expr) -> list[str]:
    """The class names an isinstance's second argument holds: a name, a dotted name, a tuple
    or a union of them."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _class_names(element)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _class_names(node.left) + _class_names(node.right)
    return []


def _called(node: ast.AST, *names: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "") in names


def store_type_checks(source: str) -> list[int]:
    """The lines of `source` that decide by a store's type: `isinstance`/`issubclass` with a
    `...Store` class or on `backend(...)`, `type(...)` compared with a `...Store` class, a
    `case ...Store()` pattern, or any `backend(...)` (reaching behind the store's wrapper is
    only ever done to look at the backend's type)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _called(node, "isinstance", "issubclass") and len(node.args) == 2:
            if any(name.endswith("Store") for name in _class_names(node.args[1])) or _called(node.args[0], "backend"):
                found.append(node.lineno)
        elif isinstance(node, ast.Compare) and _called(node.left, "type"):
            if any(name.endswith("Store") for other in node.comparators for name in _class_names(other)):
                found.append(node.lineno)
        elif isinstance(node, ast.MatchClass) and any(name.endswith("Store") for name in _class_names(node.cls)):
            found.append(node.lineno)
        elif _called(node, "backend"):
            found.append(node.lineno)
    return sorted(set(found))


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("if isinstance(backend(store), RedisStore | MemoryStore): pass", True),
        ("shared = isinstance(store, store_module.RedisStore)", True),
        ("ok = issubclass(kind, (int, SQLiteStore))", True),
        ("ok = isinstance(backend(store), Shared)", True),
        ("inner = backend(store)", True),
        ("ok = type(store) is MemoryStore", True),
        ("match store:\n    case RedisStore():\n        pass", True),
        ("ok = store.shared and isinstance(item, BotMessage)", False),
        ("ok = isinstance(intake, StreamIntake)", False),
        ("ok = type(item) is dict", False),
    ],
)
def test_the_scan_finds_every_way_of_checking_a_stores_type(source, flagged):
    assert bool(store_type_checks(source)) is flagged


def test_no_runtime_module_checks_a_stores_type():
    modules = sorted((ROOT / "runtime").rglob("*.py"))
    assert len(modules) > 20, "the runtime's modules were found"
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in modules
        for line in store_type_checks(path.read_text())
    ]
    assert found == [], "decide by what the store states (shared, external, its inbound carrier), not its type"
