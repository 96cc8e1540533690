from collections.abc import AsyncIterator

import pytest

from tests.adapters.platforms import DRIVERS, PlatformDriver


@pytest.fixture(params=sorted(DRIVERS))
async def platform(request: pytest.FixtureRequest) -> AsyncIterator[PlatformDriver]:
    """Each platform's emulator and adapter, started through the real SDK; stopped afterwards."""
    driver = DRIVERS[request.param]()
    await driver.start()
    try:
        yield driver
    finally:
        await driver.stop()

