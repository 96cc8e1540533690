"""Who a person is across platforms: an account (`platform:user_id`) and the person it belongs
to.

An account is its own person until it is linked (`/link`, the memory feature) to another:
then both answer to one person id, the account that issued the link code. Whatever follows a
person rather than an account (what an agent remembers of them, a budget) keys its state by
`person_of`, so linking two accounts joins that state and unlinking parts it again. The link
lives in the store under `link_key`, so every worker of a deployment sees the same person.
"""

from __future__ import annotations

from botweave.store import Store

#: The store key prefix of account links: `identity:link:<platform>:<user_id>` holds the
#: person id the account belongs to; absent, the account is its own person.
LINK_PREFIX = "identity:link:"


def account_id(platform: str, user_id: str) -> str:
    """The id of one account on one platform, which is also its person id while unlinked."""
    return f"{platform}:{user_id}"


def link_key(platform: str, user_id: str) -> str:
    return f"{LINK_PREFIX}{account_id(platform, user_id)}"


async def person_of(store: Store, platform: str, user_id: str) -> str:
    """The person the account belongs to: the account it was linked to, else itself."""
    linked = await store.get(link_key(platform, user_id))
    return linked or account_id(platform, user_id)
