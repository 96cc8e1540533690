"""A loopback OpenAI-compatible chat-completions server, so litellm's real HTTP path runs in tests.

It answers `POST /v1/chat/completions` plainly or as server-sent events (`stream: true`), and
records every request body so tests can assert what the model was sent.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web


class OpenAIEmulator:
    def __init__(self, reply: str = "Hello from the emulator. It streams, too.", *, delay: float = 0.0) -> None:
        self.reply = reply
        #: Seconds each request takes before answering, like a real model thinking; turns
        #: that must overlap (admission tests) need one.
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.fail_with: int | None = None
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _chunk(self, model: str, delta: dict[str, Any], finish: str | None) -> bytes:
        body = {
            "id": "chatcmpl-emu",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n".encode()

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        if self.fail_with is not None:
            return web.json_response({"error": {"message": "emulated failure", "type": "server_error"}}, status=self.fail_with)
        model = body.get("model", "emulated")
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "chatcmpl-emu",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": self.reply}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(self._chunk(model, {"role": "assistant", "content": ""}, None))
        for word in self.reply.split(" "):
            await response.write(self._chunk(model, {"content": word + " "}, None))
        await response.write(self._chunk(model, {}, "stop"))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
