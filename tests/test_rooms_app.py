"""Rooms and push through the runtime, with the offline model and a recording adapter."""

import pytest
from botweave import App, PlatformCapabilities

from tests.support import RecordingAdapter
from tests.support import message as make_message


class Wide(RecordingAdapter):
    """Records like the test adapter, under a real platform name so push recipients resolve."""

    platform = "telegram"
    capabilities = PlatformCapabilities(max_message_length=4000)


def message(text, **kw):
    return make_message(text, platform="telegram", **kw)


def room_app(**extra) -> tuple[App, Wide]:
    config = {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {
            "planner": {"model": "offline/echo", "display_name": "Planner"},
            "researcher": {"model": "offline/echo"},
            "critic": {"model": "offline/echo"},
            "helper": {"model": "offline/echo"},
        },
        "rooms": {"standup": {"roster": ["planner", "researcher", "critic"], "max_rounds": 2, "owner": "telegram:boss"}},
        "routes": [
            {"match": {"chat_id": "team"}, "room": "standup"},
            {"match": {}, "agent": "helper"},
        ],
        **extra,
    }
    app = App.from_config(config)
    adapter = Wide()
    app.add_adapter(adapter)
    return app, adapter


async def test_a_person_in_a_room_channel_gets_one_reply_per_agent_under_their_names():
    app, adapter = room_app()
    outcome = await app.handle(message("what is the plan today?", chat_id="team", channel_type="group"))
    assert outcome.status == "room"
    speakers = [s.text.split(":**", 1)[0] for s in adapter.sent]
    assert speakers == ["**Planner", "**researcher", "**critic"]  # round 0, roster order, one each
    assert all(s.chat_id == "team" for s in adapter.sent)
    assert "what is the plan today?" in adapter.sent[0].text  # the agent saw the person's words


async def test_mentions_start_a_follow_up_round_and_caps_hold():
    app, adapter = room_app()
    await app.handle(message("@critic please check", chat_id="team", channel_type="group"))
    speakers = [s.text.split(":**", 1)[0].strip("*") for s in adapter.sent]
    # the echo agents repeat the transcript, so everyone mentions @critic: critic gets round 1,
    # and max_rounds=2 stops it there
    assert speakers == ["Planner", "researcher", "critic", "critic"]


async def test_other_chats_still_reach_the_single_agent():
    app, adapter = room_app()
    outcome = await app.handle(message("hi", chat_id="elsewhere"))
    assert outcome.status == "replied"
    assert adapter.texts() == ["helper (offline echo) heard: hi"]


async def test_bots_do_not_open_room_activities():
    app, adapter = room_app(bot={"unknown_user_policy": "allow", "allow_bots": True})
    outcome = await app.handle(message("beep", chat_id="team", channel_type="group", is_bot=True, user_id="b2"))
    assert outcome.status == "ignored" and adapter.sent == []


async def test_room_mention_of_a_known_person_notifies_them_by_dm_redacted_to_their_level():
    app, adapter = room_app(
        push={"recipients": {"telegram:ann": {"name": "ann", "categories": ["human_mentioned", "agent_question"], "detail": "identified"}}}
    )
    await app.handle(message("@ann should we ship?", chat_id="team", channel_type="group", name="Bob"))
    dms = [s for s in adapter.sent if s.chat_id == "ann"]
    assert dms, "ann was told"
    assert all(s.text == "Activity in room standup (planner)" or s.text.startswith("Activity in room standup") for s in dms)
    assert not any("should we ship" in s.text for s in dms)  # identified: no content


async def test_notify_command_changes_settings_only_in_a_dm():
    app, adapter = room_app()
    outcome = await app.handle(message("/notify detail private", chat_id="d1"))
    assert outcome.status == "command"
    pref = await app.preferences.get("telegram", "u1")
    assert pref.detail_level.value == "private"
    await app.handle(message("/notify off agent_question", chat_id="team", channel_type="group"))
    assert "direct message" in adapter.texts()[-1]


async def test_a_failed_standup_notifies_the_room_owner():
    app, adapter = room_app(
        push={"recipients": {"telegram:boss": {"categories": ["scheduled_task_failed"], "detail": "detailed"}}}
    )
    with pytest.raises(RuntimeError, match="does not resolve"):
        await app.rooms.scheduler.run_now("standup", "nowhere:123")  # an unresolvable target
    assert [s.chat_id for s in adapter.sent] == ["boss"]
    assert "Room standup: the stand-up failed" in adapter.sent[0].text


async def test_room_transcript_survives_a_new_app_on_the_same_store():
    app, adapter = room_app()
    await app.handle(message("first", chat_id="team", channel_type="group"))
    restored, adapter2 = room_app()
    restored.store = app.store
    restored.rooms.rooms["standup"].store = app.store
    events = await restored.rooms.rooms["standup"].load_transcript("telegram:team")
    assert [e.speaker for e in events][1:] == ["planner", "researcher", "critic"]
    assert await restored.rooms.rooms["standup"].next_speaker("telegram:team") is None  # settled


async def test_new_in_a_room_channel_resets_the_room():
    app, adapter = room_app()
    await app.handle(message("first", chat_id="team", channel_type="group"))
    outcome = await app.handle(message("/new", chat_id="team", channel_type="group"))
    assert outcome.status == "command" and adapter.texts()[-1] == "Room standup starts afresh."
    assert await app.rooms.rooms["standup"].load_transcript("telegram:team") == []


async def test_a_long_turn_tells_the_person_who_asked_when_they_opted_in():
    app, adapter = room_app(
        push={
            "agent_finished_after_seconds": 0.05,
            "recipients": {"telegram:u1": {"categories": ["agent_finished"], "detail": "identified"}},
        }
    )
    adapter.send_delay = 0.1  # the turn takes longer than the threshold
    await app.handle(message("take your time", chat_id="dm-u1"))
    assert [s.chat_id for s in adapter.sent] == ["dm-u1", "u1"]  # the answer, then the DM
    assert adapter.sent[1].text == "Activity in helper"
    # someone who did not opt in gets no notification, however long the turn
    await app.handle(message("also slow", chat_id="dm-u2", user_id="u2"))
    assert [s.chat_id for s in adapter.sent][2:] == ["dm-u2"]
