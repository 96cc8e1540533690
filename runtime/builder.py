"""How an App is put together, the way python-telegram-bot's `ApplicationBuilder` makes an
`Application`: every collaborator made once, from the configuration and the store, and
handed the others it works with, so that `App` only holds them. The order below is the order
of dependence; nothing here runs anything (the store connects, and the platforms start, in
`App.start`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from botweave.agents import Agent, History
from botweave.buttons import ButtonBook
from botweave.commands import CommandRegistry
from botweave.config import ConfigError
from botweave.conversations import ConversationLocks
from botweave.delivery import Delivery, Outbox, SentLedger
from botweave.events import ConversationEvents
from botweave.hooks import HookRegistry
from botweave.media.reader import MediaStep
from botweave.model_calls import ModelCalls
from botweave.model_clients import ModelClients
from botweave.pipeline import Handler
from botweave.policies.access_control import PAIR_HELP, PAIR_USAGE, AccessControl
from botweave.policies.admission import Admission, AdmissionLimits, AdmissionStep
from botweave.policies.approvals import ApprovalDesk
from botweave.policies.authors import AuthorScreen
from botweave.policies.rate_limit import RateLimit
from botweave.policies.targets import MessageTargetRule
from botweave.push import Notifier
from botweave.push.commands import NOTIFY_HELP, notify_command
from botweave.push.preferences import PreferenceStore
from botweave.rooms.hub import RoomHub
from botweave.router import Router
from botweave.runtime.commands import BuiltinCommands
from botweave.runtime.config import Config
from botweave.runtime.connections import Platforms
from botweave.runtime.gateway import conversation_events, watch_step
from botweave.runtime.handling import Handling
from botweave.runtime.intake import Turns
from botweave.runtime.lifecycle import Lifecycle, Role
from botweave.runtime.model_processes import ModelProcesses
from botweave.runtime.notices import Notices
from botweave.runtime.outgoing import Outgoing
from botweave.runtime.pipeline import build_pipeline
from botweave.runtime.scheduled_agents import AgentSchedules
from botweave.runtime.steps import Observe
from botweave.runtime.turn_control import STOP_HELP, TurnControl
from botweave.runtime.turn_order import AskingAside, TurnOrder
from botweave.runtime.turns import AgentTurn
from botweave.store import MemoryStore, Patience, PatientStore, Store, open_store
from botweave.store.patient import backend
from botweave.store.redis import RedisStore
from botweave.targets import Targets
from botweave.tasks import TaskOwner
from botweave.tools import ToolServices, Toolsets


@dataclass(frozen=True)
class Parts:
    """Everything an App holds, made and wired by `build`."""

    config: Config
    role: Role
    life: Lifecycle
    patience: Patience
    store: PatientStore
    hooks: HookRegistry
    commands: CommandRegistry
    model_processes: ModelProcesses | None
    model_clients: ModelClients | None
    agents: dict[str, Agent]
    router: Router
    history: History
    platforms: Platforms
    delivery: Delivery
    targets: Targets
    tools: Toolsets
    buttons: ButtonBook
    outgoing: Outgoing
    preferences: PreferenceStore
    notifier: Notifier
    notices: Notices
    access: AccessControl
    approvals: ApprovalDesk
    rooms: RoomHub | None
    schedules: AgentSchedules | None
    control: TurnControl
    turn: AgentTurn
    pipeline: Handler
    handling: Handling
    turns: Turns
    #: Conversation events, published everywhere things happen; None without a gateway.
    events: ConversationEvents | None


def build(config: Config, *, store: Store | None = None, role: Role = "all") -> Parts:
    """The parts of an App on `config`, keeping its state in `store` (else the one
    `store.url` names, memory when none)."""
    settings = config.store
    ttl = settings.dedup_ttl_seconds
    patience = Patience(settings.outage_grace_seconds)
    chosen = store or open_store(settings.url or "memory://", settings.prefix, base=config.base_dir)
    kept = chosen if isinstance(chosen, PatientStore) else PatientStore(chosen, patience=patience)
    events = conversation_events(config, kept)
    hooks, commands, life, locks = HookRegistry(), CommandRegistry(), Lifecycle(), ConversationLocks()
    model_processes, model_clients, made = _model_calls(config)
    calls = AskingAside(made)  # a turn gives its place up while it waits for its model
    agents = {name: Agent(name, section, calls=calls) for name, section in config.agents.items()}
    router = Router(config.routes, default_agent=next(iter(agents)))
    history = History(kept)
    platforms = Platforms(config, events)
    delivery = Delivery(hooks, Outbox(kept, ttl), events=events)
    targets = Targets(platforms.adapters)
    cli_config = _pairing_cli_config(config, kept, given=store is not None)
    access = AccessControl(kept, delivery, platforms.bot_config, cli_config=cli_config, events=events)
    target_rule = MessageTargetRule(
        access, platforms.bot_config, {name: agent.message_tools.allow_targets for name, agent in config.agents.items()}
    )
    tools = _tools(config, agents, ToolServices(delivery, targets, target_rule, config.media_for), kept)
    buttons = ButtonBook(kept)
    outgoing = Outgoing(config, delivery, targets, buttons, platforms.adapters)
    preferences = PreferenceStore.from_config(kept, config.push)
    transports = config.push.transports(outgoing.send_direct)
    notifier = Notifier(preferences, transports, kept, directory=config.push.directory)
    notices = Notices(notifier, config)
    approvals = ApprovalDesk(
        kept, delivery, platforms.adapters, buttons, owner_of=access.owner_of, notify=notices.approval_requested,
        events=events,
    )
    rooms = None
    if config.rooms:
        rooms = RoomHub(
            config.rooms, agents, kept, outgoing.post_as, targets.canonical,
            posted=notices.room_posted, missed=notices.room_missed,
        )
    schedules = None
    if config.schedules:
        schedules = AgentSchedules(
            config.schedules, agents=agents, history=history, delivery=delivery, targets=targets, locks=locks,
            bot_config_for=platforms.bot_config, store=kept, failed=notices.schedule_failed,
        )
    control = TurnControl(kept, agents, history, platforms.bot_config, ttl, access.admits, events=events)
    turn = AgentTurn(agents, history, notices.turn_finished, kept, ttl, approvals=approvals, events=events)
    BuiltinCommands(commands, agents, history, rooms, life.uptime).register()
    commands.register("pair", access.pair_command, help=PAIR_HELP, args=PAIR_USAGE)
    commands.register("notify", notify_command(preferences), help=NOTIFY_HELP)
    commands.register("stop", control.stop_command, help=STOP_HELP)
    pipeline = build_pipeline(
        authors=AuthorScreen(kept),
        access=access,
        hooks=hooks,
        router=router,
        delivery=delivery,
        commands=commands,
        rooms=rooms,
        observe=Observe(agents, history, kept, ttl),
        rate_limit=RateLimit(kept),
        admission=_admission(config, kept),
        media=MediaStep(agents, {name: config.media_for(name) for name in agents}),
        control=control,
        turn=turn,
        watch=watch_step(events),
    )
    handling = Handling(
        store=kept, dedup_ttl=ttl, platforms=platforms, router=router, hooks=hooks, delivery=delivery, locks=locks,
        control=control, turn=turn, pipeline=pipeline, buttons=buttons, approvals=approvals, order=TurnOrder(),
    )
    return Parts(
        config=config, role=role, life=life, patience=patience, store=kept, hooks=hooks, commands=commands,
        model_processes=model_processes, model_clients=model_clients, agents=agents, router=router, history=history,
        platforms=platforms, delivery=delivery, targets=targets, tools=tools, buttons=buttons, outgoing=outgoing,
        preferences=preferences, notifier=notifier, notices=notices, access=access, approvals=approvals, rooms=rooms,
        schedules=schedules, control=control, turn=turn, pipeline=pipeline, handling=handling,
        turns=Turns(control, TaskOwner("turn"), locks, life),
        events=events,
    )


def _model_calls(config: Config) -> tuple[ModelProcesses | None, ModelClients | None, ModelCalls]:
    """Who makes the agents' model calls: helper processes, or the clients right here."""
    models = config.models
    if models.processes:
        processes = ModelProcesses(models.processes, models.client)
        return processes, None, processes
    clients = ModelClients(models.client)
    return None, clients, clients


def _tools(config: Config, agents: dict[str, Agent], services: ToolServices, store: Store) -> Toolsets:
    """Each agent's tools from its `tools:` entries; the MCP servers connect at start."""
    tools = Toolsets(config.agents, services, config.egress_policy)
    if tools.needs_ledger:
        services.delivery.ledger = SentLedger(store)
    try:
        tools.equip(agents)
    except ValueError as exc:
        raise ConfigError([str(exc)]) from None
    return tools


def _admission(config: Config, store: Store) -> AdmissionStep:
    limits = config.admission
    admission = Admission(
        AdmissionLimits(
            limits.max_concurrent_turns, limits.max_concurrent_turns_per_scope, limits.overflow, limits.queue_depth
        ),
        # several workers share one budget through the store
        slots=store if isinstance(backend(store), RedisStore) else None,
    )
    return AdmissionStep(admission, store, limits.busy_message)


def _pairing_cli_config(config: Config, store: Store, *, given: bool) -> Path | None:
    """The file `botweave pair --config` must read to open this process's store: the
    configuration file, when the store is the one it names (or the SQLite file the CLI
    derives from it) and lives outside this process. None otherwise."""
    source = config.source
    if given or source is None or isinstance(backend(store), MemoryStore):
        return None
    return source.resolve()
