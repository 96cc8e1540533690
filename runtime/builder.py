"""How an App is put together, the way python-telegram-bot's `ApplicationBuilder.build()`
makes an `Application`: every part made once, from the configuration and the store, and
handed the others it works with; then the App is made holding them, and the parts that need
the finished App get it (as PTB's `job_queue.set_application`): the reloading's receiver,
the plugins' `setup(app)`, the gateway. `App` only holds and exposes. The order below is the
order of dependence; nothing here runs anything (the store connects, and the platforms
start, in `App.start`).

The builder sits below the App: `App.from_config` calls `build` with the App class, so this
module never imports the App, and the parts that use the App take a protocol of what they
use (the gateway's `GatewayHost`, the intake's `Inbox`).

It builds in two parts. `Lasting` is what lives as long as the App: the store, the
registries plugins fill, the platform connections, and the desks that hold what is going on
(turn control, approvals, admission). A `Generation` (runtime/generation.py) is what is made
from one configuration: agents, router, tools, rooms, schedules, push, the pipeline.
`build_generation` makes the first one here and every one after it when the configuration is
reloaded (`Reloading` is handed it), so a reload builds nothing in a way a start would not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from botweave.agents import Agent, History
from botweave.buttons import ButtonBook
from botweave.commands import CommandRegistry
from botweave.config import ConfigError
from botweave.conversations import ConversationLocks
from botweave.delivery import Delivery, Outbox, SentLedger
from botweave.events import ConversationEvents
from botweave.gateway.server import Gateway
from botweave.hooks import HookRegistry
from botweave.media.reader import MediaStep
from botweave.memory import Links, MemoryCommands, MemoryKeeper, memory_tools
from botweave.model_calls import ModelCalls
from botweave.model_clients import ModelClients
from botweave.model_guard import GuardSettings, ModelGuard
from botweave.policies.access_control import PAIR_HELP, PAIR_USAGE, AccessControl
from botweave.policies.admission import Admission, AdmissionLimits, AdmissionStep
from botweave.policies.approvals import ApprovalDesk
from botweave.policies.asks import AskDesk
from botweave.policies.authors import AuthorScreen
from botweave.policies.config import AdmissionConfig
from botweave.policies.rate_limit import RateLimit
from botweave.policies.targets import MessageTargetRule
from botweave.push import Notifier
from botweave.push.commands import NOTIFY_HELP, notify_command
from botweave.push.preferences import PreferenceStore
from botweave.rooms.hub import RoomHub
from botweave.router import Router
from botweave.runtime.arrival import ArrivalChain
from botweave.runtime.commands import BuiltinCommands
from botweave.runtime.config import Config
from botweave.runtime.connections import Platforms
from botweave.runtime.gateway import GatewayHost, build_gateway, conversation_events, watch_step
from botweave.runtime.generation import Generation, Live
from botweave.runtime.intake import Inbox, Intake, Turns
from botweave.runtime.lifecycle import Lifecycle, Role
from botweave.runtime.model_processes import ModelProcesses
from botweave.runtime.notices import Notices
from botweave.runtime.ops import ProcessOps
from botweave.runtime.pipeline import build_pipeline
from botweave.runtime.plugins import load_plugins
from botweave.runtime.poster import Poster
from botweave.runtime.reload import Reloading
from botweave.runtime.scheduled_agents import AgentSchedules
from botweave.runtime.steps import Observe
from botweave.runtime.turn_control import STOP_HELP, TurnControl
from botweave.runtime.turns import AgentTurn
from botweave.runtime.usage import USAGE_ARGS, USAGE_HELP, UsageCommand
from botweave.store import Patience, PatientStore, Store, open_store
from botweave.store.patient import patient
from botweave.targets import Targets
from botweave.tasks import TaskOwner
from botweave.tools import ToolServices, Toolsets

if TYPE_CHECKING:  # the tracer's module imports OpenTelemetry: only where tracing is configured
    from botweave.runtime.tracing import OtelTracer


@dataclass(frozen=True)
class Lasting:
    """What an App holds for its whole life, made by `build_lasting`."""

    role: Role
    life: Lifecycle
    patience: Patience
    store: PatientStore
    hooks: HookRegistry
    commands: CommandRegistry
    locks: ConversationLocks
    model_processes: ModelProcesses | None
    model_clients: ModelClients | None
    calls: ModelCalls
    #: Fallbacks, cool-downs and budgets around every model call.
    guard: ModelGuard
    history: History
    platforms: Platforms
    delivery: Delivery
    targets: Targets
    buttons: ButtonBook
    preferences: PreferenceStore
    notices: Notices
    access: AccessControl
    approvals: ApprovalDesk
    asks: AskDesk
    admission: Admission
    control: TurnControl
    handling: ArrivalChain
    turns: Turns
    #: What `App.submit` records items with until `App.start` opens the store's own.
    intake: Intake
    #: The order a conversation's messages are submitted in.
    arrivals: ConversationLocks
    #: The App's own background tasks (its stream, platform leaders, presence, digests).
    background: TaskOwner
    #: Conversation events, published everywhere things happen; None without a gateway.
    events: ConversationEvents | None
    live: Live
    #: What agents keep about each person (empty when no agent has memory on).
    memory: MemoryKeeper
    #: One trace per turn, when `ops.tracing` is configured.
    tracer: OtelTracer | None = None


class Built(GatewayHost, Inbox, Protocol):
    """The App, as the builder wires it once made: the gateway's host, the intake's and
    reloading's receiver, and the holder of what only the finished App could make."""

    plugins: list[str]
    gateway: Gateway | None


AppT = TypeVar("AppT", bound=Built)
#: Makes the App holding the parts (the App class itself).
MakeApp = Callable[[Lasting, Reloading, ProcessOps], AppT]


def build(make: MakeApp[AppT], config: Config, *, store: Store | None = None, role: Role = "all") -> AppT:
    """The App on `config`, keeping its state in `store` (else the one `store.url` names,
    memory when none), with its first generation live and its plugins set up."""
    lasting = build_lasting(config, store=store, role=role)
    lasting.live.generation = build_generation(config, lasting)
    reloading = Reloading(
        lasting.live, lasting.platforms, partial(build_generation, lasting=lasting), role=role, source=config.source
    )
    ops = ProcessOps(
        reloading, lasting.store, lasting.live, lasting.life, lasting.background, role=role,
        stall_seconds=config.ops.loop_stall_seconds,
    )
    reloading.on_swap(partial(_follow, lasting))
    app = make(lasting, reloading, ops)
    reloading.receive_with(app)
    # plugins get the finished App, before anything starts; the gateway lists what they added
    app.plugins = load_plugins(app, config.plugins)
    app.gateway = build_gateway(app, reloading)
    return app


def _follow(lasting: Lasting, generation: Generation) -> None:
    """The lasting parts that take a reloaded configuration's settings as it goes live: push
    preferences' defaults, the admission limits, and the digests (once it has a directory)."""
    config = generation.config
    lasting.preferences.configure(config.push)
    lasting.admission.limits = admission_limits(config.admission)
    lasting.notices.start_digests(lasting.background, lasting.life.stopping)


def build_lasting(config: Config, *, store: Store | None = None, role: Role = "all") -> Lasting:
    """What outlives reloads. The settings it reads here are the ones a reload cannot change
    in a running process (`store:`, `models.processes`)."""
    settings = config.store
    ttl = settings.dedup_ttl_seconds
    patience = Patience(settings.outage_grace_seconds)
    chosen = store or open_store(settings.url or "memory://", settings.prefix, base=config.base_dir)
    kept = patient(chosen, patience)
    events = conversation_events(config, kept)
    hooks, commands, life, locks, live = HookRegistry(), CommandRegistry(), Lifecycle(), ConversationLocks(), Live()
    model_processes, model_clients, made = _model_calls(config)
    tracer = _tracer(config, role)
    if tracer is not None and model_processes is None:  # model processes trace their own calls
        from botweave.runtime.tracing import TracedCalls

        made = TracedCalls(made, tracer)
    history = History(kept)
    platforms = Platforms(config, events, kept)
    delivery = Delivery(hooks, Outbox(kept, ttl), events=events)
    buttons = ButtonBook(kept)
    preferences = PreferenceStore.from_config(kept, config.push)
    notices = Notices(live)
    cli_config = _pairing_cli_config(config, kept, given=store is not None)
    access = AccessControl(kept, delivery, platforms.bot_config, cli_config=cli_config, events=events)
    platforms.admits = lambda msg: access.admits(msg, platforms.bot_config(msg.platform))
    approvals = ApprovalDesk(
        kept, delivery, platforms.adapters, buttons, owner_of=access.owner_of, notify=notices.approval_requested,
        events=events,
    )
    asks = AskDesk(kept, delivery, platforms.adapters, buttons, shared=kept.shared, events=events)
    # several workers share one budget through the store
    admission = Admission(admission_limits(config.admission), slots=kept if kept.shared else None)
    control = TurnControl(kept, history, platforms.bot_config, ttl, access.admits, events=events)

    async def alert(category: str, platform: str | None, headline: str, text: str) -> None:
        names = [platform] if platform else list(platforms.adapters)
        owners = [f"{name}:{owner}" for name in names if (owner := await access.owner_of(name))]
        if owners:
            await notices.owner_alert(category, owners, headline, text)

    # cool-downs are read from the store before each call where other workers share it
    guard = ModelGuard(kept, shared=kept.shared, alert=alert)
    BuiltinCommands(commands, live, history, life.uptime).register()
    commands.register("pair", access.pair_command, help=PAIR_HELP, args=PAIR_USAGE)
    commands.register("notify", notify_command(preferences), help=NOTIFY_HELP)
    commands.register("stop", control.stop_command, help=STOP_HELP)
    memory = MemoryKeeper(kept, {name: agent.memory for name, agent in config.agents.items()})
    MemoryCommands(memory, Links(kept)).register(commands)
    commands.register("usage", UsageCommand(guard, access.owner_of), help=USAGE_HELP, args=USAGE_ARGS)
    handling = ArrivalChain(
        store=kept, dedup_ttl=ttl, platforms=platforms, live=live, hooks=hooks, delivery=delivery, locks=locks,
        control=control, buttons=buttons, approvals=approvals, asks=asks, tasks=TaskOwner("turn"),
    )
    turns = Turns(handling, handling.tasks, life)
    return Lasting(
        role=role, life=life, patience=patience, store=kept, hooks=hooks, commands=commands, locks=locks,
        model_processes=model_processes, model_clients=model_clients,
        calls=made, guard=guard,
        history=history, platforms=platforms, delivery=delivery, targets=Targets(platforms.adapters), buttons=buttons,
        preferences=preferences, notices=notices, access=access, approvals=approvals, asks=asks, admission=admission,
        control=control, handling=handling, turns=turns, intake=Intake(turns), arrivals=ConversationLocks(),
        background=TaskOwner("app"), events=events, live=live, memory=memory, tracer=tracer,
    )


def build_generation(config: Config, lasting: Lasting) -> Generation:
    """The parts made from `config`, wired to `lasting`. Nothing starts: MCP servers connect
    and schedules begin when the generation goes live (`App.start`, or a reload)."""
    kept, ttl = lasting.store, config.store.dedup_ttl_seconds
    notices, platforms, delivery, targets = lasting.notices, lasting.platforms, lasting.delivery, lasting.targets
    lasting.guard.configure(
        GuardSettings(config.models.max_cooldown_seconds, config.models.max_wait_seconds), config.budgets
    )
    agents = {
        name: Agent(name, section, calls=lasting.calls, guard=lasting.guard) for name, section in config.agents.items()
    }
    router = Router(config.routes, default_agent=next(iter(agents)))
    target_rule = MessageTargetRule(
        lasting.access, platforms.bot_config,
        {name: agent.message_tools.allow_targets for name, agent in config.agents.items()},
    )
    tools = _tools(config, agents, ToolServices(delivery, targets, target_rule, config.media_for), kept)
    memory = _memory(config, agents, lasting.memory)
    briefing = memory.briefing if memory.agents else None
    poster = Poster(config, delivery, targets, lasting.buttons, platforms.adapters)
    transports = config.push.transports(poster.send_direct)
    notifier = Notifier(lasting.preferences, transports, kept, directory=config.push.directory)
    rooms = None
    if config.rooms:
        rooms = RoomHub(
            config.rooms, agents, kept, poster.post_as, targets.canonical,
            posted=notices.room_posted, missed=notices.room_missed, asks=lasting.asks, briefing=briefing,
        )
    schedules = None
    if config.schedules:
        schedules = AgentSchedules(
            config.schedules, agents=agents, history=lasting.history, delivery=delivery, targets=targets,
            locks=lasting.locks, bot_config_for=platforms.bot_config, store=kept, failed=notices.schedule_failed,
            traced=lasting.tracer.run if lasting.tracer is not None else None,
        )
    turn = AgentTurn(
        agents, lasting.history, notices.turn_finished, kept, ttl, approvals=lasting.approvals, events=lasting.events,
        asks=lasting.asks,
        briefing=briefing,
    )
    pipeline = build_pipeline(
        authors=AuthorScreen(kept),
        access=lasting.access,
        hooks=lasting.hooks,
        router=router,
        delivery=delivery,
        commands=lasting.commands,
        rooms=rooms,
        observe=Observe(agents, lasting.history, kept, ttl),
        rate_limit=RateLimit(kept),
        admission=AdmissionStep(lasting.admission, kept, config.admission.busy_message),
        media=MediaStep(agents, {name: config.media_for(name) for name in agents}),
        guard=lasting.control.guard(agents),
        stale=lasting.control.stale_step,
        turn=turn,
        watch=watch_step(lasting.events),
        decided=lasting.tracer.decided if lasting.tracer is not None else None,
    )
    return Generation(
        config=config, agents=agents, router=router, tools=tools, poster=poster, notifier=notifier,
        rooms=rooms, schedules=schedules, turn=turn, pipeline=pipeline,
    )


def admission_limits(config: AdmissionConfig) -> AdmissionLimits:
    return AdmissionLimits(
        config.max_concurrent_turns, config.max_concurrent_turns_per_scope, config.overflow, config.queue_depth
    )


def _model_calls(config: Config) -> tuple[ModelProcesses | None, ModelClients | None, ModelCalls]:
    """Who makes the agents' model calls: helper processes, or the clients right here."""
    models = config.models
    if models.processes:
        processes = ModelProcesses(models.processes, models.client, tracing=_tracing_settings(config))
        return processes, None, processes
    clients = ModelClients(models.client)
    return None, clients, clients


def _tracing_settings(config: Config) -> dict[str, object] | None:
    """`ops.tracing` as a model process gets it: plain values, the headers' secrets revealed."""
    found = config.ops.tracing
    if found is None:
        return None
    headers = {name: value.get_secret_value() for name, value in found.headers.items()}
    return {**found.model_dump(exclude={"headers"}), "headers": headers}


def _tracer(config: Config, role: Role) -> OtelTracer | None:
    if config.ops.tracing is None:
        return None
    from botweave.runtime.tracing import OtelTracer

    return OtelTracer(config.ops.tracing, role=role)


def _tools(config: Config, agents: dict[str, Agent], services: ToolServices, store: Store) -> Toolsets:
    """Each agent's tools from its `tools:` entries; the MCP servers connect at start."""
    tools = Toolsets(config.agents, services, config.egress_policy)
    if tools.needs_ledger and services.delivery.ledger is None:
        services.delivery.ledger = SentLedger(store)
    try:
        tools.equip(agents)
    except ValueError as exc:
        raise ConfigError([str(exc)]) from None
    return tools


def _memory(config: Config, agents: dict[str, Agent], memory: MemoryKeeper) -> MemoryKeeper:
    """The memory settings of `config`, and the memory tools given to each agent that has it
    on (a tool of its own under one of their names is a configuration error)."""
    memory.configure({name: section.memory for name, section in config.agents.items()})
    for name in memory.agents:
        for tool_name, tool in memory_tools(memory).items():
            if tool_name in agents[name].tools:
                raise ConfigError([f"agents.{name}.tools: a tool named {tool_name!r} clashes with the memory tool of that name"])
            agents[name].tools[tool_name] = tool
    return memory


def _pairing_cli_config(config: Config, store: Store, *, given: bool) -> Path | None:
    """The file `botweave pair --config` must read to open this process's store: the
    configuration file, when the store is the one it names (or the SQLite file the CLI
    derives from it) and lives outside this process. None otherwise."""
    source = config.source
    if given or source is None or not store.external:
        return None
    return source.resolve()
