"""Pairing: a stranger gets a code, the owner approves it, the stranger is let in.

Codes are 8 characters from an alphabet without look-alikes (no 0/O/1/I), live for an hour,
and are kept only as hashes, so a leaked store reveals no usable code. At most three codes
wait per platform, and five wrong guesses within a minute lock approval for five minutes,
which makes guessing hopeless. All state is in the store, so the CLI approving a code and
the bot that issued it may be different processes.

Both limits hold however many requests race, in one process or across workers: a pending
request takes its place with the store's one-step `set_if_absent_capped` (so fifty strangers
writing at once get three codes, not fifty), and every approval attempt first takes one of
five attempt places (so fifty guesses at once are not all checked before the lock lands).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from botweave.store import Store

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL = 3600.0
MAX_PENDING = 3
MAX_FAILURES = 5
FAILURE_WINDOW = 60.0
LOCKOUT = 300.0
#: How often a stranger turned away by a full queue of pending codes is told so.
FULL_NOTICE_WINDOW = 600.0


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normalise(code: str) -> str:
    return code.strip().upper().replace("-", "").replace(" ", "")


@dataclass(frozen=True, slots=True)
class PendingRequest:
    platform: str
    user_id: str
    name: str
    chat_id: str
    created: float
    code_hash: str
    #: The conversation the request was made in, where the welcome is posted ("" in records
    #: kept before it was: then the welcome's chat names it).
    conversation: str = ""


def _as_dict(request: PendingRequest) -> dict[str, object]:
    return {f: getattr(request, f) for f in PendingRequest.__slots__}


RequestStatus = Literal["issued", "already_pending", "too_many_pending"]
ApproveStatus = Literal["approved", "wrong_code", "locked"]


@dataclass(frozen=True, slots=True)
class RequestResult:
    status: RequestStatus
    code: str | None = None  # only when issued: shown once, never stored


@dataclass(frozen=True, slots=True)
class ApproveResult:
    status: ApproveStatus
    request: PendingRequest | None = None
    became_owner: bool = False


class Pairing:
    def __init__(self, store: Store, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    @staticmethod
    def _hash(platform: str, code: str) -> str:
        return hashlib.sha256(f"{platform}:{normalise(code)}".encode()).hexdigest()

    async def request(self, platform: str, user_id: str, name: str, chat_id: str, conversation: str = "") -> RequestResult:
        """A code for `user_id`, unless they have one pending or MAX_PENDING codes wait already.

        The user's pending request is the capped key (`pair:user:<platform>:<user>`, holding the
        request); the code's hash points at the user, for approval by code.
        """
        code = new_code()
        code_hash = self._hash(platform, code)
        request = PendingRequest(platform, user_id, name, chat_id, self._clock(), code_hash, conversation)
        claimed = await self._store.set_if_absent_capped(
            self._user_key(platform, user_id),
            json.dumps(_as_dict(request)),
            prefix=self._user_key(platform, ""),
            cap=MAX_PENDING,
            ttl=CODE_TTL,
        )
        if claimed == "exists":
            return RequestResult("already_pending")
        if claimed == "full":
            return RequestResult("too_many_pending")
        await self._store.set(f"pair:pending:{platform}:{code_hash}", user_id, ttl=CODE_TTL)
        return RequestResult("issued", code)

    async def first_refusal(self, platform: str, user_id: str) -> bool:
        """Whether a stranger turned away by the cap should be told (once per FULL_NOTICE_WINDOW)."""
        return await self._store.set_if_absent(f"pair:refused:{platform}:{user_id}", "1", ttl=FULL_NOTICE_WINDOW)

    @staticmethod
    def _user_key(platform: str, user_id: str) -> str:
        return f"pair:user:{platform}:{user_id}"

    async def pending(self, platform: str | None = None) -> list[PendingRequest]:
        prefix = self._user_key(platform, "") if platform else "pair:user:"
        found = []
        for key in await self._store.keys(prefix):
            raw = await self._store.get(key)
            if raw is not None:
                found.append(PendingRequest(**json.loads(raw)))
        return sorted(found, key=lambda r: r.created)

    async def _take(self, platform: str, code: str) -> PendingRequest | None:
        code_hash = self._hash(platform, code)
        key = f"pair:pending:{platform}:{code_hash}"
        user_id = await self._store.get(key)
        if user_id is None:
            return None
        raw = await self._store.get(self._user_key(platform, user_id))
        request = PendingRequest(**json.loads(raw)) if raw is not None else None
        if request is None or request.code_hash != code_hash:
            await self._store.delete(key)  # a code whose request is gone
            return None
        await self._store.delete(key, self._user_key(platform, user_id))
        return request

    async def approve(self, platform: str, code: str, *, claim_owner: bool = False) -> ApproveResult:
        """Let the code's user in. With `claim_owner` (CLI, no owner configured) the first
        approved user becomes the owner."""
        lock_key = f"pair:locked:{platform}"
        if await self._store.get(lock_key) is not None:
            return ApproveResult("locked")
        # An attempt holds one of MAX_FAILURES places for a minute (a right code gives its
        # place back): however many guesses arrive at once, no more are checked.
        attempt = f"pair:attempt:{platform}:{uuid.uuid4().hex}"
        place = await self._store.set_if_absent_capped(
            attempt, "1", prefix=f"pair:attempt:{platform}:", cap=MAX_FAILURES, ttl=FAILURE_WINDOW
        )
        if place == "full":
            await self._store.set(lock_key, "1", ttl=LOCKOUT)
            return ApproveResult("locked")
        request = await self._take(platform, code)
        if request is None:
            failures = await self._store.window_add(f"pair:failures:{platform}", self._clock(), FAILURE_WINDOW)
            if failures >= MAX_FAILURES:
                await self._store.set(lock_key, "1", ttl=LOCKOUT)
                await self._store.delete(f"pair:failures:{platform}")
                return ApproveResult("locked")
            return ApproveResult("wrong_code")
        await self._store.delete(attempt)
        await self._admit(request)
        became_owner = claim_owner and await self._store.set_if_absent(f"pair:owner:{platform}", request.user_id)
        return ApproveResult("approved", request, became_owner)

    async def _admit(self, request: PendingRequest) -> None:
        await self._store.set(
            f"pair:approved:{request.platform}:{request.user_id}",
            json.dumps({"name": request.name, "approved_at": self._clock()}),
        )

    async def deny(self, platform: str, code: str) -> PendingRequest | None:
        return await self._take(platform, code)

    async def _take_user(self, platform: str, user_id: str) -> PendingRequest | None:
        raw = await self._store.get(self._user_key(platform, user_id))
        if raw is None:
            return None
        request = PendingRequest(**json.loads(raw))
        await self._store.delete(f"pair:pending:{platform}:{request.code_hash}", self._user_key(platform, user_id))
        return request

    async def approve_user(self, platform: str, user_id: str) -> PendingRequest | None:
        """Let a waiting user in by who they are, for an owner who is already authenticated
        (the gateway): no code to guess, so no attempts to count."""
        request = await self._take_user(platform, user_id)
        if request is not None:
            await self._admit(request)
        return request

    async def deny_user(self, platform: str, user_id: str) -> PendingRequest | None:
        return await self._take_user(platform, user_id)

    async def revoke(self, platform: str, user_id: str) -> bool:
        key = f"pair:approved:{platform}:{user_id}"
        existed = await self._store.get(key) is not None
        await self._store.delete(key)
        return existed

    async def is_approved(self, platform: str, user_id: str) -> bool:
        return await self._store.get(f"pair:approved:{platform}:{user_id}") is not None

    async def approved(self, platform: str | None = None) -> list[tuple[str, str]]:
        prefix = f"pair:approved:{platform}:" if platform else "pair:approved:"
        keys = await self._store.keys(prefix)
        return sorted(tuple(k.removeprefix("pair:approved:").split(":", 1)) for k in keys)  # type: ignore[misc]

    async def owner(self, platform: str) -> str | None:
        return await self._store.get(f"pair:owner:{platform}")
