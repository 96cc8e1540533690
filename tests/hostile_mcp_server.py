"""An MCP server over stdio that misbehaves on request, for the tests to start themselves
(`python tests/hostile_mcp_server.py`). It speaks newline-delimited JSON-RPC by hand, not
through the SDK, so it can write what no well-behaved server would. Nothing of botweave is
imported here.

Its tools, each a way to go wrong:

- `echo(text)`: answers the text (the benign case);
- `flood(size)`: answers with one text block of `size` bytes, written in pieces;
- `hang()`: stops reading and answering anything, pings included, without exiting;
- `crash()`: exits with status 3 before answering;
- `malformed(kind)`: answers with a broken frame: `truncated` JSON, `garbage` that is not
  JSON, a `bad_result` that is JSON-RPC but no tool result, an answer with `no_id`;
- `raw(frame)`: writes `frame` as it is, with `{id}` replaced by the call's id (what the
  fuzz tests mutate).

Settings, by environment: `HOSTILE_STARTS` names a file that gets one line per start (so a
test can count restarts), and from the second start on the server also offers
`added_after_restart`; `HOSTILE_CRASH_AFTER=K` exits after answering K tool calls.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

OUT = sys.stdout.buffer
PIECE = 1 << 20


def write(data: bytes) -> None:
    OUT.write(data)
    OUT.flush()


def answer(request_id: Any, result: dict[str, Any]) -> None:
    write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n")


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": {key: {"type": kind} for key, kind in properties.items()}},
    }


def starts() -> int:
    path = os.environ.get("HOSTILE_STARTS")
    if not path:
        return 1
    with open(path, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    with open(path) as handle:
        return len(handle.read().splitlines())


def tools(generation: int) -> list[dict[str, Any]]:
    offered = [
        tool("echo", "Say the text back.", text="string"),
        tool("flood", "Answer with a text of `size` bytes.", size="integer"),
        tool("hang", "Stop answering anything."),
        tool("crash", "Exit before answering."),
        tool("malformed", "Answer with a broken frame.", kind="string"),
        tool("raw", "Write the frame as it is.", frame="string"),
    ]
    if generation >= 2:
        offered.append(tool("added_after_restart", "Only there from the second start on."))
    return offered


def flood(request_id: Any, size: int) -> None:
    head = json.dumps({"jsonrpc": "2.0", "id": request_id}).encode()[:-1]
    write(head + b', "result": {"content": [{"type": "text", "text": "')
    left = size
    while left > 0:
        piece = min(left, PIECE)
        OUT.write(b"x" * piece)
        left -= piece
    write(b'"}], "isError": false}}\n')


def malformed(request_id: Any, kind: str) -> None:
    frames = {
        "truncated": b'{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "te' % json.dumps(request_id).encode(),
        "garbage": b"this is not JSON at all",
        "bad_result": json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"content": 5}}).encode(),
        "no_id": json.dumps({"jsonrpc": "2.0", "result": text_result("whose?")}).encode(),
    }
    write(frames.get(kind, b"{") + b"\n")


def call(request_id: Any, params: dict[str, Any], generation: int) -> None:
    name = params.get("name")
    arguments = params.get("arguments") or {}
    if name == "echo":
        answer(request_id, text_result(str(arguments.get("text", ""))))
    elif name == "flood":
        flood(request_id, int(arguments.get("size", 0)))
    elif name == "hang":
        time.sleep(10**6)
    elif name == "crash":
        os._exit(3)
    elif name == "malformed":
        malformed(request_id, str(arguments.get("kind", "")))
    elif name == "raw":
        write(str(arguments.get("frame", "")).replace("{id}", json.dumps(request_id)).encode("utf-8", "surrogatepass") + b"\n")
    elif name == "added_after_restart" and generation >= 2:
        answer(request_id, text_result("new here"))
    else:
        answer(request_id, {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True})


def main() -> None:
    generation = starts()
    crash_after = int(os.environ.get("HOSTILE_CRASH_AFTER", "0"))
    calls = 0
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification: nothing to answer
        if method == "initialize":
            answer(request_id, {
                "protocolVersion": message.get("params", {}).get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            })
        elif method == "tools/list":
            answer(request_id, {"tools": tools(generation)})
        elif method == "ping":
            answer(request_id, {})
        elif method == "tools/call":
            call(request_id, message.get("params") or {}, generation)
            calls += 1
            if crash_after and calls >= crash_after:
                os._exit(3)
        else:
            error = {"code": -32601, "message": f"method {method} not found"}
            write(json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode() + b"\n")


if __name__ == "__main__":
    main()
