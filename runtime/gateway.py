"""The gateway wired into the runtime: where conversation events come from and where the
server runs.

With `gateway.listen` set (bot.yaml, or `--gateway-listen`), every process of the deployment
publishes conversation events (a worker answering from the shared stream too: that is how the
ingress's gateway sees its turns), the `web` platform is enabled, and the processes that hold
platform connections (roles `all` and `ingress`) serve the gateway. Features offer their
gateway methods through the kernel's registry here (approvals, pairing, rooms, memory), so neither the
gateway nor they import each other. Without `gateway.listen` none of this exists.

A reload reaches the gateway here too: `config.reload` (admin) runs it, `health` reports the
revision that runs (with the agents, platforms, store and uptime of `_about`), and each configuration a reload puts live hands the gateway its
settings (tokens, origins, limits) and the new generation's agents and rooms, in place.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

from botweave.adapter import Adapter
from botweave.agents import Agent
from botweave.events import ConversationEvents
from botweave.gateway.config import WebConfig
from botweave.gateway.server import Gateway
from botweave.memory import MemoryKeeper, MemoryMethods
from botweave.methods import Caller, MethodRegistry, NoParams
from botweave.model_guard import ModelGuard
from botweave.policies.access_control import AccessControl
from botweave.policies.approvals import ApprovalDesk, mask_arguments
from botweave.policies.asks import AskDesk
from botweave.rooms.hub import RoomHub
from botweave.runtime.config import Config
from botweave.runtime.generation import Generation
from botweave.runtime.reload_plan import ReloadResult
from botweave.runtime.steps import Watch
from botweave.runtime.usage import register_usage_method
from botweave.store import Store


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


class GatewayHost(Protocol):
    """What the gateway is made from and reports on: the bot's parts it offers methods of, and
    what `health` tells (the App has all of it; the gateway needs no more)."""

    @property
    def role(self) -> str: ...

    @property
    def events(self) -> ConversationEvents | None: ...

    @property
    def config(self) -> Config: ...

    @property
    def agents(self) -> Mapping[str, Agent]: ...

    @property
    def rooms(self) -> RoomHub | None: ...

    @property
    def adapters(self) -> Mapping[str, Adapter]: ...

    @property
    def failed_platforms(self) -> Mapping[str, str]: ...

    @property
    def store(self) -> Store: ...

    @property
    def approvals(self) -> ApprovalDesk: ...

    @property
    def asks(self) -> AskDesk: ...

    @property
    def access(self) -> AccessControl: ...

    @property
    def memory(self) -> MemoryKeeper: ...

    @property
    def models(self) -> ModelGuard: ...

    @property
    def uptime(self) -> float: ...

    async def readiness(self) -> dict[str, str]: ...

    async def reload(self, *, everywhere: bool = False) -> ReloadResult: ...


class GatewayReloads(Protocol):
    """What the gateway needs of reloading: to follow each generation a reload puts live, and
    the revision that runs."""

    def on_swap(self, hook: Callable[[Generation], None]) -> None: ...

    def config_status(self) -> dict[str, str]: ...


def build_gateway(host: GatewayHost, reloads: GatewayReloads) -> Gateway | None:
    """The gateway server of this process (None without a gateway or in a worker), its method
    registry filled by the features that have methods."""
    events = host.events
    if events is not None:
        reloads.on_swap(partial(_follow_events, events))
    if events is None or host.role == "worker":
        return None
    registry = MethodRegistry()
    host.approvals.register_methods(registry)
    host.asks.register_methods(registry)
    host.access.register_methods(registry, host.adapters)
    MemoryMethods(host.memory).register(registry)
    if host.rooms is not None:
        host.rooms.register_methods(registry)
    register_usage_method(registry, host.models)
    registry.register(
        "config.reload", partial(_reload, host), scope="admin",
        help="read bot.yaml again and apply it in place (checked first: a refused file changes nothing)",
    )
    media = host.config.media
    gateway = Gateway(
        host.config.gateway,
        events,
        registry,
        web_platform=lambda: host.adapters.get("web"),
        agents=list(host.agents),
        readiness=host.readiness,
        config_status=reloads.config_status,
        about=partial(_about, host),
        max_upload_bytes=media.max_bytes,
        allow_mime=media.allow_mime,
        open_asks=host.asks.resent,
    )
    reloads.on_swap(partial(_follow, gateway, registry))
    return gateway


def _about(host: GatewayHost) -> dict[str, Any]:
    """What the gateway's `health` tells of the bot besides its readiness: the agents of the
    live configuration and their models, the platforms this process started (the gateway
    says which are connected), where the state lives (no password) and how long it has run."""
    return {
        "agents": [{"name": name, "model": agent.model} for name, agent in host.agents.items()],
        "platforms": sorted({*host.adapters, *host.failed_platforms}),
        "store": host.store.describe(),
        "uptime_seconds": round(host.uptime, 1),
    }


async def _reload(host: GatewayHost, caller: Caller, params: NoParams) -> dict[str, Any]:
    """What `botweave reload` reports of a process: the outcome, the revisions before and
    after, what was applied or why the file was refused (every other process of the bot on a
    shared store is asked to reload too, as SIGHUP does)."""
    result = await host.reload(everywhere=True)
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
