"""A loopback Gemini API (generativelanguage), so litellm's real `gemini/` path runs in tests.

It answers `POST /v1beta/models/{model}:generateContent` with one `GenerateContentResponse` and
`POST /v1beta/models/{model}:streamGenerateContent` with a stream of them: server-sent events
with `?alt=sse` (what litellm asks for), a JSON array without. Point litellm's `api_base` at
`base_url` (the `/v1beta` root). Text comes as `text` parts, tool calls as whole
`functionCall` parts (Gemini does not split a call's arguments), and token counts as
`usageMetadata`: every streamed chunk carries the prompt's count, the last one also the
candidates' count and the `finishReason`, as Gemini sends them.

Google's JSON mapping accepts a field under its proto name too (`function_call` for
`functionCall`), and litellm sends those: both are read.

Requests are checked the way the API checks them (an API key, `user`/`model` turns with parts,
and a turn of `functionResponse` parts only right after the `functionCall` turn it answers,
one response per call, by name) and refused with Google's error body; what was wrong also lands
in `violations`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from tests.emulators.openai import Reply, split_even
from tests.emulators.scripted import ScriptedModel, arguments_of

METHODS = ("generateContent", "streamGenerateContent")


class GeminiEmulator(ScriptedModel):
    base_path = "/v1beta"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1beta/models/{call}", self._call)

    # --- queries for assertions ----------------------------------------------------------

    def contents(self, index: int = -1) -> list[dict[str, Any]]:
        return list(self.requests[index].get("contents") or [])

    def tools_offered(self, index: int = -1) -> list[str]:
        return [
            declaration.get("name", "")
            for tool in self.requests[index].get("tools") or []
            for declaration in field(tool, "functionDeclarations") or []
        ]

    def function_responses(self, index: int = -1) -> list[dict[str, Any]]:
        """The `functionResponse` parts of one request (the latest by default)."""
        return [field(part, "functionResponse") for content in self.contents(index) for part in _parts(content)
                if field(part, "functionResponse") is not None]

    def model_of(self, index: int = -1) -> str:
        return self.received[index].path.rsplit("/", 1)[-1].split(":", 1)[0]

    # --- wire ----------------------------------------------------------------------------

    @staticmethod
    def _error(status: int, state: str, message: str) -> web.Response:
        return web.json_response({"error": {"code": status, "message": message, "status": state}}, status=status)

    def scripted_error(self, reply: Reply) -> web.Response:
        status = reply.status or 500
        state = {400: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(status, "INTERNAL")
        return self._error(status, state, reply.error_message)

    async def _call(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["call"].partition(":")
        if method not in METHODS:
            return self._error(404, "NOT_FOUND", f"Method {method!r} not found")
        body = await request.json()
        taken = self._take(request, body, method == "streamGenerateContent")
        if isinstance(taken, web.Response):
            return taken
        received, reply = taken
        prompt, completion = self._tokens(body, reply)
        chunks = self._chunks(reply, model, f"resp-emu{len(self.received):04d}", prompt, completion, streamed=received.streamed)
        if not received.streamed:
            return web.json_response(chunks[0])
        if request.query.get("alt") != "sse":
            return web.json_response(chunks)  # without alt=sse, Gemini streams one JSON array
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
        await response.write_eof()
        return response

    def _chunks(self, reply: Reply, model: str, response_id: str, prompt: int, completion: int, *,
                streamed: bool) -> list[dict[str, Any]]:
        """The answer as Gemini sends it: one response, or the stream's pieces in order."""
        parts: list[dict[str, Any]] = []
        if reply.text:
            pieces = split_even(reply.text, self.stream_chunks) if streamed else [reply.text]
            parts += [{"text": piece} for piece in pieces]
        parts += [{"functionCall": {"name": c.name, "args": arguments_of(c)}} for c in reply.tool_calls]
        if not parts:
            parts = [{"text": ""}]
        groups = [[part] for part in parts] if streamed else [parts]
        chunks = []
        for number, group in enumerate(groups):
            last = number == len(groups) - 1
            candidate: dict[str, Any] = {"content": {"parts": group, "role": "model"}, "index": 0}
            usage: dict[str, Any] = {"promptTokenCount": prompt, "totalTokenCount": prompt}
            if last:
                candidate["finishReason"] = reply.finish_reason or "STOP"
                usage = {"promptTokenCount": prompt, "candidatesTokenCount": completion, "totalTokenCount": prompt + completion}
            chunks.append({"candidates": [candidate], "usageMetadata": usage, "modelVersion": model, "responseId": response_id})
        return chunks

    def refusal(self, request: web.Request, body: dict[str, Any]) -> web.Response | None:
        if not (request.headers.get("x-goog-api-key") or request.query.get("key")):
            self._violation("no API key")
            return self._error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers. Please use an API key.")
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            self._violation("no contents")
            return self._error(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified")
        for position, content in enumerate(contents):
            role = content.get("role", "user")
            parts = _parts(content)
            if role not in ("user", "model") or not parts:
                self._violation(f"content {position}: role {role!r} with {len(parts)} parts")
                return self._error(400, "INVALID_ARGUMENT", f"* GenerateContentRequest.contents[{position}]: invalid content")
            answers = [field(p, "functionResponse").get("name") for p in parts if field(p, "functionResponse") is not None]
            if not answers:
                continue
            earlier = _parts(contents[position - 1]) if position else []
            calls = [field(p, "functionCall").get("name") for p in earlier if field(p, "functionCall") is not None]
            if not calls:
                self._violation(f"content {position}: function responses without a function call turn before them")
                return self._error(400, "INVALID_ARGUMENT", (
                    "Please ensure that function response turn comes immediately after a function call turn."))
            if sorted(map(str, calls)) != sorted(map(str, answers)):
                self._violation(f"content {position}: responses {answers} do not answer calls {calls}")
                return self._error(400, "INVALID_ARGUMENT", (
                    "Please ensure that the number of function response parts is equal to the number of function "
                    "call parts of the function call turn."))
        return None


def field(message: dict[str, Any], name: str) -> Any:
    """`message[name]`, under its lowerCamelCase name or its proto (snake_case) one."""
    if name in message:
        return message[name]
    return message.get(re.sub(r"(?<!^)([A-Z])", lambda m: "_" + m.group(1).lower(), name))


def _parts(content: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or [] if isinstance(p, dict)]
