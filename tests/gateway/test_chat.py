"""Web chat through the Python client, against the real runtime and a loopback model: sessions,
streamed answers, idempotent sends, turn control (stop, edit, delete), tools, files, history,
shares, presence and health."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from botweave import App
from botweave.gateway import Client, GatewayError
from botweave.version import __version__

from tests.emulators.openai import OpenAIEmulator, Reply, tool_call
from tests.emulators.telegram import png_bytes, wait_until
from tests.gateway.support import TOKENS, answer_of, client, collect, config, has


@pytest.fixture
async def app(start_app, llm) -> App:
    return await start_app(config(llm))


def words(text: str) -> str:
    return " ".join(text.split())


async def test_a_message_streams_its_answer_and_both_are_kept(app: App, llm: OpenAIEmulator) -> None:
    llm.queue(Reply(text="The capital of France is Paris.", chunks=6, chunk_delay=0.05))  # the model's pace
    async with client(app) as ann:
        session = await ann.create_session("geography")
        message_id = await ann.send(session, "What is the capital of France?")
        events = []
        while not events or events[-1].event != "final":
            events.append(await ann.next_event(where=lambda e: e.event != "presence"))
    conversation = f"web:{session}"
    assert all(e.conversation == conversation for e in events)
    seqs = [e.seq for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "one number after the other"
    first = events[0]
    assert first.event == "message" and first.data["id"] == message_id
    assert first.data["author"] == {"kind": "user", "id": "ann", "name": "ann"}
    deltas = [e.data["text"] for e in events if e.event == "delta"]
    assert len(deltas) == 6 and "".join(deltas) == "The capital of France is Paris."
    assert {e.data["run_id"] for e in events if e.event in ("delta", "final")} == {events[-1].data["run_id"]}
    final = events[-1].data
    assert final["text"] == "The capital of France is Paris." and final["message_id"] == message_id
    bot = [e.data for e in events if e.event == "message" and e.data["author"]["kind"] == "bot"]
    assert bot and bot[-1]["id"] == final["reply_ids"][0] and bot[-1]["text"] == final["text"]
    assert llm.last_user_text() == "What is the capital of France?"
    async with client(app) as again:
        history = await again.call("chat.history", {"conversation": conversation})
    assert [(m["author"]["kind"], m["text"]) for m in history["messages"]] == [
        ("user", "What is the capital of France?"), ("bot", "The capital of France is Paris."),
    ]
    assert history["seq"] == events[-1].seq and history["more"] is False


async def test_the_same_idempotency_key_runs_once_even_after_a_reconnect(app: App, llm: OpenAIEmulator) -> None:
    async with client(app) as ann:
        session = await ann.create_session()
        first = await ann.send(session, "count me once", idempotency_key="key-1")
        await answer_of(ann, first)
    async with client(app) as ann:  # a reconnect: the client did not hear the answer, say
        again = await ann.send(session, "count me once", idempotency_key="key-1")
        other = await ann.send(session, "and me", idempotency_key="key-2")
        await answer_of(ann, other)
        history = await ann.call("chat.history", {"conversation": f"web:{session}"})
    assert again == first and other != first
    assert len(llm.requests) == 2, "the resent message was not answered twice"
    assert [m["text"] for m in history["messages"] if m["author"]["kind"] == "user"] == ["count me once", "and me"]


async def test_sessions_belong_to_their_principal(app: App) -> None:
    async with client(app, "ann") as ann, client(app, "bob") as bob, client(app, "root") as root:
        mine = await ann.create_session("mine")
        await ann.call("sessions.create", {"title": "second"})
        listed = (await ann.call("sessions.list"))["sessions"]
        assert sorted(s["title"] for s in listed) == ["mine", "second"]
        assert (await bob.call("sessions.list"))["sessions"] == []
        for method, params in (
            ("chat.send", {"session": mine, "text": "hi", "idempotency_key": "k"}),
            ("sessions.rename", {"session": mine, "title": "stolen"}),
            ("chat.history", {"conversation": f"web:{mine}"}),
            ("subscribe", {"conversation": f"web:{mine}"}),
        ):
            with pytest.raises(GatewayError) as refused:
                await bob.call(method, params)
            assert refused.value.code == "forbidden", method
        renamed = await root.call("sessions.rename", {"session": mine, "title": "renamed by an admin"})
        assert renamed["session"]["title"] == "renamed by an admin"
        with pytest.raises(GatewayError) as unknown:
            await ann.call("sessions.create", {"agent": "nobody"})
        assert unknown.value.code == "bad_request" and "helper" in unknown.value.message
        await ann.call("sessions.delete", {"session": mine})
        assert [s["title"] for s in (await ann.call("sessions.list"))["sessions"]] == ["second"]
        with pytest.raises(GatewayError) as gone:
            await ann.call("chat.send", {"session": mine, "text": "hi", "idempotency_key": "k"})
        assert gone.value.code == "not_found"


async def test_the_agents_a_session_may_talk_to_are_listed_to_pick_from(start_app, llm: OpenAIEmulator) -> None:
    model = {"model": "openai/gpt-4o-mini", "api_base": llm.base_url, "api_key": "sk-test"}
    app = await start_app(config(llm, agents={"helper": model, "critic": model}))
    async with client(app, "eve") as eve, client(app, "ann") as ann:
        assert await eve.call("agents.list") == {"agents": [{"name": "helper"}, {"name": "critic"}]}, "read is enough"
        picked = (await ann.call("agents.list"))["agents"][1]["name"]
        session = (await ann.call("sessions.create", {"agent": picked}))["session"]
    assert session["agent"] == "critic"


async def test_stop_cuts_the_running_answer_short_like_slash_stop(app: App, llm: OpenAIEmulator) -> None:
    llm.queue(Reply(text=" ".join(f"word{n}" for n in range(60)), chunk_delay=0.05))
    async with client(app) as ann:
        session = await ann.create_session()
        message_id = await ann.send(session, "tell me a long story")
        await ann.next_event(where=lambda e: e.event == "delta")
        await ann.stop(session)
        events = await collect(ann, lambda seen: has(seen, "stopped") and has(seen, "message", text="Stopped."))
        stopped = next(e for e in events if e.event == "stopped")
        assert stopped.data["reason"] == "stopped" and stopped.data["message_id"] == message_id
        said = next(e for e in events if e.event == "message" and e.data["text"] == "Stopped.")
        assert said.data["author"]["kind"] == "bot"
        history = (await ann.call("chat.history", {"conversation": f"web:{session}"}))["messages"]
    streamed = [m for m in history if m["author"]["kind"] == "bot" and m["text"].startswith("word0")]
    assert len(streamed) == 1 and streamed[0]["text"].endswith("(stopped)")
    assert "word59" not in streamed[0]["text"]


async def test_stop_is_turn_control_and_never_a_message_of_the_person(app: App, llm: OpenAIEmulator) -> None:
    llm.queue(Reply(text=" ".join(f"word{n}" for n in range(60)), chunk_delay=0.05))
    async with client(app) as ann, client(app, "root") as watcher:
        session = await ann.create_session()
        await watcher.subscribe(f"web:{session}")
        await ann.send(session, "tell me a long story")
        await ann.next_event(where=lambda e: e.event == "delta")
        stop_id = (await ann.call("chat.stop", {"session": session}))["message_id"]
        events = await collect(watcher, lambda seen: has(seen, "message", text="Stopped."))
        history = (await ann.call("chat.history", {"conversation": f"web:{session}"}))["messages"]
    people = [e.data["text"] for e in events if e.event == "message" and e.data["author"]["kind"] == "user"]
    assert people == ["tell me a long story"], "a watcher sees what the person said, not the stop"
    assert [m["text"] for m in history if m["author"]["kind"] == "user"] == ["tell me a long story"]
    said = next(m for m in history if m["text"] == "Stopped.")
    assert said["author"]["kind"] == "bot" and said["reply_to"] == stop_id


async def test_an_edit_while_the_answer_runs_answers_the_new_text_instead(app: App, llm: OpenAIEmulator) -> None:
    llm.queue(Reply(text=" ".join(f"old{n}" for n in range(60)), chunk_delay=0.05), "the new answer")
    async with client(app) as ann:
        session = await ann.create_session()
        message_id = await ann.send(session, "first version")
        await ann.next_event(where=lambda e: e.event == "delta")
        await ann.call("chat.edit", {"session": session, "message_id": message_id, "text": "second version"})
        events = await collect(ann, lambda seen: has(seen, "final", message_id=message_id))
        stopped = next(e for e in events if e.event == "stopped")
        final = events[-1]
        assert stopped.data["reason"] == "edited" and final.data["run_id"] != stopped.data["run_id"]
        assert final.data["text"].strip() == "the new answer"
        history = (await ann.call("chat.history", {"conversation": f"web:{session}"}))["messages"]
    assert llm.last_user_text() == "second version"
    assert [(m["author"]["kind"], m["text"].strip(), m["edited"]) for m in history] == [
        ("user", "second version", True), ("bot", "the new answer", False),
    ]


async def test_deleting_the_message_cancels_its_answer(app: App, llm: OpenAIEmulator) -> None:
    llm.queue(Reply(text=" ".join(f"w{n}" for n in range(60)), chunk_delay=0.05))
    async with client(app) as ann:
        session = await ann.create_session()
        message_id = await ann.send(session, "never mind this")
        await ann.next_event(where=lambda e: e.event == "delta")
        await ann.call("chat.delete", {"session": session, "message_id": message_id})
        events = await collect(ann, lambda seen: has(seen, "stopped") and any(
            e.event == "message" and e.data["author"]["kind"] == "bot" and e.data["deleted"] for e in seen))
        assert [e.data["reason"] for e in events if e.event == "stopped"] == ["deleted"]
        history = (await ann.call("chat.history", {"conversation": f"web:{session}"}))["messages"]
    assert [m["deleted"] for m in history] == [True, True], "the question and the streamed part are gone"


async def test_tool_events_carry_the_status_of_each_call_with_its_arguments_masked(start_app, llm: OpenAIEmulator) -> None:
    app = await start_app(config(llm, agents={"helper": {
        "model": "openai/gpt-4o-mini", "api_base": llm.base_url, "api_key": "sk-test",
        "tools": [{"python": "tests.approvaldemo:transfer"}],
    }}))
    llm.queue(Reply(tool_calls=[tool_call("transfer", {"amount": 5, "to": "Bob", "api_key": "sk-live-abcdefghijkl"}),
                                tool_call("no_such_tool", {})]), "Sent.")
    async with client(app) as ann:
        session = await ann.create_session()
        message_id = await ann.send(session, "pay Bob 5")
        events = await collect(ann, lambda seen: has(seen, "final", message_id=message_id))
        history = (await ann.call("chat.history", {"conversation": f"web:{session}"}))["messages"]
    tools = [e.data for e in events if e.event == "tool"]
    statuses = [(t["name"], t["status"]) for t in tools]
    assert statuses.index(("transfer", "started")) < statuses.index(("transfer", "done"))
    assert ("no_such_tool", "failed") in statuses
    assert all(t["message_id"] == message_id and t["run_id"] == events[-1].data["run_id"] for t in tools)
    transfer = [t for t in tools if t["name"] == "transfer"]
    assert all(t["arguments"] == {"amount": 5, "to": "Bob", "api_key": "***"} for t in transfer)
    assert "sk-live" not in json.dumps([e.data for e in events])
    assert events[-1].data["text"].strip() == "Sent." and history[-1]["text"].strip() == "Sent."


async def test_an_uploaded_image_reaches_the_agent_and_a_document_is_read(app: App, llm: OpenAIEmulator) -> None:
    picture = png_bytes(6, 4)
    async with client(app) as ann:
        session = await ann.create_session()
        image = await ann.upload(picture, "cat.png", "image/png")
        document = await ann.upload(b"Quarterly numbers\nrevenue: 42\n", "report.txt", "text/plain")
        message_id = await ann.send(session, "what do you see?", attachments=[image, document])
        await answer_of(ann, message_id)
        history = (await ann.call("chat.history", {"conversation": f"web:{session}"}))["messages"]
    assert llm.images() == [picture]
    assert "revenue: 42" in llm.last_user_text()
    assert [a["filename"] for a in history[0]["attachments"]] == ["cat.png", "report.txt"]


async def test_files_are_served_to_who_may_see_them_and_uploads_keep_the_limits(start_app, llm: OpenAIEmulator) -> None:
    app = await start_app(config(llm, media={"max_bytes": 1000, "allow_mime": ["image/*", "text/*"]}))
    base = app.gateway.url.replace("ws://", "http://").removesuffix("/ws")
    async with client(app) as ann:
        file_id = await ann.upload(b"hello file", "note.txt", "text/plain")
        for too_much, code in ((b"x" * 2000, "too_large"), (b"%PDF-1.4 not allowed", "bad_request")):
            with pytest.raises(GatewayError) as refused:
                await ann.upload(too_much, "x.pdf", "application/pdf")
            assert refused.value.code == code
    async with aiohttp.ClientSession() as http:

        async def fetch(token: str | None) -> tuple[int, bytes, dict[str, str]]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with http.get(f"{base}/files/{file_id}", headers=headers) as response:
                return response.status, await response.read(), dict(response.headers)

        status, body, headers = await fetch(TOKENS["ann"])
        assert (status, body) == (200, b"hello file")
        assert headers["X-Content-Type-Options"] == "nosniff" and headers["Content-Disposition"].startswith("attachment")
        assert (await fetch(TOKENS["bob"]))[0] == 404, "another principal's upload is not theirs to see"
        assert (await fetch(TOKENS["root"]))[0] == 200
        assert (await fetch(None))[0] == 401
        assert (await fetch("wrong-token-0123456789"))[0] == 401
        async with http.post(f"{base}/uploads", data=b"x", headers={"Authorization": f"Bearer {TOKENS['eve']}"}) as response:
            assert response.status == 403, "uploading needs write"


async def test_a_share_reads_one_session_until_it_is_revoked(app: App, llm: OpenAIEmulator) -> None:
    async with client(app) as ann:
        session = await ann.create_session("shared")
        private = await ann.create_session("private")
        await answer_of(ann, await ann.send(session, "hello"))
        share = await ann.call("shares.create", {"session": session, "expires_seconds": 600})
        assert share["token"].startswith("bws_") and share["session"] == session
        async with Client(app.gateway.url, share["token"], reconnect=False) as viewer:
            assert viewer.welcome["principal"]["kind"] == "share" and viewer.welcome["scopes"] == ["read"]
            assert [s["id"] for s in (await viewer.call("sessions.list"))["sessions"]] == [session]
            history = await viewer.call("chat.history", {"conversation": f"web:{session}"})
            assert [m["text"] for m in history["messages"]][0] == "hello"
            for method, params in (
                ("chat.history", {"conversation": f"web:{private}"}),
                ("chat.send", {"session": session, "text": "x", "idempotency_key": "k"}),
            ):
                with pytest.raises(GatewayError) as refused:
                    await viewer.call(method, params)
                assert refused.value.code == "forbidden"
            await ann.call("shares.revoke", {"share_id": share["share_id"]})
            await wait_until(lambda: viewer.close_code is not None, 5, "the share's connection to close")
            assert viewer.close_code == 4010
        with pytest.raises(GatewayError) as revoked:
            async with Client(app.gateway.url, share["token"], reconnect=False):
                pass
        assert revoked.value.code == "unauthorized"
        with pytest.raises(GatewayError) as too_long:
            await ann.call("shares.create", {"session": session, "expires_seconds": 30 * 24 * 3600})
        assert too_long.value.code == "bad_request"


async def test_presence_and_health(app: App) -> None:
    async with client(app, "ann") as ann:
        async with client(app, "eve", name="dashboard") as eve:
            came = await ann.next_event(where=lambda e: e.event == "presence" and any(
                p["principal"]["name"] == "eve" for p in e.data["joined"]))
            assert came.seq is None and came.conversation is None
            (joined,) = [p for p in came.data["joined"] if p["principal"]["name"] == "eve"]
            assert joined["client"]["name"] == "dashboard"
            eve_id = joined["conn_id"]
            listed = (await eve.call("presence"))["connections"]
            assert {c["principal"]["name"] for c in listed} == {"ann", "eve"}
            assert {c["client"]["name"] for c in listed} == {"botweave-python", "dashboard"}
        went = await ann.next_event(where=lambda e: e.event == "presence" and e.data["left"])
        assert went.data["left"] == [eve_id]
        health = await ann.call("health")
        assert health == {
            "status": "ok", "failing": {}, "config": {"revision": app.revision},
            "agents": [{"name": "helper", "model": "openai/gpt-4o-mini"}],
            "platforms": {"web": "connected"},
            "store": "memory:// (in this process; gone when it stops)",
            "uptime_seconds": health["uptime_seconds"], "version": __version__,
        }
        assert 0 <= health["uptime_seconds"] < 600


async def test_health_names_a_platform_that_is_not_connected_and_why(start_app, llm: OpenAIEmulator, tmp_path) -> None:
    app = await start_app(config(llm, store={"url": f"sqlite:///{tmp_path}/bot.db"}))
    async with client(app, "ann") as ann:
        app.adapters["web"].failure = "lost its connection"  # what a platform that died records
        health = await ann.call("health")
    assert health["status"] == "unready" and health["store"] == f"sqlite:///{tmp_path}/bot.db"
    assert health["platforms"] == {"web": "lost its connection"} == health["failing"]


async def test_readiness_names_a_gateway_that_is_not_listening(app: App) -> None:
    assert await app.readiness() == {}
    assert app.gateway is not None
    await app.gateway.stop()
    assert await app.readiness() == {"gateway": "not listening"}


async def test_conversations_are_listed_for_who_may_read_them(app: App) -> None:
    async with client(app, "ann") as ann, client(app, "bob") as bob, client(app, "root") as root:
        mine = await ann.create_session("ann's")
        await answer_of(ann, await ann.send(mine, "hi"))
        theirs = await bob.create_session("bob's")
        await answer_of(bob, await bob.send(theirs, "hello"))
        listed = {c["conversation"] for c in (await ann.call("conversations.list"))["conversations"]}
        everything = (await root.call("conversations.list"))["conversations"]
    assert listed == {f"web:{mine}"}
    assert {c["conversation"] for c in everything} == {f"web:{mine}", f"web:{theirs}"}
    assert all(c["platform"] == "web" and c["kind"] == "web" and c["seq"] >= 3 for c in everything)


async def test_a_second_client_watches_a_session_live(app: App, llm: OpenAIEmulator) -> None:
    async with client(app, "ann") as ann, client(app, "root") as watcher:
        session = await ann.create_session()
        await watcher.subscribe(f"web:{session}")
        message_id = await ann.send(session, "hello")
        seen = await answer_of(watcher, message_id)
        mine = await answer_of(ann, message_id)
    assert seen.seq == mine.seq and seen.data == mine.data


async def test_a_stranger_client_cannot_send_after_the_connection_drops(app: App) -> None:
    c = client(app, reconnect=False)
    await c.connect()
    await c.close()
    with pytest.raises((GatewayError, asyncio.TimeoutError)):
        await c.call("sessions.list")
