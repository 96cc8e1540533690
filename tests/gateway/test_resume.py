"""Events that are never lost and never twice, in one process: a client cut off mid-stream
resumes from its last seq, a client that stops reading is closed as slow and resumes, a
cursor older than the log gets a resync. Counted on raw frames, so what is measured is what
the server sent (the Python client would drop a repeat itself)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botweave import App
from botweave.metrics import REGISTRY

from tests.emulators.openai import OpenAIEmulator, Reply
from tests.emulators.telegram import wait_until
from tests.gateway.support import TOKENS, Raw, client, config


def counted(name: str) -> float:
    return REGISTRY.get_sample_value(f"botweave_gateway_{name}_total") or 0.0


def lost_and_twice(received: list[int], expected: range) -> tuple[int, int]:
    """How many of the `expected` seqs never arrived, and how many arrived more than once."""
    return len(set(expected) - set(received)), len(received) - len(set(received))


async def log_head(app: App, conversation: str) -> int:
    assert app.events is not None
    return await app.events.head(conversation)


async def read_until(ws: Raw, conversation: str, done: Any, seqs: list[int], timeout: float = 30) -> list[dict[str, Any]]:
    """Frames of `conversation` (their seqs into `seqs`) until `done(frame)`; the frames."""
    frames = []
    async with asyncio.timeout(timeout):
        while True:
            frame = await ws.next(timeout)
            assert frame is not None, f"closed ({ws.close_code}) before the end"
            if frame.get("conversation") == conversation:
                seqs.append(frame["seq"])
                frames.append(frame)
                if done(frame):
                    return frames


async def test_a_client_cut_off_mid_stream_resumes_with_nothing_lost_or_repeated(start_app, llm: OpenAIEmulator) -> None:
    app = await start_app(config(llm))
    llm.queue(Reply(text=" ".join(f"word{n}" for n in range(80)), chunk_delay=0.03))
    async with client(app) as ann:
        session = await ann.create_session()
        conversation = f"web:{session}"
        received: list[int] = []
        first = Raw(app.gateway.url)
        await first.__aenter__()
        await first.connect(TOKENS["ann"], resume={conversation: 0})
        message_id = await ann.send(session, "a long story, please")
        frames = await read_until(first, conversation, lambda f: f["event"] == "delta" and len(received) >= 12, received)
        assert frames[0]["event"] == "message" and frames[0]["seq"] == 1
        assert first.http is not None
        await first.http.close()  # gone without a goodbye, the stream still running
        async with Raw(app.gateway.url) as second:
            answer = await second.connect(TOKENS["ann"], resume={conversation: received[-1]})
            assert answer["result"]["resumed"][conversation] >= received[-1]
            await read_until(second, conversation, lambda f: f["event"] == "final" and f["data"]["message_id"] == message_id,
                             received)
    head = await log_head(app, conversation)
    assert received[-1] == head
    assert lost_and_twice(received, range(1, head + 1)) == (0, 0)


async def test_a_client_that_stops_reading_is_closed_as_slow_and_resumes_everything(start_app, llm: OpenAIEmulator) -> None:
    app = await start_app(config(llm, gateway={"max_buffered": 50, "event_log_size": 5000}))
    assert app.events is not None
    conversation = "telegram:-100777"  # any conversation: reading needs only the read scope
    received: list[int] = []
    closed_before, resumed_before = counted("slow_consumer_closes"), counted("resumes")
    slow = Raw(app.gateway.url)
    await slow.__aenter__()
    await slow.connect(TOKENS["eve"], resume={conversation: 0})
    padding = "x" * 8000
    total = 3000
    for n in range(total):  # the client reads none of it: the socket fills, then its queue
        await app.events.publish(conversation, "message", {"id": str(n), "text": padding})
        await asyncio.sleep(0)  # as turns do between their events: the writer gets its turn
    assert app.gateway is not None
    await wait_until(lambda: not app.gateway.hub.connections, 30, "the slow client to be closed")
    while True:  # what made it into the socket before the close is still delivered, in order
        frame = await slow.next(10)
        if frame is None:
            break
        if frame.get("conversation") == conversation:
            received.append(frame["seq"])
    assert slow.close_code in (4008, 1006), slow.close_code
    assert received and received[-1] < total, "it was closed long before the end"
    await slow.__aexit__()
    async with Raw(app.gateway.url) as again:
        await again.connect(TOKENS["eve"], resume={conversation: received[-1]})
        await read_until(again, conversation, lambda f: f["seq"] == total, received, timeout=60)
    assert lost_and_twice(received, range(1, total + 1)) == (0, 0)
    assert counted("slow_consumer_closes") == closed_before + 1 and counted("resumes") == resumed_before + 2


async def test_a_cursor_older_than_the_log_gets_a_resync_then_goes_on(start_app, llm: OpenAIEmulator) -> None:
    app = await start_app(config(llm, gateway={"event_log_size": 10}))
    assert app.events is not None
    async with client(app) as ann:
        session = await ann.create_session()
        conversation = f"web:{session}"
        for n in range(8):
            await ann.send(session, f"message {n}")
            await ann.next_event(where=lambda e: e.event == "final" and e.data["text"])
    head = await log_head(app, conversation)
    assert head > 20
    resyncs = counted("resyncs")
    async with Raw(app.gateway.url) as late:
        await late.connect(TOKENS["ann"], resume={conversation: 3})
        resync = await late.event()
        assert resync is not None and resync["event"] == "resync"
        assert resync["conversation"] == conversation and resync["seq"] == head == resync["data"]["seq"]
        texts = [m["text"] for m in resync["data"]["messages"] if m["author"]["kind"] == "user"]
        assert texts == [f"message {n}" for n in range(8)]
        await app.events.publish(conversation, "message", {"id": "x", "text": "after the resync"})
        after = await late.event()
        assert after is not None and after["seq"] == head + 1
    assert counted("resyncs") == resyncs + 1


async def test_a_cursor_ahead_of_the_store_gets_a_resync_rather_than_silence(start_app, llm: OpenAIEmulator) -> None:
    """A client that resumes from a number this store never gave (the store was replaced):
    it is told where the conversation stands instead of waiting for seq 1000 forever."""
    app = await start_app(config(llm))
    assert app.events is not None
    await app.events.publish("web:elsewhere", "message", {"id": "1", "text": "one"})
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["root"], resume={"web:elsewhere": 1000})
        resync = await ws.event()
        assert resync is not None and resync["event"] == "resync" and resync["seq"] == 1


@pytest.mark.parametrize("writers", [1, 8])
async def test_events_from_many_writers_reach_a_follower_once_and_in_order(start_app, llm: OpenAIEmulator, writers: int) -> None:
    app = await start_app(config(llm))
    assert app.events is not None
    events = app.events
    received: list[int] = []
    async with Raw(app.gateway.url) as ws:
        await ws.connect(TOKENS["eve"], resume={"discord:1": 0})

        async def write(writer: int) -> None:
            for n in range(50):
                await events.publish("discord:1", "message", {"id": f"{writer}-{n}", "text": "hi"})

        await asyncio.gather(*(write(w) for w in range(writers)))
        await read_until(ws, "discord:1", lambda f: f["seq"] == 50 * writers, received)
    assert received == list(range(1, 50 * writers + 1))
