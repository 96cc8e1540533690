"""A tool that counts its runs, for the tests that fail a model over mid-turn."""

from __future__ import annotations

from botweave import tool

#: The arguments of every run of `book_table`, in order.
BOOKINGS: list[str] = []


@tool
def book_table(name: str) -> str:
    """Book a table (something that must not happen twice).

    Args:
        name: Whose table.
    """
    BOOKINGS.append(name)
    return f"booked for {name}"
