"""Files in and out: what kind a file is, how it is named to an agent, and where the bot may
post a file from.

Inbound attachments are read through their platform's adapter (`Adapter.download`, within
`media.max_bytes`); this module names them to the agent and to history with a compact marker
(`[image image/png 12 KB]`) and gives the platforms one way to stream a file over HTTP.

Outbound, `send_file` is the one function behind every way the bot posts a file (the
`send_file` tool, `App.send_file`): the file comes from bytes, from a `path` — only inside
`media.files_dir`, never anywhere else on the machine — or from a `url` that the network egress
policy allows at every hop, always within `media.max_bytes`, and it leaves through `Delivery`
like every other post.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import mimetypes
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import unquote, urljoin, urlsplit

import aiohttp
from botweave.adapter import ByteLimit, FileTooLarge, FileUnavailable
from botweave.delivery import Delivery
from botweave.mime import UNKNOWN, base_mime, clean_mime
from botweave.targets import Targets
from botweave.types import BotMessage, MessageActionResult, OutboundFile

log = logging.getLogger(__name__)

FileKind = Literal["image", "voice", "document", "video", "file"]
#: Why a URL may not be fetched, or None when it may: the network egress policy's question.
UrlCheck = Callable[[str], str | None]


class FileLimits(Protocol):
    """What loading a file to post needs of the media settings (the top-level `media:`, or
    an agent's own on top): the size limit, and the one folder files may come from by path."""

    @property
    def max_bytes(self) -> int: ...

    @property
    def files_dir(self) -> str | None: ...


CHUNK_BYTES = 64 * 1024
#: The longest file name or type quoted back to a person; longer ones end in an ellipsis.
QUOTED_CHARS = 60
MAX_REDIRECTS = 5
DOCUMENT_MIMES = frozenset({"application/pdf", "application/json", "application/xml", "application/x-yaml"})
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=15, sock_read=60)
#: Magic numbers of the types a file without a usable name or header is most likely to be.
_SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"),
    (b"\xff\xd8\xff", 0, "image/jpeg"),
    (b"GIF87a", 0, "image/gif"),
    (b"GIF89a", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"),
    (b"%PDF-", 0, "application/pdf"),
    (b"OggS", 0, "audio/ogg"),
    (b"ID3", 0, "audio/mpeg"),
    (b"fLaC", 0, "audio/flac"),
    (b"WAVE", 8, "audio/wav"),
)


# --- what a file is --------------------------------------------------------------------------


def sniff_mime(data: bytes) -> str | None:
    """The type the bytes themselves announce, for the common image, audio and PDF formats."""
    for magic, offset, mime in _SIGNATURES:
        if data[offset : offset + len(magic)] == magic:
            return mime
    return None


def guess_mime(filename: str | None) -> str | None:
    if not filename:
        return None
    return mimetypes.guess_type(filename, strict=False)[0]


def mime_of(ref: Mapping[str, Any]) -> str:
    """An attachment's type: as the platform declared it (when that is a MIME type at all),
    else guessed from its name, else unknown."""
    declared = base_mime(ref.get("mime"))
    if declared and declared != UNKNOWN:
        return declared
    return base_mime(guess_mime(ref.get("filename"))) or UNKNOWN


def declared_mime(ref: Mapping[str, Any]) -> str:
    """`mime_of` with the parameters the platform declared (a text file's charset)."""
    mime = mime_of(ref)
    declared = clean_mime(ref.get("mime"))
    return declared if declared is not None and base_mime(declared) == mime else mime


def kind_of(ref: Mapping[str, Any]) -> FileKind:
    """How a file is read: a picture, speech, a document, a video, or just a file."""
    mime = mime_of(ref)
    if ref.get("type") == "voice" or mime.startswith("audio/"):
        return "voice"
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("video/"):
        return "video"
    if mime.startswith("text/") or mime in DOCUMENT_MIMES:
        return "document"
    return "file"


def is_file(ref: Mapping[str, Any]) -> bool:
    """Attachments that are files to fetch (locations and contacts are not)."""
    return bool(ref.get("file_id") or ref.get("url"))


def human_size(size: object) -> str:
    """`12 KB`, `3.4 MB`: a size as a person reads it (units of 1024); '' when unknown."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return ""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{max(1, round(size / 1024))} KB"
    megabytes = size / (1024 * 1024)
    return f"{megabytes:.1f} MB" if megabytes < 10 else f"{round(megabytes)} MB"


def marker(ref: Mapping[str, Any], *, size: int | None = None, mime: str | None = None, note: str = "") -> str:
    """The compact reference to a file that the agent reads and history keeps instead of its
    bytes: `[image image/png 12 KB]`, `[document report.pdf application/pdf 120 KB]`."""
    kind = kind_of(ref)
    label = "audio" if kind == "voice" and ref.get("type") != "voice" and ref.get("filename") else kind
    parts: list[str] = [label]
    name = str(ref.get("filename") or "")
    if name and kind != "image":
        parts.append(name)
    parts.append(mime or mime_of(ref))
    shown = human_size(size if size is not None else ref.get("size"))
    if shown:
        parts.append(shown)
    text = " ".join(parts)
    return f"[{text}: {note}]" if note else f"[{text}]"


def shorten(text: str, limit: int = QUOTED_CHARS) -> str:
    """`text` as a notice may quote it: at most `limit` characters, an ellipsis marking a cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def display_name(ref: Mapping[str, Any]) -> str:
    """How a notice names a file to the person who sent it (shortened: the name is theirs to
    choose, and a notice is one short message)."""
    name = str(ref.get("filename") or "")
    return shorten(name) if name else f"the {kind_of(ref)}"


def message_text(msg: BotMessage) -> str:
    """A message's text as an agent reads it when its files are not read (observe-only
    groups, rooms): the words, then a marker per file, so a photo without a caption never
    becomes an empty turn."""
    markers = [marker(ref) for ref in msg.attachments if is_file(ref)]
    return "\n".join(part for part in (msg.prompt_text, *markers) if part)


# --- reading over HTTP -------------------------------------------------------------------------


async def http_chunks(
    url: str,
    limit: ByteLimit,
    *,
    headers: Mapping[str, str] | None = None,
    follow_redirects: bool = True,
    refuse_html: bool = False,
) -> AsyncGenerator[bytes, None]:
    """The body of a GET, chunk by chunk, for a platform's `read_file`. A declared
    Content-Length over the limit stops it before the body is read. Failures are
    `FileUnavailable` naming the status or the error's type, never the URL (it may carry a
    token). `refuse_html`: a page where a file was expected is a sign-in wall, not the file."""
    try:
        async with aiohttp.ClientSession(timeout=_TIMEOUT) as session:
            async with session.get(url, headers=dict(headers or {}), allow_redirects=follow_redirects) as response:
                if 300 <= response.status < 400 and not follow_redirects:
                    raise FileUnavailable(f"HTTP {response.status}: redirected (to a sign-in page?), not the file")
                if response.status != 200:
                    raise FileUnavailable(f"HTTP {response.status}")
                if refuse_html and base_mime(response.headers.get("Content-Type")) == "text/html":
                    raise FileUnavailable("the platform answered with a web page, not the file (not authorised?)")
                limit.declared(response.content_length)
                async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                    yield chunk
    except aiohttp.ClientError as exc:
        raise FileUnavailable(f"download failed ({type(exc).__name__})") from None
    except asyncio.TimeoutError:
        raise FileUnavailable("download timed out") from None


# --- outbound files ----------------------------------------------------------------------------


class FileRefused(Exception):
    """A file cannot be posted from where it was asked for; the message says why."""


def _filename_for(mime: str, given: str | None, fallback: str = "file") -> str:
    if given and given.strip():
        return os.path.basename(given.strip()) or fallback
    extension = mimetypes.guess_extension(mime, strict=False) or ""
    base = "image" if mime.startswith("image/") else "audio" if mime.startswith("audio/") else fallback
    return base + extension


def make_file(data: bytes, filename: str | None = None, mime: str | None = None, *, served_as: str | None = None) -> OutboundFile:
    """An outbound file with a name and a type: the type given, else what the name says, else
    what the bytes say, else what the server said it sent."""
    chosen = base_mime(mime) or base_mime(guess_mime(filename)) or sniff_mime(data) or base_mime(served_as)
    chosen = chosen or UNKNOWN
    return OutboundFile(data, _filename_for(chosen, filename), chosen)


def file_from_base64(data_base64: str, max_bytes: int, filename: str | None = None, mime: str | None = None) -> OutboundFile:
    text = re.sub(r"\s+", "", data_base64)
    if text.startswith("data:") and "," in text:  # a data: URL is its own base64 with a type
        header, text = text[len("data:") :].split(",", 1)
        mime = mime or header.split(";", 1)[0] or None
    if len(text) * 3 // 4 > max_bytes + 3:
        raise FileTooLarge(len(text) * 3 // 4, max_bytes)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise FileRefused("data_base64 is not valid base64") from None
    if len(data) > max_bytes:
        raise FileTooLarge(len(data), max_bytes)
    return make_file(data, filename, mime)


def file_from_path(path: str, files_dir: str | None, max_bytes: int, filename: str | None = None) -> OutboundFile:
    """A file inside `files_dir` (a relative path is taken from there). Links are followed
    before the check, so no link inside the folder leads out of it."""
    if not files_dir:
        raise FileRefused("sending files by path is off (media.files_dir is not set)")
    root = Path(files_dir).expanduser().resolve()
    candidate = Path(path).expanduser()
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise FileRefused("path is outside media.files_dir")
    if not resolved.is_file():
        raise FileRefused(f"no file at {path!r} in media.files_dir")
    size = resolved.stat().st_size
    if size > max_bytes:
        raise FileTooLarge(size, max_bytes)
    with resolved.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew since it was measured
        raise FileTooLarge(len(data), max_bytes)
    return make_file(data, filename or resolved.name)


def host_of(url: str) -> str:
    """The host a URL names, for messages (the whole text when it names none)."""
    try:
        return urlsplit(url).hostname or url
    except ValueError:
        return url


def _name_in(url: str, disposition: str | None) -> str | None:
    if disposition:
        match = re.search(r"filename\*?=(?:UTF-8'')?\"?([^\";]+)\"?", disposition, re.IGNORECASE)
        if match:
            return unquote(match.group(1))
    name = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    return name or None


class HopRefused(Exception):
    """The egress policy refused one hop of a request (the first URL, or a redirect's)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(reason)
        self.url, self.reason = url, reason


class HopFailed(Exception):
    """One hop of a request could not be made or read."""

    def __init__(self, url: str, error: aiohttp.ClientError) -> None:
        super().__init__(str(error))
        self.url, self.error = url, error


class TooManyRedirects(Exception):
    """More than `MAX_REDIRECTS` redirects."""


@contextlib.asynccontextmanager
async def checked_get(
    session: aiohttp.ClientSession, url: str, egress: UrlCheck
) -> AsyncIterator[tuple[aiohttp.ClientResponse, str]]:
    """GET `url` and yield the final response with its URL. Redirects are followed here, one
    at a time, never by the client: a permitted host may redirect anywhere, so `egress`
    sees every hop before it is made."""
    for _ in range(MAX_REDIRECTS + 1):
        reason = egress(url)
        if reason is not None:
            raise HopRefused(url, reason)
        try:
            async with session.get(url, allow_redirects=False) as response:
                location = response.headers.get("Location")
                if response.status in (301, 302, 303, 307, 308) and location:
                    url = urljoin(url, location)
                    continue
                yield response, url
                return
        except aiohttp.ClientError as exc:
            raise HopFailed(url, exc) from None
    raise TooManyRedirects


async def file_from_url(
    url: str, egress: UrlCheck | None, max_bytes: int, filename: str | None = None, mime: str | None = None
) -> OutboundFile:
    """Fetch a file the egress policy allows, checking every hop (a permitted host may
    redirect anywhere), reading no more than `max_bytes`. No egress policy: no URL."""
    if egress is None:
        raise FileRefused("sending files from a URL needs the network egress policy, and none is configured")
    limit = ByteLimit(max_bytes)
    try:
        async with aiohttp.ClientSession(timeout=_TIMEOUT, trust_env=False) as session:
            async with checked_get(session, url, egress) as (response, url):
                if response.status != 200:
                    raise FileRefused(f"{host_of(url)} answered HTTP {response.status}")
                limit.declared(response.content_length)
                data = bytearray()
                async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                    if len(data) + len(chunk) > max_bytes:
                        raise FileTooLarge(len(data) + len(chunk), max_bytes, counted=True)
                    data += chunk
                name = filename or _name_in(url, response.headers.get("Content-Disposition"))
                return make_file(bytes(data), name, mime, served_as=response.headers.get("Content-Type"))
    except HopRefused as exc:
        raise FileRefused(f"{host_of(exc.url)} refused: {exc.reason}") from None
    except HopFailed as exc:
        raise FileRefused(f"{host_of(exc.url)} could not be read ({type(exc.error).__name__})") from None
    except TooManyRedirects:
        raise FileRefused(f"more than {MAX_REDIRECTS} redirects") from None


@dataclass(frozen=True, slots=True)
class FileSource:
    """Where a file to post comes from: exactly one of bytes, base64, a `path` inside the
    files folder or a `url`; `filename` and `mime` override what the source says."""

    data: bytes | None = None
    data_base64: str | None = None
    path: str | None = None
    url: str | None = None
    filename: str | None = None
    mime: str | None = None


async def load_file(source: FileSource, *, media: FileLimits, egress: UrlCheck | None = None) -> OutboundFile:
    """The file from exactly one source, within `media` (see the module docstring)."""
    given = [value for value in (source.data, source.data_base64, source.path, source.url) if value]
    if len(given) != 1:
        raise FileRefused("give exactly one of url, data_base64 or path")
    filename, mime = source.filename, source.mime
    if source.data is not None:
        if len(source.data) > media.max_bytes:
            raise FileTooLarge(len(source.data), media.max_bytes)
        return make_file(source.data, filename, mime)
    if source.data_base64 is not None:
        return file_from_base64(source.data_base64, media.max_bytes, filename, mime)
    if source.path is not None:
        return await asyncio.to_thread(file_from_path, source.path, media.files_dir, media.max_bytes, filename)
    assert source.url is not None
    return await file_from_url(source.url.strip(), egress, media.max_bytes, filename, mime)


async def send_file(
    delivery: Delivery,
    targets: Targets,
    target: str,
    source: FileSource,
    *,
    media: FileLimits,
    origin: BotMessage | None = None,
    caption: str = "",
    egress: UrlCheck | None = None,
    key: str | None = None,
) -> MessageActionResult:
    """Post a file to a target (`origin`, `<platform>`, `<platform>:<chat>[:<thread>]`) through
    `Delivery`. A file that cannot be loaded, or is over `media.max_bytes`, is a `failed`
    result saying why; nothing is posted. `key` names the post in the outbox, so a turn that
    runs again never posts the file twice."""
    to = targets.resolve(target.strip() or "origin", origin)
    if to is None:
        return MessageActionResult("no_route", target, "target not resolvable")
    try:
        file = await load_file(source, media=media, egress=egress)
    except FileTooLarge as exc:
        size = "over the limit" if exc.counted or exc.size is None else human_size(exc.size)
        return MessageActionResult("failed", to.target, f"send_file: the file is {size}; the limit is {human_size(exc.limit)}")
    except (FileRefused, OSError) as exc:
        return MessageActionResult("failed", to.target, f"send_file: {exc}")
    delivered = await delivery.post_file(to, file, caption=caption, key=key, origin=origin)
    return delivered.result(to.target)


def markers_for(files: Sequence[OutboundFile]) -> str:
    """Markers for files the bot posted (images a model drew), for history."""
    return "\n".join(marker({"mime": f.mime, "filename": f.filename, "size": f.size}) for f in files)
