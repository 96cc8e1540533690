"""The support agent's tools. `refund` is listed with `approval: required` in bot.yaml, so
botweave runs it only after the owner approved that exact call."""

from botweave import ToolError, tool

ORDERS = {"A-1001": {"item": "blue kettle", "paid": 25.0, "refunded": 0.0}}


@tool
def lookup_order(order_id: str) -> dict:
    """An order's item, what was paid and what was already refunded.

    Args:
        order_id: The order number, e.g. "A-1001".
    """
    if order_id not in ORDERS:
        raise ToolError(f"no order {order_id}")
    return {"order_id": order_id, **ORDERS[order_id]}


@tool
def refund(order_id: str, amount: float) -> str:
    """Refund part or all of an order (needs the owner's approval).

    Args:
        order_id: The order number, e.g. "A-1001".
        amount: How much to give back; at most what was paid and not yet refunded.
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise ToolError(f"no order {order_id}")
    if amount <= 0 or order["refunded"] + amount > order["paid"]:
        raise ToolError(f"cannot refund {amount}: paid {order['paid']}, refunded {order['refunded']}")
    order["refunded"] += amount
    return f"refunded {amount:.2f} on {order_id}"
