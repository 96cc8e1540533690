"""botweave: connect chat platforms to LLM agents and rooms of agents.

This module only hands the public names on; each is defined where its concern lives.
"""

from botweave.config import BotConfig, ConfigError
from botweave.hooks import HookEvent, HookRegistry
from botweave.runtime.app import App
from botweave.runtime.config import Config, load_config
from botweave.runtime.turns import TurnOutcome
from botweave.types import (
    BotChannel,
    BotMessage,
    BotUser,
    MessageActionResult,
    MessageType,
    OutboundFile,
    PlatformCapabilities,
    PlatformEvent,
    QuotedRef,
)
from botweave.version import __version__

__all__ = [
    "App", "BotChannel", "BotConfig", "BotMessage", "BotUser", "Config", "ConfigError", "HookEvent",
    "HookRegistry", "MessageActionResult", "MessageType", "OutboundFile", "PlatformCapabilities", "PlatformEvent",
    "QuotedRef", "TurnOutcome", "load_config", "__version__",
]
