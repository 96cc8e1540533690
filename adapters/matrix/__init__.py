"""Matrix: see adapter.py for the data flow; the SDK (mautrix) loads only when the platform starts."""

from typing import ClassVar

from botweave.adapter import Adapter, Check, PlatformRejected, PlatformSpec
from botweave.types import PlatformCapabilities

from .config import MatrixConfig

INSTALL = "pip install 'botweave[matrix]'"


class SdkMissing(Adapter):
    """Matrix configured where mautrix is not installed (it is an optional extra): the platform
    fails to start, and the doctor fails, with the command that installs it (and markdown-it-py,
    which the extra brings along)."""

    platform = "matrix"
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities()

    async def start(self, *, inbound: bool = True) -> None:
        raise PlatformRejected(f"matrix: the Matrix SDK (mautrix) is not installed; {INSTALL}")

    async def stop(self) -> None:
        return None

    async def diagnose(self) -> list[Check]:
        return [Check("matrix", False, "the Matrix SDK (mautrix) is not installed", INSTALL)]


def _create(config: MatrixConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the SDK's import.
    try:
        from .adapter import MatrixAdapter
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("mautrix", "markdown_it"):
            raise
        return SdkMissing(config)
    return MatrixAdapter(config)


platform = PlatformSpec("matrix", MatrixConfig, _create)
