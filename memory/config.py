"""`agents.NAME.memory`: whether an agent keeps what people ask it to remember, how much, and
how much of it each request carries."""

from __future__ import annotations

from typing import Annotated

from botweave.config import Section
from pydantic import Field


class MemoryConfig(Section):
    """What an agent keeps about each person it talks to. Off by default: with it on the agent
    gets the `remember`, `recall` and `forget` tools, and each request tells it the person's
    most recently used items."""

    enabled: bool = False
    """Keep a memory of each person (per agent, shared by every chat and linked platform)."""
    max_items: Annotated[int, Field(ge=1, le=10_000)] = 200
    """The most items kept about one person; `remember` is refused when they are all used."""
    inject_tokens: Annotated[int, Field(ge=0)] = 800
    """How many tokens of the person's items (most recently used first) go into the agent's
    instructions with every request; the rest are found with `recall`."""


class AgentMemory(Section):
    """The memory feature's part of an agent's section."""

    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    """What the agent remembers of each person: `{enabled, max_items, inject_tokens}`."""
