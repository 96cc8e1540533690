"""botweave rooms: several agents answering in turn in one conversation.

The planner is pure (roster + transcript in, next speaker out), the runtime persists the
transcript in the store so restarts resume the same schedule, and the scheduler opens
activities from cron schedules on APScheduler.
"""

from botweave.cron import cron_trigger
from botweave.rooms.config import RoomConfig
from botweave.rooms.planner import RoomEvent, RoundRobinRoomPlanner, extract_mentions, next_round
from botweave.rooms.runtime import Room, RoomMember, render_transcript
from botweave.rooms.schedule import RoomScheduler, ScheduleInfo

__all__ = [
    "Room",
    "RoomConfig",
    "RoomEvent",
    "RoomMember",
    "RoomScheduler",
    "RoundRobinRoomPlanner",
    "ScheduleInfo",
    "cron_trigger",
    "extract_mentions",
    "next_round",
    "render_transcript",
]
