"""The console platform: a terminal or a pipe as a chat."""

from botweave.adapter import PlatformSpec
from botweave.adapters.console.adapter import ConsoleAdapter
from botweave.adapters.console.config import ConsoleConfig

platform = PlatformSpec("console", ConsoleConfig, ConsoleAdapter)
