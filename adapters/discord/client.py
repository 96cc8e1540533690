"""The adapter's own discord.py client: what it does differently, on this client only.

Three things differ from a plain `discord.Client`, each through a seam discord.py gives its
subclasses, so another client in the same process (a program's own bot beside botweave) keeps
discord.py exactly as it ships: nothing of discord.py's modules or classes is assigned to.

* A malformed gateway dispatch costs that one event, not the connection. discord.py lets a
  parser's exception escape its receive loop, which ends `Client.connect`. The client's
  connection state (`Client._get_state` returns it, as discord.py's own sharded client does)
  sanitises each dispatch the adapter reads before its parser runs (`schema`) and logs and
  skips a payload its parser still refuses.
* A gateway frame orjson refuses is read anyway. With orjson installed, discord.py decodes
  every frame with it, and orjson refuses JSON that is valid but carries a lone surrogate
  escape (`"\\ud800"`), `NaN`, or a number beyond 64 bits; the error ends the connection for
  good (the same frame comes back on every resume). discord.py builds the gateway WebSocket
  by its class name, so the connection state re-classes each new one of this client (in
  `_update_references`, which discord.py calls as it creates it, before its first frame;
  rebase.py does the same to the client's HTTPClient) to a subclass that keeps orjson for
  every frame and, only for a frame orjson refused, re-encodes it with the standard decoder's
  reading (lone surrogates as U+FFFD, as the schemas clean them anyway; non-finite and
  out-of-range numbers as null) and lets discord.py read that; a frame that is not JSON at all
  is logged and skipped. An ordinary frame costs one call layer and one attribute
  store more than in discord.py (well under a microsecond; the Discord race in bench/race.py
  shows no difference). REST answers are decoded as discord.py ships.
* discord.py warns once per process, in `Client.__init__`, that voice needs PyNaCl and davey;
  botweave never joins voice, so those two lines are dropped by a filter on discord.py's
  client logger that is in place only while this client is being constructed. discord.py's
  own once-per-process flag is consumed by discord.py itself, as any first client does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

import discord
from botweave.payload import Dropped, clean_text, sanitise
from botweave.tasks import failure_line
from discord.gateway import DiscordWebSocket
from discord.state import ConnectionState

from .schema import DISPATCHES

log = logging.getLogger(__name__)

#: The integers orjson reads: signed and unsigned 64-bit.
_INT_RANGE = range(-(2**63), 2**64)
#: How discord.py's voice warnings end (`PyNaCl is not installed, voice will NOT be supported`).
_VOICE_WARNING = "voice will NOT be supported"


class AdapterClient(discord.Client):
    """`discord.Client` with the adapter's connection state and without the voice warnings."""

    def __init__(self, **options: Any) -> None:
        with _voice_warnings_dropped():
            super().__init__(**options)

    def _get_state(self, **options: Any) -> GuardedState:
        return GuardedState(dispatch=self.dispatch, handlers=self._handlers, hooks=self._hooks, http=self.http, **options)


class GuardedState(ConnectionState[AdapterClient]):
    """discord.py's connection state with every parser guarded and a tolerant gateway."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # discord.py builds this client's parser table once, from its `parse_*` methods.
        for event, parser in list(self.parsers.items()):
            self.parsers[event] = _guarded(event, parser)

    def _update_references(self, ws: DiscordWebSocket) -> None:
        """discord.py calls this with each gateway WebSocket it has just created for this
        client, before reading its first frame."""
        super()._update_references(ws)
        ws.__class__ = TolerantGateway


class TolerantGateway(DiscordWebSocket):
    """discord.py's gateway WebSocket, reading a frame orjson refuses as the standard decoder does.

    `log_receive` is discord.py's hook for the frame's text just before it is decoded (a no-op
    unless debug events are on, which this client never turns on); it keeps the text here, so a
    decode failure can be answered without decompressing again.
    """

    _frame: str | None = None

    def log_receive(self, data: Any, /) -> None:
        self._frame = data

    async def received_message(self, msg: Any, /) -> None:
        # A decode error of this call comes right after this call's `log_receive`: no reset needed.
        try:
            await super().received_message(msg)
        except json.JSONDecodeError:  # orjson's error is one too; only the frame's decoding raises it
            frame = self._frame
            if not isinstance(frame, str):
                raise
            try:
                readable = _orjson_readable(frame)
            except (ValueError, RecursionError) as exc:
                log.warning("discord: skipped a gateway frame that is not JSON (%s)", failure_line(exc))
                return
            await super().received_message(readable)


def _orjson_readable(frame: str) -> str:
    """`frame` as the standard decoder reads it, written as JSON orjson reads too."""
    data = json.loads(frame, parse_constant=_null, parse_int=_int64, parse_float=_finite)
    return clean_text(json.dumps(data, ensure_ascii=False))  # a lone surrogate is now a character


def _null(_: str) -> None:
    return None


def _int64(text: str) -> int | None:
    value = int(text)
    return value if value in _INT_RANGE else None


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def _guarded(event: str, parser: Callable[[Any], None]) -> Callable[[Any], None]:
    """`parser` behind the dispatch's schema, logging and skipping what it cannot parse."""
    schema = DISPATCHES.get(event)

    def run(data: Any) -> None:
        if schema is not None:
            dropped = Dropped()
            data = sanitise(data, schema, dropped)
            if data is None:
                log.warning("discord: skipped a malformed %s dispatch (no usable id, channel or author)", event)
                return
            if dropped:
                log.warning("discord: %s: ignored malformed field(s) %s", event, ", ".join(dropped[:8]))
        try:
            parser(data)
        except Exception as exc:  # boundary: inbound, the gateway's receive loop; one dispatch is skipped, not the connection
            log.warning("discord: skipped a malformed %s dispatch (%s)", event, failure_line(exc))

    return run


class _VoiceWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().endswith(_VOICE_WARNING)


@contextlib.contextmanager
def _voice_warnings_dropped() -> Iterator[None]:
    """discord.py's voice warnings are dropped while the block runs, and only then."""
    logger = logging.getLogger("discord.client")
    only_these = _VoiceWarnings()
    logger.addFilter(only_these)
    try:
        yield
    finally:
        logger.removeFilter(only_these)
