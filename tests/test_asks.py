"""`ask_user`'s pure parts as tables: what the tool accepts from the model, which typed reply
answers a question, what a question shows once it ended; and the tool in bot.yaml."""

from __future__ import annotations

from typing import Any

import pytest
from botweave.config import ConfigError
from botweave.policies.asks import Answer, Question, no_answer, session_of
from botweave.runtime.config import load_config
from botweave.tooling import ToolContext, ToolError
from botweave.tools.asks import MAX_ASK_TIMEOUT_S, AskUser

from tests.support import message


class Recorder:
    """An `Asks` that answers at once and keeps what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, list[str], float]] = []

    async def ask(self, question: str, options: Any, timeout_seconds: float, context: ToolContext) -> dict[str, str]:
        self.asked.append((question, list(options), timeout_seconds))
        return {"answer": "fine"}


@pytest.mark.parametrize(
    ("arguments", "asked"),
    [
        ({"question": "Which size?"}, ("Which size?", [], 300.0)),
        ({"question": "  Which size?  ", "options": ["Small", "  Large  size "]}, ("Which size?", ["Small", "Large size"], 300.0)),
        ({"question": "Q", "timeout_seconds": 20}, ("Q", [], 20.0)),
        ({"question": "Q", "timeout_seconds": 10 * 3600}, ("Q", [], MAX_ASK_TIMEOUT_S)),
        ({"question": "Q", "options": [str(n) for n in range(10)]}, ("Q", [str(n) for n in range(10)], 300.0)),
    ],
)
async def test_what_the_tool_asks(arguments: dict[str, Any], asked: tuple[str, list[str], float]) -> None:
    asks = Recorder()
    result = await AskUser().call(arguments, ToolContext("a", message("hi"), asks=asks))
    assert result == {"answer": "fine"}
    assert asks.asked == [asked]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({}, "needs a `question`"),
        ({"question": "   "}, "needs a `question`"),
        ({"question": "x" * 2001}, "longer than 2000"),
        ({"question": "Q", "options": "Small, Large"}, "list of strings"),
        ({"question": "Q", "options": ["Small", 2]}, "list of strings"),
        ({"question": "Q", "options": ["Small", " "]}, "an option is empty"),
        ({"question": "Q", "options": [str(n) for n in range(11)]}, "at most 10 options"),
        ({"question": "Q", "options": ["x" * 65]}, "longer than 64"),
        ({"question": "Q", "options": ["Yes", "yes"]}, "same label"),
        ({"question": "Q", "timeout_seconds": 0}, "positive number"),
        ({"question": "Q", "timeout_seconds": True}, "positive number"),
        ({"question": "Q", "timeout_seconds": "soon"}, "positive number"),
    ],
)
async def test_what_the_tool_refuses(arguments: dict[str, Any], error: str) -> None:
    asks = Recorder()
    with pytest.raises(ToolError, match=error):
        await AskUser().call(arguments, ToolContext("a", message("hi"), asks=asks))
    assert asks.asked == []


async def test_without_a_desk_nobody_can_be_asked() -> None:
    with pytest.raises(ToolError, match="nobody can be asked"):
        await AskUser().call({"question": "Q"}, ToolContext("a"))


def test_the_default_wait_is_the_entrys_and_never_over_the_ceiling() -> None:
    assert AskUser().default_timeout == 300.0
    assert AskUser(45).default_timeout == 45.0
    assert AskUser(10 * 3600).default_timeout == MAX_ASK_TIMEOUT_S
    assert AskUser().timeout_seconds > MAX_ASK_TIMEOUT_S, "the tool timeout never cuts a question short"


def question(options: list[str]) -> Question:
    return Question("q1", "Which?", options, "1", "Ann", "telegram", "telegram:dm:1", "a", 0.0)


@pytest.mark.parametrize(
    ("options", "typed", "answer"),
    [
        ([], "12 Rose Lane", "12 Rose Lane"),
        ([], "  spaced  ", "spaced"),
        ([], "   ", None),
        (["Small", "Large"], "large", "Large"),
        (["Small", "Large"], " Small ", "Small"),
        (["Small", "Large"], "2", "Large"),
        (["Small", "Large"], "3", None),
        (["Small", "Large"], "0", None),
        (["Small", "Large"], "medium please", None),
    ],
)
def test_which_typed_reply_answers(options: list[str], typed: str, answer: str | None) -> None:
    assert question(options).pick(typed) == answer


@pytest.mark.parametrize(
    ("answer", "line", "told"),
    [
        (Answer("answered", "Large", "Ann"), "✅ Ann answered: Large", "Already answered: Large"),
        (Answer("timeout"), "⌛ No answer in time.", "Too late: this question timed out."),
        (Answer("withdrawn"), "⏹ Withdrawn: the turn was stopped before this was answered.", "This question was withdrawn."),
        (Answer("expired"), "⌛ Expired: the bot stopped before this was answered.", "This question expired."),
    ],
)
def test_how_an_ended_question_reads(answer: Answer, line: str, told: str) -> None:
    assert answer.line() == line
    assert answer.told() == told
    assert Answer.from_json(answer.to_json()) == answer


def test_the_model_is_told_the_wait_in_seconds_and_clients_name_web_sessions_by_id() -> None:
    assert no_answer(300.0) == "no answer within 300 s"
    assert no_answer(0.5) == "no answer within 0.5 s"
    assert session_of("web:s-123") == "s-123"
    assert session_of("telegram:dm:1") == "telegram:dm:1"
    shown = question(["A", "B"]).shown()
    assert shown["options"] == ["A", "B"] and "options" not in question([]).shown()


def test_ask_user_is_a_built_in_and_a_misspelling_names_it() -> None:
    config = load_config({"agents": {"a": {"model": "offline/echo", "tools": [{"name": "ask_user", "timeout_seconds": 60}]}}})
    assert config.agents["a"].tools[0].name == "ask_user"
    with pytest.raises(ConfigError) as caught:
        load_config({"agents": {"a": {"model": "offline/echo", "tools": ["ask_users"]}}})
    assert "ask_user" in str(caught.value)
