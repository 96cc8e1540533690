"""A web search MCP server (stdio) on the official MCP SDK, backed by a SearXNG instance's
JSON API (`SEARXNG_URL`, e.g. http://localhost:8888). The bot starts it as a child process;
nothing of botweave is imported here, so any MCP client can use it."""

import json
import os
import urllib.parse
import urllib.request

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("search", log_level="WARNING")


@server.tool()
def web_search(query: str, limit: int = 5) -> list[dict]:
    """Search the web; each result has a title, a URL and a snippet."""
    base = os.environ.get("SEARXNG_URL", "").rstrip("/")
    # A failure foreseen is a ToolError: its text reaches the model (and the bot's log), where
    # any other exception is a crash whose cause the SDK keeps in this server's own log.
    if not base:
        raise ToolError("no search engine configured: set SEARXNG_URL to a SearXNG instance")
    url = f"{base}/search?" + urllib.parse.urlencode({"q": query, "format": "json"})
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # a blocking call: this process does nothing else
            found = json.load(response).get("results", [])
    except (OSError, ValueError) as exc:
        raise ToolError(f"the search engine at {base} did not answer: {exc}") from None
    return [
        {"title": hit.get("title", ""), "url": hit.get("url", ""), "snippet": hit.get("content", "")}
        for hit in found[: max(1, min(limit, 10))]
    ]


if __name__ == "__main__":
    server.run()
