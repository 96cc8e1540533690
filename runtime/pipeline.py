"""The inbound pipeline, in order. This list is the one place to read (or change) what
happens to a message between its platform and its answer; each step's module says why it
does what it does.
"""

from __future__ import annotations

from botweave.commands import CommandRegistry
from botweave.delivery import Delivery
from botweave.hooks import HookRegistry
from botweave.media.reader import MediaStep
from botweave.pipeline import Decided, Handler, Step, compose
from botweave.policies.access_control import AccessControl
from botweave.policies.admission import AdmissionStep
from botweave.policies.authors import AuthorScreen
from botweave.policies.gating import group_gate
from botweave.policies.rate_limit import RateLimit
from botweave.rooms.hub import RoomHub
from botweave.router import Router
from botweave.runtime.steps import Commands, MessageHooks, Observe, Watch
from botweave.runtime.turns import AgentTurn


def build_pipeline(
    *,
    authors: AuthorScreen,
    access: AccessControl,
    hooks: HookRegistry,
    router: Router,
    delivery: Delivery,
    commands: CommandRegistry,
    rooms: RoomHub | None,
    observe: Observe,
    rate_limit: RateLimit,
    admission: AdmissionStep,
    media: MediaStep,
    stale: Step,
    guard: Step,
    turn: AgentTurn,
    watch: Watch | None = None,
    decided: Decided | None = None,
) -> Handler:
    steps: list[Step] = [
        authors,  # our own echoes, bots (within the loop guard), commands for other bots
        access.step,  # allowlists, unknown-user policy, pairing
    ]
    if watch is not None:
        steps.append(watch)  # the gateway's watchers see what admitted people say
    steps += [
        group_gate,  # in groups: addressed to us? observe only?
        stale,  # handed over long after it was sent (we were down): a notice instead
        MessageHooks(hooks, router, delivery),  # message_received hooks may drop or rewrite
        Commands(commands),  # /new, /help, /pair, /notify, plugins' commands
    ]
    if rooms is not None:
        steps.append(rooms.step)  # a room's channel: the room answers
    steps += [
        observe,  # group_policy observe: record, never answer
        rate_limit,  # per-user message budget
        admission,  # concurrent turn limits
        guard,  # /stop, edits, deletions and busy_mode cancel or re-run the turn
        media,  # the files of a message an agent answers: read within the media limits
    ]
    return compose(steps, turn, decided=decided)
