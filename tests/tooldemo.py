"""Python tools the tests name the way bot.yaml does: {python: "tests.tooldemo:weather"}."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Literal

from botweave import ToolContext, tool

#: (started, ended) of every `nap`, to see calls of one round overlap.
NAPS: list[tuple[float, float]] = []
#: The context each `whoami` call received.
CONTEXTS: list[ToolContext] = []


@tool
def weather(city: str, unit: Literal["C", "F"] = "C") -> dict:
    """Current weather for a city.

    Args:
        city: The city's name, e.g. "Lisbon".
        unit: Celsius or Fahrenheit.
    """
    return {"city": city, "temperature": 21 if unit == "C" else 70, "unit": unit}


@tool
async def nap(seconds: float) -> str:
    """Sleep a while (for concurrency tests)."""
    started = time.monotonic()
    await asyncio.sleep(seconds)
    NAPS.append((started, time.monotonic()))
    return "rested"


@tool(name="slow_lookup", timeout_seconds=0.2)
async def slow(seconds: float) -> str:
    """Takes longer than it may."""
    await asyncio.sleep(seconds)
    return "too late"


@tool
def explode(secret: str) -> str:
    """Always raises."""
    raise RuntimeError("the vault is closed")


@tool
def whoami(context: ToolContext) -> dict:
    """Which agent and message this call belongs to."""
    CONTEXTS.append(context)
    origin = context.origin
    return {"agent": context.agent, "message_id": origin.message_id if origin else None}



@tool
def book(day: datetime.date, seats: int, names: list[str], note: str | None = None) -> dict:
    """Book a table (a tool with several argument types, for the fuzz tests).

    Args:
        day: The day, e.g. 2030-01-31.
        seats: How many seats.
        names: Who is coming.
        note: Anything the restaurant should know.
    """
    return {"day": day.isoformat(), "seats": seats, "names": names, "note": note}
