"""The one decision every model client shares (botweave.failover), as a table: candidates,
the turn's failures, the cool-downs and the time in; the next candidate, a wait or giving up
out. And how failures of each client read, and how long a cool-down lasts."""

from __future__ import annotations

import asyncio

import pytest
from botweave.failover import Attempt, Call, Candidate, Failure, GiveUp, classify, cooldown_seconds, decide
from botweave.model_calls import ModelCallFailed
from botweave.openai_compatible import APIConnectionError, error_for

A = Candidate("a", "openai/gpt-3.5-turbo", 16_385)
A2 = Candidate("a2", "openai/gpt-3.5-turbo", 16_385)  # the same model with a second key
B = Candidate("b", "anthropic/claude-sonnet-4-5", 200_000)
C = Candidate("c", "openai/local", None)

RATE = Failure("rate_limited", 429, 30.0)
BUSY = Failure("overloaded", 503)
TIMEOUT = Failure("timeout")
CUT = Failure("stream_cut")
CONTEXT = Failure("context_window", 400)
AUTH = Failure("auth", 401)
BAD = Failure("bad_request", 400)
NOW = 1000.0

TABLE = [
    # (what, candidates, attempts, cooled, expected)
    ("nothing failed: the first", [A, B], [], {}, Call(A)),
    ("a 429 moves on to the next", [A, B], [("a", RATE)], {"a": NOW + 30}, Call(B)),
    ("a 503 moves on", [A, B], [("a", BUSY)], {"a": NOW + 5}, Call(B)),
    ("a timeout moves on", [A, B], [("a", TIMEOUT)], {}, Call(B)),
    ("a cut stream moves on", [A, B], [("a", CUT)], {}, Call(B)),
    ("a refused key moves on to the next key", [A, A2, B], [("a", AUTH)], {}, Call(A2)),
    ("a cooled first candidate is skipped without a call", [A, B], [], {"a": NOW + 10}, Call(B)),
    ("a cool-down that ended is no cool-down", [A, B], [], {"a": NOW - 1}, Call(A)),
    ("a cooled key is skipped for the other key", [A, A2, B], [], {"a": NOW + 10}, Call(A2)),
    ("a plain 400 is not retried", [A, B], [("a", BAD)], {}, GiveUp(BAD)),
    ("context: only a larger window", [A, A2, B], [("a", CONTEXT)], {}, Call(B)),
    ("context: an unknown window is not larger", [A, C], [("a", CONTEXT)], {}, GiveUp(CONTEXT)),
    ("context: nothing larger left", [B, A], [("b", CONTEXT)], {}, GiveUp(CONTEXT)),
    ("all cooled, back within the wait: wait for the first back", [A, B], [], {"a": NOW + 15, "b": NOW + 8}, Call(B, 8.0)),
    ("all cooled, longer than the wait: give up saying when", [A, B], [], {"a": NOW + 60, "b": NOW + 90},
     GiveUp(None, NOW + 60)),
    ("the last one failed and cooled: wait for the one back soonest",
     [A, B], [("a", RATE), ("b", RATE)], {"a": NOW + 30, "b": NOW + 12}, Call(B, 12.0)),
    ("everything failed and cooled beyond the wait: give up naming when",
     [A, B], [("a", RATE), ("b", RATE)], {"a": NOW + 30, "b": NOW + 40}, GiveUp(RATE, NOW + 30)),
    ("a passing failure of the only candidate: asked again after a pause", [A], [("a", TIMEOUT)], {}, Call(A, 0.5)),
    ("untried candidates before a second try", [A, B], [("a", TIMEOUT)], {}, Call(B)),
    ("each candidate at most twice", [A], [("a", TIMEOUT), ("a", TIMEOUT)], {}, GiveUp(TIMEOUT)),
    ("a refused key is not asked again", [A], [("a", AUTH)], {}, GiveUp(AUTH)),
]


@pytest.mark.parametrize("what, candidates, attempts, cooled, expected", TABLE, ids=[row[0] for row in TABLE])
def test_the_decision_table(what, candidates, attempts, cooled, expected):
    made = [Attempt(key, failure) for key, failure in attempts]
    assert decide(candidates, made, cooled, NOW, max_wait=20.0) == expected


@pytest.mark.parametrize(
    "retry_after, strikes, expected",
    [(30.0, 1, 30.0), (900.0, 1, 300.0), (None, 1, 5.0), (None, 2, 10.0), (None, 4, 40.0), (None, 20, 300.0), (0.0, 1, 5.0)],
)
def test_a_cooldown_is_what_the_provider_asked_else_doubling_from_five_seconds(retry_after, strikes, expected):
    assert cooldown_seconds(retry_after, strikes, 300.0) == expected


def test_failures_read_the_same_from_every_client():
    date = error_for(429, b'{"error": {"message": "slow down"}}', {"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"})
    assert classify(date).kind == "rate_limited" and classify(date).retry_after > 1e9
    assert classify(error_for(429, b"{}", {"retry-after": "7"})).retry_after == 7.0
    assert classify(error_for(503, b"{}")).kind == "overloaded"
    assert classify(error_for(500, b'{"error": {"message": "Overloaded"}}')).kind == "overloaded"
    assert classify(error_for(502, b"{}")).kind == "server_error"
    assert classify(error_for(408, b"{}")).kind == "timeout"
    assert classify(error_for(401, b"{}")).kind == "auth"
    context = b'{"error": {"message": "maximum context length is 8192 tokens", "code": "context_length_exceeded"}}'
    assert classify(error_for(400, context)).kind == "context_window"
    assert classify(error_for(400, b'{"error": {"message": "bad temperature"}}')).kind == "bad_request"
    assert classify(error_for(403, b'{"error": {"message": "content refused"}}')).kind == "auth"
    assert classify(APIConnectionError("the stream from x ended before the model said it was finished")).kind == "stream_cut"
    assert classify(APIConnectionError("Cannot connect to host")).kind == "connection"
    assert classify(asyncio.TimeoutError()).kind == "timeout"
    assert classify(ValueError("a bug")).kind == "other" and not classify(ValueError()).retryable
    # from a model process: the type name, status and Retry-After crossed the pipe
    crossed = ModelCallFailed("RateLimitError", "slow down", 429, 12.0, "rate_limit_exceeded")
    assert classify(crossed) == Failure("rate_limited", 429, 12.0, "RateLimitError", "slow down")
    assert classify(ModelCallFailed("ContextWindowExceededError", "too long")).kind == "context_window"


def test_litellm_errors_are_read_by_their_status_and_headers():
    litellm = pytest.importorskip("litellm")
    import httpx

    response = httpx.Response(429, headers={"retry-after": "9"}, request=httpx.Request("POST", "http://x"))
    limited = litellm.RateLimitError("slow down", llm_provider="openai", model="gpt-4o", response=response)
    assert classify(limited).kind == "rate_limited" and classify(limited).retry_after == 9.0
    refused = litellm.BadRequestError("no", model="gpt-4o", llm_provider="openai")
    assert classify(refused).kind == "bad_request"
    window = litellm.ContextWindowExceededError("too long", model="gpt-4o", llm_provider="openai")
    assert classify(window).kind == "context_window"
