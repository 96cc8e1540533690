"""Python functions as tools: the JSON schema the model sees is built from the function's type
hints and docstring by pydantic, and the model's arguments are validated (and coerced) by the
same model before the function runs.

A parameter annotated `ToolContext` is not shown to the model; it receives the turn's context
(the message being answered, the agent's name). Plain functions run in a worker thread so a
slow one cannot stall every other conversation; `async def` functions run on the loop.

    from botweave import tool

    @tool
    def weather(city: str, unit: Literal["C", "F"] = "C") -> dict:
        \"\"\"Current weather for a city.

        Args:
            city: The city's name, e.g. "Lisbon".
            unit: Celsius or Fahrenheit.
        \"\"\"
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import re
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

import docstring_parser
from botweave.tooling import ToolContext, ToolError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

__all__ = ["FunctionTool", "function_tool", "load_python_tools", "tool"]

F = TypeVar("F", bound=Callable[..., Any])
MARK = "__botweave_tool__"


@dataclass(frozen=True)
class ToolOptions:
    """What `@tool(...)` said about a function."""

    name: str | None = None
    description: str | None = None
    timeout_seconds: float | None = None


@overload
def tool(function: F, /) -> F: ...


@overload
def tool(
    *, name: str | None = None, description: str | None = None, timeout_seconds: float | None = None
) -> Callable[[F], F]: ...


def tool(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
) -> F | Callable[[F], F]:
    """Mark a function as an agent tool, optionally renaming or describing it. The function
    itself is returned unchanged, so it can still be called and tested directly; bot.yaml
    names it as `{python: "module:function"}` (or `{python: "module:*"}` for every marked
    function of a module)."""

    def mark(fn: F) -> F:
        setattr(fn, MARK, ToolOptions(name, description, timeout_seconds))
        return fn

    return mark(function) if function is not None else mark


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (what comes before the sections) and each parameter's description,
    from a Google (`Args:`), reST (`:param x:`) or numpydoc docstring, each on one line."""
    if not doc:
        return "", {}
    parsed = docstring_parser.parse(doc)
    description = " ".join(part for part in (parsed.short_description, parsed.long_description) if part)
    params = {param.arg_name.lstrip("*"): " ".join((param.description or "").split()) for param in parsed.params}
    return " ".join(description.split()), params


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema


@dataclass
class FunctionTool:
    """A tool made from a Python callable (see the module docstring)."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    arguments: type[BaseModel]
    context_parameter: str | None = None
    timeout_seconds: float | None = None
    _is_async: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self._is_async = inspect.iscoroutinefunction(self.function) or inspect.iscoroutinefunction(
            getattr(self.function, "__call__", None)
        )

    async def call(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        try:
            validated = self.arguments.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'arguments'}: {error['msg']}" for error in exc.errors()
            )
            raise ToolError(f"invalid arguments for {self.name}: {problems}") from None
        kwargs = {name: getattr(validated, name) for name in type(validated).model_fields}
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = context
        if self._is_async:
            return await typing.cast(Awaitable[Any], self.function(**kwargs))
        result = await asyncio.to_thread(self.function, **kwargs)
        if inspect.isawaitable(result):
            return await result
        return result


def function_tool(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_seconds: float | None = None,
) -> FunctionTool:
    """A tool from a callable: its schema from the signature's type hints and the docstring.
    `@tool` options apply unless overridden here."""
    marked: ToolOptions = getattr(function, MARK, None) or ToolOptions()
    tool_name = name or marked.name or getattr(function, "__name__", None)
    if not tool_name or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
        raise ValueError(f"tool name {tool_name!r} must be 1-64 letters, digits, _ or -")
    summary, documented = parse_docstring(inspect.getdoc(function))
    hints = typing.get_type_hints(function, include_extras=True)
    fields: dict[str, Any] = {}
    context_parameter = None
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(parameter.name, Any)
        if annotation is ToolContext:
            context_parameter = parameter.name
            continue
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (annotation, Field(default, description=documented.get(parameter.name)))
    arguments = create_model(
        f"{tool_name}_arguments",
        __config__=ConfigDict(extra="forbid", protected_namespaces=(), arbitrary_types_allowed=False),
        **fields,
    )
    return FunctionTool(
        name=tool_name,
        description=description or marked.description or summary or tool_name,
        parameters=_schema(arguments),
        function=function,
        arguments=arguments,
        context_parameter=context_parameter,
        timeout_seconds=timeout_seconds if timeout_seconds is not None else marked.timeout_seconds,
    )


def load_python_tools(reference: str, *, timeout_seconds: float | None = None) -> list[FunctionTool]:
    """The tools `{python: "module:function"}` names: one function, or with `module:*` every
    `@tool` function of the module. ValueError says what could not be found."""
    module_name, _, attribute = reference.partition(":")
    try:
        module = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from None
    attribute = attribute.strip()
    if attribute == "*":
        functions = [value for value in vars(module).values() if callable(value) and hasattr(value, MARK)]
        if not functions:
            raise ValueError(f"module {module_name!r} has no function marked with @tool")
    else:
        function = getattr(module, attribute, None)
        if function is None or not callable(function):
            raise ValueError(f"module {module_name!r} has no function {attribute!r}")
        functions = [function]
    made = []
    for function in functions:
        try:
            made.append(function_tool(function, timeout_seconds=timeout_seconds))
        except Exception as exc:  # boundary: describing a user's function (its hints are evaluated); the error names it
            name = getattr(function, "__name__", attribute)
            raise ValueError(f"{module_name}:{name} cannot be described as a tool: {exc}") from None
    return made
