"""Voice notes and audio as words, through litellm's transcription API (Whisper and the
providers litellm maps to it), with the model and credentials of `media.transcription`."""

from __future__ import annotations

from botweave.media.config import TranscriptionConfig
from botweave.model_calls import load_litellm

#: Transcription services judge a file by its name's extension; Telegram's voice notes have
#: no name at all.
_EXTENSIONS = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/m4a": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/webm": "webm",
    "audio/flac": "flac",
}


class TranscriptionFailed(Exception):
    """The service did not transcribe; the message is safe to log (no key, no audio)."""


def upload_name(filename: str | None, mime: str) -> str:
    if filename and "." in filename:
        return filename
    return f"{filename or 'voice'}.{_EXTENSIONS.get(mime, 'ogg')}"


async def transcribe(data: bytes, filename: str | None, mime: str, config: TranscriptionConfig) -> str:
    if not config.model:
        raise TranscriptionFailed("no transcription model is set (media.transcription.model)")
    request: dict[str, object] = {"model": config.model, "file": (upload_name(filename, mime), data, mime)}
    if config.api_base:
        request["api_base"] = config.api_base
    if config.api_key is not None:
        request["api_key"] = config.api_key.get_secret_value()
    try:
        litellm = await load_litellm()  # imported in a thread the first time, never on the loop
        response = await litellm.atranscription(**request)
    except Exception as exc:  # boundary: the transcription model call; whatever the provider raised is TranscriptionFailed
        detail = str(exc)[:200]
        if config.api_key is not None:
            detail = detail.replace(config.api_key.get_secret_value(), "***")
        raise TranscriptionFailed(f"{type(exc).__name__}: {detail}") from None
    return str(getattr(response, "text", "") or "").strip()
