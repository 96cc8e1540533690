"""The gateway's HTTP side under attack, spoken raw (aiohttp's client and plain sockets):
malformed multipart uploads, bodies of endless parts or bytes with or without a length, and
requests that never finish arriving. Each is answered (or cut) by a documented rule, and a
control client is served meanwhile and afterwards."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import aiohttp
import pytest
from botweave import App
from botweave.gateway import server as gateway_server
from botweave.gateway import uploads

from tests.gateway.support import TOKENS, config

BOUNDARY = "bw-test-boundary-7f3a"
LIMIT = 100_000


def base_of(app: App) -> str:
    return app.gateway.url.replace("ws://", "http://").removesuffix("/ws")


def auth(who: str = "ann") -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


def form(*parts: tuple[str, bytes], boundary: str = BOUNDARY, close: bool = True) -> bytes:
    body = b""
    for name, data in parts:
        body += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}.txt"\r\n'
            "Content-Type: text/plain\r\n\r\n"
        ).encode() + data + b"\r\n"
    return body + (f"--{boundary}--\r\n".encode() if close else b"")


async def post(app: App, body: bytes, content_type: str) -> tuple[int, dict[str, Any], str]:
    async with aiohttp.ClientSession() as http:
        headers = {**auth(), "Content-Type": content_type}
        async with http.post(f"{base_of(app)}/uploads", data=body, headers=headers) as response:
            text = await response.text()
            return response.status, json.loads(text), response.headers.get("Content-Type", "")


async def a_normal_upload_is_taken(app: App) -> None:
    """The control: a browser's upload is stored whatever was sent before."""
    status, answer, _ = await post(app, form(("file", b"hello file")), f"multipart/form-data; boundary={BOUNDARY}")
    assert status == 201 and answer["size"] == 10 and answer["filename"] == "file.txt", answer


@pytest.fixture
async def app(start_app, llm) -> App:
    return await start_app(config(llm, media={"max_bytes": LIMIT}))


@pytest.mark.parametrize(
    ("content_type", "body", "says"),
    [
        ("multipart/form-data", form(("file", b"x")), "needs a boundary"),
        (f"multipart/form-data; boundary={BOUNDARY}", b"no boundary ever comes " * 100, "before its first boundary"),
        (f"multipart/form-data; boundary={BOUNDARY}", os.urandom(5000).replace(b"--", b"__"), "before its first boundary"),
        (f"multipart/form-data; boundary={BOUNDARY}", form(("file", b"never closed"), close=False)[:-2], "closed by its boundary"),
        (f"multipart/form-data; boundary={BOUNDARY}", f"--{BOUNDARY}\r\nContent-Disposition: form-data".encode(),
         "headers ended"),
        (f"multipart/form-data; boundary={BOUNDARY}", f"--{BOUNDARY}garbage\r\n\r\nx\r\n--{BOUNDARY}--".encode(),
         "after the boundary"),
        (f"multipart/form-data; boundary={BOUNDARY}", form(("other", b"x")), "a part named file"),
        (f"multipart/form-data; boundary={BOUNDARY}", form(("file", f"a\r\n--{BOUNDARY}-inside b".encode())),
         "after the boundary"),
        ('multipart/form-data; boundary="a{b}"', form(("file", b"x"), boundary="a{b}"), "boundary is not valid"),
        ("multipart/form-data; boundary=" + "b" * 71, form(("file", b"x"), boundary="b" * 71), "boundary is not valid"),
    ],
    ids=["no-boundary", "boundary-never-comes", "garbage", "part-never-closed", "headers-never-end",
         "junk-after-boundary", "no-file-part", "boundary-inside-the-file", "bad-boundary-character", "boundary-too-long"],
)
async def test_a_malformed_multipart_upload_is_answered_400_with_the_json_error(app: App, content_type, body, says) -> None:
    status, answer, answered_as = await post(app, body, content_type)
    assert status == 400, (status, answer)
    assert answered_as.startswith("application/json")
    assert answer["error"]["code"] == "bad_request" and says in answer["error"]["message"], answer
    assert "Traceback" not in json.dumps(answer)
    await a_normal_upload_is_taken(app)


async def test_a_body_of_twenty_thousand_tiny_parts_is_refused_at_the_limit_without_holding_the_loop(start_app, llm) -> None:
    app = await start_app(config(llm))  # the default limit (20 MB): only the part count stops it
    body = form(*[(f"p{i}", b"x") for i in range(20_000)], ("file", b"at the end"))
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:  # what another client's turn would wait for
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    status, answer, _ = await post(app, body, f"multipart/form-data; boundary={BOUNDARY}")
    done.set()
    await ticking
    assert status == 400 and f"at most {uploads.MAX_PARTS} parts" in answer["error"]["message"], answer
    assert max(gaps) < 1.0, f"the loop was held for {max(gaps):.2f} s"
    await a_normal_upload_is_taken(app)


class RawHTTP:
    """One TCP connection to the gateway, written and read by hand."""

    def __init__(self, app: App) -> None:
        self.port = app.gateway.port
        self.written = 0

    async def __aenter__(self) -> RawHTTP:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.transport.abort()

    async def write(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()
        self.written += len(data)

    async def status(self, timeout: float = 20.0) -> tuple[int, dict[str, Any]]:
        """The answer's status and JSON body."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), timeout)
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await asyncio.wait_for(self.reader.readexactly(int(headers["content-length"])), timeout)
        return int(lines[0].split()[1]), json.loads(body)

    async def closed_within(self, seconds: float) -> float:
        """How long until the server closed the connection (it must within `seconds`)."""
        started = time.monotonic()
        async with asyncio.timeout(seconds):
            while await self.reader.read(65536):
                pass
        return time.monotonic() - started


def upload_head(content_type: str) -> bytes:
    return (
        f"POST /uploads HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKENS['ann']}\r\n"
        f"Content-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


ENDLESS = 30_000_000  # what the attack would send; the server must answer long before


@pytest.mark.parametrize(
    ("content_type", "start"),
    [
        (f"multipart/form-data; boundary={BOUNDARY}", f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="other"\r\n\r\n'),
        (f"multipart/form-data; boundary={BOUNDARY}", f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"\r\n\r\n'),
        (f"multipart/form-data; boundary={BOUNDARY}", "a preamble that goes on "),
        ("application/octet-stream", "raw bytes "),
    ],
    ids=["another-part", "the-file-part", "preamble", "raw-body"],
)
async def test_a_chunked_body_without_a_length_is_refused_as_soon_as_it_passes_the_limit(app: App, content_type, start) -> None:
    async with RawHTTP(app) as attacker:
        await attacker.write(upload_head(content_type) + chunk(start.encode()))

        async def flood() -> None:  # paced (30 MB take over four seconds): the answer must come first
            piece = chunk(b"y" * 65536)
            while attacker.written < ENDLESS:
                await attacker.write(piece)
                await asyncio.sleep(0.01)

        flooding = asyncio.create_task(flood())
        try:
            status, answer = await attacker.status(timeout=30)
            sent = attacker.written
        finally:
            flooding.cancel()
            await asyncio.gather(flooding, return_exceptions=True)
    assert status == 413 and answer["error"]["code"] == "too_large", answer
    assert sent < ENDLESS, f"the answer came after {sent} bytes: the body was read whole first"
    await a_normal_upload_is_taken(app)


async def test_an_upload_that_stops_arriving_is_answered_408(app: App, monkeypatch) -> None:
    monkeypatch.setattr(uploads, "IDLE_S", 1.0)
    async with RawHTTP(app) as stalled:
        await stalled.write(upload_head(f"multipart/form-data; boundary={BOUNDARY}") + chunk(f"--{BOUNDARY}\r\n".encode()))
        await a_normal_upload_is_taken(app)  # served while the other waits
        status, answer = await stalled.status(timeout=10)
    assert status == 408 and answer["error"]["code"] == "timeout" and answer["error"]["retryable"], answer


async def test_a_request_that_never_finishes_its_headers_is_closed_while_others_are_served(app: App) -> None:
    bound = gateway_server.HEADER_TIMEOUT_S + 5
    async with RawHTTP(app) as half, RawHTTP(app) as drip:
        await half.write(b"GET / HT")  # half a request line, then nothing
        await drip.write(b"GET / HTTP/1.1\r\n")

        async def dripping() -> None:  # one header byte every half second, never the blank line
            with pytest.raises((ConnectionError, OSError)):
                for _ in range(int(bound * 2) + 10):
                    await drip.write(b"X")
                    await asyncio.sleep(0.5)

        drip_task = asyncio.create_task(dripping())
        async with aiohttp.ClientSession() as http:  # the control: served while both hang on
            async with http.get(f"{base_of(app)}/") as response:
                assert response.status == 200
        waited = await asyncio.gather(half.closed_within(bound), drip.closed_within(bound))
        await drip_task
    assert all(w <= bound for w in waited), waited
    await a_normal_upload_is_taken(app)


async def test_a_browsers_upload_keeps_its_name_type_and_bytes_whatever_else_the_form_holds(app: App) -> None:
    data = bytes(range(256)) * 10 + f"\r\n--{BOUNDARY[:-1]}".encode()  # binary, nearly a boundary at its end
    body = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="note"\r\n\r\nhello\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="фото 1.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    ).encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()
    status, answer, _ = await post(app, body, f"multipart/form-data; boundary={BOUNDARY}")
    assert status == 201, answer
    assert answer["filename"] == "фото 1.png" and answer["mime"] == "image/png" and answer["size"] == len(data)
    stored = await app.gateway.files.data(answer["file_id"])
    assert stored == data
