"""Where a turn's work happens, for whoever traces it.

The kernel marks its units of work (a tool call, a delivery, a retried send) with `span` and
`event`, and a failover with `before_call` (the next model call's span records it); the
runtime, when tracing is configured, makes `CURRENT` the tracer of the turn that runs, and its
spans nest by the tracer's own context. With no tracer (the default) each is a lookup and
nothing more, and no tracing library is ever imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from types import TracebackType
from typing import Protocol

AttributeValue = str | int | float | bool
Attributes = Mapping[str, AttributeValue]


class Span(Protocol):
    def set(self, key: str, value: AttributeValue) -> None:
        """Record what was learned while the span ran (a count, an outcome)."""

    def fail(self, error_type: str) -> None:
        """Mark the span failed, with the error's type only (its text may quote private data)."""


class Tracer(Protocol):
    def span(self, name: str, attributes: Attributes) -> AbstractContextManager[Span]:
        """A span under the current one, for the duration of the `with` block."""

    def event(self, name: str, attributes: Attributes) -> None:
        """Something that happened within the current span (a retried send)."""

    def before_call(self, name: str, attributes: Attributes) -> None:
        """An event for the span of the next model call made in this context (a failover:
        decided before that call's span begins)."""

    def carrier(self) -> dict[str, str]:
        """The current span's context as W3C headers, for work that goes on in another process
        (with the event `before_call` left for the model call that process makes)."""


#: How a run nobody wrote (a schedule's) is traced: `with traced(name, attributes):` around it.
Traced = Callable[[str, Attributes], AbstractContextManager[object]]

#: The tracer of the turn running in this context; None when nothing traces.
CURRENT: ContextVar[Tracer | None] = ContextVar("botweave_tracer", default=None)


class _Untraced(AbstractContextManager["_Untraced"]):
    """The span of work nobody traces: it records nothing."""

    def __enter__(self) -> _Untraced:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def set(self, key: str, value: AttributeValue) -> None:
        return None

    def fail(self, error_type: str) -> None:
        return None


UNTRACED = _Untraced()
_NO_ATTRIBUTES: Attributes = {}


def span(name: str, attributes: Attributes = _NO_ATTRIBUTES) -> AbstractContextManager[Span]:
    tracer = CURRENT.get()
    return UNTRACED if tracer is None else tracer.span(name, attributes)


def event(name: str, attributes: Attributes = _NO_ATTRIBUTES) -> None:
    tracer = CURRENT.get()
    if tracer is not None:
        tracer.event(name, attributes)


def before_call(name: str, attributes: Attributes) -> None:
    """Something the next model call's span should say it follows (a failover, its reason)."""
    tracer = CURRENT.get()
    if tracer is not None:
        tracer.before_call(name, attributes)


def carrier() -> dict[str, str] | None:
    """The running turn's trace context for another process to continue; None when untraced."""
    tracer = CURRENT.get()
    return None if tracer is None else tracer.carrier()
