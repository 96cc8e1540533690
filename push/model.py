"""The small value types shared by preferences, transports and the notifier.

Kept apart from `push.policy` so the policy stays free of delivery concerns, and apart from
the transports so the config parser can name recipients without importing aiohttp.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = ["DM_TRANSPORT", "PushMessage", "Recipient"]

#: The transport key of "a DM on the recipient's own platform", every recipient's default.
DM_TRANSPORT = "dm"


@dataclass(frozen=True)
class Recipient:
    """A person who can be notified: who they are on a platform, and how to reach them.

    `transport` is a key into the notifier's transports: `dm` (the default) or
    `webhook:<name>` for a webhook declared under `push.webhooks`. `name` and `aliases` are
    the handles agents use to @-mention them in rooms.
    """

    platform: str
    user_id: str
    name: str | None = None
    aliases: tuple[str, ...] = ()
    transport: str = DM_TRANSPORT

    def __post_init__(self) -> None:
        if not self.platform or ":" in self.platform:
            raise ValueError(f"recipient platform must be a plain name, got {self.platform!r}")
        if not str(self.user_id):
            raise ValueError("recipient user id must not be empty")
        object.__setattr__(self, "user_id", str(self.user_id))
        object.__setattr__(self, "aliases", tuple(self.aliases))

    @property
    def key(self) -> str:
        """`<platform>:<user_id>`, the form used in config and in store keys."""
        return f"{self.platform}:{self.user_id}"

    @property
    def handles(self) -> tuple[str, ...]:
        """Every name this person answers to, for mention matching."""
        return tuple(h for h in (self.name, *self.aliases) if h)

    @classmethod
    def parse(cls, key: str, **extra: Any) -> Recipient:
        """`telegram:42` → Recipient; the user id may itself contain colons."""
        platform, sep, user_id = str(key).partition(":")
        if not sep or not platform or not user_id:
            raise ValueError(f"recipient must be written <platform>:<user_id>, got {key!r}")
        return cls(platform=platform, user_id=user_id, **extra)

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "user_id": self.user_id,
            "name": self.name,
            "aliases": list(self.aliases),
            "transport": self.transport,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Recipient:
        return cls(
            platform=str(data["platform"]),
            user_id=str(data["user_id"]),
            name=data.get("name"),
            aliases=tuple(data.get("aliases") or ()),
            transport=str(data.get("transport") or DM_TRANSPORT),
        )


@dataclass(frozen=True)
class PushMessage:
    """One message handed to a transport: already redacted, ready to show to a person.

    `kind` is `notification` or `digest`; a digest carries how many notifications it sums up
    in `count`. The webhook transport posts `to_dict()` as its JSON body, so `identity` is
    only filled in when the recipient's detail level allows it to be seen.
    """

    text: str
    category: str
    recipient: Recipient
    created_at: datetime
    identity: str | None = None
    urgent: bool = False
    kind: str = "notification"
    count: int = 1

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": self.kind,
            "category": self.category,
            "text": self.text,
            "recipient": {"platform": self.recipient.platform, "user_id": self.recipient.user_id},
            "created_at": self.created_at.isoformat(),
            "urgent": self.urgent,
            "count": self.count,
        }
        if self.identity is not None:
            body["identity"] = self.identity
        return body
