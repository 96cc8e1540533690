"""A loopback Ollama server, so litellm's real `ollama_chat/` path runs in tests.

It answers `POST /api/chat` (point litellm's `api_base` at `base_url`, the server's root) with
one JSON object, or, when the request streams (Ollama's default), with newline-delimited JSON:
a line per piece of text (`"done": false`), the tool calls whole in one line of their own (Ollama
does not split a call's arguments, which are an object, not a string), and a last line with
`"done": true`, the `done_reason` and the token counts (`prompt_eval_count`, `eval_count`)
with the timings Ollama reports beside them.

`POST /api/show` describes the model (its template, context length and capabilities): litellm
asks for it while logging a call to a model it has no price for, with a blocking request from
the caller's event loop, so this emulator serves from a thread of its own, as Ollama would from
its own process.

Ollama refuses little: a request without a model or messages gets its `{"error": ...}` body;
a tool result that follows no call is accepted, as Ollama does, but lands in `violations`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from aiohttp import web

from tests.emulators.openai import DEFAULT_REPLY, Reply, split_even
from tests.emulators.scripted import ScriptedModel, arguments_of

ROLES = ("system", "user", "assistant", "tool")


class OllamaEmulator(ScriptedModel):
    threaded = True

    def __init__(self, reply: str = DEFAULT_REPLY) -> None:
        super().__init__(reply)
        #: The models `/api/show` was asked about.
        self.shown: list[str] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/chat", self._chat)
        app.router.add_post("/api/show", self._show)

    # --- queries for assertions ----------------------------------------------------------

    def messages(self, index: int = -1) -> list[dict[str, Any]]:
        return list(self.requests[index].get("messages") or [])

    def tools_offered(self, index: int = -1) -> list[str]:
        return [t.get("function", {}).get("name", "") for t in self.requests[index].get("tools") or []]

    def tool_messages(self, index: int = -1) -> list[dict[str, Any]]:
        """The `tool` messages of one request (the latest by default)."""
        return [m for m in self.messages(index) if m.get("role") == "tool"]

    # --- wire ----------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())  # litellm posts it as octet-stream; Ollama reads any type
        taken = self._take(request, body, body.get("stream", True) is not False)
        if isinstance(taken, web.Response):
            return taken
        received, reply = taken
        prompt, completion = self._tokens(body, reply)
        model = str(body["model"])
        if not received.streamed:
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or ""}
            if reply.tool_calls:
                message["tool_calls"] = _calls(reply)
            return web.json_response({**_line(model, message, done=True), **_totals(reply, prompt, completion)})
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)

        async def send(line: dict[str, Any]) -> None:
            await response.write(json.dumps(line).encode() + b"\n")

        for piece in split_even(reply.text, self.stream_chunks) if reply.text else []:
            await send(_line(model, {"role": "assistant", "content": piece}, done=False))
        if reply.tool_calls:
            await send(_line(model, {"role": "assistant", "content": "", "tool_calls": _calls(reply)}, done=False))
        await send({**_line(model, {"role": "assistant", "content": ""}, done=True), **_totals(reply, prompt, completion)})
        await response.write_eof()
        return response

    async def _show(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        name = str(body.get("model") or body.get("name") or "")
        self.shown.append(name)
        if not name:
            return web.json_response({"error": "model is required"}, status=400)
        return web.json_response({
            "modelfile": f"FROM {name}",
            "parameters": "stop \"<|im_end|>\"",
            "template": "{{- if .Tools }}{{ .Tools }}{{ end }}{{ .Prompt }}",
            "details": {"format": "gguf", "family": "qwen3", "parameter_size": "8.2B", "quantization_level": "Q4_K_M"},
            "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960},
            "capabilities": ["completion", "tools"],
        })

    def scripted_error(self, reply: Reply) -> web.Response:
        return web.json_response({"error": reply.error_message}, status=reply.status or 500)

    def refusal(self, request: web.Request, body: dict[str, Any]) -> web.Response | None:
        if not body.get("model"):
            self._violation("no model")
            return web.json_response({"error": "model is required"}, status=400)
        messages = body.get("messages")
        if not isinstance(messages, list):
            self._violation("no messages")
            return web.json_response({"error": "messages is required"}, status=400)
        calls_open = False
        for position, message in enumerate(messages):
            role = message.get("role")
            if role not in ROLES:
                self._violation(f"message {position} has role {role!r}")
                return web.json_response({"error": f"invalid role: {role}"}, status=400)
            if role == "tool" and not calls_open:
                self._violation(f"tool message {position} follows no assistant message with tool_calls")
            if role != "tool":
                calls_open = role == "assistant" and bool(message.get("tool_calls"))
        return None


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [{"function": {"name": c.name, "arguments": arguments_of(c)}} for c in reply.tool_calls]


def _line(model: str, message: dict[str, Any], *, done: bool) -> dict[str, Any]:
    stamp = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
    return {"model": model, "created_at": stamp, "message": message, "done": done}


def _totals(reply: Reply, prompt: int, completion: int) -> dict[str, Any]:
    """What Ollama's last line adds: why it stopped, the token counts and the timings (ns)."""
    return {
        "done_reason": reply.finish_reason or "stop",
        "total_duration": 5_000_000,
        "load_duration": 1_000_000,
        "prompt_eval_count": prompt,
        "prompt_eval_duration": 2_000_000,
        "eval_count": completion,
        "eval_duration": 2_000_000,
    }
