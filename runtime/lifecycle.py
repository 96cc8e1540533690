"""Where an App is in its life, for the parts that run beside it: the journal's turns wait
until the platforms are up, background loops end when it stops, a stopping stream lets the
turns it started finish for as long as `stop` allows, `/status` tells the uptime and
`/readyz` whether it is serving."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Literal

#: What a process does with a shared store: `ingress` holds the platform connections, `worker`
#: answers from the stream, `all` does both.
Role = Literal["all", "worker", "ingress"]


@dataclass
class Lifecycle:
    #: Set once the platforms are started: journaled turns may answer.
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    #: Started and not stopping: what /readyz reports first.
    serving: bool = False
    #: How long a stopping stream lets the turns it started finish.
    drain_seconds: float = 5.0
    started_at: float = field(default_factory=time.monotonic)

    def started(self) -> None:
        self.started_at = time.monotonic()
        self.ready.set()
        self.serving = True

    def stop(self, drain_seconds: float) -> None:
        self.drain_seconds = drain_seconds
        self.serving = False
        self.stopping.set()

    def drain(self) -> float:
        return self.drain_seconds

    def uptime(self) -> float:
        return time.monotonic() - self.started_at

    def state(self) -> str:
        return "stopping" if self.stopping.is_set() else "starting"
