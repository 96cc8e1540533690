"""A program with a discord.py bot of its own beside botweave's Discord adapter, run by
tests/adapters/test_discord_host.py in a fresh interpreter (so no earlier client in the
process counts: discord.py does some things once per process).

`adapter`: starts botweave's Discord adapter against the emulator, sends it a frame orjson
refuses (a lone surrogate escape) and two plain ones, then starts the program's own plain
`discord.Client` against a second emulator and sends it the same kinds of frame. `plain`: the
plain client alone. Either way it prints, as JSON, what differs in discord.py between before
and after (every attribute of every discord module by identity, every entry of the `__dict__`
of every class they define, the filters of discord's loggers), the warnings discord's loggers
printed, and what each client made of its frames.

    python -m tests.adapters.discord_host adapter|plain
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

import discord
from botweave.adapters.discord.adapter import DiscordAdapter  # its import-time effects come first
from botweave.adapters.discord.config import DiscordConfig
from botweave.adapters.discord.rebase import rebase
from botweave.types import BotMessage
from discord.gateway import DiscordWebSocket
from discord.state import ConnectionState

from tests.emulators import discord as discord_emulator
from tests.emulators.discord import DM_CHANNEL_ID, DiscordEmulator

ODD = "surrogate \ud83d here"  # json.dumps sends it as a lone `\ud83d` escape, which orjson refuses


def discord_state() -> dict[str, Any]:
    """Everything of discord.py a client could change for the whole process, by identity."""
    found: dict[str, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] != "discord":
            continue
        for attr, value in list(vars(module).items()):
            found[f"{name}.{attr}"] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for key, member in list(vars(value).items()):
                    found[f"{name}.{attr}.{key}"] = id(member)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.split(".")[0] == "discord" and isinstance(logger, logging.Logger):
            found[f"logger {name} filters"] = [id(f) for f in logger.filters]
    return found


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return sorted(key for key in before if after.get(key) != before[key])


class Warnings(logging.Handler):
    """What discord's loggers print at WARNING and above."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


async def until(condition: Any, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def dm(emu: DiscordEmulator, text: str) -> None:
    await emu.dispatch("MESSAGE_CREATE", emu.message(text, channel_id=DM_CHANNEL_ID, store=False))


async def plain_bot(emu: DiscordEmulator) -> dict[str, Any]:
    """The program's own bot, as discord.py's docs write one (pointed at the emulator)."""
    intents = discord.Intents.default()
    intents.message_content = True
    client = discord.Client(intents=intents)
    rebase(client, api_base=emu.api_base, gateway=emu.gateway_url)
    seen: list[str] = []

    @client.event
    async def on_message(message: discord.Message) -> None:
        seen.append(message.content)

    await client.login(discord_emulator.TOKEN)
    running = asyncio.create_task(client.connect(reconnect=False))
    await emu.wait_ready()
    await dm(emu, "to the plain bot")
    await until(lambda: seen)
    parser = client._connection.parsers["MESSAGE_CREATE"]
    outcome: dict[str, Any] = {
        "seen": list(seen),
        "stock state": type(client._connection) is ConnectionState,
        "stock gateway": type(client.ws) is DiscordWebSocket,
        "stock parser": getattr(parser, "__func__", None) is ConnectionState.parse_message_create,
    }
    if discord.utils.HAS_ORJSON:
        await dm(emu, ODD)  # discord.py as it ships: orjson refuses the frame and the connection ends
        try:
            await asyncio.wait_for(running, 10)
        except Exception as exc:  # noqa: BLE001 - the outcome is what is reported
            outcome["odd frame"] = type(exc).__name__
        else:
            outcome["odd frame"] = "read"
    await client.close()
    running.cancel()
    return outcome


async def with_adapter(report: dict[str, Any]) -> None:
    emu = await DiscordEmulator().start()
    adapter = DiscordAdapter(DiscordConfig(token=discord_emulator.TOKEN, api_base_url=emu.api_base, gateway_url=emu.gateway_url))
    received: list[str] = []

    async def sink(item: Any) -> None:
        if isinstance(item, BotMessage):
            received.append(item.text)

    adapter.bind(sink)
    await adapter.start()
    await emu.wait_ready()
    for text in (ODD, "plain words"):
        await dm(emu, text)
    await until(lambda: len(received) == 2)
    report["changed by the adapter"] = differences(report.pop("before"), discord_state())
    other = await DiscordEmulator().start()
    report["plain bot"] = await plain_bot(other)
    await dm(emu, "still here")
    await until(lambda: len(received) == 3)
    report["adapter received"] = received
    await adapter.stop()
    await other.stop()
    await emu.stop()


async def plain_alone(report: dict[str, Any]) -> None:
    emu = await DiscordEmulator().start()
    report["plain bot"] = await plain_bot(emu)
    await emu.stop()


def main() -> None:
    mode = sys.argv[1]
    warnings = Warnings()
    logging.getLogger("discord").addHandler(warnings)
    voice = discord.VoiceClient
    report: dict[str, Any] = {
        "voice warnings due": [flag for flag in ("warn_nacl", "warn_dave") if getattr(voice, flag, False)],
        "before": discord_state(),
    }
    before = dict(report["before"])
    asyncio.run(with_adapter(report) if mode == "adapter" else plain_alone(report))
    report.pop("before", None)
    report["changed"] = differences(before, discord_state())
    report["warnings"] = warnings.lines
    print(json.dumps(report))


if __name__ == "__main__":
    main()
