"""The arrival chain end to end through a started App: a conversation's turns keep the order
its messages arrived in even when recording them takes longer for one than another, a
platform retry is dropped once, and a /stop does not wait behind the turn it stops."""

import asyncio
from collections.abc import Sequence

from botweave import App
from botweave.store import MemoryStore
from botweave.store.base import Operation

from tests.support import RecordingAdapter, config, message


class SlowToRecord(MemoryStore):
    """A store that takes its time writing the item whose key ends in `:slow` (a store
    under load), so the message after it is recorded first."""

    async def commit(
        self, marker: str, operations: Sequence[Operation], *, value: str = "1", ttl: float | None = None
    ) -> bool:
        if marker.startswith("dedup:") and marker.endswith(":slow"):
            await asyncio.sleep(0.2)
        return await super().commit(marker, operations, value=value, ttl=ttl)


async def started(store: MemoryStore, **bot: object) -> tuple[App, RecordingAdapter]:
    app = App.from_config(config(**bot), store=store)
    adapter = RecordingAdapter()
    app.add_adapter(adapter)
    await app.start(platforms=[])
    return app, adapter


async def test_turns_keep_arrival_order_when_a_later_message_is_recorded_first():
    app, adapter = await started(SlowToRecord())
    try:
        assert app.journal is not None
        await asyncio.gather(app.submit(message("first", message_id="slow")), app.submit(message("second")))
        await app.drain()
        assert [text.rsplit(" ", 1)[-1] for text in adapter.texts()] == ["first", "second"]
    finally:
        await app.stop()


async def test_a_platform_retry_is_answered_once():
    app, adapter = await started(MemoryStore())
    try:
        await app.submit(message("hello", message_id="m1"))
        await app.submit(message("hello", message_id="m1"))  # the platform sends it again
        await app.drain()
        assert adapter.texts() == ["assistant (offline echo) heard: hello"]
    finally:
        await app.stop()
