from collections.abc import AsyncIterator

import pytest

from tests.adapters.platforms import DRIVERS, PlatformDriver
from tests.adapters.rooms import ROOM_DRIVERS, RoomDriver


@pytest.fixture(params=sorted(DRIVERS))
async def platform(request: pytest.FixtureRequest) -> AsyncIterator[PlatformDriver]:
    """Each platform's emulator and adapter, started through the real SDK; stopped afterwards."""
    driver = DRIVERS[request.param]()
    await driver.start()
    try:
        yield driver
    finally:
        await driver.stop()


@pytest.fixture(params=sorted(ROOM_DRIVERS))
async def room(request: pytest.FixtureRequest) -> AsyncIterator[RoomDriver]:
    """Each platform's emulator, ready for an App with a room (`await room.start()`); the App
    is stopped before the emulator."""
    driver = ROOM_DRIVERS[request.param]()
    await driver.start_emulator()
    try:
        yield driver
    finally:
        await driver.stop()
