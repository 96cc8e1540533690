"""A generation: the parts of an App made from one configuration, the ones a reload makes
again (agents, the router, tools, rooms, schedules, push, the pipeline of steps), and `Live`,
which says which generation answers now (the live generation).

Everything else an App holds lasts as long as the App does (the store, the platform
connections, the registries plugins fill, and the desks that hold what is going on: turn
control, approvals, admission); those read the settings of the live generation when they
need them. An item takes the live generation when its pipeline starts and keeps it to the
end, so a turn finishes with the configuration it started with while the next one already
has the new one; `busy` counts such items, so that what a replaced generation alone uses
(MCP servers, its schedulers' runs) is stopped once none is left.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from botweave.agents import Agent
from botweave.pipeline import Handler
from botweave.push import Notifier
from botweave.rooms.hub import RoomHub
from botweave.router import Router
from botweave.runtime.config import Config
from botweave.runtime.poster import Poster
from botweave.runtime.scheduled_agents import AgentSchedules
from botweave.runtime.turns import AgentTurn
from botweave.tools import Toolsets


@dataclass(eq=False)
class Generation:
    config: Config
    agents: dict[str, Agent]
    router: Router
    tools: Toolsets
    poster: Poster
    notifier: Notifier
    rooms: RoomHub | None
    schedules: AgentSchedules | None
    turn: AgentTurn
    pipeline: Handler
    #: Items running in this generation's pipeline now.
    busy: int = 0
    _idle: asyncio.Event | None = field(default=None, repr=False)

    @property
    def revision(self) -> str:
        return self.config.revision

    def enter(self) -> None:
        self.busy += 1

    def leave(self) -> None:
        self.busy -= 1
        if not self.busy and self._idle is not None:
            self._idle.set()

    async def start_schedules(self) -> None:
        """Rooms' stand-ups and agents' schedules begin (a process that answers)."""
        if self.rooms is not None:
            await self.rooms.start()
        if self.schedules is not None:
            await self.schedules.start()

    async def stop_schedules(self) -> None:
        """The schedulers stop, waiting for their runs."""
        if self.rooms is not None:
            await self.rooms.stop()
        if self.schedules is not None:
            await self.schedules.stop()

    async def settled(self) -> None:
        """Returns once no item runs in this generation's pipeline (asked once another
        generation is live, so none starts any more)."""
        if self.busy:
            self._idle = asyncio.Event()
            await self._idle.wait()


class Live:
    """Which generation answers now: one reference every lasting part reads, so a reload
    switches all of them in one assignment. The builder makes it before the first
    generation, since the lasting parts are made first."""

    generation: Generation
