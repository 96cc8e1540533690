"""A tool the approval tests list with `approval: required`: {python: "tests.approvaldemo:transfer"}."""

from __future__ import annotations

from botweave import tool

#: The arguments of every `transfer` that actually ran.
TRANSFERS: list[dict] = []


@tool
def transfer(amount: int, to: str, api_key: str = "") -> str:
    """Move money (only once a person approved it, in the tests)."""
    TRANSFERS.append({"amount": amount, "to": to})
    return f"sent {amount} to {to}"
