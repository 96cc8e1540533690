"""botweave: connect chat platforms to LLM agents and rooms of agents.

This module only hands the public names on; each is defined where its concern lives, and
imported when first asked for: `import botweave` (which every `botweave.*` import runs first,
the command line's included) loads nothing else, so `botweave --help` does not wait for
pydantic and the kernel, and importing a kernel module (`botweave.types`, say) loads the
kernel and nothing above it (the App and its configuration from the runtime, `tool` from
the tools).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from botweave.version import __version__

if TYPE_CHECKING:  # what type checkers see of the names below; nothing is imported here at run time
    from botweave.config import BotConfig, ConfigError
    from botweave.hooks import HookEvent, HookRegistry
    from botweave.pipeline import TurnOutcome
    from botweave.runtime.app import App
    from botweave.runtime.config import Config, load_config
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

#: Every public name, and the module it comes from.
_WHERE = {
    "App": "botweave.runtime.app",
    "BotChannel": "botweave.types",
    "BotConfig": "botweave.config",
    "BotMessage": "botweave.types",
    "BotUser": "botweave.types",
    "Button": "botweave.types",
    "Config": "botweave.runtime.config",
    "ConfigError": "botweave.config",
    "HookEvent": "botweave.hooks",
    "HookRegistry": "botweave.hooks",
    "MessageActionResult": "botweave.types",
    "MessageType": "botweave.types",
    "OutboundFile": "botweave.types",
    "PlatformCapabilities": "botweave.types",
    "PlatformEvent": "botweave.types",
    "QuotedRef": "botweave.types",
    "ToolContext": "botweave.tooling",
    "ToolError": "botweave.tooling",
    "TurnOutcome": "botweave.pipeline",
    "load_config": "botweave.runtime.config",
    "tool": "botweave.tools.python",
}

__all__ = [
    "App", "BotChannel", "BotConfig", "BotMessage", "BotUser", "Button", "Config", "ConfigError", "HookEvent",
    "HookRegistry", "MessageActionResult", "MessageType", "OutboundFile", "PlatformCapabilities", "PlatformEvent",
    "QuotedRef", "ToolContext", "ToolError", "TurnOutcome", "load_config", "tool", "__version__",
]


def __getattr__(name: str) -> Any:
    """A public name, imported on first use and kept here afterwards."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'botweave' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
