"""The shape of the inbound pipeline: steps with one signature, composed into one handler.

A step is given the message on its way (`Inbound`) and the rest of the pipeline
(`call_next`). It may answer and stop, change what flows on, or pass it along, the way
aiogram's middlewares and Starlette's `call_next` work. Each step lives with its concern
(policies decide who is heard, rooms take their channels, the runtime runs commands and
turns) and the runtime puts them in order. Every exit returns a `TurnOutcome` saying why,
so a message that got no answer is explainable. See docs/architecture.md.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from botweave.adapter import Adapter
from botweave.agents import UserTurn
from botweave.config import BotConfig
from botweave.conversations import conversation_key
from botweave.delivery import Delivered, ReplyChannel
from botweave.events import RunEvents
from botweave.router import Target
from botweave.types import BotMessage


class TurnStatus(str, Enum):
    """Why the pipeline stopped where it did."""

    REPLIED = "replied"
    SILENT = "silent"  # the agent chose not to answer
    CANCELLED = "cancelled"  # a message_sending hook cancelled the reply
    AGENT_ERROR = "agent_error"
    COMMAND = "command"
    ROOM = "room"
    OBSERVED = "observed"  # recorded in history, never answered
    EVENT = "event"
    DUPLICATE = "duplicate"
    DROPPED_UNKNOWN_PLATFORM = "dropped_unknown_platform"
    DROPPED_SELF = "dropped_self"
    DROPPED_BOT = "dropped_bot"
    DROPPED_LOOP_GUARD = "dropped_loop_guard"
    DROPPED_OTHER_BOT_COMMAND = "dropped_other_bot_command"
    DENIED = "denied"
    PAIRING_OFFERED = "pairing_offered"
    PAIRING_PENDING = "pairing_pending"
    PAIRING_FULL = "pairing_full"
    IGNORED = "ignored"  # a group message not addressed to the bot
    HOOK_DENIED = "hook_denied"
    UNROUTABLE = "unroutable"
    RATE_LIMITED = "rate_limited"
    BUSY = "busy"
    STOPPED = "stopped"  # cancelled by /stop, a deletion, an edit or a newer message; `detail` says which
    COLLECTED = "collected"  # recorded in history, answered together with a later message
    STALE = "stale"  # arrived long after it was sent; its author was told instead
    FAILED = "failed"  # the turn broke; its author was told


@dataclass
class TurnOutcome:
    """What the pipeline did with one inbound item; logs, tests and benchmarks read it."""

    status: TurnStatus
    delivery: Delivered | None = None
    detail: str = ""
    #: The history item a turn committed (as stored), so a re-run can take its place.
    history_item: str | None = None

    @property
    def message_ids(self) -> list[str]:
        return self.delivery.message_ids if self.delivery else []


@dataclass
class Inbound:
    """One message on its way through the pipeline, with what the steps learned about it."""

    message: BotMessage
    adapter: Adapter
    config: BotConfig
    reply: ReplyChannel
    #: Where the router sends it (an agent or a room); None when nothing matches.
    target: Target | None
    #: Set by group gating: record the message in history, answer nothing.
    observe_only: bool = False
    #: Set by the media step: what the agent reads of the message's files (None: its text).
    turn: UserTurn | None = None
    #: Set by turn control when an edited message is answered again: the history item of the
    #: earlier answer, which the new exchange replaces.
    replaces: str | None = None
    #: The events of the answer being made, when the gateway is configured (made by the first
    #: step that needs them; a re-run after an edit gets new ones).
    run: RunEvents | None = None

    @property
    def conversation(self) -> str:
        return conversation_key(self.message)


T = TypeVar("T")
R = TypeVar("R")

#: The one middleware signature: a step is given the item on its way and the rest of the
#: way (`call_next`), and returns how the item ended. The pipeline's steps take an `Inbound`;
#: the runtime's arrival chain (runtime/arrival.py) composes its own steps the same way.
Middleware = Callable[[T, Callable[[T], Awaitable[R]]], Awaitable[R]]

Handler = Callable[[Inbound], Awaitable[TurnOutcome]]
Step = Callable[[Inbound, Handler], Awaitable[TurnOutcome]]


#: Told of each step that decided an item's way (it answered or stopped the item rather than
#: pass it on): the step, when it began (`time.time_ns()`), the item, and the outcome.
Decided = Callable[[Step, int, Inbound, TurnOutcome], None]


def compose(
    steps: Sequence[Middleware[T, R]],
    endpoint: Callable[[T], Awaitable[R]],
    *,
    decided: Callable[[Middleware[T, R], int, T, R], None] | None = None,
) -> Callable[[T], Awaitable[R]]:
    """One handler that runs `steps` in order and `endpoint` last; with `decided`, each step
    that ends the item's way is reported to it (tracing names the step that refused)."""
    handler = endpoint
    for step in reversed(steps):
        handler = _chain(step, handler) if decided is None else _observed(step, handler, decided)
    return handler


def _chain(step: Middleware[T, R], call_next: Callable[[T], Awaitable[R]]) -> Callable[[T], Awaitable[R]]:
    async def run(item: T) -> R:
        return await step(item, call_next)

    return run


class _Onward(Generic[T, R]):
    """A step's `call_next` that notes whether the step called it: the awaitable it returns is
    the next handler's own, so observing adds no coroutine to each step."""

    __slots__ = ("call_next", "passed")

    def __init__(self, call_next: Callable[[T], Awaitable[R]]) -> None:
        self.call_next = call_next
        self.passed = False

    def __call__(self, item: T) -> Awaitable[R]:
        self.passed = True
        return self.call_next(item)


def _observed(
    step: Middleware[T, R], call_next: Callable[[T], Awaitable[R]], decided: Callable[[Middleware[T, R], int, T, R], None]
) -> Callable[[T], Awaitable[R]]:
    async def run(item: T) -> R:
        onward = _Onward(call_next)
        started = time.time_ns()
        outcome = await step(item, onward)
        if not onward.passed:
            decided(step, started, item, outcome)
        return outcome

    return run
