"""A plugin: `/order [QUANTITY] ITEM` records an order, and a `message_sending` hook signs
every reply the bot sends. The orders live here so the program embedding the bot (shop.py)
can read them; a real shop would keep them in its own database."""

from __future__ import annotations

#: Every order taken, oldest first: {"who", "quantity", "item", "chat"}.
ORDERS: list[dict] = []
#: Conversations that ordered something, as send targets (`platform:chat`), for announcements.
CUSTOMERS: set[str] = set()
SIGNATURE = "— Corner Coffee"


async def order(inbound):
    words = list(inbound.message.command_args or [])
    quantity = int(words.pop(0)) if words and words[0].isdigit() else 1
    if not words:
        return "What would you like? e.g. /order 2 coffee"
    message = inbound.message
    chat = f"{message.platform}:{message.channel.channel_id}"
    ORDERS.append({"who": message.sender.name, "quantity": quantity, "item": " ".join(words), "chat": chat})
    CUSTOMERS.add(chat)
    return f"Order #{len(ORDERS)}: {quantity} × {' '.join(words)}. It will be ready in 5 minutes."


def sign(event):
    """Hooks may rewrite what is about to be sent: each reply gets the shop's signature."""
    if event.text and not event.text.endswith(SIGNATURE):
        event.text = f"{event.text}\n{SIGNATURE}"


def setup(app):
    app.commands.register("order", order, help="order something", args="[QUANTITY] ITEM")
    app.hooks.register("message_sending", sign)
