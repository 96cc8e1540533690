"""Gateway methods: one registry for every method a gateway client may call, whoever provides
it, each classified by the scope it needs.

The gateway registers its own (sessions, chat, watching, shares, presence, health); features
register theirs the way they register commands (the approval desk `approvals.*`, access
control `pairing.*`, rooms `rooms.list`), so no feature imports the gateway and the gateway
imports no feature. A method registered without a scope needs `admin`: whatever nobody
classified is denied by default.

A method is a handler, the pydantic model of its params (unknown or mistyped fields are a
`bad_request` naming the field, before the handler runs), and its scope. A handler raises
`MethodError` for an answer that is an error; anything else it raises is a bug, answered as
`internal` and logged by the gateway.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

log = logging.getLogger(__name__)

Scope = Literal["read", "write", "approvals", "pairing", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "write", "approvals", "pairing", "admin")


class Params(BaseModel):
    """Base of every method's params: a field the method does not know is an error."""

    model_config = ConfigDict(extra="forbid")


class NoParams(Params):
    """A method that takes nothing."""


class MethodError(Exception):
    """An error answer: `code` for programs, `message` for people, whether trying again may
    help (after `retry_after_ms`, when known)."""

    def __init__(self, code: str, message: str, *, retryable: bool = False, retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.retry_after_ms = retry_after_ms

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message, "retryable": self.retryable}
        if self.retry_after_ms is not None:
            error["retry_after_ms"] = self.retry_after_ms
        return error


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls: the principal's name, its scopes, and the platform identities it speaks for
    (its own on `web`, and a bound `user` such as `telegram:123`). A share reads only the
    conversations in `conversations`; None means no such limit."""

    name: str
    scopes: frozenset[str]
    identities: tuple[tuple[str, str], ...] = ()
    kind: str = "token"
    conversations: frozenset[str] | None = None
    conn_id: str = ""

    @property
    def admin(self) -> bool:
        return "admin" in self.scopes

    def has(self, scope: str) -> bool:
        return self.admin or scope in self.scopes

    def speaks_for(self, platform: str, user_id: str) -> bool:
        return (platform, user_id) in self.identities


Handler = Callable[[Caller, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    handler: Handler
    scope: Scope
    params: type[Params] = field(default=NoParams)
    help: str = ""
    #: Whether a share (a caller limited to its conversations) may call it.
    shares: bool = False


class MethodRegistry:
    def __init__(self) -> None:
        self._methods: dict[str, Method] = {}

    def register(
        self,
        name: str,
        handler: Handler,
        *,
        scope: Scope | None = None,
        params: type[Params] = NoParams,
        help: str = "",
        shares: bool = False,
    ) -> None:
        """Add a method; a second registration of one name replaces the first. Without a
        `scope` the method needs `admin`. A share reads its own conversations and nothing
        else: it may call only methods registered with `shares=True` (which keep it to its
        conversations themselves), whatever their scope."""
        if not name or not all(part.replace("_", "").isalnum() for part in name.split(".")):
            raise ValueError(f"method names are dotted words (sessions.list), not {name!r}")
        if scope is not None and scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}; scopes: {', '.join(SCOPES)}")
        self._methods[name] = Method(name, handler, scope or "admin", params, help, shares)

    def get(self, name: str) -> Method | None:
        return self._methods.get(name)

    def scope_of(self, name: str) -> Scope:
        """The scope a method needs: `admin` for one nobody classified."""
        method = self._methods.get(name)
        return method.scope if method is not None else "admin"

    def __iter__(self) -> Iterator[Method]:
        return iter(sorted(self._methods.values(), key=lambda m: m.name))

    def __contains__(self, name: object) -> bool:
        return name in self._methods

    def allowed(self, caller: Caller) -> list[str]:
        """The methods `caller` may call."""
        return [m.name for m in self if _may_call(caller, m)]

    async def call(self, caller: Caller, name: str, params: Any) -> Any:
        """Run `name` for `caller` with `params` (a mapping, or None for none): the scope is
        checked first, then the params, then the handler runs."""
        method = self._methods.get(name)
        if method is None:
            raise MethodError("unknown_method", f"there is no method {name!r}")
        if caller.conversations is not None and not method.shares:
            raise MethodError("forbidden", f"a share reads its own conversation only; {name} is not for shares")
        if not caller.has(method.scope):
            raise MethodError("forbidden", f"{name} needs the {method.scope} scope")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise MethodError("bad_request", "params must be a JSON object")
        try:
            parsed = method.params.model_validate(params)
        except ValidationError as exc:
            raise MethodError("bad_request", _first_problem(exc)) from None
        return await method.handler(caller, parsed)


def _may_call(caller: Caller, method: Method) -> bool:
    return caller.has(method.scope) and (caller.conversations is None or method.shares)


def _first_problem(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors()[:3]:
        where = ".".join(str(part) for part in error["loc"]) or "params"
        problems.append(f"{where}: {error['msg']}")
    return "; ".join(problems)
