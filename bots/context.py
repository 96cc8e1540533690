"""Conversations that never outgrow the model: how many tokens a request carries, the most it
may carry, and what to do with the oldest turns when it would carry more.

The decision is `plan_context`, a pure function of sizes (tokens per history item, the size of
what is always sent, the window): it folds the oldest turns, never the newest `keep_recent`
messages unless nothing else makes the request fit, and never part of a turn (history keeps a
turn, with its tool calls and their results, as one item, so folding whole items never parts
a call from its result). Folding everything older than the protected messages at once, rather
than just enough to fit, is what keeps compaction rare: the next one is due only once the
conversation has grown by a window's worth again, so a session's cost per turn stays flat.

`Context.fit` applies the plan to one turn. With `summarize`, the folded turns (an earlier
summary among them) become one summary, written by the agent's model (or
`context.summary_model`) and returned as the history to store, so it is written once. A
summary call that fails costs the turn nothing but the folded turns: the request is sent
trimmed, says nothing of a summary, and the next turn tries again.

Token counts: an estimate, a token per three ASCII characters (English prose runs near four,
so this errs on the safe side) and one per other character (CJK text runs close to a token a
character), four per message for its framing, and a flat `IMAGE_TOKENS` per image; for a
model litellm knows, the larger of that and litellm's `token_counter` with the tiktoken
encoding litellm ships (text that tokenizes densely, such as ids and digits, can run over the
estimate). The tokenizer is always that one: left to choose, litellm downloads a model's own
tokenizer from Hugging Face (for Llama, Replicate and Claude models, and on older litellm for
any provider-prefixed name), a network call with retries inside a turn. litellm is imported (once, in a
thread) only when the count matters: the agent sets `context.max_tokens`, or a request is over
`SMALL_REQUEST` by the estimate. Counts of stored turns are cached by their stored text.
"""

from __future__ import annotations

import json
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from botweave.config import AgentConfig
from botweave.model_calls import ModelCalls, litellm_loaded, load_litellm

log = logging.getLogger(__name__)

#: The window of a model litellm does not know.
DEFAULT_WINDOW = 8000
#: A request this small is sent without looking the model's window up (every chat model takes
#: more), so short conversations never import litellm for it.
SMALL_REQUEST = 2048
#: The framing of one message (role, separators), in tokens.
MESSAGE_OVERHEAD = 4
IMAGE_TOKENS = 1000
#: The longest summary asked for, and what is set aside for it when planning.
SUMMARY_TOKENS = 600
SUMMARY_PREFIX = "Summary of the earlier conversation (older messages were condensed to fit the model's window):\n"
SUMMARY_INSTRUCTIONS = (
    "Condense the conversation below into a short summary for the assistant to continue from: "
    "the facts, decisions, open questions and what the person asked for, in plain sentences. "
    "Write only the summary."
)
CUT_NOTE = "\n[…the rest of this message was cut: it is longer than the model's window]"
#: A folded message is quoted to the summary model up to this many characters.
QUOTE_CHARS = 4000
_OFFLINE = "offline/"


@dataclass(frozen=True, slots=True)
class ContextPlan:
    """What to do before sending: fold the `fold` oldest history items (0: send as is), into a
    summary (`summarize`) or by dropping them; `overflow`: even with no history at all the
    request is over the window, so the new message itself has to be cut."""

    fold: int = 0
    summarize: bool = False
    overflow: bool = False


def plan_context(
    items: Sequence[tuple[int, int]],
    fixed: int,
    window: int,
    keep_recent: int,
    compaction: str,
    summary_tokens: int = SUMMARY_TOKENS,
) -> ContextPlan:
    """The plan for a request of `fixed` tokens (instructions, tools, the new message) plus
    the history `items`, oldest first, each (tokens, messages)."""
    total = fixed + sum(tokens for tokens, _ in items)
    if total <= window:
        return ContextPlan()
    # the newest items holding the last `keep_recent` messages are protected
    protected_from, seen = len(items), 0
    while protected_from > 0 and seen < keep_recent:
        protected_from -= 1
        seen += items[protected_from][1]
    summarize = compaction == "summarize"
    reserve = summary_tokens if summarize else 0
    fold = protected_from
    rest = fixed + reserve + sum(tokens for tokens, _ in items[fold:])
    while rest > window and fold < len(items):  # the protected turns themselves do not fit
        rest -= items[fold][0]
        fold += 1
    if fold == 0:
        return ContextPlan(overflow=rest > window)
    return ContextPlan(fold=fold, summarize=summarize, overflow=rest > window)


def estimate_text(text: str) -> int:
    ascii_chars = sum(1 for char in text if char < "\x80") if not text.isascii() else len(text)
    return math.ceil(ascii_chars / 3) + (len(text) - ascii_chars)


def estimate_message(message: dict[str, Any]) -> int:
    """The documented estimate of one message's tokens (see the module docstring)."""
    tokens = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        tokens += estimate_text(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                tokens += estimate_text(str(part.get("text", "")))
            else:
                tokens += IMAGE_TOKENS
    calls = message.get("tool_calls")
    if calls:
        tokens += estimate_text(json.dumps(calls, ensure_ascii=False))
    return tokens


class TokenCounter:
    """Token counts for one model (see the module docstring for how)."""

    CACHE = 4096

    def __init__(self, model: str) -> None:
        self.model = model
        self._known: bool | None = None
        self._cache: OrderedDict[str, int] = OrderedDict()

    @property
    def wants_litellm(self) -> bool:
        """Whether loading litellm would make the counts better (it knows tokenizers)."""
        return not litellm_loaded() and not self.model.startswith(_OFFLINE)

    def _litellm(self) -> Any | None:
        if not litellm_loaded() or self.model.startswith(_OFFLINE):
            return None
        import litellm

        if self._known is None:
            try:
                litellm.get_model_info(self.model)
                self._known = True
            except Exception:  # boundary: litellm's model map raises a bare Exception for a model it does not map
                self._known = False
            if self._known:
                self._cache.clear()  # counted by the estimate alone until now
        return litellm if self._known else None

    def message(self, message: dict[str, Any]) -> int:
        estimate = estimate_message(message)
        litellm = self._litellm()
        if litellm is not None and isinstance(message.get("content"), str) and not message.get("tool_calls"):
            try:
                local = {"type": "openai_tokenizer", "tokenizer": litellm.utils.encoding}
                counted = litellm.token_counter(model=self.model, messages=[message], custom_tokenizer=local)
                return max(estimate, int(counted))
            except ValueError:  # litellm's own error for content it cannot count
                log.debug("token_counter failed for %s; estimating", self.model, exc_info=True)
        return estimate

    def messages(self, messages: Sequence[dict[str, Any]]) -> int:
        return sum(self.message(m) for m in messages)

    def item(self, raw: str, messages: Sequence[dict[str, Any]]) -> int:
        """The tokens of one stored history item, cached by its stored text."""
        found = self._cache.get(raw)
        if found is None:
            found = self.messages(messages)
            self._cache[raw] = found
            if len(self._cache) > self.CACHE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(raw)
        return found


_WINDOWS: dict[str, int] = {}


async def model_window(model: str) -> int:
    """The model's input window from litellm's model information; DEFAULT_WINDOW when it has
    none (or the model is the offline stand-in)."""
    if model in _WINDOWS:
        return _WINDOWS[model]
    window = DEFAULT_WINDOW
    if not model.startswith(_OFFLINE):
        litellm = await load_litellm()
        try:
            info = litellm.get_model_info(model)
            window = int(info.get("max_input_tokens") or info.get("max_tokens") or DEFAULT_WINDOW)
        except Exception:  # boundary: litellm's model map raises a bare Exception for a model it does not map
            window = DEFAULT_WINDOW
    _WINDOWS[model] = window
    return window


async def request_window(config: AgentConfig) -> int:
    """The most tokens one of the agent's requests may carry."""
    if config.context.max_tokens is not None:
        return config.context.max_tokens
    return max(await model_window(config.model) - (config.max_tokens or 0), 256)


def is_summary(messages: Sequence[dict[str, Any]]) -> bool:
    return (
        len(messages) == 1
        and messages[0].get("role") == "system"
        and str(messages[0].get("content", "")).startswith(SUMMARY_PREFIX)
    )


def transcript(items: Sequence[Sequence[dict[str, Any]]], max_chars: int) -> str:
    """The folded turns as the summary model reads them, newest kept when over `max_chars`."""
    lines: list[str] = []
    for item in items:
        for message in item:
            role = str(message.get("role", ""))
            content = message.get("content")
            text = content if isinstance(content, str) else " ".join(
                str(part.get("text", "")) for part in content or [] if isinstance(part, dict) and part.get("type") == "text"
            )
            if role == "system" and text.startswith(SUMMARY_PREFIX):
                lines.append("Earlier summary: " + text[len(SUMMARY_PREFIX):])
                continue
            for call in message.get("tool_calls") or []:
                function = call.get("function", {})
                lines.append(f"assistant called {function.get('name')}({str(function.get('arguments', ''))[:500]})")
            if text:
                label = "tool result" if role == "tool" else role
                lines.append(f"{label}: {text[:QUOTE_CHARS]}")
    joined = "\n".join(lines)
    return joined[-max_chars:] if len(joined) > max_chars else joined


#: A turn's tool rounds end when less than this is left of the window: the next request
#: answers in words.
ROUND_FLOOR = 256
RESULT_CUT_NOTE = "…[the rest of this result was cut: the model's window is full]"
#: A result keeps at least this many tokens however full the window is, so a short answer (an
#: error saying what was wrong) always reaches the model whole.
RESULT_FLOOR = 100


def fit_round(
    messages: Sequence[dict[str, Any]], room: int, count: Callable[[dict[str, Any]], int] = estimate_message
) -> tuple[list[dict[str, Any]], int]:
    """One tool round (the call message, then its results) with each result cut to its share
    of the `room` the window has left, as `count` counts; the room left after them. The call is
    never cut (the provider needs it whole), and a result is only ever shortened, never
    dropped, so every call keeps its result; a short result (up to RESULT_FLOOR) is kept whole.
    Only a model's own oversized call (its arguments go back to it as it wrote them) can leave
    the room below zero; the next request then asks for words."""
    call, *results = messages
    room -= count(call)
    fitted: list[dict[str, Any]] = [call]
    for index, result in enumerate(results):
        share = max(RESULT_FLOOR, room // (len(results) - index))
        content = result.get("content")
        size = count(result)
        if size > share and isinstance(content, str):
            keep, cut = len(content), result
            while size > share and keep > 0:
                keep = max(0, min(keep - 1, keep * share // size - 16))
                cut = {**result, "content": content[:keep] + RESULT_CUT_NOTE}
                size = count(cut)
            result = cut
        room -= size
        fitted.append(result)
    return fitted, room


@dataclass(frozen=True, slots=True)
class Fitted:
    """One request's history as it will be sent, and what became of the stored history:
    `stored` is the new list of stored items when a summary replaced the oldest (None: the
    stored history is unchanged); `tokens` is the request's size and `user_content` the new
    message as sent (cut when it alone was over the window)."""

    history: list[dict[str, Any]]
    stored: list[str] | None
    tokens: int
    window: int
    user_content: Any


class Context:
    """Fits each of an agent's requests in its window, as the agent's `context:` says."""

    def __init__(self, config: AgentConfig, calls: ModelCalls) -> None:
        self.config = config
        self.calls = calls
        self.counter = TokenCounter(config.model)

    async def window(self, estimate: int) -> int:
        """The window, without looking the model up when the request is small anyway."""
        if self.config.context.max_tokens is None and estimate <= SMALL_REQUEST:
            return SMALL_REQUEST
        return await request_window(self.config)

    async def fit(
        self,
        items: Sequence[tuple[str, list[dict[str, Any]]]],
        frame: Sequence[dict[str, Any]],
        tools_json: str,
        user_content: Any,
    ) -> Fitted:
        """The history to send with a request made of `frame` (the system message and the new
        user message) and the tools, and the stored history to keep when it was folded."""
        counter = self.counter
        settings = self.config.context
        if settings.max_tokens is not None and counter.wants_litellm:
            await load_litellm()
        fixed = counter.messages(frame) + (estimate_text(tools_json) if tools_json else 0)
        sizes = [(counter.item(raw, messages), len(messages)) for raw, messages in items]
        total = fixed + sum(tokens for tokens, _ in sizes)
        if total > SMALL_REQUEST and counter.wants_litellm:
            await load_litellm()  # the count matters now: count again with the model's tokenizer
            fixed = counter.messages(frame) + (estimate_text(tools_json) if tools_json else 0)
            sizes = [(counter.item(raw, messages), len(messages)) for raw, messages in items]
            total = fixed + sum(tokens for tokens, _ in sizes)
        window = await self.window(total)
        plan = plan_context(sizes, fixed, window, settings.keep_recent, settings.compaction)
        if plan.overflow:
            user_content, fixed = self._cut(user_content, frame, fixed, window)
        kept = list(items[plan.fold:])
        history = [m for _, messages in kept for m in messages]
        if plan.fold == 0:
            return Fitted(history, None, fixed + sum(t for t, _ in sizes), window, user_content)
        folded = [messages for _, messages in items[: plan.fold]]
        summary = await self._summary(folded, window) if plan.summarize else None
        if summary is None:
            tokens = fixed + sum(t for t, _ in sizes[plan.fold:])
            return Fitted(history, None, tokens, window, user_content)
        item = [{"role": "system", "content": SUMMARY_PREFIX + summary}]
        raw = json.dumps(item, ensure_ascii=False)
        summary_tokens = counter.item(raw, item)
        while history and fixed + summary_tokens + counter.messages(history) > window:
            history = history[1:]  # a summary longer than asked for: never over the window
            while history and history[0].get("role") == "tool":
                history = history[1:]
        stored = [raw, *(raw_item for raw_item, _ in kept)]
        tokens = fixed + summary_tokens + counter.messages(history)
        return Fitted([*item, *history], stored, tokens, window, user_content)

    def _cut(self, content: Any, frame: Sequence[dict[str, Any]], fixed: int, window: int) -> tuple[Any, int]:
        """The new message shortened until the request fits (text only; pictures stay)."""
        if not isinstance(content, str):
            return content, fixed
        over = fixed - window
        keep = max(0, len(content) - 4 * over - 4 * estimate_text(CUT_NOTE) - 64)
        while True:
            cut = content[:keep] + CUT_NOTE
            size = fixed - estimate_text(content) + estimate_text(cut)
            if size <= window or keep == 0:
                return cut, size
            keep = max(0, keep - max(64, keep // 10))

    async def _summary(self, folded: list[list[dict[str, Any]]], window: int) -> str | None:
        settings = self.config.context
        model = settings.summary_model or self.config.model
        request: dict[str, Any] = {
            "model": model,
            "messages": [
                {"role": "system", "content": SUMMARY_INSTRUCTIONS},
                {"role": "user", "content": transcript(folded, max(1000, (window - SUMMARY_TOKENS) * 3))},
            ],
            "stream": False,
            "max_tokens": SUMMARY_TOKENS,
            "timeout": self.config.timeout_seconds,
            "metadata": {"botweave_purpose": "summary"},
        }
        if settings.summary_model is None:
            if self.config.api_base:
                request["api_base"] = self.config.api_base
            if self.config.api_key is not None:
                request["api_key"] = self.config.api_key.get_secret_value()
        try:
            output = await self.calls.answer(request)
        except Exception as exc:  # boundary: the summary's model call; whatever the provider raised, the turn goes on trimmed
            log.warning("summarising the conversation with %s failed (%s); sending it trimmed", model, type(exc).__name__)
            return None
        text = (output.text or "").strip()
        if not text:
            log.warning("the summary model %s answered nothing; sending the conversation trimmed", model)
            return None
        return text
