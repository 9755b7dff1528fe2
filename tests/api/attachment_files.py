"""Real small files for the attachment tests of every surface (issue 37): a PDF with text, PNG images with printed
text (the OCR image set of bench/data/ocr), and the bad files the platform refuses."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

from PIL import Image

from tests.knowledge.factories import make_pdf

OCR_IMAGES = Path(__file__).resolve().parents[2] / "bench" / "data" / "ocr"
MB = 1024 * 1024


def menu_pdf() -> bytes:
    """A two-page PDF: a restaurant's menu with prices."""
    return make_pdf(["Lotus Garden menu\nKung Pao chicken 38 yuan\nMapo tofu 26 yuan", "Drinks\nJasmine tea 12 yuan"])


def menu_png() -> bytes:
    """A photographed-menu sized PNG with printed English text (bench/data/ocr/en_menu.png)."""
    return (OCR_IMAGES / "en_menu.png").read_bytes()


def small_png(color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(buffer, "PNG")
    return buffer.getvalue()


def renamed_executable() -> bytes:
    """A Windows program's first bytes (MZ header), to be sent as "photo.png"."""
    return b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff\x00\x00" + b"\x00" * 200 + b"This program cannot be run"


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def pixel_bomb_png(width: int = 30000, height: int = 30000) -> bytes:
    """A PNG whose header says 30000x30000 (900 megapixels), with a tiny body: never decoded."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 1024))
        + _png_chunk(b"IEND", b"")
    )


def zip_bomb_docx() -> bytes:
    """A .docx whose document.xml unpacks to 300 MB of zeros (a few hundred kilobytes packed)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w", force_zip64=True) as entry:
            block = b"\x00" * MB
            for _ in range(300):
                entry.write(block)
    return buffer.getvalue()


def truncated_pdf() -> bytes:
    return menu_pdf()[:60]


BAD_FILES = {
    "renamed executable": ("photo.png", renamed_executable),
    "zip-bomb docx": ("report.docx", zip_bomb_docx),
    "30000x30000 png": ("huge.png", pixel_bomb_png),
    "truncated pdf": ("menu.pdf", truncated_pdf),
}
