"""Images people send (issue 37): decoded with a pixel bound, turned upright, re-encoded without metadata, resized
for a vision model, and their cost in a model's tokens by OpenAI's published formula.

A decompression bomb (a small file that decodes to billions of pixels) is refused from the header, before a pixel
is decoded: Pillow's `Image.open` reads only the header, so the size is known for free; what is kept is a new
encoding of the pixels alone, so a photo's EXIF (GPS position, camera, time), XMP and comments are gone.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from enum import StrEnum

from django.utils.translation import gettext as _
from PIL import Image, ImageOps, UnidentifiedImageError

from core.conf import setting
from llm.tokens import image_model_size

# Used until core.conf declares ATTACHMENT_MAX_PIXELS (issue 37); the same value as its default.
DEFAULT_MAX_PIXELS = 50_000_000
JPEG_QUALITY = 90
# The formats read, by sniffed content type (knowledge.files.sniff); Pillow is told to try only that one.
PILLOW_FORMATS = {
    "image/png": "PNG",
    "image/jpeg": "JPEG",
    "image/gif": "GIF",
    "image/webp": "WEBP",
    "image/bmp": "BMP",
}
# Pictures drawn rather than photographed (screenshots, diagrams) stay lossless.
_LOSSLESS_SOURCES = {"PNG", "GIF", "BMP"}


class Detail(StrEnum):
    """OpenAI's `image_url.detail`: how closely a vision model looks at an image (and what it costs)."""

    AUTO = "auto"
    LOW = "low"
    HIGH = "high"


class ImageProblem(StrEnum):
    PIXELS = "pixels"  # more pixels than ATTACHMENT_MAX_PIXELS
    BROKEN = "broken"  # not an image Pillow can decode


class ImageRefused(Exception):
    """The bytes are not an image this platform takes; `reason` says which check failed."""

    def __init__(self, reason: ImageProblem, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class CleanImage:
    """An image re-encoded upright and without metadata."""

    data: bytes
    content_type: str  # "image/png" or "image/jpeg"
    width: int
    height: int


def max_pixels() -> int:
    """The most pixels an image may have (setting ATTACHMENT_MAX_PIXELS)."""
    try:
        return int(setting("ATTACHMENT_MAX_PIXELS"))
    except KeyError:  # a tree where core.conf does not declare it yet
        return DEFAULT_MAX_PIXELS


def open_bounded(data: bytes, content_type: str | None = None) -> Image.Image:
    """The image in `data`, opened (header read, pixels not decoded yet); ImageRefused when it is not one, or when
    its header declares more than `max_pixels()` pixels."""
    formats = [PILLOW_FORMATS[content_type]] if content_type in PILLOW_FORMATS else list(PILLOW_FORMATS.values())
    limit = max_pixels()
    try:
        image = Image.open(io.BytesIO(data), formats=formats)
    except Image.DecompressionBombError as exc:  # Pillow's own bound (2 x MAX_IMAGE_PIXELS), also from the header
        found = re.search(r"\((\d+) pixels\)", str(exc))
        raise _too_many_pixels(int(found.group(1)) if found else None, limit) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise broken_image(exc) from exc
    width, height = image.size
    if width * height > limit:
        raise _too_many_pixels(width * height, limit)
    if width <= 0 or height <= 0:
        raise broken_image(ValueError("no pixels"))
    return image


def clean_image(data: bytes, content_type: str | None = None) -> CleanImage:
    """Decode `data` (bounded by `open_bounded`), apply its EXIF orientation and re-encode it without metadata:
    PNG for images with transparency and drawn ones (PNG, GIF, BMP), JPEG (quality 90) for photos."""
    image = open_bounded(data, content_type)
    source_format = image.format or ""
    try:
        image.load()
        upright = ImageOps.exif_transpose(image) or image
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise broken_image(exc) from exc
    icc = upright.info.get("icc_profile")
    lossless = source_format in _LOSSLESS_SOURCES or _has_alpha(upright)
    pixels = _for_png(upright) if lossless else upright.convert("RGB")
    pixels.info = {}
    buffer = io.BytesIO()
    options = {"icc_profile": icc} if icc else {}
    if lossless:
        pixels.save(buffer, "PNG", optimize=False, **options)
    else:
        pixels.save(buffer, "JPEG", quality=JPEG_QUALITY, **options)
    return CleanImage(buffer.getvalue(), "image/png" if lossless else "image/jpeg", pixels.width, pixels.height)


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _for_png(image: Image.Image) -> Image.Image:
    """The image in a mode PNG stores as it is (palette, grey, RGB with or without alpha)."""
    if image.mode in ("1", "L", "LA", "P", "RGB", "RGBA"):
        return image.copy()
    return image.convert("RGBA" if _has_alpha(image) else "RGB")


def model_size(width: int, height: int, detail: str = Detail.AUTO) -> tuple[int, int]:
    """The size a vision model gets an image at (llm.tokens.image_model_size, the same rule its tokens are counted
    by)."""
    return image_model_size(width, height, str(detail))


def image_for_model(data: bytes, detail: str = Detail.AUTO) -> tuple[bytes, int, int]:
    """The image in `data` (a stored, cleaned image) as a vision model gets it: scaled to `model_size`, JPEG
    (PNG when it has transparency). Returns (bytes, width, height); the bytes as given when no scaling is needed."""
    image = open_bounded(data)
    target = model_size(image.width, image.height, detail)
    if target == image.size and image.format in ("JPEG", "PNG"):
        return data, image.width, image.height
    try:
        image.load()
        resized = image.resize(target, Image.Resampling.LANCZOS) if target != image.size else image
    except (OSError, ValueError, SyntaxError) as exc:
        raise broken_image(exc) from exc
    buffer = io.BytesIO()
    if _has_alpha(resized):
        _for_png(resized).save(buffer, "PNG")
    else:
        resized.convert("RGB").save(buffer, "JPEG", quality=85)
    return buffer.getvalue(), resized.width, resized.height


def _too_many_pixels(pixels: int | None, limit: int) -> ImageRefused:
    if pixels is None:
        what = _("The image is far too large to open (a decompression bomb?).")
    else:
        what = _("The image has %(count)s pixels.") % {"count": f"{pixels:,}"}
    return ImageRefused(
        ImageProblem.PIXELS,
        _("%(what)s This platform takes images of at most %(limit)s pixels: scale it down and send it again.")
        % {"what": what, "limit": f"{limit:,}"},
    )


def broken_image(exc: BaseException) -> ImageRefused:
    """The refusal of bytes that do not decode as an image, with the decoder's reason."""
    return ImageRefused(
        ImageProblem.BROKEN,
        _("The image is damaged and cannot be read (%(reason)s). Save it again as PNG or JPEG and send it.")
        % {"reason": exc},
    )
