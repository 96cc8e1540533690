"""botweave core: message types, configuration and the runtime that connects platforms to agents."""

from typing import TYPE_CHECKING, Any

from bots.config import BotConfig, Config, ConfigError, load_config
from bots.hooks import HookEvent, HookRegistry
from bots.types import (
    BotChannel,
    BotMessage,
    BotUser,
    MessageActionResult,
    MessageType,
    PlatformCapabilities,
    PlatformEvent,
    QuotedRef,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from bots.app import App, TurnOutcome


def __getattr__(name: str) -> Any:
    # The runtime wires adapters and policies, which import these core types; loading it
    # lazily lets `import policies` or `import adapters.base` come first without a cycle.
    if name in ("App", "TurnOutcome"):
        from bots import app

        return getattr(app, name)
    raise AttributeError(f"module 'bots' has no attribute {name!r}")

__all__ = [
    "App",
    "BotChannel",
    "BotConfig",
    "BotMessage",
    "BotUser",
    "Config",
    "ConfigError",
    "HookEvent",
    "HookRegistry",
    "MessageActionResult",
    "MessageType",
    "PlatformCapabilities",
    "PlatformEvent",
    "QuotedRef",
    "TurnOutcome",
    "load_config",
    "__version__",
]
