"""The `admission:` section: limits on concurrent agent turns, one budget for all platforms."""

from __future__ import annotations

from typing import Annotated, Literal

from botweave.config import Section
from pydantic import Field


class AdmissionConfig(Section):
    max_concurrent_turns: Annotated[int, Field(ge=0)] = 0
    max_concurrent_turns_per_scope: Annotated[int, Field(ge=0)] = 0
    overflow: Literal["reject", "queue", "shed_oldest"] = "queue"
    queue_depth: Annotated[int, Field(ge=1)] = 100
    busy_message: str = "I'm busy right now; please try again shortly."
