"""Matrix: see adapter.py for the data flow; the SDK (mautrix) loads only when the platform starts."""

from botweave.adapter import Adapter, PlatformSpec

from .config import MatrixConfig


def _create(config: MatrixConfig) -> Adapter:
    # Deferred so `botweave --help`, `check` and the console never pay for the SDK's import.
    from .adapter import MatrixAdapter

    return MatrixAdapter(config)


platform = PlatformSpec("matrix", MatrixConfig, _create)
