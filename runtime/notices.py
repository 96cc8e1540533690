"""What the running bot tells people through push notifications on its own: an approval
waiting for them, a long turn finished, a mention in a room, a stand-up or scheduled run
that was missed or failed; and the digests it sends out every half minute. It outlives
reloads: each notice goes out with the push settings of the live generation."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from botweave.agents import Agent
from botweave.delivery import Delivered
from botweave.push import NotificationCategory, Notifier
from botweave.push.notifier import mention_triggers
from botweave.runtime.config import Config
from botweave.runtime.generation import Live
from botweave.store import store_failures
from botweave.tasks import TaskOwner
from botweave.types import BotMessage

log = logging.getLogger(__name__)

DIGEST_FLUSH_SECONDS = 30.0


class Notices:
    def __init__(self, live: Live) -> None:
        self._live = live
        self._digesting = False

    @property
    def _notifier(self) -> Notifier:
        return self._live.generation.notifier

    @property
    def _config(self) -> Config:
        return self._live.generation.config

    async def approval_requested(self, platform: str, user_id: str, content: str, agent: str) -> None:
        await self._notifier.notify(
            NotificationCategory.APPROVAL_REQUESTED, [f"{platform}:{user_id}"], content, identity=agent, urgent=True
        )

    async def turn_finished(self, msg: BotMessage, agent: Agent, delivered: Delivered, seconds: float) -> None:
        """A long turn tells the person who asked (`agent_finished`, if they opted in)."""
        if seconds >= self._config.push.agent_finished_after_seconds:
            await self._notifier.notify(
                NotificationCategory.AGENT_FINISHED,
                [f"{msg.platform}:{msg.sender.user_id}"],
                delivered.text,
                identity=agent.name,
            )

    async def room_posted(self, room: str, speaker: str, text: str) -> None:
        for recipient, category in mention_triggers(text, self._config.push.known_people()):
            await self._notifier.notify(category, [recipient], text, identity=f"room {room} ({speaker})")

    async def room_missed(self, room: str, detail: str) -> None:
        owner = self._config.rooms[room].owner if room in self._config.rooms else None
        log.warning("room %s: %s", room, detail)
        if owner:
            await self._notifier.notify(
                NotificationCategory.SCHEDULED_TASK_FAILED, [owner], f"Room {room}: {detail}", identity=f"room {room}"
            )

    async def schedule_failed(self, name: str, detail: str) -> None:
        schedule = self._config.schedules.get(name)
        owner = schedule.owner if schedule is not None else None
        if owner:
            await self._notifier.notify(
                NotificationCategory.SCHEDULED_TASK_FAILED, [owner], f"Schedule {name}: {detail}", identity=f"schedule {name}"
            )

    async def owner_alert(self, category: str, owners: list[str], headline: str, text: str) -> None:
        """A model refused its key, or a budget is spent: the owners hear of it (`model_failed`,
        `budget`); `headline` names no person, so it is what a lock screen may show."""
        await self._notifier.notify(NotificationCategory.parse(category), owners, text, identity=headline)

    def start_digests(self, tasks: TaskOwner, stopping: asyncio.Event) -> None:
        """Digests go out once the live configuration has a push directory (at start or after
        a reload), from one task in `tasks` until `stopping`."""
        if self._config.push.directory and not self._digesting:
            self._digesting = True
            tasks.spawn(self.flush_digests(stopping), name="notification digests")

    async def flush_digests(self, stopping: asyncio.Event) -> None:
        """Send the digests that are due, every `DIGEST_FLUSH_SECONDS`, until `stopping`."""
        while not stopping.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=DIGEST_FLUSH_SECONDS)
            try:
                await self._notifier.flush_digests()
            except store_failures():  # the store; the transports report their own failures
                log.exception("delivering notification digests failed; will retry")
