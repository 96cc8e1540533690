"""The wire: frames, close codes, and reading what a client sent (docs/gateway.md is the
reference for people writing clients; this module is what the server holds to).

Reading is defensive by construction: a text frame becomes a request or a `MethodError`
naming what is wrong with it, never an exception of another kind, so whatever a client sends
is answered with a structured error and the connection goes on.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from botweave.methods import MethodError
from botweave.payload import clean_text

PROTOCOL = 1
#: The largest frame read from a client, before `connect` and after (files go over HTTP).
MAX_FRAME_BYTES = 64 * 1024
#: The longest request id a client may choose (a string; any JSON number is an id too).
MAX_ID_CHARS = 200
#: How long a new connection has to send `connect`.
HANDSHAKE_TIMEOUT_S = 10.0

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011
CLOSE_UNAUTHORIZED = 4001
CLOSE_PROTOCOL = 4002
CLOSE_HANDSHAKE_TIMEOUT = 4003
CLOSE_NOT_CONNECTED = 4004
CLOSE_SLOW_CONSUMER = 4008
CLOSE_REVOKED = 4010


#: What a client may use as a request's id: a string, or a JSON number (integer or not).
RequestId = str | int | float


def usable_id(value: Any) -> bool:
    """Whether `value` can be a request's id: a string of at most `MAX_ID_CHARS` characters,
    or a finite number (JSON has no NaN or infinity; Python's reader takes them, so they are
    refused here; true and false are not numbers)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return len(value) <= MAX_ID_CHARS
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


class BadFrame(MethodError):
    """A frame that is not a request; `request_id` is its id when it had a usable one."""

    def __init__(self, code: str, message: str, request_id: RequestId | None = None) -> None:
        super().__init__(code, message)
        self.request_id = request_id


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: Any


def _cleaned(value: Any) -> Any:
    """Strings without lone surrogates or NUL (U+FFFD instead): a JSON escape can carry them,
    and neither a store nor a UTF-8 encoder takes them."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [_cleaned(item) for item in value]
    if isinstance(value, dict):
        return {clean_text(str(key)): _cleaned(item) for key, item in value.items()}
    return value


def read_request(text: str) -> Request:
    """A client frame as a request; `BadFrame` (not_json, bad_frame) otherwise, naming the
    frame's id when it had a usable one, so the answer can carry it."""
    try:
        frame = json.loads(text)
    except (ValueError, RecursionError):
        raise BadFrame("not_json", "the frame is not JSON") from None
    if "\\u" in text or "\x00" in text:  # only an escape (or a NUL) brings what clean_text replaces
        try:
            frame = _cleaned(frame)
        except RecursionError:
            raise BadFrame("bad_frame", "the frame is nested too deeply") from None
    if not isinstance(frame, dict):
        raise BadFrame("not_json", "the frame must be a JSON object")
    request_id = frame.get("id")
    usable = usable_id(request_id)
    problem = None
    if frame.get("type") != "req":
        problem = 'frames from a client are {"type": "req", "id", "method", "params"}'
    elif not usable:
        problem = f"a request needs an id: a string (up to {MAX_ID_CHARS} characters) or a number"
    elif not isinstance(frame.get("method"), str) or not frame["method"]:
        problem = "a request needs a method name"
    if problem is not None:
        raise BadFrame("bad_frame", problem, request_id if usable else None)
    assert isinstance(request_id, (str, int, float))  # usable_id said so
    return Request(request_id, frame["method"], frame.get("params"))


def _dumps(frame: dict[str, Any]) -> str:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"), default=str)


def result_frame(request_id: RequestId | None, result: Any) -> str:
    return _dumps({"type": "res", "id": request_id, "ok": True, "result": result if result is not None else {}})


def error_frame(request_id: RequestId | None, error: MethodError) -> str:
    return _dumps({"type": "res", "id": request_id, "ok": False, "error": error.to_dict()})


def event_frame(event: str, data: Any, *, conversation: str | None = None, seq: int | None = None) -> str:
    frame: dict[str, Any] = {"type": "event", "event": event}
    if conversation is not None:
        frame["conversation"] = conversation
    if seq is not None:
        frame["seq"] = seq
    frame["data"] = data
    return _dumps(frame)


def logged_event_frame(conversation: str, seq: int, logged: str) -> str:
    """An event as the conversation's log holds it (`{"event":..,"data":..}`), framed without
    reading it again: the same text goes to every client following the conversation."""
    return '{"type":"event","conversation":' + json.dumps(conversation, ensure_ascii=False) + ',"seq":' + str(seq) + "," + logged[1:]
