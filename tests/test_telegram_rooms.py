"""Issue 7 on Telegram, end to end: a room of three offline agents bound to a Telegram group.

Telegram has no per-message author override, so each agent's turn arrives as its own
message starting with the agent's name in bold (a `bold` entity over "Name:"). The offline
echo agents repeat their whole prompt, so an @-mention in a person's message reappears in
every round-0 reply and admits the mentioned agent to round 1.

The room has no `schedule:` here (a cron occurrence during a test run would add posts);
the stand-up test fires the kickoff with `run_now`, the path `botweave room run` takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest_asyncio
from botweave import App

from tests.emulators.telegram import (
    TelegramEmulator,
    adapter_config,
    telegram_emulator,  # noqa: F401  (fixture)
    utf16_len,
    wait_until,
)

GROUP_ID = -1002
ANN = TelegramEmulator.user(7, "Ann", "ann")
NAMES = {"planner": "Planner", "researcher": "Researcher", "critic": "Critic"}
KICKOFF = "Stand-up time: what did you do yesterday?"

Starter = Callable[..., Any]


@pytest_asyncio.fixture
async def start_room_app(telegram_emulator: TelegramEmulator, start_app: Starter) -> Starter:
    async def start(model: str = "offline/echo") -> App:
        config = {
            "bot": {"unknown_user_policy": "allow"},
            "agents": {name: {"model": model, "display_name": shown} for name, shown in NAMES.items()},
            "rooms": {
                "standup": {
                    "roster": list(NAMES),
                    "max_rounds": 2,
                    "kickoff": KICKOFF,
                    "target": f"telegram:{GROUP_ID}",
                }
            },
            "routes": [{"match": {"chat_id": GROUP_ID}, "room": "standup"}],
            "platforms": {"telegram": adapter_config(telegram_emulator)},
        }
        return await start_app(config)

    return start


def speaker_of(message: dict[str, Any]) -> str:
    """The name shown in bold at the start of a post (what a person sees as its author)."""
    text = message["text"]
    bold = [e for e in message.get("entities", []) if e["type"] == "bold" and e["offset"] == 0]
    assert bold, f"no bold name prefix in {text!r}"
    name = text.encode("utf-16-le")[: 2 * bold[0]["length"]].decode("utf-16-le")
    assert name.endswith(":") and text.startswith(name + " "), text
    return name[:-1]


async def quiet(app: App, emu: TelegramEmulator, seconds: float = 0.4) -> None:
    """Every pushed update fetched, every turn finished, then a pause for anything late."""
    await wait_until(lambda: not emu.pending, what="updates to be fetched")
    await asyncio.sleep(0.05)
    await app.drain()
    await asyncio.sleep(seconds)
    await app.drain()


async def test_a_person_gets_one_reply_per_agent_under_their_names_and_posts_do_not_retrigger(
    start_room_app, telegram_emulator
):
    emu = telegram_emulator
    app = await start_room_app()
    group = emu.group(GROUP_ID, "Team")
    emu.push_message(group, ANN, "what is the plan today?")  # no @ThisBot: a room channel hears people
    await wait_until(lambda: len(emu.sent(GROUP_ID)) >= 3, timeout=15, what="three room posts")
    await quiet(app, emu)

    posts = emu.sent(GROUP_ID)
    assert [speaker_of(p) for p in posts] == ["Planner", "Researcher", "Critic"]  # round 0, roster order
    for post, agent in zip(posts, NAMES):
        body = post["text"].split(": ", 1)[1]
        assert body.startswith(f"{agent} (offline echo) heard: ")  # each agent answered for itself
        assert "what is the plan today?" in body  # and saw the person's words
    assert all(utf16_len(p["text"]) <= 4096 for p in posts)
    assert len(emu.calls_to("sendMessage")) == 3

    # Telegram never shows a bot its own posts; even if one came back, it must not restart the room.
    emu.push("message", emu.current(GROUP_ID, posts[0]["message_id"]))
    await quiet(app, emu)
    assert len(emu.calls_to("sendMessage")) == 3


async def test_a_mention_drives_one_follow_up_round_and_the_round_cap_holds(start_room_app, telegram_emulator):
    emu = telegram_emulator
    app = await start_room_app()
    group = emu.group(GROUP_ID, "Team")
    emu.push_message(group, ANN, "@critic please check the release plan")
    await wait_until(lambda: len(emu.sent(GROUP_ID)) >= 4, timeout=15, what="four room posts")
    await quiet(app, emu)
    # round 0 everyone (each repeats "@critic"), round 1 only the critic; max_rounds=2 stops there
    assert [speaker_of(p) for p in emu.sent(GROUP_ID)] == ["Planner", "Researcher", "Critic", "Critic"]
    assert "This is round 2." in emu.sent(GROUP_ID)[3]["text"]
    assert len(emu.calls_to("sendMessage")) == 4


async def test_a_stand_up_kickoff_posts_once_per_agent_into_the_group(start_room_app, telegram_emulator):
    emu = telegram_emulator
    app = await start_room_app()
    assert app.rooms is not None
    emu.group(GROUP_ID, "Team")
    await asyncio.wait_for(app.rooms.scheduler.run_now("standup", f"telegram:{GROUP_ID}"), timeout=15)
    await quiet(app, emu)
    posts = emu.sent(GROUP_ID)
    assert [speaker_of(p) for p in posts] == ["Planner", "Researcher", "Critic"]
    assert all(KICKOFF in p["text"] for p in posts)  # every agent was given the kickoff
    assert len(emu.calls_to("sendMessage")) == 3  # the kickoff itself is not posted
    assert all("reply_to_message" not in p for p in posts)


class _Verbose:
    """A litellm provider whose every answer is one paragraph of 5000 characters."""

    provider = "verbosetelegram"
    text = "word " * 999 + "end."

    @classmethod
    def register(cls) -> None:
        from botweave.agents import litellm_module
        from botweave.offline_model import OfflineEcho

        text = cls.text

        class Verbose(OfflineEcho):
            async def acompletion(self, *args: Any, **kwargs: Any):  # type: ignore[override]
                response = await super().acompletion(*args, **kwargs)
                response.choices[0].message.content = text
                return response

        litellm = litellm_module()
        if not any(p.get("provider") == cls.provider for p in litellm.custom_provider_map):
            litellm.custom_provider_map.append({"provider": cls.provider, "custom_handler": Verbose()})


async def test_a_long_agent_turn_arrives_in_full_under_its_name(start_room_app, telegram_emulator):
    _Verbose.register()
    emu = telegram_emulator
    app = await start_room_app(model=f"{_Verbose.provider}/echo")
    emu.group(GROUP_ID, "Team")
    await asyncio.wait_for(app.rooms.scheduler.run_now("standup", f"telegram:{GROUP_ID}"), timeout=15)
    await quiet(app, emu, seconds=0.1)
    calls = emu.calls_to("sendMessage")
    assert calls and all(c.status == 200 for c in calls)
    words = " ".join(emu.sent_texts(GROUP_ID)).split()
    assert words.count("word") == 3 * 999 and words.count("end.") == 3  # every turn, in full
    assert speaker_of(emu.sent(GROUP_ID)[0]) == "Planner"
