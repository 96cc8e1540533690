"""The policies' sections of bot.yaml: `admission:` (limits on concurrent agent turns, one
budget for all platforms) and `network:` (which hosts tools may reach), which an agent may
carry of its own (`AgentNetwork`, part of its `agents.NAME` section)."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from botweave.config import Section
from pydantic import Field


class AdmissionConfig(Section):
    max_concurrent_turns: Annotated[int, Field(ge=0)] = 0
    """Agent turns running at once across the deployment (every worker sharing the store counts); 0: no limit."""
    max_concurrent_turns_per_scope: Annotated[int, Field(ge=0)] = 0
    """Agent turns running at once per scope (a Telegram chat, a Discord guild, a Slack team); 0: no limit."""
    overflow: Literal["reject", "queue", "shed_oldest"] = "queue"
    """A turn over the limit: `reject` it with `busy_message`, `queue` it (up to `queue_depth`),
    or `shed_oldest` to make room."""
    queue_depth: Annotated[int, Field(ge=1)] = 100
    """Turns waiting for a free slot before overflow applies."""
    busy_message: str = "I'm busy right now; please try again shortly."
    """What a person whose message was not admitted is told."""


class NetworkConfig(Section):
    """Which hosts tools may reach (`fetch_url`, MCP servers over HTTP). The rules are the
    egress policy's (`egress.py`); here they are only data, so an agent can carry
    its own."""

    allow_hosts: list[str] = Field(default_factory=list)
    """Hosts tools may reach (`example.com`, `*.example.com`, addresses, CIDR ranges); non-
    empty: every other host is denied. Private addresses must be named here."""
    deny_hosts: list[str] = Field(default_factory=list)
    """Hosts tools may never reach; a deny wins over an allow."""


class AgentNetwork(Section):
    """An agent's own `network:`: replaces the top-level one for this agent's tools when set."""

    network: Optional[NetworkConfig] = None
    """This agent's own network policy for its tools, instead of the top-level `network:`."""
