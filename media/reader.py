"""What an agent is given of a message's files, and the pipeline step that gives it.

Files are read only for a message that will be answered by an agent: the step sits after
access, gating, rate limits and admission, so a stranger's file is never fetched. Each file
is judged before a byte moves — its type against `allow_mime`, its place against
`max_files`, whether anything here reads it (an image for a model without vision, a voice
note with no transcription model, a video: a marker is all the agent gets) — and then read
through the platform's adapter within `max_bytes`:

- images become content parts (the bytes themselves, scaled only above the provider's limit;
  one too large to decode is refused from its header, and its sender told);
- text files and PDFs become text, cut at `document_chars`; a PDF is read for at most
  `document_pages` pages and `document_seconds` seconds, and its sender told what was left;
- voice notes and audio become a transcript prefixed `[voice]`.

Whatever was not read is still named to the agent by a marker (`[image image/png 12 KB]`), so
no message becomes an empty turn, and history keeps those markers rather than the bytes. A
file over a limit is told to the sender in one short notice, and the rest of the message is
answered as usual. A reply to a photo shows the agent that photo.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botweave.adapter import Adapter, FileTooLarge, FileUnavailable
from botweave.agents import Agent, UserTurn
from botweave.files import (
    declared_mime,
    display_name,
    human_size,
    is_file,
    kind_of,
    marker,
    mime_of,
    shorten,
    sniff_mime,
)
from botweave.media.config import MediaConfig
from botweave.media.documents import ENCRYPTED, NO_TEXT, UNREADABLE, Budget, Extracted, extract
from botweave.media.images import ImageLimit, ImageTooLarge, ImageUnreadable, fit, image_part, limit_for
from botweave.media.speech import TranscriptionFailed, transcribe
from botweave.mime import mime_allowed
from botweave.model_calls import load_litellm
from botweave.pipeline import Handler, Inbound, TurnOutcome
from botweave.types import BotMessage

log = logging.getLogger(__name__)


#: The stand-in model (botweave.offline_model), named here so that reading a message does not
#: import litellm before a turn needs it.
OFFLINE_PREFIX = "offline/"


#: What litellm's model map says of each model's vision, once looked up.
_VISION: dict[str, bool] = {}


async def _model_has_vision(model: str) -> bool:
    if model.startswith(OFFLINE_PREFIX):
        return True  # the offline echo describes every image it is shown
    if model not in _VISION:
        try:
            litellm = await load_litellm()  # imported in a thread the first time, never on the loop
            _VISION[model] = bool(litellm.supports_vision(model=model))
        except Exception:  # boundary: litellm's model map raises a bare Exception for a model it does not map
            _VISION[model] = False
    return _VISION[model]


async def has_vision(agent: Agent) -> bool:
    """The agent's `vision`: as configured, or (auto) what litellm knows of its model."""
    vision = agent.config.vision
    return await _model_has_vision(agent.model) if vision == "auto" else bool(vision)


@dataclass
class Reading:
    """What reading a message's files came to: the agent's turn and, when a file was left
    out for a limit, the notice its sender gets."""

    turn: UserTurn
    notice: str | None = None


@dataclass
class _Parts:
    lines: list[str] = field(default_factory=list)  # what the agent reads
    record: list[str] = field(default_factory=list)  # what history keeps
    images: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # told to the sender

    def both(self, line: str) -> None:
        self.lines.append(line)
        self.record.append(line)


class MediaReader:
    """Reads one message's files for one agent, through the adapter the message came from."""

    def __init__(self, adapter: Adapter, agent: Agent, media: MediaConfig) -> None:
        self.adapter = adapter
        self.agent = agent
        self.media = media
        self.vision = False  # known once `read` has asked (`has_vision`)
        self._image_limit: ImageLimit | None = None

    async def read(self, msg: BotMessage) -> Reading:
        self.vision = await has_vision(self.agent)
        parts = _Parts()
        if msg.prompt_text:
            parts.both(msg.prompt_text)
        files = [ref for ref in msg.attachments if is_file(ref)]
        for index, ref in enumerate(files):
            await self._read_one(ref, index, parts)
        if msg.quoted is not None:
            quoted = [ref for ref in msg.quoted.attachments if is_file(ref)]
            await self._read_quoted(quoted[: self.media.max_files], parts)
        if len(files) > self.media.max_files:
            parts.problems.append(f"only the first {self.media.max_files} files were read")
        turn = UserTurn("\n".join(parts.lines), tuple(parts.images), "\n".join(parts.record))
        return Reading(turn, _notice(parts.problems))

    async def _read_one(self, ref: Mapping[str, Any], index: int, parts: _Parts) -> None:
        mime, kind, name = mime_of(ref), kind_of(ref), display_name(ref)
        if not mime_allowed(mime, self.media.allow_mime):
            parts.problems.append(f"{name} was not read ({shorten(mime)} files are not accepted)")
            parts.both(marker(ref, note="not read"))
            return
        if index >= self.media.max_files:
            parts.both(marker(ref, note="not read"))
            return
        if kind == "image" and not self.vision:
            parts.both(marker(ref))
            return
        if kind == "voice" and not self.media.transcription.model:
            parts.both(marker(ref, note="not transcribed: no transcription model is set"))
            return
        if kind not in ("image", "voice", "document"):
            parts.both(marker(ref))
            return
        data = await self._download(ref, name, parts)
        if data is None:
            return
        if kind == "image":
            await self._image(ref, data, parts)
        elif kind == "document":
            await self._document(ref, mime, name, data, parts)
        else:
            await self._voice(ref, mime, data, parts)

    async def _read_quoted(self, refs: Sequence[Mapping[str, Any]], parts: _Parts) -> None:
        """The replied-to message's images, so "what is this?" under a photo is answerable;
        nothing about them is told to the sender (they may be someone else's files)."""
        for ref in refs:
            if kind_of(ref) != "image" or not self.vision or not mime_allowed(mime_of(ref), self.media.allow_mime):
                continue
            data = await self._download(ref, display_name(ref), None)
            if data is not None:
                await self._image(ref, data, parts, replied=True)

    async def _download(self, ref: Mapping[str, Any], name: str, parts: _Parts | None) -> bytes | None:
        try:
            return await self.adapter.download(ref, self.media.max_bytes)
        except FileTooLarge as exc:
            limit = human_size(exc.limit)
            if parts is not None:
                if exc.counted or exc.size is None:
                    parts.problems.append(f"{name} is over the {limit} limit")
                else:
                    parts.problems.append(f"{name} is {human_size(exc.size)}; the limit is {limit}")
                parts.both(marker(ref, note=f"not read: over the {limit} limit"))
        except FileUnavailable as exc:
            log.warning("%s: a file could not be fetched: %s", self.adapter.platform, exc)
            if parts is not None:
                parts.problems.append(f"{name} could not be fetched")
                parts.both(marker(ref, note="could not be fetched"))
        return None

    async def _image(self, ref: Mapping[str, Any], data: bytes, parts: _Parts, *, replied: bool = False) -> None:
        mime = sniff_mime(data) or mime_of(ref)
        shown = marker(ref, size=len(data), mime=mime)
        if self._image_limit is None:
            self._image_limit = await limit_for(self.agent.model)
        try:
            sent, sent_mime = await asyncio.to_thread(fit, data, mime, self._image_limit)  # scaling is CPU work
        except ImageTooLarge as exc:
            log.info("an image was refused: %s", exc)
            pixels = f" ({exc.size[0]}×{exc.size[1]} pixels)" if exc.size else ""
            if not replied:
                parts.problems.append(f"{display_name(ref)} is too large to look at{pixels}")
            parts.both(marker(ref, size=len(data), mime=mime, note=f"not read: too large to look at{pixels}"))
            return
        except ImageUnreadable as exc:
            log.info("an image could not be read: %s", exc)
            parts.both(marker(ref, size=len(data), mime=mime, note="unreadable image"))
            return
        parts.images.append(image_part(sent, sent_mime))
        parts.record.append(f"[in reply to: {shown[1:]}" if replied else shown)

    async def _document(self, ref: Mapping[str, Any], mime: str, name: str, data: bytes, parts: _Parts) -> None:
        media = self.media
        budget = Budget(media.document_chars, media.document_pages, media.document_seconds)
        extracted = await extract(data, declared_mime(ref), budget)
        shown = marker(ref, size=len(data), mime=mime)
        shortfall = _shortfall(name, extracted, budget)
        if shortfall:
            parts.problems.append(shortfall)
        if extracted.problem:
            parts.both(marker(ref, size=len(data), mime=mime, note=extracted.problem))
            return
        cut = ""
        if extracted.cut:
            cut = f"\n[… cut at {media.document_chars} characters]"
        elif extracted.stopped:
            cut = f"\n[… read the first {extracted.pages_read} of {extracted.pages} pages]"
        parts.lines.append(f"{shown}\n{extracted.text}{cut}\n[end of {name}]")
        parts.record.append(shown)

    async def _voice(self, ref: Mapping[str, Any], mime: str, data: bytes, parts: _Parts) -> None:
        try:
            text = await transcribe(data, ref.get("filename"), mime, self.media.transcription)
        except TranscriptionFailed as exc:
            log.warning("transcription failed: %s", exc)
            parts.both(marker(ref, size=len(data), mime=mime, note="transcription failed"))
            return
        parts.both(f"[voice] {text}" if text else marker(ref, size=len(data), mime=mime, note="no speech heard"))


def _shortfall(name: str, extracted: Extracted, budget: Budget) -> str | None:
    """What the sender is told about a document that was not read whole. Its text cut at
    `document_chars`, or a scan without text, is not news to them: the agent is told, and
    says what it read."""
    if extracted.problem:
        if extracted.problem == NO_TEXT:
            return None
        if extracted.problem == ENCRYPTED:
            return f"{name} is encrypted"
        return f"{name} could not be read" if extracted.problem == UNREADABLE else f"{name}: {extracted.problem}"
    pages = f"only the first {extracted.pages_read} of {extracted.pages} pages"
    if extracted.stopped == "pages":
        return f"{name}: {pages} were read"
    if extracted.stopped == "time":
        return f"{name}: {pages} were read in the {budget.seconds:g} s allowed"
    if extracted.stopped == "failed":
        return f"{name}: {pages} could be read"
    if extracted.pages_failed:
        return f"{name}: {extracted.pages_failed} of its {extracted.pages} pages could not be read"
    return None


def _notice(problems: list[str]) -> str | None:
    if not problems:
        return None
    unique = list(dict.fromkeys(problems))
    text = "; ".join(unique)
    return f"I couldn't read everything you sent: {text}."


class MediaStep:
    """The pipeline step: a message with files, on its way to an agent, has them read (see
    the module docstring); the notice, if any, goes out before the answer."""

    def __init__(self, agents: Mapping[str, Agent], media: Mapping[str, MediaConfig]) -> None:
        self._agents = agents
        self._media = media  # each agent's effective settings

    async def __call__(self, inbound: Inbound, call_next: Handler) -> TurnOutcome:
        msg = inbound.message
        target = inbound.target
        agent = self._agents.get(target.name) if target is not None and target.kind == "agent" else None
        if agent is None or not await self._has_files(msg, agent):
            return await call_next(inbound)
        await inbound.adapter.typing(msg.channel.channel_id, thread_id=msg.thread_id)
        reading = await MediaReader(inbound.adapter, agent, self._media[agent.name]).read(msg)
        if reading.notice is not None:
            await inbound.reply.send_text(reading.notice, purpose="media-notice")
        inbound.turn = reading.turn
        return await call_next(inbound)

    @staticmethod
    async def _has_files(msg: BotMessage, agent: Agent) -> bool:
        """Files of its own, or a replied-to picture the agent can look at."""
        if any(is_file(ref) for ref in msg.attachments):
            return True
        quoted = msg.quoted.attachments if msg.quoted is not None else ()
        return any(is_file(ref) and kind_of(ref) == "image" for ref in quoted) and await has_vision(agent)
