"""The tools' part of bot.yaml: an agent's `tools:` list (`AgentTools`, part of its
`agents.NAME` section) and the MCP servers its entries name."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from botweave.config import Section, problem, raise_problems
from pydantic import Field, field_validator, model_validator


class McpServerConfig(Section):
    """One MCP server: a command started with the bot (stdio) or a URL (streamable HTTP)."""

    command: Optional[list[str]] = None
    """The program and its arguments, started with the bot and spoken to over stdio, e.g.
    `[python, server.py]`."""
    url: Optional[str] = None
    """The server's streamable HTTP endpoint (checked against the network policy)."""
    env: dict[str, str] = Field(default_factory=dict, repr=False)  # may carry the server's keys
    """Environment variables for the server process (it does not inherit the bot's, except the
    basics such as PATH)."""
    cwd: Optional[str] = None
    """The folder the server process starts in; unset: the bot's."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)  # may carry a bearer token
    """HTTP headers sent with every request to `url`, e.g. `Authorization: Bearer ${TOKEN}`."""
    startup_timeout_seconds: Annotated[float, Field(gt=0)] = 30.0
    """How long start-up waits for the server to answer before the bot goes on without it
    (each later try to bring it back gets as long)."""
    max_response_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    """The largest answer read from the server, counted as it arrives; a larger one fails its
    call with an error naming this limit."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of `command: [program, arg, ...]` or `url: http://...`")
        if self.command is not None and not (self.command and all(part.strip() for part in self.command)):
            raise ValueError("command: must list the program and its arguments, e.g. [python, server.py]")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url: must start with http:// or https:// (got {self.url!r})")
        return self


ToolKind = Literal["builtin", "python", "mcp"]


class ToolEntry(Section):
    """One entry of an agent's `tools:` list: a built-in by name (a bare string or
    `{name: ...}`), a Python function `{python: "module:function"}`, or the tools of an MCP
    server `{mcp: {SERVER: {command: [...]} | {url: ...}}}`. `approval: required` makes
    every tool of the entry wait for a person's yes (`approver`: the person who asked, or the
    bot's owner) before it runs; no answer within `approval_timeout_seconds` is a no."""

    name: Optional[str] = None
    """A built-in tool by name: `send_message`, `react`, `edit_message`, `delete_message`,
    `create_thread`, `send_file`, `fetch_url`, `ask_user` (for `ask_user`, `timeout_seconds`
    is how long a question waits when the model sets no time: 300 s unless given)."""
    python: Optional[str] = None
    """A Python function, `module:function`, or `module:*` for every `@tool` function of the
    module."""
    mcp: Optional[dict[str, McpServerConfig]] = None
    """The tools of one MCP server, `{SERVER: {command: [...]}}` or `{SERVER: {url: ...}}`; they
    are called `SERVER__TOOL`."""
    timeout_seconds: Optional[Annotated[float, Field(gt=0)]] = None
    """How long one call may run before the model is told it timed out."""
    approval: Literal["required", "none"] = "none"
    """`required`: every call waits for a person to press Approve before it runs."""
    approver: Optional[Literal["requester", "owner"]] = None
    """Who approves: `requester` (the person who asked, in the conversation; the default) or
    `owner` (the platform's `owner_user_id`, in a DM)."""
    approval_timeout_seconds: Optional[Annotated[float, Field(gt=0)]] = None
    """How long an approval may wait; no answer in time is a denial. Unset: 300."""

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source(self) -> ToolEntry:
        given = [key for key in ("name", "python", "mcp") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(
                "a tool is a built-in name, {python: \"module:function\"} or "
                "{mcp: {SERVER: {command: [...]}}} (exactly one of name, python, mcp)"
            )
        if self.python is not None:
            module, _, function = self.python.partition(":")
            if not module.strip() or not function.strip():
                raise ValueError(f"python: must be \"module:function\", e.g. \"mytools:weather\" (got {self.python!r})")
        if self.approval != "required":
            given = [key for key in ("approver", "approval_timeout_seconds") if getattr(self, key) is not None]
            if given:
                raise ValueError(f"{' and '.join(given)} only apply with `approval: required`")
        if self.mcp is not None and len(self.mcp) != 1:
            raise ValueError(
                "mcp: name exactly one server per entry, e.g. {mcp: {files: {command: [python, server.py]}}}; "
                "its tools are called SERVER__TOOL"
            )
        return self

    @property
    def kind(self) -> ToolKind:
        if self.python is not None:
            return "python"
        return "mcp" if self.mcp is not None else "builtin"

    @property
    def server(self) -> tuple[str, McpServerConfig]:
        """The MCP server of an `mcp` entry: its name in bot.yaml and how to reach it."""
        assert self.mcp is not None
        return next(iter(self.mcp.items()))


_TARGET_ENTRY = re.compile(r"^[A-Za-z0-9_-]+(:[^:\s]+){0,2}$")


class MessageToolsConfig(Section):
    """An agent's `message_tools:`. Its message tools act only where the bot talks (by the
    platforms' access rules), in the conversation being answered and in the home chats; each
    `allow_targets` entry opens one more place: `platform:chat` (with its threads),
    `platform:chat:thread`, `platform:*` (every chat there) or a bare `platform` (its home chat)."""

    allow_targets: list[str] = Field(default_factory=list)
    """Places beyond those the access rules open where this agent's message tools may post,
    edit or react (`platform:chat`, `platform:chat:thread`, `platform:*`, `platform`)."""

    @field_validator("allow_targets", mode="before")
    @classmethod
    def _targets(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return value
        problems = [
            problem((index,), f"{item!r} is not a target; write platform:chat, platform:chat:thread, "
                              "platform:* or a bare platform, e.g. telegram:-1001234", item)
            for index, item in enumerate(value)
            if not _TARGET_ENTRY.match(str(item).strip())
        ]
        raise_problems(cls.__name__, problems)
        return [str(item).strip() for item in value]


class AgentTools(Section):
    """An agent's `tools:`: what it may call, in the order listed, and its `message_tools:`,
    where the message tools among them may act."""

    tools: list[ToolEntry] = Field(default_factory=list)
    """The tools this agent may call, in the order offered to the model."""
    message_tools: MessageToolsConfig = Field(default_factory=MessageToolsConfig)
    """Where this agent's message tools may act beyond the chats the bot talks in."""
