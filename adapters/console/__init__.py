"""The console platform: a terminal or a pipe as a chat."""

from botweave.adapter import PlatformSpec

from .adapter import ConsoleAdapter
from .config import ConsoleConfig

platform = PlatformSpec("console", ConsoleConfig, ConsoleAdapter)
