"""The console's bot.yaml section."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from botweave.config import PlatformConfig


class ConsoleConfig(PlatformConfig):
    #: The console is the person at this terminal, so nobody needs approving.
    default_unknown_user_policy: ClassVar[Literal["deny", "pair", "allow"]] = "allow"
    user_name: str = "you"
    """The name you appear under in the terminal chat."""
    save_dir: Optional[str] = None
    """Where files the bot sends are saved (their path is printed); unset, a new folder in the
    system's temporary directory."""
