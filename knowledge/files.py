"""A file someone sends (issue 37): bytes and a name in, a read file out, or a refusal that says what is wrong.

The type comes from the bytes, never from the name: a renamed program is refused as a program, a PDF called
"photo.png" is read as a PDF (and renamed). The name only tells text kinds apart (Markdown, CSV, JSON, HTML, plain
text), which have no signature. What is refused, each a `FileRefused` with a translated message:

- an empty file, or one over `max_bytes`;
- a program: Windows (MZ), Linux (ELF), macOS (Mach-O) and Java class files, whatever they are named. A script
  starting with "#!" is text like any other and is taken as plain text (people ask what a script does; nothing here
  ever runs a file, and it is served back as text);
- an archive other than a Word .docx, and a .docx that declares more unpacked bytes than
  KNOWLEDGE_MAX_UNPACKED_BYTES, or over 10 MB at more than MAX_UNPACK_RATIO times its size (a zip bomb);
- an image with more than ATTACHMENT_MAX_PIXELS pixels, refused from its header before it is decoded;
- a damaged PDF, image or document, and a document with no text (a scanned PDF whose OCR finds none).

Images are kept re-encoded without metadata (knowledge.images); documents are kept as sent.
"""

from __future__ import annotations

import io
import re
import unicodedata
import zipfile
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.utils.translation import gettext as _

from core.conf import setting
from knowledge import images
from knowledge.parsing import (
    NoText,
    OverLimit,
    ParseError,
    Parser,
    PDFParser,
    Section,
    decode_text,
    parser_for,
)

# A .docx's XML packs about 5-20 to 1; a zip bomb a thousand to one and more. Checked above MAX_UNPACK_FLOOR bytes.
MAX_UNPACK_RATIO = 100
MAX_UNPACK_FLOOR = 10_000_000
# The pages of one scanned PDF sent in a conversation that OCR reads (about a second each on two cores).
ATTACHMENT_OCR_PAGES = 10
MAX_NAME_LENGTH = 200


class FileKind(StrEnum):
    IMAGE = "image"
    DOCUMENT = "document"


class RefusedCode(StrEnum):
    TOO_LARGE = "too_large"
    EMPTY = "empty"
    UNSUPPORTED_TYPE = "unsupported_type"
    EXECUTABLE = "executable"
    TOO_MANY_PIXELS = "too_many_pixels"
    BROKEN = "broken"
    ARCHIVE_BOMB = "archive_bomb"
    NO_TEXT = "no_text"


class FileRefused(Exception):
    """The file is not taken; `message` (translated) says what is wrong with it and what to do."""

    def __init__(self, code: RefusedCode, message: str, **params: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.params = params


@dataclass(frozen=True)
class ReadFile:
    """A file that was read: what is stored (`data`) and the text in it."""

    kind: FileKind
    name: str  # cleaned display name (no path), extension fixed to the sniffed type when missing or wrong
    content_type: str  # sniffed from the bytes
    data: bytes  # an image re-encoded without metadata (PNG or JPEG); a document as sent
    text: str  # all the text read ("" for an image where OCR found none)
    sections: list[Section] = field(default_factory=list)  # page numbers in metadata["page"] where known
    width: int = 0
    height: int = 0
    pages: int = 0
    from_ocr: bool = False


# --- what the bytes are ------------------------------------------------------------------------------------------

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
TEXT = "text/plain"
EXECUTABLE = "application/x-executable"
ZIP = "application/zip"
HEIC = "image/heic"
UNKNOWN = "application/octet-stream"

# Signatures at the start of the file, first match wins.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"MZ", EXECUTABLE),
    (b"\x7fELF", EXECUTABLE),
    (b"\xfe\xed\xfa\xce", EXECUTABLE),  # Mach-O, 32 and 64 bits, both byte orders
    (b"\xfe\xed\xfa\xcf", EXECUTABLE),
    (b"\xce\xfa\xed\xfe", EXECUTABLE),
    (b"\xcf\xfa\xed\xfe", EXECUTABLE),
    (b"\xca\xfe\xba\xbe", EXECUTABLE),  # Mach-O universal binary, and Java class files
    (b"PK\x03\x04", ZIP),
    (b"PK\x05\x06", ZIP),
)
# Text kinds, told apart by the name's extension.
TEXT_TYPES = {
    "md": "text/markdown",
    "markdown": "text/markdown",
    "csv": "text/csv",
    "tsv": "text/csv",
    "json": "application/json",
    "jsonl": "application/json",
    "html": "text/html",
    "htm": "text/html",
}
# The extension a file of each type gets when its name has none or another type's.
EXTENSIONS = {
    "image/png": ("png",),
    "image/jpeg": ("jpg", "jpeg", "jpe"),
    "image/gif": ("gif",),
    "image/webp": ("webp",),
    "image/bmp": ("bmp",),
    PDF: ("pdf",),
    DOCX: ("docx",),
    "text/markdown": ("md", "markdown"),
    "text/csv": ("csv", "tsv"),
    "application/json": ("json", "jsonl"),
    "text/html": ("html", "htm"),
    TEXT: ("txt",),
}
# The knowledge parser of each document type.
_PARSER_TYPES = {
    DOCX: "docx",
    "text/markdown": "md",
    "text/csv": "csv",
    "application/json": "json",
    "text/html": "html",
    TEXT: "txt",
}


def sniff(data: bytes, name: str = "") -> str:
    """The content type of `data` from its bytes; the name only tells text kinds apart. "application/octet-stream"
    for anything else, "application/x-executable" for a program."""
    for signature, content_type in _SIGNATURES:
        if data.startswith(signature):
            return DOCX if content_type == ZIP and _is_docx(data) else content_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if _is_bmp(data):
        return "image/bmp"
    if data[4:8] == b"ftyp" and data[8:12] in (b"heic", b"heix", b"mif1", b"msf1", b"heim", b"heis"):
        return HEIC
    if b"%PDF-" in data[:1024]:
        return PDF
    if _is_text(data):
        return TEXT_TYPES.get(_extension(name), TEXT)
    return UNKNOWN


def _is_docx(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "word/document.xml" in archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _is_bmp(data: bytes) -> bool:
    # "BM" alone starts many texts: the header's own size must be one a BMP has.
    return len(data) > 26 and data[:2] == b"BM" and int.from_bytes(data[14:18], "little") in (12, 40, 52, 56, 108, 124)


def _is_text(data: bytes) -> bool:
    head = data[:8192]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    if b"\x00" in head:
        return False
    try:
        decode_text(head if len(data) <= len(head) else _whole_characters(head))
    except ParseError:
        return False
    return True


def _whole_characters(head: bytes) -> bytes:
    """`head` without a UTF-8 character cut at its end."""
    for cut in range(min(3, len(head)), 0, -1):
        try:
            head[:-cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        try:
            head.decode("utf-8")
        except UnicodeDecodeError:
            return head[:-cut]
    return head


def _extension(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


def clean_name(name: str, content_type: str) -> str:
    """A display name: no folders, no control characters, at most MAX_NAME_LENGTH characters, and an extension
    that says the sniffed type (replaced when it names another known type, added when there is none)."""
    name = re.split(r"[/\\]", name)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] != "C").strip().strip(".") or "file"
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem:
        stem, extension = name, ""
    extension = extension.lower()
    wanted = EXTENSIONS.get(content_type, ("bin",))
    if extension in wanted or (content_type == TEXT and extension and extension not in _KNOWN_EXTENSIONS):
        pass  # plain text keeps its own extension (.py, .log, .sh)
    elif extension in _KNOWN_EXTENSIONS:
        extension = wanted[0]
    else:
        stem, extension = name, wanted[0]
    return f"{stem[: MAX_NAME_LENGTH - len(extension) - 1]}.{extension}"


_KNOWN_EXTENSIONS = {ext for exts in EXTENSIONS.values() for ext in exts} | {"exe", "dll", "so", "bin", "heic", "zip"}


# --- reading -----------------------------------------------------------------------------------------------------


def read_file(name: str, data: bytes, *, max_bytes: int, ocr: bool = True) -> ReadFile:
    """Check and read a file someone sent: an image (cleaned, its text read by OCR when `ocr`) or a document (its
    text and sections by the knowledge parsers; a scanned PDF's pages by OCR when `ocr`). FileRefused otherwise."""
    if not data:
        raise FileRefused(RefusedCode.EMPTY, _("The file “%(name)s” is empty. Choose another file.") % {"name": name})
    if len(data) > max_bytes:
        raise FileRefused(
            RefusedCode.TOO_LARGE,
            _("The file “%(name)s” is %(size)s; files of at most %(limit)s are taken. Send a smaller file.")
            % {"name": name, "size": human_size(len(data)), "limit": human_size(max_bytes)},
            size=len(data),
            limit=max_bytes,
        )
    content_type = sniff(data, name)
    _refuse_type(name, content_type)
    display = clean_name(name, content_type)
    if content_type in images.PILLOW_FORMATS:
        return _read_image(display, data, content_type, ocr=ocr)
    return _read_document(display, data, content_type, ocr=ocr)


def _refuse_type(name: str, content_type: str) -> None:
    if content_type == EXECUTABLE:
        raise FileRefused(
            RefusedCode.EXECUTABLE,
            _("“%(name)s” is a program, not a document or an image; programs are never taken. Send a PDF, a Word "
              "document, a text file or an image.") % {"name": name},
        )  # fmt: skip
    if content_type == HEIC:
        raise FileRefused(
            RefusedCode.UNSUPPORTED_TYPE,
            _("“%(name)s” is a HEIC photo, which cannot be read here. Save it as JPEG (or share it as “Most "
              "Compatible”) and send it again.") % {"name": name},
        )  # fmt: skip
    if content_type not in EXTENSIONS:
        raise FileRefused(
            RefusedCode.UNSUPPORTED_TYPE,
            _("“%(name)s” is not a file type that can be read. Send a PDF, a Word document (.docx), a text, "
              "Markdown, CSV, JSON or HTML file, or an image (PNG, JPEG, GIF, WebP, BMP).") % {"name": name},
        )  # fmt: skip


def _read_image(name: str, data: bytes, content_type: str, *, ocr: bool) -> ReadFile:
    try:
        image = images.clean_image(data, content_type)
    except images.ImageRefused as refused:
        code = RefusedCode.TOO_MANY_PIXELS if refused.reason == images.ImageProblem.PIXELS else RefusedCode.BROKEN
        raise FileRefused(code, refused.message) from refused
    text = ""
    if ocr:
        # OCR loads its models (~1 s) on first use: only a process that reads an image's text pays for it
        from knowledge.ocr import read_image_text  # noqa: PLC0415

        text = read_image_text(image.data).text
    sections = [Section(text, {"source": "ocr"})] if text.strip() else []
    return ReadFile(
        kind=FileKind.IMAGE,
        name=name,
        content_type=image.content_type,
        data=image.data,
        text=text,
        sections=sections,
        width=image.width,
        height=image.height,
        from_ocr=ocr,
    )


def _read_document(name: str, data: bytes, content_type: str, *, ocr: bool) -> ReadFile:
    if content_type == DOCX:
        refuse_archive_bomb(name, data)
    try:
        if content_type == PDF:
            parser: Parser = PDFParser(ocr_pages=ATTACHMENT_OCR_PAGES if ocr else 0)
        else:
            parser = parser_for(_PARSER_TYPES[content_type])
        parser.check(data)
        parsed = parser.parse(data)
        sections = [s for s in parsed if s.text.strip()]
        if not sections:
            raise NoText(_("No text was found in the file. Send a file with text, or an image of it."))
    except NoText as exc:
        raise FileRefused(RefusedCode.NO_TEXT, _("“%(name)s”: %(reason)s") % {"name": name, "reason": exc}) from exc
    except OverLimit as exc:
        raise FileRefused(RefusedCode.TOO_LARGE, str(exc)) from exc
    except ParseError as exc:
        raise FileRefused(
            RefusedCode.BROKEN, _("“%(name)s” cannot be read: %(reason)s") % {"name": name, "reason": exc}
        ) from exc
    text = "\n\n".join(section.text for section in sections)
    if len(text) > setting("KNOWLEDGE_MAX_CHARACTERS"):
        raise FileRefused(
            RefusedCode.TOO_LARGE,
            _("“%(name)s” has %(count)s characters of text; at most %(limit)s are taken. Send a shorter file.")
            % {"name": name, "count": f"{len(text):,}", "limit": f"{setting('KNOWLEDGE_MAX_CHARACTERS'):,}"},
        )
    pages = len(parsed) if content_type == PDF else 0  # a PDF's parser gives a section for every page
    return ReadFile(
        kind=FileKind.DOCUMENT,
        name=name,
        content_type=content_type,
        data=data,
        text=text,
        sections=sections,
        pages=pages,
        from_ocr=any(s.metadata.get("ocr") for s in sections),
    )


def refuse_archive_bomb(name: str, data: bytes) -> None:
    """FileRefused (ARCHIVE_BOMB) when the .docx in `data` declares more unpacked bytes than
    KNOWLEDGE_MAX_UNPACKED_BYTES, or over MAX_UNPACK_FLOOR at more than MAX_UNPACK_RATIO times its size; BROKEN
    when its directory cannot be read. Nothing is unpacked: zipfile never inflates an entry past its declared size."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(member.file_size for member in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise FileRefused(
            RefusedCode.BROKEN,
            _("The Word document “%(name)s” is damaged and cannot be read (%(reason)s).")
            % {"name": name, "reason": exc},
        ) from exc
    too_packed = unpacked > MAX_UNPACK_FLOOR and unpacked > len(data) * MAX_UNPACK_RATIO
    if unpacked > setting("KNOWLEDGE_MAX_UNPACKED_BYTES") or too_packed:
        raise FileRefused(
            RefusedCode.ARCHIVE_BOMB,
            _(
                "“%(name)s” unpacks to %(size)s from %(packed)s, more than a Word document does (a zip bomb?); it was "
                "not opened. Save the document again in Word and send it."
            )
            % {"name": name, "size": human_size(unpacked), "packed": human_size(len(data))},
            unpacked=unpacked,
        )


def human_size(size: int) -> str:
    """A byte count as people read it: "512 bytes", "1.5 MB"."""
    if size < 1024:
        return _("%(count)s bytes") % {"count": size}
    if size < 1024 * 1024:
        return _("%(count)s KB") % {"count": f"{size / 1024:.1f}".removesuffix(".0")}
    return _("%(count)s MB") % {"count": f"{size / 1024 / 1024:.1f}".removesuffix(".0")}
