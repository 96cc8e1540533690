"""Reading an upload's body as it arrives, every byte and every part counted against the
limits before more is read.

aiohttp's own multipart reader trusts the body: a part the upload does not use is read to
its end whatever its size, twenty thousand tiny parts are walked through without the event
loop getting a turn, and a body that is not multipart after all (no boundary, one that never
comes, a part never closed) raises errors of several kinds that were answered as a crash.
This reader takes the body chunk by chunk from the request's stream and:

* counts every byte of the body (preamble, headers, other parts, the file) against
  `max_body`, and the file's own bytes against `max_file`: `UploadRefused` 413 the moment
  either is passed, with or without a `Content-Length`;
* counts parts against `MAX_PARTS` and a part's headers against `MAX_HEADER_BYTES`;
* stops at the end of the part named `file` (nothing after it is read);
* turns whatever is wrong with the body into `UploadRefused` 400 naming it;
* gives the event loop a turn after each part (and waits for the network, so for other
  clients' turns, whenever nothing is buffered), so other clients are served meanwhile;
* waits at most `IDLE_S` for each next chunk: a client that stops sending mid-body gets 408.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import HTTP

from aiohttp import StreamReader

#: Parts a multipart upload may have (a browser's form sends one).
MAX_PARTS = 16
#: The largest header block of one part.
MAX_HEADER_BYTES = 8 * 1024
#: Bytes a multipart body may have besides the file (its boundaries, headers, other fields).
OVERHEAD_BYTES = 64 * 1024
#: How long the next piece of a body may keep the server waiting.
IDLE_S = 30.0
#: RFC 2046: 1 to 70 characters of these, not ending in a space.
_BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")


class UploadRefused(Exception):
    """Why an upload is not taken: the HTTP status and the error code and message to answer."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Upload:
    """The file an upload carried: its name and declared type as the client gave them."""

    data: bytes
    filename: str
    content_type: str


def boundary_of(content_type_header: str) -> bytes:
    """The multipart boundary a `Content-Type` names, or `UploadRefused` 400."""
    header = Message()
    header["Content-Type"] = content_type_header
    boundary = header.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise UploadRefused(400, "bad_request", "a multipart upload needs a boundary in its Content-Type")
    if not _BOUNDARY.fullmatch(boundary):
        raise UploadRefused(400, "bad_request", "the multipart boundary is not valid (1 to 70 plain characters)")
    return boundary.encode("ascii")


class _Body:
    """The request's stream with a budget: what was read and not yet used sits in `buffer`."""

    def __init__(self, stream: StreamReader, max_body: int, max_file: int) -> None:
        self.stream = stream
        self.max_body = max_body
        self.max_file = max_file
        self.read = 0
        self.buffer = bytearray()

    async def more(self, what: str) -> None:
        """Read the next chunk into the buffer; `what` names what was awaited when it ends."""
        try:
            chunk = await asyncio.wait_for(self.stream.readany(), IDLE_S)
        except asyncio.TimeoutError:
            raise UploadRefused(408, "timeout", f"the upload stopped arriving for {IDLE_S:.0f} seconds") from None
        if not chunk:
            raise UploadRefused(400, "bad_request", f"the upload ended before {what}")
        self.read += len(chunk)
        if self.read > self.max_body:
            raise UploadRefused(413, "too_large", f"the file is over the limit of {self.max_file} bytes (media.max_bytes)")
        self.buffer += chunk


async def read_multipart(stream: StreamReader, boundary: bytes, *, max_file: int) -> Upload:
    """The part named `file` of a multipart body (see the module docstring)."""
    body = _Body(stream, max_file + OVERHEAD_BYTES, max_file)
    body.buffer += b"\r\n"  # so the first delimiter looks like every other: CRLF "--" boundary
    delimiter = b"\r\n--" + boundary
    keep = len(delimiter) - 1
    # The preamble: everything before the first delimiter is skipped (and counted).
    while (found := body.buffer.find(delimiter)) < 0:
        del body.buffer[: max(0, len(body.buffer) - keep)]
        await body.more("its first boundary")
    del body.buffer[: found + len(delimiter)]
    parts = 0
    while True:
        if await _closing(body):
            raise UploadRefused(400, "bad_request", "a multipart upload needs a part named file")
        parts += 1
        if parts > MAX_PARTS:
            raise UploadRefused(400, "bad_request", f"a multipart upload has at most {MAX_PARTS} parts")
        headers = await _headers(body)
        name = headers.get_param("name", header="content-disposition")
        wanted = name == "file"
        data = bytearray()
        async for piece in _part(body, delimiter, keep):
            if wanted:
                data += piece
                if len(data) > max_file:
                    raise UploadRefused(413, "too_large", f"the file is over the limit of {max_file} bytes (media.max_bytes)")
        if wanted:
            await _closing(body)  # a boundary of its own, not a longer line that starts like one
            return Upload(bytes(data), headers.get_filename() or "file", headers.get("Content-Type", ""))
        await asyncio.sleep(0)  # another client's turn between parts


async def _closing(body: _Body) -> bool:
    """Read what follows a delimiter: `--` (the body's last boundary: True) or the end of
    the line (a part follows: False); anything else there is not a boundary line."""
    while len(body.buffer) < 2:
        await body.more("the line after a boundary")
    if body.buffer.startswith(b"--"):
        return True
    while (line_end := body.buffer.find(b"\r\n")) < 0:
        if len(body.buffer) > MAX_HEADER_BYTES:
            raise UploadRefused(400, "bad_request", "a multipart boundary line is not followed by a line break")
        await body.more("the line after a boundary")
    if body.buffer[:line_end].strip(b" \t"):
        raise UploadRefused(400, "bad_request", "a multipart boundary line carries something after the boundary")
    del body.buffer[: line_end + 2]
    return False


async def _headers(body: _Body) -> Message:
    if body.buffer.startswith(b"\r\n"):  # a part without headers
        del body.buffer[:2]
        return Message()
    while (end := body.buffer.find(b"\r\n\r\n")) < 0:
        if len(body.buffer) > MAX_HEADER_BYTES:
            raise UploadRefused(400, "bad_request", f"a part's headers are over {MAX_HEADER_BYTES} bytes")
        await body.more("a part's headers ended")
    if end > MAX_HEADER_BYTES:
        raise UploadRefused(400, "bad_request", f"a part's headers are over {MAX_HEADER_BYTES} bytes")
    block = bytes(body.buffer[: end + 4])
    del body.buffer[: end + 4]
    return BytesHeaderParser(policy=HTTP).parsebytes(block)


async def _part(body: _Body, delimiter: bytes, keep: int) -> AsyncIterator[bytes]:
    """A part's bytes up to the next delimiter (which is used up)."""
    while (found := body.buffer.find(delimiter)) < 0:
        if len(body.buffer) > keep:
            cut = len(body.buffer) - keep
            yield bytes(body.buffer[:cut])
            del body.buffer[:cut]
        await body.more("a part was closed by its boundary")
    yield bytes(body.buffer[:found])
    del body.buffer[: found + len(delimiter)]


async def read_raw(stream: StreamReader, *, max_file: int) -> bytes:
    """A body that is the file itself, counted as it arrives."""
    data = bytearray()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.readany(), IDLE_S)
        except asyncio.TimeoutError:
            raise UploadRefused(408, "timeout", f"the upload stopped arriving for {IDLE_S:.0f} seconds") from None
        if not chunk:
            return bytes(data)
        data += chunk
        if len(data) > max_file:
            raise UploadRefused(413, "too_large", f"the file is over the limit of {max_file} bytes (media.max_bytes)")
