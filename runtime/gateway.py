"""The gateway wired into the runtime: where conversation events come from and where the
server runs.

With `gateway.listen` set (bot.yaml, or `--gateway-listen`), every process of the deployment
publishes conversation events (a worker answering from the shared stream too: that is how the
ingress's gateway sees its turns), the `web` platform is enabled, and the processes that hold
platform connections (roles `all` and `ingress`) serve the gateway. Features offer their
gateway methods through the kernel's registry here (approvals, pairing, rooms), so neither the
gateway nor they import each other. Without `gateway.listen` none of this exists.

A reload reaches the gateway here too: `config.reload` (admin) runs it, `health` reports the
revision that runs (with the agents, platforms, store and uptime of `_about`), and each configuration a reload puts live hands the gateway its
settings (tokens, origins, limits) and the new generation's agents and rooms, in place.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from botweave.events import ConversationEvents
from botweave.gateway.config import WebConfig
from botweave.gateway.server import Gateway
from botweave.methods import Caller, MethodRegistry, NoParams
from botweave.policies.approvals import mask_arguments
from botweave.runtime.config import Config
from botweave.runtime.steps import Watch
from botweave.store import Store

if TYPE_CHECKING:
    from botweave.runtime.app import App
    from botweave.runtime.generation import Generation
    from botweave.runtime.reload import Reloads


def enable_web(config: Config) -> None:
    """With a gateway, the web platform is on (its own section, or the defaults)."""
    if config.gateway.listen is not None and getattr(config.platforms, "web", None) is None:
        setattr(config.platforms, "web", WebConfig())  # the field exists: made from the installed platforms


def conversation_events(config: Config, store: Store) -> ConversationEvents | None:
    """The conversation events every publication point is handed, or None without a gateway
    (and then nothing publishes at all). Enables the web platform as a side effect."""
    settings = config.gateway
    if settings.listen is None:
        return None
    enable_web(config)
    return ConversationEvents(
        store, log_size=settings.event_log_size, history=settings.history_messages, mask=mask_arguments
    )


def watch_step(events: ConversationEvents | None) -> Watch | None:
    return Watch(events) if events is not None else None


def build_gateway(app: App, reloads: Reloads) -> Gateway | None:
    """The gateway server of this process (None without a gateway or in a worker), its method
    registry filled by the features that have methods."""
    events = app.events
    if events is not None:
        reloads.on_swap(partial(_follow_events, events))
    if events is None or app.role == "worker":
        return None
    registry = MethodRegistry()
    app.approvals.register_methods(registry)
    app.access.register_methods(registry, app.adapters)
    if app.rooms is not None:
        app.rooms.register_methods(registry)
    registry.register(
        "config.reload", partial(_reload, reloads), scope="admin",
        help="read bot.yaml again and apply it in place (checked first: a refused file changes nothing)",
    )
    media = app.config.media
    gateway = Gateway(
        app.config.gateway,
        events,
        registry,
        web_platform=lambda: app.adapters.get("web"),
        agents=list(app.agents),
        readiness=app.readiness,
        config_status=reloads.config_status,
        about=partial(_about, app),
        max_upload_bytes=media.max_bytes,
        allow_mime=media.allow_mime,
    )
    reloads.on_swap(partial(_follow, gateway, registry))
    return gateway


def _about(app: App) -> dict[str, Any]:
    """What the gateway's `health` tells of the bot besides its readiness: the agents of the
    live configuration and their models, the platforms this process started (the gateway
    says which are connected), where the state lives (no password) and how long it has run."""
    return {
        "agents": [{"name": name, "model": agent.model} for name, agent in app.agents.items()],
        "platforms": sorted({*app.adapters, *app.failed_platforms}),
        "store": app.store.describe(),
        "uptime_seconds": round(app.uptime, 1),
    }


async def _reload(reloads: Reloads, caller: Caller, params: NoParams) -> dict[str, Any]:
    """What `botweave reload` reports of a process: the outcome, the revisions before and
    after, what was applied or why the file was refused (every other process of the bot on a
    shared store is asked to reload too, as SIGHUP does)."""
    result = await reloads.reload(everywhere=True)
    answer = result.to_dict()
    answer["problems"] = (result.error or "").splitlines()
    answer["message"] = result.summary()
    return answer


def _follow_events(events: ConversationEvents, generation: Generation) -> None:
    """How much of each conversation's log and history is kept, from the next append on (in
    every process that publishes, a worker too)."""
    settings = generation.config.gateway
    events.log_size, events.history_size = settings.event_log_size, settings.history_messages


def _follow(gateway: Gateway, registry: MethodRegistry, generation: Generation) -> None:
    """A reload put `generation` live: the gateway takes its settings (`gateway.listen`
    waits for a restart) and its agents, rooms and media limits."""
    config = generation.config
    gateway.configure(
        config.gateway, agents=list(generation.agents), max_upload_bytes=config.media.max_bytes,
        allow_mime=config.media.allow_mime,
    )
    if generation.rooms is not None:
        generation.rooms.register_methods(registry)
    elif "rooms.list" in registry:
        registry.register("rooms.list", _no_rooms, scope="read", help="the rooms and where they run")


async def _no_rooms(caller: Caller, params: NoParams) -> dict[str, Any]:
    return {"rooms": []}
