"""botweave: connect chat platforms to LLM agents and rooms of agents.

This module only hands the public names on; each is defined where its concern lives. The
kernel's names are imported with it; those of the layers above the kernel (the App and its
configuration from the runtime, `tool` from the tools) only when first asked for, so that
importing a kernel module (`botweave.types`, say) loads the kernel and nothing above it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from botweave.config import BotConfig, ConfigError
from botweave.hooks import HookEvent, HookRegistry
from botweave.pipeline import TurnOutcome
from botweave.tooling import ToolContext, ToolError
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

if TYPE_CHECKING:  # what type checkers see of the names below; nothing is imported here at run time
    from botweave.runtime.app import App
    from botweave.runtime.config import Config, load_config
    from botweave.tools.python import tool

#: The public names of the layers above the kernel, and the module each comes from.
_ABOVE = {
    "App": "botweave.runtime.app",
    "Config": "botweave.runtime.config",
    "load_config": "botweave.runtime.config",
    "tool": "botweave.tools.python",
}

__all__ = [
    "App", "BotChannel", "BotConfig", "BotMessage", "BotUser", "Button", "Config", "ConfigError", "HookEvent",
    "HookRegistry", "MessageActionResult", "MessageType", "OutboundFile", "PlatformCapabilities", "PlatformEvent",
    "QuotedRef", "ToolContext", "ToolError", "TurnOutcome", "load_config", "tool", "__version__",
]


def __getattr__(name: str) -> Any:
    """A name of the layers above, imported on first use and kept here afterwards."""
    where = _ABOVE.get(name)
    if where is None:
        raise AttributeError(f"module 'botweave' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
