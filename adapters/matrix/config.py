"""Matrix's bot.yaml section."""

from __future__ import annotations

from typing import Annotated, Optional

from botweave.config import PlatformConfig
from pydantic import Field, SecretStr, field_validator


class MatrixConfig(PlatformConfig):
    homeserver: Optional[str] = None
    """The homeserver's client API address (`https://matrix.example.org`); `api_base_url`, when
    set, takes its place."""
    user_id: Optional[str] = None
    """The bot's full Matrix id (`@assistant:example.org`)."""
    access_token: Optional[SecretStr] = None
    """An access token of the bot's account (write `${MATRIX_ACCESS_TOKEN}`); either this or
    `password`."""
    password: Optional[SecretStr] = None
    """The bot account's password, to log in at start when no `access_token` is given."""
    device_id: Optional[str] = None
    """The device the bot logs in as. Keep it fixed: the homeserver remembers sent transaction
    ids per device, which is what keeps a repeated send from posting twice across restarts."""
    sync_timeout_seconds: Annotated[int, Field(ge=0, le=300)] = 30
    """How long each /sync long poll waits for something to happen, in seconds."""
    answer_backlog_on_first_start: bool = False
    """On the very first start (no sync position stored yet), answer the messages the
    homeserver hands over from before the bot ran; by default they are skipped and only what
    arrives from then on is answered."""

    @field_validator("user_id")
    @classmethod
    def _full_id(cls, value: Optional[str]) -> Optional[str]:
        if value and not (value.startswith("@") and ":" in value[2:]):
            raise ValueError(f"{value!r} is not a full Matrix user id; write it as @name:server (e.g. @assistant:example.org)")
        return value

    def missing_credentials(self) -> list[str]:
        """The homeserver, the bot's id, and a token or a password."""
        missing = [] if self.homeserver or self.api_base_url else ["homeserver"]
        if not self.user_id:
            missing.append("user_id")
        if not any(value is not None and value.get_secret_value().strip() for value in (self.access_token, self.password)):
            missing.append("access_token")
        return missing
