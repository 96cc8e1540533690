"""The HTTP transport under python-telegram-bot: an aiohttp `BaseRequest`.

PTB's default transport is httpx, whose connection pool rescans every waiting request against
every connection whenever a request starts or ends. With a few hundred conversations answering
at once, hundreds of Bot API calls wait for the pool, and those rescans become most of the
bot's CPU. aiohttp's connector hands a freed connection to the next waiter directly.

Calls in flight are capped at the pool size here, before aiohttp: a call either gets a
connection at once or waits its turn in a FIFO queue, up to `pool_timeout`. A call that timed
out in that queue was never sent, which `never_sent` tells the retry rules (pacing.py), as it
does for a connection that could not be made.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

import aiohttp
from telegram._utils.defaultvalue import DefaultValue
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData
from yarl import URL

try:  # aiohttp 3.10+ tells a connect timeout from a read timeout
    from aiohttp import ConnectionTimeoutError
except ImportError:  # pragma: no cover - older aiohttp
    ConnectionTimeoutError = aiohttp.ServerTimeoutError  # type: ignore[misc,assignment]


#: How the Bot API parameters of a call without files are sent, as PTB's own transport does.
FORM_HEADERS = {"Content-Type": "application/x-www-form-urlencoded"}


class PoolTimeout(Exception):
    """No connection became free within `pool_timeout`; the request was not sent."""


def never_sent(cause: BaseException | None) -> bool:
    """Whether a failure of this transport proves the request never reached the server."""
    return isinstance(cause, (PoolTimeout, aiohttp.ClientConnectorError, ConnectionTimeoutError))


@lru_cache(maxsize=64)
def _env_proxy(scheme: str, host: str) -> str | None:
    """The proxy the environment (HTTPS_PROXY, NO_PROXY, ...) names for an origin, read once
    per origin rather than on every call, as httpx would use it."""
    if urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies().get(scheme)


class AiohttpRequest(BaseRequest):
    """A `BaseRequest` on one aiohttp session with at most `connection_pool_size` calls in flight."""

    def __init__(
        self,
        connection_pool_size: int = 32,
        *,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        self.pool_size = max(1, connection_pool_size)
        self._read_timeout = read_timeout
        self._write_timeout = write_timeout
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._media_write_timeout = media_write_timeout
        self._slots = asyncio.Semaphore(self.pool_size)
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[float | None, float | None, float | None], aiohttp.ClientTimeout] = {}
        #: Calls that had to wait for a connection (a sign the pool is too small for the load).
        self.waited = 0

    @property
    def read_timeout(self) -> float | None:
        return self._read_timeout

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.pool_size, limit_per_host=self.pool_size)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": self.USER_AGENT},
            )

    async def shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def _timeout(self, connect: float | None, read: float | None, write: float | None) -> aiohttp.ClientTimeout:
        """aiohttp has no write timeout: a request is allowed its write and read time in all."""
        key = (connect, read, write)
        timeout = self._timeouts.get(key)
        if timeout is None:
            total = None if read is None or write is None else read + write + (connect or 0.0)
            timeout = self._timeouts[key] = aiohttp.ClientTimeout(total=total, sock_connect=connect, sock_read=read)
        return timeout

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data.multipart_data if request_data is not None and request_data.contains_files else None
        data: Any = None
        headers: Mapping[str, str] | None = None
        if files:
            data = _form(request_data.json_parameters if request_data is not None else {}, files)
        elif request_data is not None and request_data.parameters:
            # Encoded here: aiohttp turns a dict into a FormData, which builds a multipart
            # writer (and a random boundary) for every call only to send it urlencoded.
            data = urlencode(request_data.json_parameters).encode()
            headers = FORM_HEADERS
        read = self._read_timeout if isinstance(read_timeout, DefaultValue) else read_timeout
        write = (self._media_write_timeout if files else self._write_timeout) if isinstance(
            write_timeout, DefaultValue
        ) else write_timeout
        connect = self._connect_timeout if isinstance(connect_timeout, DefaultValue) else connect_timeout
        wait = self._pool_timeout if isinstance(pool_timeout, DefaultValue) else pool_timeout
        await self._take_slot(wait)
        try:
            target = URL(url, encoded=True)
            async with session.request(
                method,
                target,
                data=data,
                headers=headers,
                timeout=self._timeout(connect, read, write),
                proxy=_env_proxy(target.scheme, target.host or ""),
            ) as response:
                return response.status, await response.read()
        except ConnectionTimeoutError as exc:
            raise TimedOut("Timed out connecting to the Bot API; the request was not sent") from exc
        except asyncio.TimeoutError as exc:
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc
        finally:
            self._slots.release()

    async def _take_slot(self, wait: float | None) -> None:
        """One of `pool_size` places in flight, first come first served."""
        if not self._slots.locked():
            await self._slots.acquire()
            return
        self.waited += 1
        try:
            async with asyncio.timeout(wait):
                await self._slots.acquire()
        except TimeoutError:
            raise TimedOut(
                "Pool timeout: every connection is busy. The request was *not* sent to Telegram."
            ) from PoolTimeout()


def _form(fields: Mapping[str, str], files: Mapping[str, tuple[str, Any, str]]) -> aiohttp.FormData:
    """multipart/form-data: the parameters as fields, each upload as a file part."""
    form = aiohttp.FormData(quote_fields=False)
    for name, value in fields.items():
        if name not in files:
            form.add_field(name, value)
    for name, (filename, content, mime_type) in files.items():
        form.add_field(name, content, filename=filename, content_type=mime_type)
    return form
