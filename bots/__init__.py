"""botweave core: message types, configuration and the runtime that connects platforms to agents."""

from bots.app import App, TurnOutcome
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
