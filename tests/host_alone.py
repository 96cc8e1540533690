"""A program that embeds botweave, run by tests/test_host_alone.py in a fresh interpreter.

It does what such a program does: imports litellm, openai and httpx for its own use and makes
a litellm call of its own (so those libraries have done their own lazy set-up), then imports
botweave, builds an App, serves it inside a plain `asyncio.run` of its own, lets one turn
through a model call on the loopback OpenAI emulator, and stops it. It prints, as JSON, what
differs between before botweave and after: every function and class of litellm, openai,
httpx, aiohttp and asyncio (by identity, each class's `__dict__` entry by entry), the
event loop's attributes, the garbage collector's thresholds and freeze count, the thread
switch interval, the event loop policy, the signal handlers (the program's own SIGHUP handler
is also looked at while botweave serves), faulthandler, the threads left running.

    python -m tests.host_alone [auto|litellm|direct] [--stream]
"""

from __future__ import annotations

import asyncio
import faulthandler
import gc
import json
import os
import re
import signal
import sys
import threading
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import httpx  # noqa: E402,F401  (the program's own)
import litellm  # noqa: E402
import openai  # noqa: E402,F401

from tests.emulators.openai import OpenAIEmulator  # noqa: E402

WATCHED = ("litellm", "openai", "httpx", "aiohttp", "asyncio")


def definitions() -> dict[str, int]:
    """Every function and class the watched packages define, and every entry of those
    classes' `__dict__`s, by identity."""
    found: dict[str, int] = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in WATCHED:
            continue
        for attr, value in list(vars(module).items()):
            if getattr(value, "__module__", None) != name:
                continue
            if isinstance(value, type):
                found[f"{name}.{attr}"] = id(value)
                for key, member in list(vars(value).items()):
                    found[f"{name}.{attr}.{key}"] = id(member)
            elif callable(value):
                found[f"{name}.{attr}"] = id(value)
    return found


def process_state() -> dict[str, Any]:
    return {
        "gc.get_threshold": gc.get_threshold(),
        "gc.get_freeze_count": gc.get_freeze_count(),
        "sys.getswitchinterval": sys.getswitchinterval(),
        "asyncio policy": id(asyncio.get_event_loop_policy()),
        "SIGINT": str(signal.getsignal(signal.SIGINT)),
        "SIGTERM": str(signal.getsignal(signal.SIGTERM)),
        "SIGHUP": str(signal.getsignal(signal.SIGHUP)),
        "faulthandler": faulthandler.is_enabled(),
        # an executor's workers by their executor: using the program's default executor (as
        # asyncio.to_thread and litellm's logging do) may start more of its workers
        "threads": sorted({re.sub(r"_\d+$", "", thread.name) for thread in threading.enumerate()}),
    }


def the_programs_hangup(signum: int, frame: Any) -> None:
    """The program's own SIGHUP handler: botweave's reload on SIGHUP is for its own process."""


def loop_state(loop: asyncio.AbstractEventLoop) -> dict[str, int]:
    """The loop's attributes by identity; its counters (plain integers) move with any use."""
    state = {
        f"loop.{key}": id(value)
        for key, value in vars(loop).items()
        if not (isinstance(value, int) and not isinstance(value, bool))
    }
    state["loop class"] = id(type(loop))
    state["loop task factory"] = id(loop.get_task_factory())
    state["loop exception handler"] = id(loop.get_exception_handler())
    return state


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [f"{key}: {before[key]!r} -> {after.get(key)!r}" for key in before if after.get(key) != before[key]]


async def the_programs_own_calls(stream: bool) -> None:
    llm = OpenAIEmulator("warm")
    await llm.start()
    try:
        kwargs: dict[str, Any] = dict(model="openai/gpt-4o", api_base=llm.base_url, api_key="sk-own")
        await litellm.acompletion(messages=[{"role": "user", "content": "hi"}], **kwargs)
        if stream:
            response = await litellm.acompletion(messages=[{"role": "user", "content": "hi"}], stream=True, **kwargs)
            async for _ in response:
                pass
    finally:
        await llm.stop()


async def serve_botweave(client: str, stream: bool) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    await asyncio.to_thread(lambda: None)  # the loop's own default executor, as any program's has by now
    loop_before = loop_state(loop)

    from botweave import App

    from tests.support import RecordingAdapter, message

    llm = OpenAIEmulator("Answered by the loopback model.")
    await llm.start()
    try:
        app = App.from_config(
            {
                "bot": {"unknown_user_policy": "allow", "streaming": stream},
                "agents": {"a": {"model": "openai/gpt-emulated", "api_base": llm.base_url, "api_key": "sk-loop"}},
                **({"models": {"client": client}} if client != "auto" else {}),
            }
        )
        adapter = RecordingAdapter()
        app.add_adapter(adapter)
        serving = asyncio.create_task(app.serve())
        for _ in range(600):
            if await app.readiness() == {}:
                break
            await asyncio.sleep(0.05)
        hangup_kept = signal.getsignal(signal.SIGHUP) is the_programs_hangup  # while botweave serves
        await app.submit(message("hello"))
        for _ in range(600):
            if adapter.sent and (not stream or adapter.edits or adapter.sent[-1].text.strip() == llm.reply):
                break
            await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)  # as a service manager stops it
        code = await serving
    finally:
        await llm.stop()
    shown = adapter.edits[-1][1] if adapter.edits else (adapter.sent[-1].text if adapter.sent else "")
    return {
        "exit code": code,
        "answered": shown.strip() == llm.reply,
        "model requests": len(llm.requests),
        "loop": differences(loop_before, loop_state(loop)),
        "SIGHUP kept while serving": hangup_kept,
    }


def main() -> None:
    client = sys.argv[1] if len(sys.argv) > 1 else "auto"
    stream = "--stream" in sys.argv
    asyncio.run(the_programs_own_calls(stream))
    signal.signal(signal.SIGHUP, the_programs_hangup)
    before = {**definitions(), **process_state()}
    outcome = asyncio.run(serve_botweave(client, stream))
    after = {**definitions(), **process_state()}
    outcome["changed"] = differences(before, after)
    outcome["compared"] = len(before)
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
