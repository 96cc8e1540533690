"""Images as model content parts: the bytes as sent, re-encoded only when the provider could
not take them (a type it does not read, or over its size or dimension limit).

Each provider states its own limit (Anthropic: 5 MB and 8000 px a side; OpenAI and Gemini:
about 20 MB). An image within it goes to the model untouched, because every re-encoding
loses detail the person may be asking about; one over it is scaled down until it fits.
"""

from __future__ import annotations

import base64
import io
import logging
from dataclasses import dataclass
from typing import Any

from botweave.model_calls import load_litellm
from botweave.types import PHOTO_MIMES
from PIL import Image, UnidentifiedImageError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ImageLimit:
    """The largest image a provider takes: encoded bytes, and pixels on the longer side."""

    max_bytes: int
    max_side: int | None = None


DEFAULT_LIMIT = ImageLimit(20 * 1024 * 1024)
PROVIDER_LIMITS: dict[str, ImageLimit] = {
    "anthropic": ImageLimit(5 * 1024 * 1024, 8000),
    "bedrock": ImageLimit(3_750_000, 8000),
    "openai": ImageLimit(20 * 1024 * 1024),
    "azure": ImageLimit(20 * 1024 * 1024),
    "gemini": ImageLimit(20 * 1024 * 1024),
    "vertex_ai": ImageLimit(20 * 1024 * 1024),
}


class ImageUnreadable(Exception):
    """Bytes that no image decoder reads; the agent gets a marker instead."""


async def limit_for(model: str) -> ImageLimit:
    """`model`'s provider's limit, as litellm names the provider (imported off the loop)."""
    try:
        litellm = await load_litellm()
        provider = str(litellm.get_llm_provider(model)[1])
    except Exception:
        return DEFAULT_LIMIT
    return PROVIDER_LIMITS.get(provider, DEFAULT_LIMIT)


def _within(data: bytes, limit: ImageLimit) -> bool:
    if len(data) > limit.max_bytes:
        return False
    if limit.max_side is None:
        return True
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            return max(image.size) <= limit.max_side
    except (UnidentifiedImageError, OSError):
        return True  # let the provider judge what we cannot


def fit(data: bytes, mime: str, limit: ImageLimit = DEFAULT_LIMIT) -> tuple[bytes, str]:
    """The image as the provider can take it: unchanged when it already can, else re-encoded
    (PNG for a type models do not read, JPEG when it must shrink) and scaled down step by
    step until it is within `limit`."""
    if mime in PHOTO_MIMES and _within(data, limit):
        return data, mime
    try:
        with Image.open(io.BytesIO(data)) as opened:
            opened.load()
            image = opened.copy()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ImageUnreadable(str(exc)) from None
    if mime not in PHOTO_MIMES:
        converted = _encode(image, "PNG")
        if _within(converted, limit):
            return converted, "image/png"
    if image.mode not in ("RGB", "L"):
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image.convert("RGBA"), mask=image.convert("RGBA").getchannel("A"))
        image = background
    if limit.max_side is not None and max(image.size) > limit.max_side:
        image.thumbnail((limit.max_side, limit.max_side))
    for _ in range(12):
        encoded = _encode(image, "JPEG", quality=85)
        if len(encoded) <= limit.max_bytes:
            log.info("an image was scaled to %dx%d to fit the model's limit", *image.size)
            return encoded, "image/jpeg"
        width, height = image.size
        image = image.resize((max(1, int(width * 0.75)), max(1, int(height * 0.75))))
    raise ImageUnreadable("could not be made small enough for the model")


def _encode(image: Image.Image, kind: str, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=kind, **options)
    return buffer.getvalue()


def image_part(data: bytes, mime: str) -> dict[str, Any]:
    """An OpenAI-style image content part carrying the bytes themselves (a data: URL, never a
    platform URL: those may carry the bot's token and expire)."""
    encoded = base64.b64encode(data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{encoded}"}}
