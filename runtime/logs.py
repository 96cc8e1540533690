"""Logging as operators read it: text for a terminal, one JSON object per line for a collector.

What the runtime reports at INFO is meant to be read: each platform connecting (which bot,
which mode) and one line per turn. Fields that a collector should index travel as the
record's `extra` (`log.info(..., extra={"agent": ...})`); the text format carries them in the
message, the JSON format also as keys of their own.

Secrets stay out: httpx logs every request URL at INFO, and a Telegram Bot API URL contains the
bot's token, so httpx (and httpcore below it) never log below WARNING, whatever the verbosity.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any, Literal

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: Never below WARNING: their INFO lines carry request URLs, and Telegram's carry the token.
SECRET_BEARING = ("httpx", "httpcore")
#: Chatty at INFO about their own internals; heard at DEBUG (-vv).
NOISY = (
    "LiteLLM", "litellm", "discord", "telegram", "slack_bolt", "slack_sdk", "microsoft_agents", "aiohttp.access", "apscheduler",
)

#: What every LogRecord has; anything else on a record came from `extra=` and is a field.
_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class _Stderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record is emitted: the console's prompt swaps
    in a proxy that prints above the prompt line instead of through it."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the record's
    extra fields, and the traceback as `exception` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def setup_logging(level: int = logging.INFO, fmt: LogFormat = "text", *, libraries: bool = False) -> None:
    """Send the process's logs to stderr in `fmt`, at `level` (replacing earlier handlers:
    this is for the program that owns the process, the CLI or `App.run`). The SDKs' own
    chatter stays at WARNING unless `libraries` asks for it too."""
    handler = _Stderr()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in NOISY:
        logging.getLogger(name).setLevel(level if libraries else max(level, logging.WARNING))
    for name in SECRET_BEARING:
        logging.getLogger(name).setLevel(logging.WARNING)
