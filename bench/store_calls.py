"""How many store calls a Telegram turn makes, and how many of them the turn waits for.

A real App (python-telegram-bot against the Bot API emulator, the offline model) runs on the
SQLite store, as `botweave run` does with no `store:` section, behind a counting wrapper:
every call to the store is counted by method and by what its key is for, and so is every
write handed to `Store.later` (queued behind the turn, not awaited). One warm-up message per
chat, then `--messages` each in `--chats` private chats, one after the other per chat:

    python3 bench/store_calls.py [--chats 5] [--messages 4]

It prints the calls per answered message: awaited (a hop to the store's thread and back
that the turn waits on) and deferred, with a line per kind.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from botweave import App  # noqa: E402
from botweave.store import PatientStore, SQLiteStore  # noqa: E402

from tests.emulators.telegram import TelegramEmulator, adapter_config, wait_until  # noqa: E402

#: What a key is for, by its prefix (the first that matches).
PURPOSES = (
    ("inbox:", "inbound journal"),
    ("dedup:", "inbound journal"),
    ("ctl:", "turn control"),
    ("history:", "history"),
    ("turn:", "turn marker"),
    ("reply:", "turn marker"),
    ("outbox:", "outbox"),
)


def purpose(args: Sequence[Any]) -> str:
    """What the call's first key is for."""
    first = args[0] if args else ""
    if isinstance(first, (list, tuple)):  # get_many, slots, later
        first = first[0] if first else ""
    key = getattr(first, "key", first)
    for prefix, name in PURPOSES:
        if isinstance(key, str) and key.startswith(prefix):
            return name
    return str(key).split(":", 1)[0] or "?"


class Counting:
    """A store that counts its calls and passes them on (duck-typed: the App only calls it
    through `PatientStore`)."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.awaited: collections.Counter[tuple[str, str]] = collections.Counter()
        self.deferred: collections.Counter[tuple[str, str]] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name.startswith("_") or not callable(found) or name in ("describe", "log_feed", "connect", "close"):
            return found
        if name == "later":
            def later(*ops: Any) -> Any:
                for op in ops:
                    self.deferred[(type(op).__name__.lower(), purpose([op]))] += 1
                return found(*ops)
            return later

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.awaited[(name, purpose(args))] += 1
            return await found(*args, **kwargs)

        return counted

    def reset(self) -> None:
        self.awaited.clear()
        self.deferred.clear()


async def exchange(emu: TelegramEmulator, chats: Sequence[dict[str, Any]], users: Sequence[dict[str, Any]], round_: int) -> None:
    for chat, user in zip(chats, users, strict=True):
        emu.push_message(chat, user, f"message {round_}")
    want = round_ + 1
    await wait_until(lambda: all(len(emu.sent(c["id"])) >= want for c in chats), timeout=60, what="replies")


def table(counts: collections.Counter[tuple[str, str]], turns: int) -> list[str]:
    return [f"    {n / turns:5.2f}  {what:<16} {method}" for (method, what), n in sorted(counts.items(), key=lambda kv: kv[0][1])]


async def main(args: argparse.Namespace) -> None:
    emu = await TelegramEmulator().start()
    folder = Path(tempfile.mkdtemp(prefix="botweave-store-calls-"))
    counting = Counting(SQLiteStore(folder / "bot.db"))
    config = {
        "bot": {"unknown_user_policy": "allow"},
        "agents": {"assistant": {"model": "offline/echo", "max_history": 50}},
        "platforms": {"telegram": adapter_config(emu)},
    }
    app = App.from_config(config, store=PatientStore(counting))  # type: ignore[arg-type]
    await app.start()
    try:
        users = [TelegramEmulator.user(100 + i, f"User{i}", f"user{i}") for i in range(args.chats)]
        chats = [emu.private_chat(u) for u in users]
        await exchange(emu, chats, users, 0)  # warm-up: first contact, connections
        await asyncio.sleep(0.2)
        counting.reset()
        for round_ in range(1, args.messages + 1):
            await exchange(emu, chats, users, round_)
        await asyncio.sleep(0.2)
        await app.drain()
    finally:
        await app.stop()
        await emu.stop()
    turns = args.chats * args.messages
    awaited = sum(counting.awaited.values()) / turns
    deferred = sum(counting.deferred.values()) / turns
    print(f"store calls per Telegram turn (SQLite, {turns} turns): {awaited:.2f} awaited, {deferred:.2f} deferred")
    print("  awaited:")
    print("\n".join(table(counting.awaited, turns)))
    if counting.deferred:
        print("  deferred (Store.later):")
        print("\n".join(table(counting.deferred, turns)))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=5)
    parser.add_argument("--messages", type=int, default=4)
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
