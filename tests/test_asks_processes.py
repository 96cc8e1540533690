"""`ask_user` through a real `botweave run` process, its default SQLite store, the Telegram
emulator and the OpenAI emulator scripted to call the tool: presses by the right and the wrong
person, a free reply that is the call's result (one request for the continuation, no turn of
its own), a timeout, /stop while waiting, and a question left open by a stopped process
reported expired by the next one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests import crashlab
from tests.emulators.openai import OpenAIEmulator, Reply, ToolCall, text_of
from tests.emulators.telegram import TelegramEmulator, wait_until

ANN = TelegramEmulator.user(1, "Ann", "ann")
BOB = TelegramEmulator.user(2, "Bob", "bob")


def model(body: dict[str, Any]) -> Any:
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return Reply(text=f"Got {text_of(last)}")
    said = text_of(last)
    asks = {
        "size": {"question": "Which size?", "options": ["Small", "Large"]},
        "address": {"question": "What is the address?"},
        "quick": {"question": "Quick, yes or no?", "options": ["Yes", "No"], "timeout_seconds": 1},
        "wait": {"question": "Shall I wait?"},
    }
    for word, arguments in asks.items():
        if word in said:
            return Reply(tool_calls=[ToolCall("ask_user", arguments)])
    return Reply(text=f"You said {said}")


def write_config(path: Path, emu: TelegramEmulator, llm: OpenAIEmulator) -> Path:
    path.write_text(yaml.safe_dump({
        "agents": {"assistant": {"model": "openai/loopback", "api_base": llm.base_url, "api_key": "sk-loopback",
                                 "tools": ["ask_user"]}},
        "platforms": {"telegram": {"token": emu.token, "api_base_url": emu.api_base_url, "poll_timeout": 1,
                                   "unknown_user_policy": "allow"}},
    }))
    return path


def question(emu: TelegramEmulator, text: str) -> dict[str, Any] | None:
    return next((m for m in emu.sent(ANN["id"]) if text in (m.get("text") or "")), None)


def said(emu: TelegramEmulator, text: str) -> bool:
    return any(text in t for t in emu.sent_texts(ANN["id"]))


async def test_ask_user_through_botweave_run(telegram_emulator: TelegramEmulator, tmp_path: Path, private_state_dir: Path) -> None:
    emu = telegram_emulator
    llm = OpenAIEmulator()
    llm.on_request = model
    await llm.start()
    procs = crashlab.Processes(tmp_path)
    config = write_config(tmp_path / "bot.yaml", emu, llm)
    chat = emu.private_chat(ANN)
    try:
        procs.spawn("run-1", config, "run")
        # buttons: Bob's press is not his, Ann's is the answer
        emu.push_message(chat, ANN, "which size?")
        await wait_until(lambda: question(emu, "Which size?"), timeout=60, what="the question")
        asked = question(emu, "Which size?")
        assert asked is not None and [b["text"] for b in emu.buttons(ANN["id"], asked["message_id"])] == ["Small", "Large"]
        bob = emu.press((ANN["id"], asked["message_id"]), BOB, "Large")
        await wait_until(lambda: emu.callback_answer(bob) is not None, timeout=20, what="Bob's answer")
        assert "not yours" in emu.callback_answer(bob).text  # type: ignore[union-attr]
        ann = emu.press((ANN["id"], asked["message_id"]), ANN, "Large")
        await wait_until(lambda: said(emu, 'Got {"answer": "Large"}'), timeout=30, what="the continuation")
        assert emu.callback_answer(ann).text == "Answered: Large"  # type: ignore[union-attr]
        assert "Ann answered: Large" in emu.current(ANN["id"], asked["message_id"])["text"]  # type: ignore[index]

        # a free reply: one request for the continuation, no turn of its own
        before = len(llm.requests)
        emu.push_message(chat, ANN, "what address?")
        await wait_until(lambda: question(emu, "What is the address?"), timeout=30, what="the free question")
        emu.push_message(chat, ANN, "12 Rose Lane")
        await wait_until(lambda: said(emu, 'Got {"answer": "12 Rose Lane"}'), timeout=30, what="the free answer")
        await wait_until(lambda: len(llm.requests) >= before + 2, timeout=5, what="the requests")
        assert len(llm.requests) == before + 2
        assert not said(emu, "You said 12 Rose Lane")

        # the timeout
        emu.push_message(chat, ANN, "quick one")
        await wait_until(lambda: said(emu, 'Got {"error": "no answer within 1 s"}'), timeout=30, what="the timeout")

        # /stop while waiting
        emu.push_message(chat, ANN, "wait for me")
        await wait_until(lambda: question(emu, "Shall I wait?"), timeout=30, what="the question to stop")
        emu.push_message(chat, ANN, "/stop")
        waiting = question(emu, "Shall I wait?")
        assert waiting is not None
        await wait_until(lambda: "Withdrawn" in (emu.current(ANN["id"], waiting["message_id"]) or {}).get("text", ""),
                         timeout=30, what="the question withdrawn")
        assert "Stopped." in emu.sent_texts(ANN["id"])

        # asked, then the process stops: the next one reports the question expired
        emu.push_message(chat, ANN, "the size again")
        await wait_until(lambda: len([m for m in emu.sent(ANN["id"]) if "Which size?" in (m.get("text") or "")]) == 2,
                         timeout=30, what="a second question")
        second = [m for m in emu.sent(ANN["id"]) if "Which size?" in (m.get("text") or "")][-1]
        assert await procs.terminate("run-1") < 10
        procs.spawn("run-2", config, "run")
        await wait_until(lambda: "Expired" in (emu.current(ANN["id"], second["message_id"]) or {}).get("text", ""),
                         timeout=60, what="the question reported expired")
        late = emu.push_callback_query(second, ANN, second["reply_markup"]["inline_keyboard"][0][1]["callback_data"])
        await wait_until(lambda: emu.callback_answer(late) is not None, timeout=20, what="the late press answered")
        assert "expired" in emu.callback_answer(late).text  # type: ignore[union-attr]
        assert json.dumps(emu.current(ANN["id"], second["message_id"])).count("inline_keyboard") == 0
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{procs.logs()[-6000:]}") from None
    finally:
        for name in list(procs.running):
            if procs.running[name].poll() is None:
                await procs.terminate(name)
        procs.close()
        await llm.stop()
