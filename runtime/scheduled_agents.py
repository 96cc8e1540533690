"""Scheduled agents: `schedules:` runs an agent on cron with a prompt and posts its answer to a
target, the way a room's stand-up is scheduled.

    schedules:
      morning_digest:
        cron: "0 8 * * mon-fri"
        timezone: Europe/Berlin
        agent: researcher
        prompt: "Summarise what changed overnight."
        target: slack:C0123456
        owner: slack:U0123456     # told when a run is missed or fails

Decisions, and why:
- The cron ledger is the kernel's (botweave.cron), shared with rooms: an occurrence runs
  once or is recorded as missed (`schedule:<name>:missed`), never runs late. A run that fails
  (the target does not resolve, the model fails, the post is refused) is recorded in
  `schedule:<name>:failed`. Either way the owner is notified (`scheduled_task_failed`).
- The prompt arrives as a message from "schedule NAME" with `allow_control=False`, so nothing
  in it is ever taken as a command, and the run is a turn of the target's conversation: it
  holds that conversation's lock and lands in its history, so when someone answers the post
  in the channel the agent knows what it said. Tools see that message as their origin (the
  `origin` target is the schedule's target).
- With several workers sharing a store, each occurrence is claimed in the store before it
  runs, so one worker runs it; the post also has an outbox key, so a run repeated after a
  crash posts once.
- No streaming: nobody is watching a scheduled post being written.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from typing import Annotated, Optional

from apscheduler.triggers.base import BaseTrigger
from botweave.agents import Agent, AgentError, History, ToolTurn
from botweave.config import BotConfig, Section
from botweave.conversations import ConversationLocks
from botweave.cron import Clock, CronScheduler, Job, cron_trigger
from botweave.delivery import Delivery
from botweave.replies import format_footer, is_silent, with_footer
from botweave.runtime.turns import user_entry
from botweave.store import Store, store_failures
from botweave.targets import Targets
from botweave.tooling import ToolContext
from botweave.tracing import Traced
from botweave.types import BotChannel, BotMessage, BotUser
from pydantic import Field, model_validator

log = logging.getLogger(__name__)

Failed = Callable[[str, str], Awaitable[None]]
"""`failed(schedule_name, detail)`: a run was missed or failed; tell the owner."""
MAX_FAILURES_KEPT = 500
CLAIM_TTL_SECONDS = 7 * 24 * 3600.0


class ScheduleConfig(Section):
    cron: str
    """A crontab line, e.g. `0 8 * * mon-fri`."""
    agent: str
    """The agent that answers the prompt."""
    prompt: str
    """What the agent is asked each time."""
    target: str
    """Where the answer is posted: `<platform>:<chat>[:<thread>]`, or `<platform>` for its home
    chat."""
    timezone: str = "UTC"
    """The time zone `cron` is read in."""
    misfire_grace_seconds: Annotated[float, Field(gt=0)] = 300.0
    """How late a run may still start after downtime; older occurrences are recorded as missed."""
    owner: Optional[str] = None  # `<platform>:<user_id>`
    """`<platform>:<user_id>` told when a run is missed or fails."""

    @model_validator(mode="after")
    def _valid(self) -> ScheduleConfig:
        try:
            cron_trigger(self.cron, self.timezone)
        except ValueError as exc:
            raise ValueError(f"invalid cron expression {self.cron!r}: {exc}") from None
        if not self.prompt.strip():
            raise ValueError("prompt: must say what the agent is asked each time")
        if not self.target.strip():
            raise ValueError("target: where to post, e.g. slack:C0123456 or telegram (its home chat)")
        if self.owner is not None and ":" not in self.owner:
            raise ValueError(f"owner: must be <platform>:<user_id>, e.g. telegram:123456 (got {self.owner!r})")
        return self


class ScheduleFailed(RuntimeError):
    """A run that could not post; the message says why, for the log and the owner."""


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class AgentSchedules(CronScheduler):
    """Runs every `schedules:` entry (see the module docstring)."""

    kind = "schedule"

    def __init__(
        self,
        configs: Mapping[str, ScheduleConfig],
        *,
        agents: Mapping[str, Agent],
        history: History,
        delivery: Delivery,
        targets: Targets,
        locks: ConversationLocks,
        bot_config_for: Callable[[str], BotConfig],
        store: Store,
        failed: Failed | None = None,
        clock: Clock = _utc_now,
        trigger_for: Callable[[ScheduleConfig], BaseTrigger] | None = None,
        traced: Traced | None = None,
    ) -> None:
        self.configs = dict(configs)
        self._agents = agents
        self._history = history
        self._delivery = delivery
        self._targets = targets
        self._conversation_locks = locks
        self._bot_config_for = bot_config_for
        self._failed = failed
        self._traced = traced
        build = trigger_for or (lambda config: cron_trigger(config.cron, config.timezone))
        jobs = [Job(name, build(config), config.misfire_grace_seconds) for name, config in self.configs.items()]
        super().__init__(jobs, self._scheduled, store, self._missed, clock)

    @classmethod
    def failed_key(cls, name: str) -> str:
        return f"{cls.kind}:{name}:failed"

    async def failures(self, name: str) -> list[dict[str, str]]:
        """Recorded failed runs of `name`, oldest first: scheduled time, when, and why."""
        return [json.loads(item) for item in await self.store.list_range(self.failed_key(name))]

    async def run_now(self, name: str) -> None:
        """Run a schedule once now; the cron ledger is untouched. ValueError for an unknown name."""
        if name not in self.configs:
            raise ValueError(f"unknown schedule {name!r}; schedules: {', '.join(sorted(self.configs)) or '(none)'}")
        await self._scheduled(name, None)

    async def _missed(self, name: str, when: datetime) -> None:
        if self._failed is not None:
            await self._failed(name, f"the run due at {when.isoformat()} was missed")

    async def _scheduled(self, name: str, when: datetime | None) -> None:
        stamp = (when or self._clock()).isoformat()
        if when is not None and not await self.store.set_if_absent(
            f"{self.kind}:{name}:run:{stamp}", "1", ttl=CLAIM_TTL_SECONDS
        ):
            return  # another worker has this occurrence
        try:
            if self._traced is None:
                await self._post(name, self.configs[name], stamp)
            else:  # a run nobody wrote: a trace of its own
                with self._traced("botweave.schedule", {"botweave.schedule": name}):
                    await self._post(name, self.configs[name], stamp)
        except (ScheduleFailed, AgentError) as exc:
            await self._record_failure(name, stamp, str(exc))
        except Exception as exc:  # boundary: a scheduled agent's run is a turn: its failure is recorded and its owner told
            log.exception("schedule %s: the run failed", name)
            await self._record_failure(name, stamp, f"{type(exc).__name__}: {exc}")

    async def _record_failure(self, name: str, stamp: str, detail: str) -> None:
        log.warning("schedule %s: the run for %s failed: %s", name, stamp, detail)
        record = {"scheduled": stamp, "recorded": self._clock().isoformat(), "detail": detail}
        await self.store.list_append(self.failed_key(name), json.dumps(record), max_len=MAX_FAILURES_KEPT)
        if self._failed is not None:
            try:
                await self._failed(name, f"the run for {stamp} failed: {detail}")
            except store_failures():  # the notifier's store; its transports report their own failures
                log.exception("schedule %s: telling the owner failed", name)

    async def _post(self, name: str, config: ScheduleConfig, stamp: str) -> None:
        agent = self._agents[config.agent]
        to = self._targets.resolve(config.target)
        if to is None:
            raise ScheduleFailed(
                f"target {config.target!r} does not resolve to a chat (is that platform running? "
                "a bare platform name needs its home_chat)"
            )
        origin = BotMessage(
            message_id=f"schedule:{name}:{stamp}",
            content=config.prompt,
            sender=BotUser("schedule", f"schedule:{name}", f"schedule {name}"),
            channel=BotChannel(to.chat_id, "group"),
            thread_id=to.thread_id,
            platform=to.adapter.platform,
            allow_control=False,
        )
        conversation = to.target  # the key live turns in that chat use
        bot = self._bot_config_for(to.adapter.platform)
        log.info("schedule %s: %s answers into %s", name, agent.name, to.target)
        async with self._conversation_locks.hold(conversation):
            started = time.monotonic()
            earlier = await self._history.load(conversation, agent.config.max_history)
            entry = user_entry(origin)
            turn = ToolTurn(ToolContext(agent.name, origin, conversation))
            text = await agent.complete(earlier, entry["content"], turn)
            if is_silent(text, bot.allow_silence, bot.silence_token):
                log.info("schedule %s: the agent had nothing to post", name)
                answer = {"role": "assistant", "content": ""}
            else:
                if bot.footer:
                    text = with_footer(text, format_footer(agent.model, time.monotonic() - started, turn.used))
                delivered = await self._delivery.post(to, text, key=f"out:{self.kind}:{name}:{stamp}", origin=origin)
                if not delivered.ok:
                    first = delivered.failures[0] if delivered.failures else None
                    why = f"{first.status} {first.detail}" if first else "cancelled by a message_sending hook"
                    raise ScheduleFailed(f"posting into {to.target} failed: {why}")
                answer = {"role": "assistant", "content": delivered.text}
            await self._history.append_turn(conversation, agent.config.max_history, [entry, *turn.messages, answer])
