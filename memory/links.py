"""Linking one person's accounts on several platforms: `/link` gives a one-time code, the same
person sends `/link CODE` from another platform, and both accounts are one person from then on
(botweave.identity: one memory, one budget). `/unlink` parts them again.

Codes are 8 characters from an alphabet without look-alikes, live ten minutes, are used once
and are kept only as hashes. Guessing meets the same failed-attempt budget as pairing codes:
every attempt first takes one of five places (a minute each; a right code gives its place
back), and five wrong codes within a minute lock linking on that platform for five minutes,
however many guesses race, across workers too.
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

from botweave.identity import account_id, link_key, person_of
from botweave.store import Store

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL = 600.0
MAX_FAILURES = 5
FAILURE_WINDOW = 60.0
LOCKOUT = 300.0

LinkStatus = Literal["linked", "wrong_code", "locked", "same_person"]


def normalise(code: str) -> str:
    return code.strip().upper().replace("-", "").replace(" ", "")


@dataclass(frozen=True, slots=True)
class Linked:
    """How a `/link CODE` went; on `linked`, the person both accounts now are and the person
    the redeeming account was before (whose memory joins the other's)."""

    status: LinkStatus
    person: str = ""
    was: str = ""


class Links:
    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    @staticmethod
    def _hash(code: str) -> str:
        return hashlib.sha256(f"botweave-link:{normalise(code)}".encode()).hexdigest()

    @staticmethod
    def _members_key(person: str) -> str:
        return f"identity:members:{person}"

    async def issue(self, platform: str, user_id: str) -> str:
        """A new code for the account; the account's earlier code stops working."""
        account = account_id(platform, user_id)
        issued_key = f"link:issued:{account}"
        earlier = await self._store.get(issued_key)
        if earlier is not None:
            await self._store.delete(f"link:code:{earlier}")
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        code_hash = self._hash(code)
        await self._store.set(f"link:code:{code_hash}", account, ttl=CODE_TTL)
        await self._store.set(issued_key, code_hash, ttl=CODE_TTL)
        return code

    async def redeem(self, platform: str, user_id: str, code: str) -> Linked:
        """Join the account to the person whose account issued `code`."""
        lock_key = f"link:locked:{platform}"
        if await self._store.get(lock_key) is not None:
            return Linked("locked")
        attempt = f"link:attempt:{platform}:{uuid.uuid4().hex}"
        place = await self._store.set_if_absent_capped(
            attempt, "1", prefix=f"link:attempt:{platform}:", cap=MAX_FAILURES, ttl=FAILURE_WINDOW
        )
        if place == "full":
            await self._store.set(lock_key, "1", ttl=LOCKOUT)
            return Linked("locked")
        code_key = f"link:code:{self._hash(code)}"
        issuer = await self._store.get(code_key)
        if issuer is None:
            failures = await self._store.window_add(f"link:failures:{platform}", self._clock(), FAILURE_WINDOW)
            if failures >= MAX_FAILURES:
                await self._store.set(lock_key, "1", ttl=LOCKOUT)
                await self._store.delete(f"link:failures:{platform}")
                return Linked("locked")
            return Linked("wrong_code")
        await self._store.delete(attempt, code_key, f"link:issued:{issuer}")
        issuer_platform, _, issuer_user = issuer.partition(":")
        person = await person_of(self._store, issuer_platform, issuer_user)
        was = await person_of(self._store, platform, user_id)
        if was == person:
            return Linked("same_person", person, was)
        await self._join(account_id(platform, user_id), was, person)
        return Linked("linked", person, was)

    async def _join(self, account: str, was: str, person: str) -> None:
        """Point the account (and, when it was a person others had joined, those too) at
        `person`."""
        moving = [account]
        if was == account:
            moving += await self.members(account)
            await self._store.delete(self._members_key(account))
        else:
            await self._forget_member(was, account)
        for member in moving:
            member_platform, _, member_user = member.partition(":")
            await self._store.set(link_key(member_platform, member_user), person)
        members = await self.members(person)
        await self._store.set(self._members_key(person), json.dumps(sorted({*members, *moving})))

    async def members(self, person: str) -> list[str]:
        """The accounts linked to `person` (besides the person's own)."""
        raw = await self._store.get(self._members_key(person))
        return list(json.loads(raw)) if raw else []

    async def _forget_member(self, person: str, account: str) -> None:
        members = [member for member in await self.members(person) if member != account]
        if members:
            await self._store.set(self._members_key(person), json.dumps(members))
        else:
            await self._store.delete(self._members_key(person))

    async def unlink(self, platform: str, user_id: str) -> list[str]:
        """Part the account from the person it was linked to, or (the person's own account)
        every account linked to it; the accounts parted, none when it was not linked."""
        account = account_id(platform, user_id)
        person = await person_of(self._store, platform, user_id)
        if person != account:
            await self._store.delete(link_key(platform, user_id))
            await self._forget_member(person, account)
            return [person]
        members = await self.members(account)
        for member in members:
            member_platform, _, member_user = member.partition(":")
            await self._store.delete(link_key(member_platform, member_user))
        await self._store.delete(self._members_key(account))
        return members
