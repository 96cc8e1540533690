"""A loopback Anthropic Messages API, so litellm's real `anthropic/` path runs in tests.

It answers `POST /v1/messages` (point litellm's `api_base` at `base_url`, the server's root:
litellm adds `/v1/messages`) plainly or, with `"stream": true`, as server-sent events in the
order Anthropic sends them: `message_start` (with the prompt's token count), a
`content_block_start` / `content_block_delta` / `content_block_stop` run per text or `tool_use`
block (text as `text_delta`, a call's input as `input_json_delta` fragments), `message_delta`
(the stop reason and the output token count) and `message_stop`.

Requests are checked the way the API checks them (key and version headers, `max_tokens`, only
user and assistant turns, every `tool_use` answered by a `tool_result` in the very next user
turn and no result without its call) and refused with Anthropic's error body; what was wrong
also lands in `violations`.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.emulators.openai import Reply, split_even
from tests.emulators.scripted import ScriptedModel, arguments_of

VERSION = "2023-06-01"
#: Anthropic's error `type` for each HTTP status it answers with.
ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error",
}


class AnthropicEmulator(ScriptedModel):
    id_prefix = "toolu_emu"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)

    # --- queries for assertions ----------------------------------------------------------

    def messages(self, index: int = -1) -> list[dict[str, Any]]:
        return list(self.requests[index].get("messages") or [])

    def tools_offered(self, index: int = -1) -> list[str]:
        return [t.get("name", "") for t in self.requests[index].get("tools") or []]

    def tool_results(self, index: int = -1) -> list[dict[str, Any]]:
        """The `tool_result` blocks of one request (the latest by default)."""
        return [block for message in self.messages(index) for block in _blocks(message) if block.get("type") == "tool_result"]

    def tool_output(self, call_id: str) -> Any:
        """What the client sent back for `call_id`, decoded from JSON when it is JSON."""
        for index in range(len(self.received) - 1, -1, -1):
            for block in self.tool_results(index):
                if block.get("tool_use_id") == call_id:
                    content = block.get("content")
                    if isinstance(content, list):
                        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
                    try:
                        return json.loads(content)
                    except (TypeError, ValueError):
                        return content
        raise KeyError(f"no tool_result for {call_id}")

    # --- wire ----------------------------------------------------------------------------

    @staticmethod
    def _error(status: int, kind: str, message: str) -> web.Response:
        return web.json_response({"type": "error", "error": {"type": kind, "message": message}}, status=status)

    def scripted_error(self, reply: Reply) -> web.Response:
        status = reply.status or 500
        return self._error(status, ERROR_TYPES.get(status, "api_error"), reply.error_message)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        taken = self._take(request, body, bool(body.get("stream")))
        if isinstance(taken, web.Response):
            return taken
        received, reply = taken
        prompt, completion = self._tokens(body, reply)
        message_id = f"msg_emu{len(self.received):04d}"
        model = body.get("model", "claude-emulated")
        stop = reply.finish_reason or ("tool_use" if reply.tool_calls else "end_turn")
        if not received.streamed:
            content: list[dict[str, Any]] = []
            if reply.text:
                content.append({"type": "text", "text": reply.text})
            content += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": arguments_of(c)} for c in reply.tool_calls
            ]
            return web.json_response(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": stop,
                    "stop_sequence": None,
                    "usage": {"input_tokens": prompt, "output_tokens": completion,
                              "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
                }
            )
        return await self._stream(request, reply, message_id, model, stop, prompt, completion)

    async def _stream(self, request: web.Request, reply: Reply, message_id: str, model: str, stop: str,
                      prompt: int, completion: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
        await response.prepare(request)

        async def event(kind: str, data: dict[str, Any]) -> None:
            await response.write(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode())

        await event("message_start", {"message": {
            "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }})
        index = 0
        if reply.text:
            await event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            await event("ping", {})
            for piece in split_even(reply.text, self.stream_chunks):
                await event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}})
            await event("content_block_stop", {"index": index})
            index += 1
        for call in reply.tool_calls:
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            await event("content_block_start", {"index": index, "content_block": block})
            for fragment in ["", *split_even(json.dumps(arguments_of(call)), self.argument_chunks)]:
                await event("content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": fragment}})
            await event("content_block_stop", {"index": index})
            index += 1
        await event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": completion}})
        await event("message_stop", {})
        await response.write_eof()
        return response

    def refusal(self, request: web.Request, body: dict[str, Any]) -> web.Response | None:
        if not request.headers.get("x-api-key"):
            self._violation("no x-api-key header")
            return self._error(401, "authentication_error", "x-api-key header is required")
        if request.headers.get("anthropic-version") != VERSION:
            self._violation(f"anthropic-version {request.headers.get('anthropic-version')!r}")
            return self._error(400, "invalid_request_error", "anthropic-version: header is required")
        if not isinstance(body.get("max_tokens"), int):
            self._violation("no max_tokens")
            return self._error(400, "invalid_request_error", "max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self._violation("no messages")
            return self._error(400, "invalid_request_error", "messages: at least one message is required")
        issued = {c.id for c in self.issued_calls}
        for position, message in enumerate(messages):
            role = message.get("role")
            if role not in ("user", "assistant"):
                self._violation(f"message {position} has role {role!r}")
                return self._error(400, "invalid_request_error", f"messages.{position}.role: Input should be 'user' or 'assistant'")
            blocks = _blocks(message)
            results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            earlier = _blocks(messages[position - 1]) if position else []
            called = [b.get("id") for b in earlier if b.get("type") == "tool_use"]
            stray = [i for i in results if i not in called]
            if (role == "assistant" and results) or stray:
                self._violation(f"message {position}: tool_result without its tool_use: {stray or results}")
                return self._error(400, "invalid_request_error", (
                    f"messages.{position}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{', '.join(map(str, stray or results))}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message."))
            for block in blocks:
                if block.get("type") == "tool_use" and block.get("id") not in issued:
                    self._violation(f"message {position} carries tool_use {block.get('id')!r}, never issued here")
            calls = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            following = _blocks(messages[position + 1]) if position + 1 < len(messages) else None
            if calls and following is not None:
                answered = {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
                missing = [i for i in calls if i not in answered]
                if missing:
                    self._violation(f"message {position}: tool_use without a tool_result right after: {missing}")
                    return self._error(400, "invalid_request_error", (
                        f"messages.{position + 1}: `tool_use` ids were found without `tool_result` blocks immediately "
                        f"after: {', '.join(map(str, missing))}. Each `tool_use` block must have a corresponding "
                        "`tool_result` block in the next message."))
        return None


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's content blocks (a plain string is one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]
