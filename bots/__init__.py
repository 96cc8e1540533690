"""botweave: connect chat platforms to LLM agents and rooms of agents.

This module only hands the public names on; each is defined where its concern lives.
"""

from botweave.config import BotConfig, ConfigError
from botweave.hooks import HookEvent, HookRegistry
from botweave.runtime.app import App
from botweave.runtime.config import Config, load_config
from botweave.runtime.turns import TurnOutcome
from botweave.tooling import ToolContext, ToolError
from botweave.tools.python import tool
from botweave.types import (
    BotChannel,
    BotMessage,
    BotUser,
    Button,
    MessageActionResult,
    MessageType,
    OutboundFile,
    PlatformCapabilities,
    PlatformEvent,
    QuotedRef,
)
from botweave.version import __version__

__all__ = [
    "App", "BotChannel", "BotConfig", "BotMessage", "BotUser", "Button", "Config", "ConfigError", "HookEvent",
    "HookRegistry", "MessageActionResult", "MessageType", "OutboundFile", "PlatformCapabilities", "PlatformEvent",
    "QuotedRef", "ToolContext", "ToolError", "TurnOutcome", "load_config", "tool", "__version__",
]
