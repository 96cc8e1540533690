"""Human approval of tool calls: a tool marked `approval: required` runs only after its
approver pressed Approve.

The turn that wants the call asks (`ApprovalDesk.ask`): it posts the request (the tool and its
arguments, secrets masked) with Approve / Deny buttons to the approver (into the conversation
for the person who asked, as a direct message for the bot's owner), tells them through the
`approval_requested` notification, and waits. A press is answered by `ApprovalDesk.answer`,
in whichever process receives it: only the approver's press counts, and the first decision
is written with `set_if_absent`, so a second press (or a press racing the timeout) changes
nothing. The waiting turn sees the decision in the store (it looks a few times a second, and
at once when the press reached its own process), edits the request to show it, and hands the
model the call's result or `{"error": "denied by <who>"}` / `{"error": "approval timed out"}`.

Everything about a request lives in the store, so the process that receives the press need
not be the one that asked. While a turn waits it keeps a short-lived "live" key fresh; a
request whose live key is gone was asked by a turn that no longer runs (the process stopped),
and is reported expired: at the next start (`sweep`), or when someone presses it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from botweave.adapter import Adapter
from botweave.buttons import ButtonBook
from botweave.conversations import conversation_key, direct_conversation
from botweave.delivery import PROCESS, Delivery, Destination
from botweave.events import ConversationEvents
from botweave.methods import Caller, MethodError, MethodRegistry, NoParams, Params
from botweave.store import Store, store_failures
from botweave.tasks import TaskOwner
from botweave.tooling import ApprovalRule, ToolContext
from botweave.types import Button, PlatformEvent, PressAnswer

log = logging.getLogger(__name__)

APPROVE = "approval:approve"
DENY = "approval:deny"
ACTIONS = frozenset({APPROVE, DENY})
#: How often a waiting turn looks for a decision made in another process.
POLL_S = 0.25
#: A waiting turn renews its live key this often; the key lapses this long after the last renewal.
RENEW_S = 5.0
LIVE_TTL_S = 15.0
#: How long a request is remembered after its deadline (a late press still gets an answer).
KEEP_S = 24 * 3600.0
MASK = "***"
#: The longest argument value shown; the request shows what is asked, not whole documents.
MAX_VALUE_CHARS = 300

_SECRET_NAME = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[-_]?key|apikey|auth|credential|private[-_]?key|cookie|session|signature",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"^(sk-[A-Za-z0-9_-]{8,}|xox[abprs]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+|gh[pousr]_[A-Za-z0-9]{16,}"
    r"|github_pat_[A-Za-z0-9_]+|AKIA[0-9A-Z]{16}|(Bearer|Basic)\s+\S+|eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.\S*)$"
)
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^/\s:@]+:)(?P<password>[^/\s@]+)(?=@)", re.IGNORECASE)

Outcome = Literal["approved", "denied", "timeout", "expired", "withdrawn"]
Notify = Callable[[str, str, str, str], Awaitable[None]]
OwnerOf = Callable[[str], Awaitable[str | None]]


def mask_arguments(value: Any, name: str = "") -> Any:
    """The arguments as the approver sees them: a value under a name that means a secret
    (`password`, `token`, `api_key`, ...), or that looks like a credential itself (an API key,
    a bearer token, a JWT), is `***`; a password inside a URL is masked; long text is cut."""
    if isinstance(value, dict):
        return {str(k): mask_arguments(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_arguments(item, name) for item in value]
    if name and _SECRET_NAME.search(name) and value not in (None, "", True, False):
        return MASK
    if isinstance(value, str):
        if _SECRET_VALUE.match(value.strip()):
            return MASK
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, value)
        return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"
    return value


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:g} seconds"
    return f"{seconds / 60:.0f} minutes"


def request_text(tool: str, masked: dict[str, Any], agent: str, approver: str, timeout: float) -> str:
    """The request people read: who asks to run what, with which arguments, and until when."""
    arguments = json.dumps(masked, ensure_ascii=False, indent=2) if masked else "(no arguments)"
    return (
        f"Approval needed: {agent} wants to run {tool}\n"
        f"```\n{arguments}\n```\n"
        f"Only {approver} can answer; no answer within {_minutes(timeout)} means no."
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """How a request ended, and by whom (the approver's name, for a press)."""

    outcome: Outcome
    by: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> Decision:
        data = json.loads(raw)
        return cls(data.get("outcome", "expired"), str(data.get("by") or ""))

    def error(self) -> str | None:
        """What the model is told instead of the call's result; None when it may run."""
        if self.outcome == "approved":
            return None
        if self.outcome == "denied":
            return f"denied by {self.by}"
        if self.outcome == "timeout":
            return "approval timed out"
        return f"approval {self.outcome}"

    def line(self) -> str:
        """The line the request gains once decided."""
        if self.outcome == "approved":
            return f"✅ Approved by {self.by}."
        if self.outcome == "denied":
            return f"❌ Denied by {self.by}."
        if self.outcome == "timeout":
            return "⌛ No answer in time: denied."
        if self.outcome == "withdrawn":
            return "⏹ Withdrawn: the turn was stopped before this was answered."
        return "⌛ Expired: the bot stopped before this was answered."

    def told(self) -> str:
        """What a press after the decision is answered."""
        return {
            "approved": "Already approved.",
            "denied": "Already denied.",
            "timeout": "Too late: this request timed out.",
            "expired": "This request expired.",
            "withdrawn": "This request was withdrawn.",
        }[self.outcome]


@dataclass(slots=True)
class Request:
    """One approval request as the store keeps it."""

    id: str
    tool: str
    approver_id: str
    approver_name: str
    platform: str
    text: str
    deadline: float
    chat_id: str | None = None
    thread_id: str | None = None
    message_id: str | None = None
    #: Where the turn that asks runs, which agent asks, and the arguments it would run with
    #: (masked): what the gateway shows of the request.
    conversation: str = ""
    agent: str = ""
    arguments: Any = None
    #: The conversation the request itself was posted in (the turn's own, or the owner's
    #: direct one), where its decision is shown.
    posted_in: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> Request:
        return cls(**json.loads(raw))

    def shown(self) -> dict[str, Any]:
        """The request as the gateway's clients see it."""
        return {
            "id": self.id,
            "tool": self.tool,
            "agent": self.agent,
            "arguments": self.arguments,
            "approver": {"platform": self.platform, "user_id": self.approver_id, "name": self.approver_name},
            "conversation": self.conversation,
            "deadline": self.deadline,
        }


class ResolveParams(Params):
    id: str
    decision: Literal["approve", "deny"]


def _request_key(approval_id: str) -> str:
    return f"approval:{approval_id}"


def _decision_key(approval_id: str) -> str:
    return f"approval:{approval_id}:decision"


def _live_key(approval_id: str) -> str:
    return f"approval:{approval_id}:live"


PENDING = "approvals:pending:"


async def orphans(
    store: Store, pending: str, keys: Callable[[str], tuple[str, str, str]], expired: str
) -> AsyncIterator[tuple[str, str, str]]:
    """The waiting questions under `pending` whose turn runs in no process any more (after a
    restart): each one's id, its stored record and how it ended, which is `expired`, written
    now, unless an outcome was stored before. `keys(id)` names its live, record and outcome
    keys. A pending entry whose record is gone is removed."""
    for key in await store.keys(pending):
        item_id = key.removeprefix(pending)
        live, record, outcome = keys(item_id)
        if await store.get(live) is not None:
            continue  # a turn in another process still waits for it
        raw = await store.get(record)
        if raw is None:
            await store.delete(key)
            continue
        if await store.set_if_absent(outcome, expired, ttl=KEEP_S):
            yield item_id, raw, expired
        else:
            yield item_id, raw, await store.get(outcome) or expired


async def settled(
    store: Store, key: str, live_key: str, deadline: float, wakeup: asyncio.Event, *, poll: float, timeout: str
) -> str:
    """How a waiting turn's question ended: the outcome stored under `key` by whichever
    process settled it (a press, an answer; `wakeup` is set when it was this one), or `timeout`
    written there once `deadline` (Unix time) passes, unless an outcome wins that race.
    Meanwhile `live_key` is renewed, so a restart can tell a question still waited on from
    one its process left open."""
    renew_at = time.monotonic() + RENEW_S
    while True:
        raw = await store.get(key)
        if raw is not None:
            return raw
        left = deadline - time.time()
        if left <= 0:
            if await store.set_if_absent(key, timeout, ttl=KEEP_S):
                return timeout
            continue  # an outcome won the race against the deadline
        if time.monotonic() >= renew_at:
            await store.set(live_key, PROCESS, ttl=LIVE_TTL_S)
            renew_at = time.monotonic() + RENEW_S
        try:
            await asyncio.wait_for(wakeup.wait(), min(poll, left))
        except asyncio.TimeoutError:
            pass


class ApprovalDesk:
    """Asks approvers and reads their presses (see the module docstring). It implements the
    kernel's `Approvals`; the runtime hands it to every turn and routes presses to `answer`."""

    def __init__(
        self,
        store: Store,
        delivery: Delivery,
        adapters: Mapping[str, Adapter],
        buttons: ButtonBook,
        *,
        owner_of: OwnerOf,
        notify: Notify | None = None,
        poll_seconds: float = POLL_S,
        events: ConversationEvents | None = None,
    ) -> None:
        self._store = store
        self._events = events
        self._delivery = delivery
        self._adapters = adapters
        self._buttons = buttons
        self._owner_of = owner_of
        self._notify = notify
        self._poll = poll_seconds
        self._wakeups: dict[str, asyncio.Event] = {}  # requests this process waits for
        self._tasks = TaskOwner("approvals")
        self._shutting_down = False

    # --- asking -------------------------------------------------------------------------

    async def ask(self, tool: str, arguments: dict[str, Any], rule: ApprovalRule, context: ToolContext) -> str | None:
        origin = context.origin
        if origin is None:
            return f"{tool} needs a person's approval, and no person started this turn"
        adapter = self._adapters.get(origin.platform)
        if adapter is None or not adapter.capabilities.buttons:
            return f"{tool} needs a person's approval, and {origin.platform} cannot show approval buttons"
        if rule.approver == "owner":
            owner = await self._owner_of(origin.platform)
            if not owner:
                return f"{tool} needs the owner's approval, and no owner is configured for {origin.platform}"
            approver_id = owner
            approver_name = origin.sender.name if owner == origin.sender.user_id else "the owner"
        else:
            approver_id, approver_name = origin.sender.user_id, origin.sender.name
        masked = mask_arguments(arguments)
        request = Request(
            id=uuid.uuid4().hex[:16],
            tool=tool,
            approver_id=approver_id,
            approver_name=approver_name,
            platform=origin.platform,
            text=request_text(tool, masked, context.agent, approver_name, rule.timeout_seconds),
            deadline=time.time() + rule.timeout_seconds,
            conversation=context.conversation or conversation_key(origin),
            agent=context.agent,
            arguments=masked,
        )
        keep = rule.timeout_seconds + KEEP_S
        buttons = await self._buttons.issue(
            [Button("Approve", APPROVE, request.id, "primary"), Button("Deny", DENY, request.id, "danger")], ttl=keep
        )
        wakeup = self._wakeups[request.id] = asyncio.Event()
        try:
            # Recorded before it is posted: the press may come the moment it shows.
            await self._store.set(_live_key(request.id), PROCESS, ttl=LIVE_TTL_S)
            await self._store.set(_request_key(request.id), request.to_json(), ttl=keep)
            await self._store.set(PENDING + request.id, "1", ttl=keep)
            problem = await self._post(adapter, request, buttons, origin.message_id, origin.thread_id, rule.approver,
                                       origin.channel.channel_id)
            if problem is not None:
                await self._forget(request.id)
                return f"could not ask for approval of {tool}: {problem}"
            await self._store.set(_request_key(request.id), request.to_json(), ttl=keep)
            if self._events is not None:
                await self._events.publish(request.conversation, "approval.requested", request.shown())
            await self._tell(request, context.agent)
            try:
                decision = await self._wait(request, wakeup)
            except asyncio.CancelledError:
                if not self._shutting_down:  # stopped, interrupted or re-run: nobody waits any more
                    await asyncio.shield(self._expire(request, Decision("withdrawn")))
                raise
            await self._show(request, decision)
            await self._store.delete(PENDING + request.id)
            return decision.error()
        finally:
            self._wakeups.pop(request.id, None)
            # A turn that stops waiting (finished, or cut off by a stop) is no longer live: a
            # request it leaves undecided is reported expired from now on.
            await asyncio.shield(self._store.delete(_live_key(request.id)))

    async def _post(
        self,
        adapter: Adapter,
        request: Request,
        buttons: list[Button],
        origin_id: str,
        thread_id: str | None,
        approver: str,
        chat_id: str,
    ) -> str | None:
        """Post the request where the approver sees it; why not, if it could not be posted."""
        if approver == "owner":
            delivered = await self._delivery.post_direct(adapter, request.approver_id, request.text, buttons=buttons)
            request.chat_id = delivered.chat_id
            request.posted_in = direct_conversation(request.platform, request.approver_id)
        else:
            to = Destination(adapter, chat_id, thread_id, reply_to=origin_id, conversation=request.conversation)
            delivered = await self._delivery.post(to, request.text, buttons=buttons)
            request.chat_id, request.thread_id = chat_id, thread_id
            request.posted_in = request.conversation
        if delivered.cancelled:
            return "a message_sending hook cancelled the request"
        if delivered.failures or not delivered.message_ids or request.chat_id is None:
            return delivered.failures[0].detail if delivered.failures else "the request was not posted"
        request.message_id = delivered.message_ids[-1]
        return None

    async def _tell(self, request: Request, agent: str) -> None:
        if self._notify is None:
            return
        try:
            await self._notify(request.platform, request.approver_id, f"Approval needed: {agent} wants to run {request.tool}", agent)
        except store_failures():  # the notifier's store; its transports report their own failures
            log.exception("approval %s: the approval_requested notification failed", request.id)

    async def _wait(self, request: Request, wakeup: asyncio.Event) -> Decision:
        """The decision: a press (seen in the store, so it may come from any process), or the
        deadline passing first."""
        raw = await settled(
            self._store, _decision_key(request.id), _live_key(request.id), request.deadline, wakeup,
            poll=self._poll, timeout=Decision("timeout").to_json(),
        )
        return Decision.from_json(raw)

    async def _show(self, request: Request, decision: Decision) -> None:
        """Edit the request to show how it ended, its buttons gone (and tell the gateway's
        clients, once)."""
        if self._events is not None and request.conversation:
            resolved = {"id": request.id, "outcome": decision.outcome, "by": decision.by, "approver": request.shown()["approver"]}
            await self._events.publish(request.conversation, "approval.resolved", resolved, unique=f"evonce:approval:{request.id}")
        adapter = self._adapters.get(request.platform)
        if adapter is None or request.chat_id is None or request.message_id is None:
            return
        to = Destination(adapter, request.chat_id, request.thread_id, conversation=request.posted_in or None)
        result = await self._delivery.edit(to, request.message_id, f"{request.text}\n\n{decision.line()}", buttons=())
        if result.status == "unsupported":  # no edits there (WhatsApp): the decision answers the request
            answer = replace(to, reply_to=request.message_id)
            await self._delivery.post(answer, decision.line(), key=f"approval:{request.id}:decision")
        elif not result.ok:
            log.warning("approval %s: could not show the decision: %s %s", request.id, result.status, result.detail)

    async def _forget(self, approval_id: str) -> None:
        await self._store.delete(_request_key(approval_id), PENDING + approval_id, _live_key(approval_id))

    # --- presses ------------------------------------------------------------------------

    async def answer(self, event: PlatformEvent) -> PressAnswer | None:
        """A press of an approval button (None for any other button): decided when it is the
        approver's and the request is open; the presser is told what happened either way."""
        if event.action_id not in ACTIONS or not event.value:
            return None
        raw = await self._store.get(_request_key(event.value))
        if raw is None:
            return PressAnswer("This approval request is no longer open.", alert=True)
        request = Request.from_json(raw)
        if event.user_id != request.approver_id:
            return PressAnswer(f"This approval is not yours to answer; it is waiting for {request.approver_name}.",
                               alert=True)
        decision, refusal = await self._decide(request, event.action_id == APPROVE, request.approver_name)
        if decision is None:
            return PressAnswer(refusal, alert=refusal.startswith("This request expired"))
        return PressAnswer("Approved." if decision.outcome == "approved" else "Denied.")

    async def _decide(self, request: Request, approve: bool, by: str) -> tuple[Decision | None, str]:
        """Record the approver's decision, once; (None, what to tell) when it was decided
        before or its turn is gone."""
        decided = await self._store.get(_decision_key(request.id))
        if decided is not None:
            return None, Decision.from_json(decided).told()
        if await self._store.get(_live_key(request.id)) is None:
            await self._expire(request)
            return None, "This request expired: the bot stopped before it was answered."
        decision = Decision("approved" if approve else "denied", by)
        if not await self._store.set_if_absent(_decision_key(request.id), decision.to_json(), ttl=KEEP_S):
            latest = await self._store.get(_decision_key(request.id))
            return None, Decision.from_json(latest).told() if latest else "Already decided."
        wakeup = self._wakeups.get(request.id)
        if wakeup is not None:  # the waiting turn is in this process: no need to wait for its next look
            wakeup.set()
        return decision, ""

    # --- the gateway ----------------------------------------------------------------------

    def register_methods(self, registry: MethodRegistry) -> None:
        """`approvals.list` and `approvals.resolve`, for the gateway's clients: an approver
        answers from a browser as they would by pressing the button."""
        registry.register("approvals.list", self._list_method, scope="approvals", help="open approval requests")
        registry.register("approvals.resolve", self._resolve_method, scope="approvals", params=ResolveParams)

    async def pending(self) -> list[Request]:
        """Open requests whose turn still waits, oldest deadline first."""
        found = []
        for key in await self._store.keys(PENDING):
            approval_id = key.removeprefix(PENDING)
            raw = await self._store.get(_request_key(approval_id))
            if raw is None or await self._store.get(_decision_key(approval_id)) is not None:
                continue
            if await self._store.get(_live_key(approval_id)) is not None:
                found.append(Request.from_json(raw))
        return sorted(found, key=lambda r: r.deadline)

    async def _list_method(self, caller: Caller, params: NoParams) -> dict[str, Any]:
        mine = [r.shown() for r in await self.pending() if caller.admin or caller.speaks_for(r.platform, r.approver_id)]
        return {"approvals": mine}

    async def _resolve_method(self, caller: Caller, params: ResolveParams) -> dict[str, Any]:
        raw = await self._store.get(_request_key(params.id))
        if raw is None:
            raise MethodError("not_found", f"no approval request {params.id}")
        request = Request.from_json(raw)
        approver = caller.speaks_for(request.platform, request.approver_id)
        if not approver and not caller.admin:
            raise MethodError("forbidden", f"this approval is waiting for {request.approver_name}, not you")
        by = request.approver_name if approver else f"{caller.name} (admin)"
        decision, refusal = await self._decide(request, params.decision == "approve", by)
        if decision is None:
            raise MethodError("conflict", refusal)
        return {"outcome": decision.outcome}

    async def _expire(self, request: Request, decision: Decision | None = None) -> None:
        """A request whose turn is gone: decided as expired (unless a decision beat us to
        it) and shown so, in the background, so the press is answered in time."""
        decision = decision or Decision("expired")
        if await self._store.set_if_absent(_decision_key(request.id), decision.to_json(), ttl=KEEP_S):
            self._spawn(self._close(request, decision))

    async def _close(self, request: Request, decision: Decision) -> None:
        await self._show(request, decision)
        await self._store.delete(PENDING + request.id)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(work, name="show a decision")

    # --- after a restart ----------------------------------------------------------------

    async def sweep(self) -> int:
        """Report every request whose turn no longer runs (asked before this process started,
        by a process that is gone): decided as expired and its message edited, or, if it was
        decided but never shown, shown. Returns how many were closed."""
        def keys(approval_id: str) -> tuple[str, str, str]:
            return _live_key(approval_id), _request_key(approval_id), _decision_key(approval_id)

        closed = 0
        async for approval_id, raw, decided in orphans(self._store, PENDING, keys, Decision("expired").to_json()):
            request, decision = Request.from_json(raw), Decision.from_json(decided)
            log.info("approval %s of %s: its turn stopped before the end; reported %s", approval_id, request.tool,
                     decision.outcome)
            await self._close(request, decision)
            closed += 1
        return closed

    def shutting_down(self) -> None:
        """From now on a wait cut off is the process ending: its request stays open for the
        next start to report, rather than being closed by a process about to disconnect."""
        self._shutting_down = True

    async def stop(self) -> None:
        """Let the edits still in flight finish (briefly)."""
        await self._tasks.wait(timeout=5.0)
