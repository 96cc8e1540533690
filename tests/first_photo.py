"""A bot's first photo in a fresh interpreter, run by tests/test_media.py: where litellm is
imported when reading a message's files is what first needs it.

The agent is an `openai/` model with `vision: auto`, so its calls go through botweave's own
client and nothing but the media step's lookups (does the model see images, what is its
provider's size limit) asks litellm anything. The App is started the way a program or a test
starts one (`App.start`, not the CLI's serve loop, which would import litellm beforehand).
It prints, as JSON, whether the photo reached the model and which thread imported litellm:
an import on the event loop's thread would freeze every conversation for seconds.

    python -m tests.first_photo
"""

from __future__ import annotations

import asyncio
import importlib.abc
import json
import os
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


class ImportWatch(importlib.abc.MetaPathFinder):
    """Notes the thread that imports litellm; finds nothing itself."""

    def __init__(self) -> None:
        self.thread: str | None = None

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        if fullname == "litellm" and self.thread is None:
            self.thread = "main" if threading.current_thread() is threading.main_thread() else "worker"


async def first_photo() -> dict[str, Any]:
    from botweave import App

    from tests.emulators.openai import OpenAIEmulator
    from tests.emulators.telegram import TelegramEmulator, adapter_config, png_bytes, wait_until

    llm = OpenAIEmulator("A small picture.")
    await llm.start()
    emu = await TelegramEmulator().start()
    ann = TelegramEmulator.user(1, "Ann", "ann")
    app = App.from_config({
        "agents": {"a": {"model": "openai/gpt-4o", "api_base": llm.base_url, "api_key": "sk-loopback"}},
        "platforms": {"telegram": {"unknown_user_policy": "allow", **adapter_config(emu)}},
    })
    try:
        await app.start()
        emu.push_photo(emu.private_chat(ann), ann, png_bytes(8, 6))
        await wait_until(lambda: emu.sent_texts(ann["id"]), timeout=120, what="the answer to the photo")
        await app.drain()
        return {"answered": emu.sent_texts(ann["id"]), "image parts": len(llm.image_parts(0))}
    finally:
        await app.stop()
        await emu.stop()
        await llm.stop()


def main() -> None:
    watch = ImportWatch()
    sys.meta_path.insert(0, watch)
    assert "litellm" not in sys.modules
    outcome = asyncio.run(first_photo())
    outcome["litellm imported on"] = watch.thread
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
