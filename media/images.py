"""Images as model content parts: the bytes as sent when the provider can take them, else
decoded within a memory budget and re-encoded smaller; an image that cannot be decoded within
the budget is refused before a pixel of it is decoded.

An image's header says what decoding it would cost, and Pillow's `open` reads only the header.
The pixels are another matter: a 9 KB PNG may declare 9000×9000 (81 MB once decoded, 324 MB
as RGBA), a 100-byte one 20000×20000. So everything is decided from the header first:

- **As sent**, when the provider takes the type, the byte size and the longer side (Anthropic
  states 5 MB and 8000 px a side; OpenAI and Gemini about 20 MB and no side, which is taken
  as `MAX_SIDE`). Every re-encoding loses detail the person may be asking about.
- **Scaled down** otherwise, to `SCALED_SIDE` on the longer side (or the provider's side limit,
  if smaller): no model reads more (OpenAI fits every image into 2048×2048 before its model
  sees it, Anthropic into 1568 px), so nothing the model would have seen is lost. A JPEG is
  decoded straight at 1/2, 1/4 or 1/8 of its size (Pillow's `draft`, done by the JPEG decoder
  itself); other formats are decoded whole, then reduced a strip of rows at a time, so the
  colour conversion (a 1-bit image holds one byte a pixel, RGBA four) never covers the whole
  image at once.
- **Refused**, with a notice to the sender, when the decoded image and the copies scaling needs
  would take more than `DECODE_BYTES` at once (128 MiB: a 24-megapixel colour picture,
  6000×4000, fits; 1-bit, greyscale and palette images, one byte a pixel once decoded, fit
  up to about 100 megapixels) or when Pillow itself calls it a decompression bomb (over
  179 megapixels). That bounds one image's cost to the bot at that budget plus its bytes,
  within what one message may cost (200 MB).

Only the formats listed in `FORMATS` are opened at all, whatever the file claims to be.
"""

from __future__ import annotations

import base64
import io
import logging
import math
from dataclasses import dataclass
from typing import Any

from botweave.model_calls import load_litellm
from botweave.types import PHOTO_MIMES
from PIL import Image, UnidentifiedImageError

log = logging.getLogger(__name__)

#: The longest side any provider takes (Anthropic refuses more); the default for providers
#: that state no limit.
MAX_SIDE = 8000
#: The longer side of an image that had to be re-encoded: as much as any model reads.
SCALED_SIDE = 2048
#: The most memory decoding and scaling one image may take (see the module docstring).
DECODE_BYTES = 128 * 1024 * 1024
#: Rows are converted and reduced in strips of about this many pixels.
STRIP_PIXELS = 1_000_000
#: The decoders trusted with a stranger's bytes, and the types they read. Cameras'
#: multi-picture JPEGs open as JPEG's MPO variant: to a model they are JPEGs.
FORMAT_MIMES = {
    "PNG": "image/png", "JPEG": "image/jpeg", "MPO": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp",
    "BMP": "image/bmp", "TIFF": "image/tiff",
}
FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")


@dataclass(frozen=True, slots=True)
class ImageLimit:
    """The largest image a provider takes: encoded bytes, and pixels on the longer side."""

    max_bytes: int
    max_side: int = MAX_SIDE


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
    """Bytes that no trusted decoder reads; the agent gets a marker instead."""


class ImageTooLarge(ImageUnreadable):
    """An image that would cost more than `DECODE_BYTES` to decode; `size` as declared, when
    Pillow let the header be read at all."""

    def __init__(self, size: tuple[int, int] | None) -> None:
        super().__init__(f"{size[0]}×{size[1]} pixels" if size else "a decompression bomb")
        self.size = size


async def limit_for(model: str) -> ImageLimit:
    """`model`'s provider's limit, as litellm names the provider (imported off the loop)."""
    litellm = await load_litellm()
    try:
        provider = str(litellm.get_llm_provider(model)[1])
    except litellm.BadRequestError:  # litellm's answer for a model it cannot route
        return DEFAULT_LIMIT
    return PROVIDER_LIMITS.get(provider, DEFAULT_LIMIT)


def fit(data: bytes, mime: str, limit: ImageLimit = DEFAULT_LIMIT) -> tuple[bytes, str]:
    """The image as the provider can take it: unchanged when it already can, else scaled and
    re-encoded within `DECODE_BYTES` (see the module docstring). Raises `ImageTooLarge` or
    `ImageUnreadable`."""
    try:
        with Image.open(io.BytesIO(data), formats=FORMATS) as image:  # the header only
            mime = FORMAT_MIMES.get(str(image.format), mime)  # what the bytes are, whatever was declared
            if mime in PHOTO_MIMES and len(data) <= limit.max_bytes and max(image.size) <= limit.max_side:
                return data, mime
            return _reencoded(image, mime, limit)
    except ImageUnreadable:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageTooLarge(None) from None
    except UnidentifiedImageError:
        raise ImageUnreadable("not an image this bot reads") from None
    except Exception as exc:  # boundary: Pillow's decoders on hostile bytes fail in any way (OSError, SyntaxError, struct.error, ...)
        raise ImageUnreadable(f"{type(exc).__name__}: {exc}"[:200]) from None


def _reencoded(image: Image.Image, mime: str, limit: ImageLimit) -> tuple[bytes, str]:
    declared = image.size
    target = _within(declared, min(limit.max_side, SCALED_SIDE))
    if image.format in ("JPEG", "MPO"):
        image.draft("RGB", target)  # the decoder itself skips what the target does not need
    factor = max(1, min(image.width // target[0], image.height // target[1]))
    working = _working_mode(image.mode)
    if _cost(image, working, factor, target) > DECODE_BYTES:
        raise ImageTooLarge(declared)
    image.load()
    reduced = _reduced(image, working, factor)
    if reduced is not image:
        image.close()  # frees the decoded pixels before the resize needs memory of its own
    scaled = reduced if reduced.size == target else reduced.resize(target, Image.Resampling.LANCZOS)
    del reduced
    if mime not in PHOTO_MIMES and scaled.size == declared:
        lossless = _encode(scaled, "PNG")  # a type models do not read, at its own size
        if len(lossless) <= limit.max_bytes:
            return lossless, "image/png"
    flat = _flattened(scaled)
    for _ in range(12):
        encoded = _encode(flat, "JPEG", quality=85)
        if len(encoded) <= limit.max_bytes:
            log.info("an image of %dx%d was scaled to %dx%d for the model", *declared, *flat.size)
            return encoded, "image/jpeg"
        flat = flat.resize((max(1, int(flat.width * 0.75)), max(1, int(flat.height * 0.75))))
    raise ImageUnreadable("could not be made small enough for the model")


def _within(size: tuple[int, int], side: int) -> tuple[int, int]:
    """`size` scaled (never up) so its longer side is at most `side`, the ratio kept."""
    width, height = size
    scale = min(1.0, side / max(width, height, 1))
    return max(1, round(width * scale)), max(1, round(height * scale))


def _bytes_per_pixel(mode: str) -> int:
    """What Pillow holds a decoded pixel in (two-band and RGB modes take four bytes too)."""
    if mode in ("1", "L", "P"):
        return 1
    return 2 if mode.startswith("I;16") else 4


def _working_mode(mode: str) -> str:
    """The mode an image is scaled in: greyscale stays one byte a pixel; alpha is kept until
    the end (transparent parts become white there)."""
    if mode in ("1", "L", "I", "F") or mode.startswith("I;16"):
        return "L"
    return "RGBA" if mode in ("RGBA", "LA", "PA", "La", "RGBa", "P") else "RGB"


def _strip_rows(width: int, factor: int) -> int:
    return factor * max(1, STRIP_PIXELS // (width * factor))


def _cost(image: Image.Image, working: str, factor: int, target: tuple[int, int]) -> int:
    """The most bytes decoding and scaling hold at once. First the decoded image, its reduced
    copy (none when it is scaled as it is) and one strip being converted; then, the decoded
    pixels freed, the reduced copy and the resize's result and intermediate."""
    width, height = image.size
    native, per_pixel = _bytes_per_pixel(image.mode), _bytes_per_pixel(working)
    decoded = width * height * native
    resized = 2 * target[0] * target[1] * per_pixel
    if factor == 1 and image.mode == working:
        return decoded + resized
    reduced = math.ceil(width / factor) * math.ceil(height / factor) * per_pixel
    strip = 0 if factor == 1 else min(height, _strip_rows(width, factor)) * width * (native + per_pixel)
    return max(decoded + reduced + strip, reduced + resized)


def _reduced(image: Image.Image, working: str, factor: int) -> Image.Image:
    """`image` in the `working` mode, reduced by `factor` (a box filter) a strip of rows at a
    time, each strip converted on its own; `image` itself when there is nothing to do."""
    if factor == 1:
        return image if image.mode == working else image.convert(working)
    width, height = image.size
    reduced = Image.new(working, (math.ceil(width / factor), math.ceil(height / factor)))
    rows = _strip_rows(width, factor)
    for top in range(0, height, rows):
        strip = image.crop((0, top, width, min(height, top + rows)))
        reduced.paste(strip.convert(working).reduce(factor), (0, top // factor))
    return reduced


def _flattened(image: Image.Image) -> Image.Image:
    """What a JPEG can hold: transparency painted white."""
    if image.mode != "RGBA":
        return image
    background = Image.new("RGB", image.size, (255, 255, 255))
    background.paste(image, mask=image.getchannel("A"))
    return background


def _encode(image: Image.Image, kind: str, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=kind, **options)
    return buffer.getvalue()


def image_part(data: bytes, mime: str) -> dict[str, Any]:
    """An OpenAI-style image content part carrying the bytes themselves (a data: URL, never a
    platform URL: those may carry the bot's token and expire)."""
    encoded = base64.b64encode(data).decode("ascii")
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{encoded}"}}
