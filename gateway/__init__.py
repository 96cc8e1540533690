"""The gateway: one WebSocket control plane for web chat, custom clients and operators, and
the `web` platform its chats run on (docs/gateway.md)."""

from botweave.adapter import PlatformSpec

from .adapter import WebAdapter
from .client import Client, Event, GatewayError
from .config import GatewayConfig, WebConfig

platform = PlatformSpec("web", WebConfig, WebAdapter)

__all__ = ["Client", "Event", "GatewayConfig", "GatewayError", "WebAdapter", "WebConfig", "platform"]
