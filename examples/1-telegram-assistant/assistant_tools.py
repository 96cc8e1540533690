"""The assistant's Python tools: each `@tool` function is offered to the model, its JSON
schema taken from the type hints and the docstring."""

from typing import Literal

from botweave import tool


@tool
def convert_temperature(value: float, to: Literal["C", "F"]) -> dict:
    """Convert a temperature between Celsius and Fahrenheit.

    Args:
        value: The temperature to convert, in the other unit.
        to: The unit wanted: C (from Fahrenheit) or F (from Celsius).
    """
    converted = value * 9 / 5 + 32 if to == "F" else (value - 32) * 5 / 9
    return {"value": round(converted, 1), "unit": to}
