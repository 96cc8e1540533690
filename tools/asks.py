"""`ask_user`: the agent asks the person it answers, and the turn waits for the reply.

The asking itself is the runtime's (the turn's `Asks`: the question posted in the
conversation, buttons for the options, the reply or press read back); this tool only checks
what the model asked for and says it in the model's terms. The wait is not bounded by the
usual tool timeout: the question's own `timeout_seconds` bounds it.
"""

from __future__ import annotations

from typing import Any

from botweave.tooling import ToolContext, ToolError

#: Seconds a question waits when neither the model nor bot.yaml says.
DEFAULT_ASK_TIMEOUT_S = 300.0
#: The longest a question may wait: the turn holds its conversation meanwhile.
MAX_ASK_TIMEOUT_S = 3600.0
MAX_OPTIONS = 10
MAX_OPTION_CHARS = 64
MAX_QUESTION_CHARS = 2000


class AskUser:
    """The `ask_user` tool. `default_timeout` is the wait when the model gives none (the
    entry's `timeout_seconds` in bot.yaml, else 300 s)."""

    name = "ask_user"
    description = (
        "Ask the person you are answering a question and wait for their reply; use it when you "
        "cannot go on without their choice or a fact only they know. With `options`, they pick "
        "one (buttons); without, they reply in their own words. Returns {\"answer\": \"...\"}, or "
        "{\"error\": \"no answer within N s\"} when they did not answer in time."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question, as the person will read it."},
            "options": {
                "type": "array",
                "items": {"type": "string", "maxLength": MAX_OPTION_CHARS},
                "maxItems": MAX_OPTIONS,
                "description": f"Up to {MAX_OPTIONS} short answers to choose from; leave out for a free reply.",
            },
            "timeout_seconds": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_ASK_TIMEOUT_S,
                "description": "How long to wait for the answer (default 300).",
            },
        },
        "required": ["question"],
        "additionalProperties": False,
    }

    def __init__(self, default_timeout: float | None = None) -> None:
        self.default_timeout = min(default_timeout or DEFAULT_ASK_TIMEOUT_S, MAX_ASK_TIMEOUT_S)

    @property
    def timeout_seconds(self) -> float:
        # The question's own deadline ends the wait; this only catches a wait that outlives it.
        return MAX_ASK_TIMEOUT_S + 60.0

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, str]:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ToolError("ask_user needs a `question`")
        if len(question) > MAX_QUESTION_CHARS:
            raise ToolError(f"the question is longer than {MAX_QUESTION_CHARS} characters")
        options = _options(arguments.get("options"))
        timeout = _timeout(arguments.get("timeout_seconds"), self.default_timeout)
        if context.asks is None:
            raise ToolError("nobody can be asked here")
        result = await context.asks.ask(question.strip(), options, timeout, context)
        if "error" in result:
            raise ToolError(result["error"])
        return result


def _options(raw: Any) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(o, str) for o in raw):
        raise ToolError("options must be a list of strings")
    labels = [" ".join(o.split()) for o in raw]
    if any(not label for label in labels):
        raise ToolError("an option is empty")
    if len(labels) > MAX_OPTIONS:
        raise ToolError(f"at most {MAX_OPTIONS} options (got {len(labels)})")
    if any(len(label) > MAX_OPTION_CHARS for label in labels):
        raise ToolError(f"an option is longer than {MAX_OPTION_CHARS} characters; buttons show a few words")
    if len({label.casefold() for label in labels}) != len(labels):
        raise ToolError("two options have the same label")
    return labels


def _timeout(raw: Any, default: float) -> float:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw <= 0:
        raise ToolError("timeout_seconds must be a positive number of seconds")
    return min(float(raw), MAX_ASK_TIMEOUT_S)
