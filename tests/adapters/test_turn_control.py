"""Turn control on Telegram, Discord and Slack through their real SDK clients: /stop, the busy
modes, edit-to-rerun, delete-to-cancel, and the notices that keep a message from vanishing.

The model is the OpenAI emulator behind litellm, streaming its answer a word every 0.1 s, so a
turn is still running while the person acts.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from botweave import App
from botweave.policies.admission import DROPPED_MESSAGE
from botweave.runtime.turn_control import NOTHING_RUNNING, STOPPED
from botweave.runtime.turns import APOLOGY

from tests.adapters.turns import TIMEOUT_S, TURN_DRIVERS, TurnDriver, slow_answer
from tests.emulators.telegram import wait_until

ONE_PROCESS, TWO_WORKERS = "one process", "two workers"
#: A case that holds however the chat is answered: by one process, or by two workers sharing
#: Redis (either may run any turn).
EITHER_DEPLOYMENT = pytest.mark.parametrize("deployment", [ONE_PROCESS, TWO_WORKERS])


@pytest.fixture
def deployment() -> str:
    """How the chat is answered (one process, unless a test says otherwise)."""
    return ONE_PROCESS


@pytest.fixture(params=sorted(TURN_DRIVERS))
async def chat(request: pytest.FixtureRequest, deployment: str) -> AsyncIterator[TurnDriver]:
    driver = TURN_DRIVERS[request.param]()
    if deployment == TWO_WORKERS:
        driver.shared = {"url": request.getfixturevalue("redis_url"), "prefix": f"turns-{uuid.uuid4().hex[:8]}:"}
    await driver.begin()
    try:
        yield driver
    finally:
        await driver.stop()


@EITHER_DEPLOYMENT
async def test_stop_mid_stream_keeps_what_was_shown_marked_and_cancels_the_queue(chat: TurnDriver) -> None:
    await chat.start()
    chat.llm.queue_text(slow_answer())
    await chat.say("tell me a story")
    streamed = await chat.streaming()
    await chat.say("and another one")  # queued behind the story: /stop ends it too
    await chat.say("/stop")
    await chat.idle()
    posts = dict(chat.bot_posts())
    assert posts[streamed].endswith("(stopped)"), posts[streamed]
    assert "story39" not in posts[streamed]  # it really stopped mid-way
    assert STOPPED in posts.values()
    assert len(chat.llm.requests) == 1, "the queued message never reached the model"
    chat.llm.queue_text("fine")
    await chat.say("what did you say?")
    await chat.idle()
    # history keeps the stopped exchange, marked; the cancelled queued message is not in it
    assert chat.user_turns() == ["tell me a story", "what did you say?"]
    assert chat.assistant_turns()[0].endswith("(stopped)")


async def test_stop_with_nothing_running_says_so(chat: TurnDriver) -> None:
    await chat.start()
    await chat.say("/stop")
    await chat.idle()
    assert chat.texts() == [NOTHING_RUNNING]


async def test_in_a_group_only_the_requester_or_the_owner_stops_a_turn(chat: TurnDriver) -> None:
    await chat.start()
    chat.llm.queue_text(slow_answer())
    await chat.say("tell me a story", group=True, who="alice")
    await chat.streaming(group=True)
    await chat.say("/stop", group=True, who="bob")
    await wait_until(lambda: any("Only" in t for t in chat.texts(group=True)), TIMEOUT_S, "the refusal")
    refusal = next(t for t in chat.texts(group=True) if "Only" in t)
    assert "Alice" in refusal
    await chat.say("/stop", group=True, who="alice")
    await chat.idle()
    story = chat.texts(group=True)[0]
    assert story.endswith("(stopped)") and "story39" not in story


@EITHER_DEPLOYMENT
async def test_interrupt_cancels_the_running_turn_and_the_next_sees_both(chat: TurnDriver) -> None:
    await chat.start(busy_mode="interrupt")
    chat.llm.queue_text(slow_answer())
    await chat.say("tell me a story")
    streamed = await chat.streaming()
    chat.llm.queue_text("about cats then")
    await chat.say("actually, about cats")
    await chat.idle()
    assert dict(chat.bot_posts())[streamed].endswith("(interrupted)")
    assert len(chat.llm.requests) == 2
    assert chat.user_turns() == ["tell me a story", "actually, about cats"]
    assert chat.texts()[-1].strip() == "about cats then"


async def test_a_stranger_cannot_interrupt_someone_elses_turn(chat: TurnDriver) -> None:
    config = chat.config(busy_mode="interrupt", owner_user_id=chat.user_id("alice"))
    config["bot"]["unknown_user_policy"] = config["platforms"][chat.name]["unknown_user_policy"] = "deny"
    await chat.start(config)
    chat.llm.queue_text(slow_answer())
    await chat.say("tell me a story", group=True, who="alice")
    streamed = await chat.streaming(group=True)
    await chat.say("stop that and listen to me", group=True, who="bob")
    await chat.idle()
    story = dict(chat.bot_posts(group=True))[streamed]
    assert not story.endswith("(interrupted)") and "story39" in story, story
    assert len(chat.llm.requests) == 1, "the stranger's message never reached the model"


@EITHER_DEPLOYMENT
async def test_collect_answers_the_messages_that_came_meanwhile_together(chat: TurnDriver) -> None:
    await chat.start(busy_mode="collect")
    chat.llm.queue_text(slow_answer(), chunk_delay=0.05)
    await chat.say("first question")
    await chat.streaming()
    chat.llm.queue_text("both answered")
    await chat.say("second question")
    await chat.say("third question")
    await chat.idle()
    assert len(chat.llm.requests) == 2, "the two messages that came meanwhile got one turn"
    assert chat.user_turns() == ["first question", "second question", "third question"]
    texts = chat.texts()
    assert texts[0].strip().endswith("story39") and [t.strip() for t in texts[1:]] == ["both answered"]


async def test_an_edit_while_the_turn_runs_answers_the_new_text_in_the_same_message(chat: TurnDriver) -> None:
    await chat.start()
    chat.llm.queue_text(slow_answer())
    asked = await chat.say("tell me a story about dogs")
    streamed = await chat.streaming()
    chat.llm.queue_text("a story about cats")
    await chat.edit(asked, "tell me a story about cats")
    await chat.idle()
    assert [(i, t.strip()) for i, t in chat.bot_posts()] == [(streamed, "a story about cats")]
    assert len(chat.llm.requests) == 2
    assert chat.user_turns() == ["tell me a story about cats"]
    chat.llm.queue_text("ok")
    await chat.say("thanks")
    await chat.idle()
    # history holds the edited exchange only
    assert chat.user_turns() == ["tell me a story about cats", "thanks"]
    assert [t.strip() for t in chat.assistant_turns()] == ["a story about cats"]


@EITHER_DEPLOYMENT
async def test_an_edit_soon_after_the_reply_answers_again_into_the_earlier_reply(chat: TurnDriver) -> None:
    await chat.start(streaming=False)
    chat.llm.queue_text("two")
    asked = await chat.say("what is 1+1?")
    await chat.idle()
    [(reply_id, text)] = chat.bot_posts()
    assert text == "two"
    sends = chat.sends()
    chat.llm.queue_text("three")
    await chat.edit(asked, "what is 1+2?")
    await wait_until(lambda: chat.bot_posts() == [(reply_id, "three")], TIMEOUT_S, "the reply edited in place")
    await chat.idle()
    assert chat.sends() == sends, "nothing new was posted"
    chat.llm.queue_text("ok")
    await chat.say("thanks")
    await chat.idle()
    assert chat.user_turns() == ["what is 1+2?", "thanks"]
    assert chat.assistant_turns() == ["three"]


async def test_an_edit_after_the_rerun_window_is_left_alone(chat: TurnDriver) -> None:
    await chat.start(streaming=False, rerun_window_seconds=0.5)
    chat.llm.queue_text("two")
    asked = await chat.say("what is 1+1?")
    await chat.idle()
    await asyncio.sleep(0.8)
    await chat.edit(asked, "what is 1+2?")
    await chat.idle()
    assert chat.texts() == ["two"] and len(chat.llm.requests) == 1


async def test_deleting_a_queued_message_cancels_its_turn(chat: TurnDriver) -> None:
    if not chat.deletes:
        pytest.skip(f"{chat.name} does not report deletions")
    await chat.start()
    # 2.4 s of streaming: longer than any platform's edit floor (Teams: 1.5 s), so the answer
    # still runs when it first shows a few words
    chat.llm.queue_text(slow_answer(), chunk_delay=0.06)
    await chat.say("first")
    await chat.streaming()
    queued = await chat.say("second")
    await chat.delete(queued)
    await chat.idle()
    assert len(chat.llm.requests) == 1
    assert chat.user_turns() == ["first"]
    assert len(chat.bot_posts()) == 1


async def test_deleting_a_running_message_cancels_its_turn_and_its_partial_answer(chat: TurnDriver) -> None:
    if not chat.deletes:
        pytest.skip(f"{chat.name} does not report deletions")
    await chat.start()
    chat.llm.queue_text(slow_answer())
    asked = await chat.say("tell me a story")
    await chat.streaming()
    await chat.delete(asked)
    await chat.idle()
    assert chat.bot_posts() == []
    chat.llm.queue_text("hi")
    await chat.say("hello")
    await chat.idle()
    assert chat.user_turns() == ["hello"], "the deleted exchange is not in history"


@EITHER_DEPLOYMENT
async def test_a_message_handed_over_long_after_it_was_sent_gets_one_notice(chat: TurnDriver) -> None:
    await chat.start()
    await chat.say("are you there?", age=3600)
    await chat.idle()
    [notice] = chat.texts()
    assert "offline" in notice and "1 h" in notice
    assert chat.llm.requests == []


async def test_admission_refusal_and_a_full_queue_each_tell_their_sender(chat: TurnDriver) -> None:
    await chat.start(config={
        **chat.config(streaming=False),
        "admission": {"max_concurrent_turns": 1, "overflow": "shed_oldest", "queue_depth": 1},
    })
    chat.llm.delay = 1.0
    await chat.say("one", group=True, who="alice")
    await wait_until(lambda: len(chat.llm.requests) == 1, TIMEOUT_S, "the first turn to run")
    await chat.say("two")  # waits in the queue (Alice's DM: another conversation)
    await chat.say("three", who="bob")  # Bob's DM, a third conversation: pushes "two" out
    await chat.idle()
    assert DROPPED_MESSAGE in chat.texts()
    assert chat.texts().count(DROPPED_MESSAGE) == 1


@EITHER_DEPLOYMENT
async def test_a_turn_whose_model_fails_after_retries_tells_its_sender_once(chat: TurnDriver) -> None:
    await chat.start()
    chat.llm.fail_with = 500
    await chat.say("hello")
    await chat.idle()
    [notice] = chat.texts()
    assert notice == APOLOGY


# --- several workers on Redis: the signal reaches the turn whichever worker runs it ------------


def shared(chat: TurnDriver, redis_url: str, **bot: object) -> dict:
    return chat.config(**bot) | {"store": {"url": redis_url, "prefix": f"turns-{uuid.uuid4().hex[:8]}:"}}


def _record_handled(app: App, seen: list) -> None:
    handle = app.handle

    async def recording(item, **options):  # type: ignore[no-untyped-def]
        seen.append(item)
        return await handle(item, **options)

    app.handle = recording  # type: ignore[method-assign]


async def test_stop_reaches_a_turn_running_on_another_worker(chat: TurnDriver, redis_url: str) -> None:
    config = shared(chat, redis_url)
    await chat.start(config, role="ingress")
    first = await chat.start(config, role="worker")
    assert first.stream is not None
    first.stream.concurrency = 1  # busy with the story, it reads nothing more
    on_first: list = []
    _record_handled(first, on_first)
    chat.llm.queue_text(slow_answer())
    await chat.say("tell me a story")
    streamed = await chat.streaming()
    second = await chat.start(config, role="worker")
    on_second: list = []
    _record_handled(second, on_second)
    await chat.say("/stop")
    await chat.idle()
    assert [getattr(i, "text", None) for i in on_second] == ["/stop"], "the second worker handled the /stop"
    assert [getattr(i, "text", None) for i in on_first] == ["tell me a story"]
    posts = dict(chat.bot_posts())
    assert posts[streamed].endswith("(stopped)") and "story39" not in posts[streamed]
    assert STOPPED in posts.values()


async def test_an_edit_reaches_a_turn_running_on_another_worker(chat: TurnDriver, redis_url: str) -> None:
    config = shared(chat, redis_url)
    await chat.start(config, role="ingress")
    first = await chat.start(config, role="worker")
    assert first.stream is not None
    first.stream.concurrency = 1
    chat.llm.queue_text(slow_answer())
    asked = await chat.say("tell me a story about dogs")
    streamed = await chat.streaming()
    second = await chat.start(config, role="worker")
    on_second: list = []
    _record_handled(second, on_second)
    chat.llm.queue_text("a story about cats")
    await chat.edit(asked, "tell me a story about cats")
    await chat.idle()
    assert [getattr(i, "kind", None) for i in on_second] == ["message_edited"]
    assert [(i, t.strip()) for i, t in chat.bot_posts()] == [(streamed, "a story about cats")]
    assert chat.user_turns() == ["tell me a story about cats"]


async def test_a_delete_reaches_a_turn_running_on_another_worker(chat: TurnDriver, redis_url: str) -> None:
    if not chat.deletes:
        pytest.skip(f"{chat.name} does not report deletions")
    config = shared(chat, redis_url)
    await chat.start(config, role="ingress")
    first = await chat.start(config, role="worker")
    assert first.stream is not None
    first.stream.concurrency = 1
    chat.llm.queue_text(slow_answer())
    asked = await chat.say("tell me a story")
    await chat.streaming()
    await chat.start(config, role="worker")
    await chat.delete(asked)
    await chat.idle()
    assert chat.bot_posts() == []


# --- a restart: what was stopped is not answered after all ---------------------------------------


async def test_a_stopped_queue_is_not_replayed_after_a_restart(chat: TurnDriver, tmp_path) -> None:
    config = chat.config() | {"store": {"url": f"sqlite:///{tmp_path / 'state.db'}"}}
    app = await chat.start(config)
    chat.llm.queue_text(slow_answer())
    await chat.say("tell me a story")
    await chat.streaming()
    await chat.say("and another")
    await chat.say("/stop")
    await wait_until(lambda: STOPPED in chat.texts(), TIMEOUT_S, "the stop to be confirmed")
    await app.stop(timeout=0)  # whatever is left in the journal stays there
    chat.apps.remove(app)
    before = chat.texts()
    await chat.start(config)
    await asyncio.sleep(1.0)
    await chat.idle()
    assert len(chat.llm.requests) == 1, "nothing stopped ran after the restart"
    # Telegram has no idempotency key: a confirmation cut off by the stop may be sent again
    # (at least once); nothing else is new.
    assert [t for t in chat.texts() if t != STOPPED] == [t for t in before if t != STOPPED]
