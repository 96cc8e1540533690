"""The media part of bot.yaml: the top-level `media:` section and an agent's own `media:`
on top of it (`AgentMedia`, part of its `agents.NAME` section)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

from botweave.config import Section, problem, raise_problems
from botweave.mime import is_mime_pattern
from pydantic import Field, SecretStr, field_validator

DEFAULT_ALLOW_MIME = ("image/*", "text/*", "application/pdf", "audio/*")


class TranscriptionConfig(Section):
    """The speech-to-text model voice notes go through (litellm's transcription API); with no
    model, voice notes reach the agent as a marker, not as words."""

    model: Optional[str] = None
    """The speech-to-text model, as litellm names it (e.g. `openai/whisper-1`); unset: voice
    notes arrive as a marker."""
    api_base: Optional[str] = None
    """An OpenAI-compatible server for transcriptions."""
    api_key: Optional[SecretStr] = None
    """The key for the transcription model; unset: the provider's usual environment variable."""


class MediaConfig(Section):
    """What the bot reads of the files people send, and where it may post files from."""

    max_bytes: Annotated[int, Field(ge=1)] = 20_000_000
    """The largest file read or sent, checked against the size a platform declares and again while
    the bytes arrive."""
    max_files: Annotated[int, Field(ge=0)] = 10
    """Files read per message; the rest are named in a notice, not read."""
    allow_mime: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOW_MIME))
    """The types that are read at all (`image/*` wildcards allowed); others get a notice."""
    document_chars: Annotated[int, Field(ge=0)] = 20_000
    """The most text taken from one document (text files, PDFs)."""
    document_pages: Annotated[int, Field(ge=1)] = 100
    """The most pages of a PDF read; the sender is told when there were more."""
    document_seconds: Annotated[float, Field(gt=0, le=300)] = 5.0
    """The longest a PDF is read for, in seconds; what was read by then is what the agent
    gets, and the sender is told."""
    files_dir: Optional[str] = None
    """The only folder `send_file` may post files from by path; unset, no path is allowed."""
    transcription: TranscriptionConfig = Field(default_factory=TranscriptionConfig)
    """How voice notes and audio become text for the agent."""

    @field_validator("allow_mime", mode="before")
    @classmethod
    def _mime_patterns(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return value
        problems = []
        patterns = []
        for index, item in enumerate(value):
            text = str(item).strip().lower()
            if not is_mime_pattern(text):
                problems.append(
                    problem(
                        (index,),
                        f"{item!r} is not a MIME type; write type/subtype, e.g. image/png, image/* or application/pdf",
                        item,
                    )
                )
            patterns.append(text)
        raise_problems(cls.__name__, problems)
        return patterns

    def merged(self, override: MediaOverrides | None) -> MediaConfig:
        """These settings with an agent's own `media:` on top (only the keys it sets; a
        `transcription:` there is merged key by key too)."""
        if override is None:
            return self
        update = {name: getattr(override, name) for name in override.model_fields_set if name != "transcription"}
        if override.transcription is not None:
            fields = override.transcription.model_fields_set
            update["transcription"] = self.transcription.model_copy(
                update={name: getattr(override.transcription, name) for name in fields}
            )
        return self.model_copy(update=update)


class MediaOverrides(Section):
    """An agent's `media:`: any MediaConfig key, replacing the top-level value for that agent."""

    max_bytes: Optional[Annotated[int, Field(ge=1)]] = None
    """This agent's own `media.max_bytes`."""
    max_files: Optional[Annotated[int, Field(ge=0)]] = None
    """This agent's own `media.max_files`."""
    allow_mime: Optional[list[str]] = None
    """This agent's own `media.allow_mime`."""
    document_chars: Optional[Annotated[int, Field(ge=0)]] = None
    """This agent's own `media.document_chars`."""
    document_pages: Optional[Annotated[int, Field(ge=1)]] = None
    """This agent's own `media.document_pages`."""
    document_seconds: Optional[Annotated[float, Field(gt=0, le=300)]] = None
    """This agent's own `media.document_seconds`."""
    files_dir: Optional[str] = None
    """This agent's own `media.files_dir`."""
    transcription: Optional[TranscriptionConfig] = None
    """This agent's own `media.transcription`."""

    _mime_patterns = field_validator("allow_mime", mode="before")(
        MediaConfig._mime_patterns.__func__  # type: ignore[attr-defined]
    )


class AgentMedia(Section):
    """An agent's `media:`: its own media settings, on top of the top-level `media:`."""

    media: Optional[MediaOverrides] = None
    """This agent's own media settings; each key given replaces the top-level `media:` one."""
