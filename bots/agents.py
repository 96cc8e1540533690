"""Agents: a named model with instructions and tools, answering from the conversation's history."""

from __future__ import annotations

import base64
import binascii
import json
import logging
import mimetypes
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botweave.config import AgentConfig
from botweave.context import ROUND_FLOOR, estimate_message, fit_round
from botweave.metrics import model_call
from botweave.mime import UNKNOWN, base_mime
from botweave.model_calls import CallPart, ModelCalls, ModelOutput
from botweave.model_clients import ModelClients
from botweave.model_guard import AgentError as AgentError
from botweave.model_guard import ModelGuard, ModelSession, Route, who_of
from botweave.store import Append, Operation, Remove, Store
from botweave.streaming import Rewind
from botweave.tooling import Tool, ToolCall, ToolContext, run_round, schema_of
from botweave.types import BotMessage, OutboundFile

log = logging.getLogger(__name__)


class History:
    """A conversation's turns in the store, newest last, trimmed to the agent's budget.

    Each turn is one list item: the person's message, any rounds of tool calls with their
    results, and the answer, in the provider's message format. Keeping a turn in one item is
    what makes trimming safe: the store drops whole items, so a tool result is never kept
    without the call it answers (providers refuse such a conversation). A message recorded on
    its own (a group message the bot only observes) is an item of one message.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    @staticmethod
    def key(conversation: str) -> str:
        return f"history:{conversation}"

    async def load(self, conversation: str, max_turns: int) -> list[dict[str, Any]]:
        if max_turns <= 0:
            return []
        raw = await self._store.list_range(self.key(conversation), -max_turns, -1)
        messages: list[dict[str, Any]] = []
        for item in raw:
            value = json.loads(item)
            messages.extend(value if isinstance(value, list) else [value])
        return complete_exchanges(messages)

    async def load_items(self, conversation: str, max_turns: int) -> list[tuple[str, list[dict[str, Any]]]]:
        """The newest `max_turns` items as stored (text) and read (messages), oldest first;
        an item whose messages are not whole exchanges (written before turns were kept
        whole) keeps only its whole ones."""
        if max_turns <= 0:
            return []
        raw = await self._store.list_range(self.key(conversation), -max_turns, -1)
        items: list[tuple[str, list[dict[str, Any]]]] = []
        for item in raw:
            value = json.loads(item)
            messages = complete_exchanges(value if isinstance(value, list) else [value])
            if messages:
                items.append((item, messages))
        return items

    def rewrite_ops(
        self, conversation: str, max_turns: int, items: Sequence[str], messages: Sequence[dict[str, Any]],
        replaces: str | None = None,
    ) -> tuple[list[Operation], str]:
        """The history rewritten as `items` (a summary in the place of the oldest turns) with
        this turn's `messages` as one item, appended or in the place of `replaces`."""
        key = self.key(conversation)
        item = json.dumps(list(messages), ensure_ascii=False)
        kept = list(items)
        if replaces is not None and replaces in kept:
            kept[len(kept) - 1 - kept[::-1].index(replaces)] = item
        else:
            kept.append(item)
        return [Remove(key), Append(key, tuple(kept), max(max_turns, 1))], item

    async def append(self, conversation: str, max_turns: int, *entries: dict[str, Any]) -> None:
        """Record messages one item each (nothing in them refers to another)."""
        op = self.append_op(conversation, max_turns, *entries)
        await self._store.list_append(op.key, *op.values, max_len=op.max_len)

    def append_op(self, conversation: str, max_turns: int, *entries: dict[str, Any]) -> Append:
        """The append as an operation, for a turn that commits it with its other effects."""
        values = tuple(json.dumps(e, ensure_ascii=False) for e in entries)
        return Append(self.key(conversation), values, max(max_turns, 1))

    async def append_turn(self, conversation: str, max_turns: int, messages: Sequence[dict[str, Any]]) -> None:
        """Record one whole turn as one item, so it is kept or dropped whole."""
        op = self.append_turn_op(conversation, max_turns, messages)
        await self._store.list_append(op.key, *op.values, max_len=op.max_len)

    def append_turn_op(self, conversation: str, max_turns: int, messages: Sequence[dict[str, Any]]) -> Append:
        """The whole turn's append as an operation, for the commit that carries its effects."""
        item = json.dumps(list(messages), ensure_ascii=False)
        return Append(self.key(conversation), (item,), max(max_turns, 1))

    async def replace_turn_ops(
        self, conversation: str, max_turns: int, old_item: str, messages: Sequence[dict[str, Any]]
    ) -> list[Operation]:
        """The history rewritten with `messages` as one item in the place of `old_item` (the
        newest copy of it), for a commit; appended when `old_item` was trimmed away already.
        The caller holds the conversation's turn, so nothing else writes it meanwhile."""
        key = self.key(conversation)
        items = await self._store.list_range(key)
        item = json.dumps(list(messages), ensure_ascii=False)
        for index in range(len(items) - 1, -1, -1):
            if items[index] == old_item:
                items[index] = item
                break
        else:
            items.append(item)
        return [Remove(key), Append(key, tuple(items), max(max_turns, 1))]

    async def reset(self, conversation: str) -> None:
        await self._store.delete(self.key(conversation))


def complete_exchanges(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` without tool calls that lack their results or results that lack their call.

    Turns are stored whole, so this only matters for history written before they were; it is
    cheap insurance, because one orphaned tool message makes a provider refuse every later
    request of the conversation.
    """
    kept: list[dict[str, Any]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.get("role") == "tool":
            index += 1  # a result whose call is not right before it
            continue
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if not calls:
            kept.append(message)
            index += 1
            continue
        results = []
        index += 1
        while index < len(messages) and messages[index].get("role") == "tool":
            results.append(messages[index])
            index += 1
        wanted = {call.get("id") for call in calls}
        if wanted == {result.get("tool_call_id") for result in results}:
            kept.append(message)
            kept.extend(results)
    return kept


@dataclass
class ToolTurn:
    """One turn's tool rounds: the context every call gets, and what the rounds added to the
    conversation (assistant messages carrying calls, and the results), in the provider's
    format, for history. `used` names the tools called, in order."""

    context: ToolContext
    messages: list[dict[str, Any]] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    #: What this turn adds to the agent's instructions (what it remembers of the person).
    instructions: str = ""
    #: Tokens the tool rounds may still add to the request before the model's window is full
    #: (None: no limit); results are cut to fit, and below ROUND_FLOOR the rounds end.
    room: int | None = None
    #: How the room is counted (the context's token counter).
    count: Callable[[dict[str, Any]], int] = estimate_message

    @property
    def out_of_room(self) -> bool:
        return self.room is not None and self.room < ROUND_FLOOR
    #: The model that gave the latest answer (a fallback, when the agent's own failed).
    model: str = ""

    def note(self) -> str:
        """What the model is told about the message it answers, so it can react to it."""
        origin = self.context.origin
        if origin is None:
            return ""
        where = f"{origin.platform}:{origin.channel.channel_id}"
        if origin.thread_id:
            where += f":{origin.thread_id}"
        return f"The message you are answering has id {origin.message_id}, in {where} (the `origin` target)."


class _StreamedCalls:
    """Tool calls as a stream carries them: fragments by index, put together at the end."""

    def __init__(self) -> None:
        self._parts: dict[int, dict[str, str]] = {}

    def add(self, fragments: tuple[CallPart, ...]) -> None:
        for fragment in fragments:
            part = self._parts.setdefault(fragment.index, {"id": "", "name": "", "arguments": ""})
            if fragment.id:
                part["id"] = fragment.id
            if fragment.name:
                part["name"] = fragment.name
            part["arguments"] += fragment.arguments

    def calls(self) -> list[ToolCall]:
        return [
            ToolCall(part["id"] or f"call_{index}", part["name"], part["arguments"])
            for index, part in sorted(self._parts.items())
            if part["name"]
        ]


def _calls_of(parts: tuple[CallPart, ...]) -> list[ToolCall]:
    calls = [ToolCall(part.id or f"call_{part.index}", part.name, part.arguments) for part in parts]
    return [call for call in calls if call.name]


#: What an agent (by name) is told, for one turn only, of the person whose message it answers
#: (what it remembers of them); the memory feature provides it, the runtime hands it to turns.
Briefing = Callable[[str, BotMessage], Awaitable[str]]

ROUND_SEPARATOR = "\n\n"
OUT_OF_ROUNDS = "I stopped after {rounds} rounds of tool calls without reaching an answer."
OUT_OF_ROOM = "I stopped calling tools: their results filled the model's window before I reached an answer."
#: A user turn as the model reads it: text, or OpenAI-style content parts (text and images).
UserContent = str | list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class UserTurn:
    """What an agent is given for one message: the text (words, transcripts, documents, markers
    for what was not read), the images it may look at as content parts, and `record`, the
    compact text history keeps instead of the bytes (None: the text itself)."""

    text: str
    images: tuple[dict[str, Any], ...] = ()
    record: str | None = None

    def content(self, prefix: str = "") -> UserContent:
        text = prefix + self.text
        if not self.images:
            return text
        words = [{"type": "text", "text": text}] if text.strip() else []
        return [*words, *self.images]

    def history(self, prefix: str = "") -> str:
        return prefix + (self.text if self.record is None else self.record)


def _stopped(turn: ToolTurn, rounds: int, round_number: int) -> str:
    """What a turn whose tool rounds ended without words says ("" when they did not end)."""
    if not rounds:
        return ""
    if turn.out_of_room:
        return OUT_OF_ROOM
    return OUT_OF_ROUNDS.format(rounds=rounds) if round_number == rounds else ""


def decode_data_url(url: str) -> tuple[str, bytes] | None:
    """(type, bytes) of a base64 `data:` URL; None for anything else. The type is the model's
    to write, so one that is not a MIME type is unknown."""
    if not url.startswith("data:") or "," not in url:
        return None
    header, payload = url[len("data:") :].split(",", 1)
    parts = header.split(";")
    if "base64" not in parts[1:]:
        return None
    try:
        return (base_mime(parts[0]) or UNKNOWN), base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None


def images_of(urls: tuple[str, ...], found: list[OutboundFile]) -> None:
    """Collect the images a model returned as files; images given only by an http URL are not
    fetched."""
    for url in urls:
        decoded = decode_data_url(url)
        if decoded is None:
            log.info("a model returned an image that is not a data: URL; not sent")
            continue
        mime, data = decoded
        extension = mimetypes.guess_extension(mime, strict=False) or ".png"
        found.append(OutboundFile(data, f"image-{len(found) + 1}{extension}", mime))


@dataclass
class Agent:
    """A model with instructions and, optionally, tools.

    With tools, a turn is a loop: the model answers with calls, the calls run (concurrently
    within a round) and their results go back, until it answers in words or `max_tool_rounds`
    rounds are used up; the last request then forbids further calls. Streaming streams every
    round's text as it comes, so the final answer streams after the tool rounds; words a model
    says before calling a tool stay (a streamed word cannot be taken back), separated from what
    follows by a blank line. A whole (not streamed) answer is the last round's words only.
    `calls` is where the requests go: litellm in this process (the offline model answered
    here) unless the runtime gives it other clients or helper processes.
    """

    name: str
    config: AgentConfig
    tools: dict[str, Tool] = field(default_factory=dict)
    calls: ModelCalls = field(default_factory=lambda: ModelClients("litellm"))
    _tools_json: tuple[tuple[int, ...], str] | None = field(default=None, init=False, repr=False)
    #: Fallbacks, cool-downs and budgets, shared by the App's agents; one of its own otherwise.
    guard: ModelGuard | None = None

    @property
    def model(self) -> str:
        return self.config.model

    def _messages(self, history: list[dict[str, Any]], user_turn: UserContent, turn: ToolTurn) -> list[dict[str, Any]]:
        system = self.config.instructions
        note = turn.note() if self.tools else ""
        for extra in (note, turn.instructions):
            if extra:
                system = f"{system}\n\n{extra}"
        return [{"role": "system", "content": system}, *history, {"role": "user", "content": user_turn}]

    def frame(self, user_turn: UserContent, turn: ToolTurn) -> list[dict[str, Any]]:
        """What every request of the turn carries besides history: instructions and message."""
        return self._messages([], user_turn, turn)

    def tools_json(self) -> str:
        """The tools as the request describes them (their size counts against the window),
        made again only when the tools changed (an MCP server listed new ones)."""
        if not self.tools:
            return ""
        offered = tuple(map(id, self.tools.values()))
        if self._tools_json is None or self._tools_json[0] != offered:
            self._tools_json = (offered, json.dumps([schema_of(tool) for tool in self.tools.values()]))
        return self._tools_json[1]

    def _request(self, messages: list[dict[str, Any]], stream: bool, *, last_round: bool = False) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "stream": stream,
            "timeout": self.config.timeout_seconds,
            "metadata": {"botweave_agent": self.name},
        }
        if self.tools:
            request["tools"] = [schema_of(tool) for tool in self.tools.values()]
            if last_round:
                request["tool_choice"] = "none"
                request["drop_params"] = True  # a provider without tool_choice still answers in words
        if self.config.temperature is not None:
            request["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            request["max_tokens"] = self.config.max_tokens
        return request  # the server and key are the candidate's (model_guard.Route)

    def _session(self, turn: ToolTurn) -> ModelSession:
        """The turn's model calls through the guard: its candidates, cool-downs and budgets,
        counted as the person's and the chat's when a message started the turn, as the
        conversation's chat when none did (a room's scheduled stand-up)."""
        origin = turn.context.origin
        if origin is not None:
            who = who_of(self.name, origin.platform, origin.sender.user_id, origin.channel.channel_id)
        else:
            platform, _, chat = (turn.context.conversation or "").partition(":")
            who = who_of(self.name, platform or None, None, chat or None)
        if self.guard is None:
            self.guard = ModelGuard()
        return self.guard.session(self.name, self.config, who)

    def _answered(self, turn: ToolTurn, route: Route) -> None:
        """Whoever reports on the turn (its footer, log line and events) names this model."""
        turn.model = route.candidate.model
        run = turn.context.run
        if run is not None:
            run.model = route.candidate.model

    async def _answer(self, session: ModelSession, request: dict[str, Any], turn: ToolTurn) -> ModelOutput:
        """One whole answer, from the first candidate that gives one."""
        while True:
            route, asked = await session.next(request)
            started = time.monotonic()
            try:
                output = await self.calls.answer(asked)
            except Exception as exc:  # boundary: the model call; the guard classifies it, those that end the turn raise in next()
                model_call(self.name, time.monotonic() - started)
                await session.failed(route, exc)
                continue
            model_call(self.name, time.monotonic() - started, *(output.usage or (0, 0)), model=route.candidate.model)
            self._answered(turn, route)
            await session.answered(route, output.usage)
            return output

    def _turn(self, turn: ToolTurn | None) -> ToolTurn:
        return turn if turn is not None else ToolTurn(ToolContext(self.name))

    async def _run_round(
        self, messages: list[dict[str, Any]], turn: ToolTurn, text: str | None, calls: list[ToolCall]
    ) -> None:
        """Run one round's calls and add the call message and the results to both the
        request's messages and the turn's record."""
        call_message: dict[str, Any] = {"role": "assistant", "content": text or None, "tool_calls": [c.wire() for c in calls]}
        results = await run_round(calls, self.tools, turn.context)
        turn.used.extend(call.name for call in calls)
        if turn.room is not None:
            fitted, turn.room = fit_round([call_message, *results], turn.room, turn.count)
            call_message, results = fitted[0], fitted[1:]
        for message in (call_message, *results):
            messages.append(message)
            turn.messages.append(message)

    async def complete(
        self,
        history: list[dict[str, Any]],
        user_turn: UserContent,
        turn: ToolTurn | None = None,
        *,
        images: list[OutboundFile] | None = None,
    ) -> str:
        """The whole reply's text; images the model returns land in `images`."""
        turn = self._turn(turn)
        messages = self._messages(history, user_turn, turn)
        rounds = self.config.max_tool_rounds if self.tools else 0
        session = self._session(turn)
        for round_number in range(rounds + 1):
            request = self._request(messages, stream=False, last_round=round_number == rounds or turn.out_of_room)
            output = await self._answer(session, request, turn)
            calls = _calls_of(output.calls) if round_number < rounds and not turn.out_of_room else []
            if not calls:
                if images is not None:
                    images_of(output.image_urls, images)
                return output.text or _stopped(turn, rounds, round_number)
            await self._run_round(messages, turn, output.text, calls)
        return ""  # not reached: the last round never runs calls

    async def stream(
        self,
        history: list[dict[str, Any]],
        user_turn: UserContent,
        turn: ToolTurn | None = None,
        *,
        images: list[OutboundFile] | None = None,
    ) -> AsyncIterator[str]:
        """The reply's text as it arrives; images the model returns land in `images`."""
        turn = self._turn(turn)
        messages = self._messages(history, user_turn, turn)
        rounds = self.config.max_tool_rounds if self.tools else 0
        shown = False  # some text reached the person already
        said = 0  # characters yielded so far, all rounds together
        session = self._session(turn)
        for round_number in range(rounds + 1):
            request = self._request(messages, stream=True, last_round=round_number == rounds or turn.out_of_room)
            while True:
                route, asked = await session.next(request)
                text = ""
                before, pictures = said, len(images) if images is not None else 0
                calls = _StreamedCalls()
                started = time.monotonic()
                tokens = None
                try:
                    async for piece in self.calls.stream(asked):
                        tokens = piece.usage or tokens
                        if images is not None:
                            images_of(piece.image_urls, images)
                        if piece.text:
                            if not text and shown:
                                said += len(ROUND_SEPARATOR)
                                yield ROUND_SEPARATOR
                            text += piece.text
                            said += len(piece.text)
                            yield piece.text
                        if piece.calls:
                            calls.add(piece.calls)
                except Exception as exc:  # boundary: the model call; the guard classifies it, those that end the turn raise in next()
                    model_call(self.name, time.monotonic() - started)
                    if said > before:  # the next model's answer takes the place of these words
                        said = before
                        yield Rewind(before)
                    if images is not None:
                        del images[pictures:]
                    await session.failed(route, exc)
                    continue
                model_call(self.name, time.monotonic() - started, *(tokens or (0, 0)), model=route.candidate.model)
                self._answered(turn, route)
                await session.answered(route, tokens)
                break
            shown = shown or bool(text)
            made = calls.calls() if round_number < rounds and not turn.out_of_room else []
            if not made:
                if not shown and _stopped(turn, rounds, round_number):
                    yield _stopped(turn, rounds, round_number)
                return
            await self._run_round(messages, turn, text, made)
