"""The gateway wired into the runtime: where conversation events come from and where the
server runs.

With `gateway.listen` set (bot.yaml, or `--gateway-listen`), every process of the deployment
publishes conversation events (a worker answering from the shared stream too: that is how the
ingress's gateway sees its turns), the `web` platform is enabled, and the processes that hold
platform connections (roles `all` and `ingress`) serve the gateway. Features offer their
gateway methods through the kernel's registry here (approvals, pairing, rooms), so neither the
gateway nor they import each other. Without `gateway.listen` none of this exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botweave.events import ConversationEvents
from botweave.gateway.config import WebConfig
from botweave.gateway.server import Gateway
from botweave.methods import MethodRegistry
from botweave.policies.approvals import mask_arguments
from botweave.runtime.config import Config
from botweave.runtime.steps import Watch
from botweave.store import Store

if TYPE_CHECKING:
    from botweave.runtime.app import App


def conversation_events(config: Config, store: Store) -> ConversationEvents | None:
    """The conversation events every publication point is handed, or None without a gateway
    (and then nothing publishes at all). Enables the web platform as a side effect."""
    settings = config.gateway
    if settings.listen is None:
        return None
    if getattr(config.platforms, "web", None) is None:
        setattr(config.platforms, "web", WebConfig())  # the field exists: made from the installed platforms
    return ConversationEvents(
        store, log_size=settings.event_log_size, history=settings.history_messages, mask=mask_arguments
    )


def watch_step(events: ConversationEvents | None) -> Watch | None:
    return Watch(events) if events is not None else None


def build_gateway(app: App) -> Gateway | None:
    """The gateway server of this process (None without a gateway or in a worker), its method
    registry filled by the features that have methods."""
    events = app.events
    if events is None or app.role == "worker":
        return None
    registry = MethodRegistry()
    app.approvals.register_methods(registry)
    app.access.register_methods(registry, app.adapters)
    if app.rooms is not None:
        app.rooms.register_methods(registry)
    media = app.config.media
    return Gateway(
        app.config.gateway,
        events,
        registry,
        web_platform=lambda: app.adapters.get("web"),
        agents=list(app.agents),
        readiness=app.readiness,
        max_upload_bytes=media.max_bytes,
        allow_mime=media.allow_mime,
    )
