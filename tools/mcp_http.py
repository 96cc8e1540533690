"""MCP over streamable HTTP with a bound on every answer: the SDK's transport, given an HTTP
client whose responses count their bytes as they stream.

The SDK reads a JSON answer whole before parsing it, and an event stream for as long as the
server keeps writing. Its seam is the HTTP client it accepts; ours has a transport that wraps
each answer to a POST (where tool results come back) in a stream that stops with
`ResponseTooLarge` once more than `max_response_bytes` arrived, so no answer is held whole
and the request it carried fails with an error that names the limit. The long-lived GET
stream of server notifications is left to the SDK's per-event bound.

`ResponseTooLarge` is both an httpx2 stream error and an SSE error because those are what
the SDK turns into a failed request (for a JSON answer and an event stream respectively)
rather than into a failure of the whole connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import httpx2

CONNECT_TIMEOUT_SECONDS = 30.0
#: How long an event stream may go quiet: a tool may work for a while before it answers.
READ_TIMEOUT_SECONDS = 300.0


class ResponseTooLarge(httpx2.StreamError, httpx2.SSEError):
    """An MCP server's answer outgrew `max_response_bytes`; the message says so."""


class _Counted(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, declared: int | None) -> None:
        self._inner = inner
        self._limit = limit
        self._declared = declared

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._declared is not None and self._declared > self._limit:
            raise ResponseTooLarge(self._problem())
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise ResponseTooLarge(self._problem())
            yield chunk

    def _problem(self) -> str:
        return f"the answer is larger than max_response_bytes ({self._limit} bytes)"

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """httpx2's own transport, with the answers to POSTs counted (see the module docstring)."""

    def __init__(self, max_response_bytes: int) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self._limit = max_response_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if request.method != "POST":
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        declared = response.headers.get("content-length", "")
        counted = _Counted(response.stream, self._limit, int(declared) if declared.isdigit() else None)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=counted,
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def bounded_client(headers: Mapping[str, str], max_response_bytes: int) -> httpx2.AsyncClient:
    """The HTTP client one MCP connection uses; the caller closes it."""
    return httpx2.AsyncClient(
        headers=dict(headers),
        timeout=httpx2.Timeout(CONNECT_TIMEOUT_SECONDS, read=READ_TIMEOUT_SECONDS),
        transport=BoundedTransport(max_response_bytes),
    )
