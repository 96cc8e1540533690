"""The policies' sections of bot.yaml: `admission:` (limits on concurrent agent turns, one
budget for all platforms) and `network:` (which hosts tools may reach), which an agent may
carry of its own (`AgentNetwork`, part of its `agents.NAME` section)."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from botweave.config import Section
from pydantic import Field


class AdmissionConfig(Section):
    max_concurrent_turns: Annotated[int, Field(ge=0)] = 0
    max_concurrent_turns_per_scope: Annotated[int, Field(ge=0)] = 0
    overflow: Literal["reject", "queue", "shed_oldest"] = "queue"
    queue_depth: Annotated[int, Field(ge=1)] = 100
    busy_message: str = "I'm busy right now; please try again shortly."


class NetworkConfig(Section):
    """Which hosts tools may reach (`fetch_url`, MCP servers over HTTP). The rules are the
    egress policy's (`egress.py`); here they are only data, so an agent can carry
    its own."""

    allow_hosts: list[str] = Field(default_factory=list)
    deny_hosts: list[str] = Field(default_factory=list)


class AgentNetwork(Section):
    """An agent's own `network:`: replaces the top-level one for this agent's tools when set."""

    network: Optional[NetworkConfig] = None
