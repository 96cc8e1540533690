"""Tools an agent can call: the one interface every tool source implements, and how one round
of calls runs.

Built-ins, Python functions and MCP servers (the tools feature) all hand agents objects of
the `Tool` shape, so the agent's loop knows nothing of where a tool came from. A round's calls
run concurrently; each call ends in a result the model can read, whatever happened: a tool
that raises, times out, is refused by a policy or does not exist answers `{"error": "…"}`, and
the turn goes on. Logs name the tool and how it ended, never its arguments, which may carry
whatever the person typed (addresses, tokens).

A tool may need a person's yes before it runs (`approval: required` in bot.yaml): such a
tool is wrapped in `NeedsApproval`, and its call first asks the turn's `Approvals` (the
runtime hands one in with the context). The wait for an answer is not part of the tool's
own timeout, and a refusal, a timeout or the lack of anyone to ask is the call's result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from botweave import tracing
from botweave.events import RunEvents
from botweave.metrics import TOOL_CALLS
from botweave.types import BotMessage, MessageActionResult

#: The label of calls to a tool the agent does not have (the model made the name up).
UNKNOWN_TOOL = "(unknown)"
log = logging.getLogger(__name__)

#: Seconds a call may take when its tool sets no `timeout_seconds`.
DEFAULT_TIMEOUT_SECONDS = 30.0
#: A result longer than this is cut: one huge page must not crowd the conversation out.
MAX_RESULT_CHARS = 32_000


Approver = Literal["requester", "owner"]
#: Seconds an approval request waits for its answer when its tool sets none.
DEFAULT_APPROVAL_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """Who must say yes before a tool runs (the person whose message started the turn, or the
    bot's owner on that platform), and how long they have."""

    approver: Approver = "requester"
    timeout_seconds: float = DEFAULT_APPROVAL_TIMEOUT_S


class Approvals(Protocol):
    """Asks the approver whether one call may run; the runtime hands each turn one."""

    async def ask(self, tool: str, arguments: dict[str, Any], rule: ApprovalRule, context: ToolContext) -> str | None:
        """None when the call was approved; otherwise what the model is told instead of a
        result (`denied by <who>`, `approval timed out`, or why nobody could be asked)."""
        ...


class Asks(Protocol):
    """Asks the person a turn answers a question and waits for the reply (`ask_user`); the
    runtime hands each turn one."""

    async def ask(
        self, question: str, options: Sequence[str], timeout_seconds: float, context: ToolContext
    ) -> dict[str, str]:
        """`{"answer": ...}`, or `{"error": ...}` when nobody answered in time or nobody could
        be asked."""
        ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a call knows about the turn it runs in. `origin` is the message being answered
    (None when nobody wrote one, e.g. a room member's turn), which is what the `origin`
    target and a reaction's default message mean. `approvals` asks for a person's yes where
    a tool needs one; without it such a tool cannot run. `asks` puts a question to the person
    of `origin` (`ask_user`). `run`, when the gateway is configured, is where each call's
    progress is published (arguments masked)."""

    agent: str
    origin: BotMessage | None = None
    conversation: str | None = None
    approvals: Approvals | None = None
    run: RunEvents | None = None
    asks: Asks | None = None


@runtime_checkable
class Tool(Protocol):
    """A function the model may call: its name, a description and a JSON schema of its
    arguments as the model sees them, and the call itself. `timeout_seconds` None means
    `DEFAULT_TIMEOUT_SECONDS`."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]: ...

    @property
    def timeout_seconds(self) -> float | None: ...

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any: ...


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    """A tool that runs only once its approver said yes (see the module docstring)."""

    tool: Tool
    rule: ApprovalRule

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def parameters(self) -> dict[str, Any]:
        return self.tool.parameters

    @property
    def timeout_seconds(self) -> float | None:
        return self.tool.timeout_seconds

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        return await self.tool.call(arguments, context)


class ToolError(Exception):
    """A tool could not do what it was asked; the message is what the model is told."""


class ToolRefused(ToolError):
    """A policy refused the call (the network egress policy, say); the message says why."""


class Egress(Protocol):
    """The network egress policy as tools see it; the runtime hands each agent its own."""

    def refusal(self, url: str) -> str | None:
        """Why `url` may not be reached, or None when it may."""
        ...


def schema_of(tool: Tool) -> dict[str, Any]:
    """The tool as a function declaration in a chat completion request."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def action_output(result: MessageActionResult, target: str | None = None) -> dict[str, Any]:
    """A message action as the model reads it: the ids of what it posted let it edit, delete
    or react to them later."""
    ids = list(result.message_ids) or ([result.message_id] if result.message_id else [])
    return {"status": result.status, "target": target or result.target, "message_ids": ids, "detail": result.detail}


def _jsonable(value: Any) -> Any:
    if isinstance(value, MessageActionResult):
        return action_output(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)  # pydantic models
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def output_text(value: Any) -> str:
    """A call's return value as the text of its `tool` message: strings as they are,
    everything else as JSON; cut at `MAX_RESULT_CHARS`."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=_jsonable)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[… cut: the result had {len(text)} characters]"
    return text


def error_text(message: str) -> str:
    return json.dumps({"error": message}, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for, as it came: `arguments` is the model's JSON text."""

    id: str
    name: str
    arguments: str

    def wire(self) -> dict[str, Any]:
        """The call as the assistant message in history carries it (OpenAI's format)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def parse_arguments(raw: str) -> dict[str, Any]:
    """The model's argument text as a mapping; an empty text is no arguments.

    Whatever the text, the result is a ToolError or a mapping a tool can use: JSON nested too
    deep to read is an error, and a lone surrogate (valid as a JSON escape, but no character
    any encoder takes) becomes U+FFFD, as it does in what platforms send.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ToolError(f"the arguments are not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise ToolError("the arguments are nested too deep") from None
    if not isinstance(value, dict):
        raise ToolError("the arguments must be a JSON object")
    if _SURROGATE.search(raw) or _SURROGATE_ESCAPE.search(raw):
        try:
            return _encodable(value)  # type: ignore[no-any-return]
        except RecursionError:
            raise ToolError("the arguments are nested too deep") from None
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _encodable(value: Any) -> Any:
    """`value` with every lone surrogate in its strings replaced by U+FFFD (json.loads joins
    the escapes of a proper pair into one character, so what is left is lone)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_encodable(key): _encodable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_encodable(item) for item in value]
    return value


async def run_call(call: ToolCall, tools: Mapping[str, Tool], context: ToolContext) -> str:
    """One call, always ending in a result text (see the module docstring); each is counted in
    `botweave_tool_calls_total` by how it ended."""
    tool = tools.get(call.name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        log.warning("agent %s: the model called unknown tool %s", context.agent, call.name)
        TOOL_CALLS.labels(UNKNOWN_TOOL, "unknown").inc()  # a made-up name is no label
        if context.run is not None:
            await context.run.tool(call.id, call.name, "failed", _shown_arguments(call))
        return error_text(f"there is no tool named {call.name!r}; tools: {known}")
    with tracing.span(f"execute_tool {call.name}", {"gen_ai.operation.name": "execute_tool",
                                                    "gen_ai.tool.name": call.name}) as span:
        outcome, text = await _call(tool, call, context)  # its arguments and result are never traced
        span.set("botweave.tool.status", outcome)
        if outcome != "ok":
            span.fail(outcome)
    TOOL_CALLS.labels(call.name, outcome).inc()
    if context.run is not None:
        await context.run.tool(call.id, call.name, "done" if outcome == "ok" else "failed", _shown_arguments(call))
    return text


def _shown_arguments(call: ToolCall) -> Any:
    """The arguments as a tool event shows them (masked by the events): parsed when they
    parse, else nothing (the model's broken text may hold anything)."""
    try:
        return parse_arguments(call.arguments)
    except ToolError:
        return {}


async def _call(tool: Tool, call: ToolCall, context: ToolContext) -> tuple[str, str]:
    started = time.monotonic()
    timeout = tool.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
    run = context.run
    try:
        arguments = parse_arguments(call.arguments)
        if isinstance(tool, NeedsApproval):
            if run is not None:
                await run.tool(call.id, call.name, "awaiting_approval", arguments)
            refusal = await _approval(tool, arguments, context)
            if refusal is not None:
                log.info("agent %s: tool %s not approved", context.agent, call.name)
                return "denied", error_text(refusal)
            started = time.monotonic()
        if run is not None:
            await run.tool(call.id, call.name, "started", arguments)
        async with asyncio.timeout(timeout):
            value = await tool.call(arguments, context)
    except TimeoutError:
        log.warning("agent %s: tool %s timed out after %.1fs", context.agent, call.name, timeout)
        return "timeout", error_text(f"{call.name} timed out after {timeout:g}s")
    except ToolRefused as exc:
        log.warning("agent %s: tool %s refused: %s", context.agent, call.name, exc)
        return "refused", error_text(str(exc))
    except ToolError as exc:
        # The tool's message may quote what it was given (a URL with a token in it, say).
        log.info("agent %s: tool %s reported an error", context.agent, call.name)
        return "error", error_text(str(exc))
    except Exception as exc:  # boundary: a tool's call, user-supplied code; a broken tool must not end the turn
        # The exception's text may repeat the arguments, so only its type is logged.
        log.warning("agent %s: tool %s raised %s", context.agent, call.name, type(exc).__name__)
        return "error", error_text(f"{call.name} failed: {type(exc).__name__}: {exc}"[:2000])
    log.info("agent %s: tool %s done in %.2fs", context.agent, call.name, time.monotonic() - started)
    return "ok", output_text(value)


async def _approval(tool: NeedsApproval, arguments: dict[str, Any], context: ToolContext) -> str | None:
    if context.approvals is None:
        return f"{tool.name} needs a person's approval, and nobody can be asked here"
    return await context.approvals.ask(tool.name, arguments, tool.rule, context)


async def run_round(calls: Sequence[ToolCall], tools: Mapping[str, Tool], context: ToolContext) -> list[dict[str, Any]]:
    """Run one round's calls concurrently; their `tool` messages, in the order of the calls."""
    if len(calls) == 1:  # the common case needs no task of its own
        outputs = [await run_call(calls[0], tools, context)]
    else:
        outputs = list(await asyncio.gather(*(run_call(call, tools, context) for call in calls)))
    return [{"role": "tool", "tool_call_id": call.id, "content": output} for call, output in zip(calls, outputs)]
