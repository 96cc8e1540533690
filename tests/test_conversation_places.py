"""A conversation's line: places taken at once and waited for later keep the order they were
taken in, whatever their takers await meanwhile, and share the line with `hold`."""

import asyncio

from botweave.conversations import ConversationLocks, Place


async def test_places_come_in_the_order_they_were_taken_however_late_each_waits():
    locks = ConversationLocks()
    served: list[str] = []

    async def turn(name: str, busy_for: float) -> None:
        place = locks.place("chat")  # taken at once
        try:
            await asyncio.sleep(busy_for)  # recording it, say: the later one is done first
            await place.wait()
            served.append(name)
            await asyncio.sleep(0.01)
        finally:
            place.release()

    await asyncio.gather(turn("first", 0.05), turn("second", 0.0), turn("third", 0.02))
    assert served == ["first", "second", "third"]


async def test_a_place_given_up_before_its_turn_leaves_the_line():
    locks = ConversationLocks()
    holder = locks.place("chat")
    await holder.wait()
    quitter, next_one = locks.place("chat"), locks.place("chat")
    quitter.release()  # a platform retry, found out while it waited
    holder.release()
    await asyncio.wait_for(next_one.wait(), timeout=1)
    next_one.release()


async def test_a_waiter_cancelled_in_line_passes_its_turn_on():
    locks = ConversationLocks()
    holder = locks.place("chat")
    await holder.wait()
    cancelled, next_one = locks.place("chat"), locks.place("chat")
    waiting = asyncio.create_task(cancelled.wait())
    await asyncio.sleep(0)
    holder.release()  # handed to `cancelled`, which is cancelled before it runs
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    cancelled.release()
    await asyncio.wait_for(next_one.wait(), timeout=1)
    next_one.release()


async def test_hold_and_places_share_one_line():
    locks = ConversationLocks()
    order: list[str] = []
    place = locks.place("chat")

    async def scheduled() -> None:
        async with locks.hold("chat"):
            order.append("scheduled")

    other = asyncio.create_task(scheduled())
    await asyncio.sleep(0.01)
    await place.wait()
    order.append("message")
    place.release()
    await other
    assert order == ["message", "scheduled"]
    async with locks.hold("another chat"):
        assert await asyncio.wait_for(_served(locks.place("chat")), timeout=1)


async def _served(place: Place) -> bool:
    await place.wait()
    place.release()
    return True
