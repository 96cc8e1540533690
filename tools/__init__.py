"""botweave tools: what agents can call. Built-ins (message tools on the target grammar,
`fetch_url`), Python functions (`@tool`, `{python: "module:function"}`) and MCP servers,
all handed to agents in the kernel's `Tool` shape (botweave.tooling), which also runs the calls.
"""

from botweave.tools.fetch import FetchUrl
from botweave.tools.mcp import McpServer, McpServers, McpTool
from botweave.tools.messages import MESSAGE_TOOLS, MessageTools
from botweave.tools.python import FunctionTool, function_tool, load_python_tools, tool
from botweave.tools.text import html_to_text
from botweave.tools.toolset import BUILTINS, ToolServices, Toolsets

__all__ = [
    "BUILTINS",
    "MESSAGE_TOOLS",
    "FetchUrl",
    "FunctionTool",
    "McpServer",
    "McpServers",
    "McpTool",
    "MessageTools",
    "ToolServices",
    "Toolsets",
    "function_tool",
    "html_to_text",
    "load_python_tools",
    "tool",
]
