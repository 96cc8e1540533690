"""Files of the web platform: what people upload for `chat.send` and what the bot posts into
web sessions, kept in the store.

The store, not a folder on disk, because a web message may be answered by any worker sharing
the store (with Redis, on another host), and that worker reads the person's file the way a
Telegram worker asks Telegram for one. Each file is one record (who uploaded it, the
conversations it was shown in, its name, type and size) and its bytes, base64, within
`media.max_bytes`; both expire with the conversation records.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import asdict, dataclass, field

from botweave.events import RECORD_TTL_S
from botweave.store import Store

_META = "gwfile:"
_DATA = "gwfiledata:"


@dataclass
class StoredFile:
    """A file's record: `owner` uploaded it (None: the bot posted it); it may be shown to
    whoever may read one of `conversations`."""

    file_id: str
    filename: str
    mime: str
    size: int
    owner: str | None = None
    conversations: list[str] = field(default_factory=list)
    created: float = 0.0

    def ref(self) -> dict[str, object]:
        """The file as a message's attachment names it."""
        ref: dict[str, object] = {"file_id": self.file_id, "filename": self.filename, "mime": self.mime, "size": self.size}
        if self.mime in ("audio/ogg", "audio/opus"):
            ref["type"] = "voice"
        return ref


class FileShelf:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def put(
        self, data: bytes, filename: str, mime: str, *, owner: str | None = None, conversation: str | None = None
    ) -> StoredFile:
        stored = StoredFile(
            file_id=f"f-{uuid.uuid4().hex[:20]}",
            filename=filename or "file",
            mime=mime or "application/octet-stream",
            size=len(data),
            owner=owner,
            conversations=[conversation] if conversation else [],
            created=time.time(),
        )
        await self.store.set(_DATA + stored.file_id, base64.b64encode(data).decode("ascii"), ttl=RECORD_TTL_S)
        await self._save(stored)
        return stored

    async def _save(self, stored: StoredFile) -> None:
        await self.store.set(_META + stored.file_id, json.dumps(asdict(stored), ensure_ascii=False), ttl=RECORD_TTL_S)

    async def get(self, file_id: str) -> StoredFile | None:
        if not file_id.startswith("f-"):
            return None
        raw = await self.store.get(_META + file_id)
        if raw is None:
            return None
        try:
            return StoredFile(**json.loads(raw))
        except (TypeError, ValueError):
            return None

    async def data(self, file_id: str) -> bytes | None:
        raw = await self.store.get(_DATA + file_id)
        return base64.b64decode(raw) if raw is not None else None

    async def shown_in(self, stored: StoredFile, conversation: str) -> None:
        """The file is attached to a message of `conversation`: its readers may fetch it."""
        if conversation not in stored.conversations:
            stored.conversations.append(conversation)
            await self._save(stored)
