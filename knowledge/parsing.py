"""Document parsers (K1): bytes of an uploaded file in, text sections out.

One parser per file type behind a small interface and a registry, as the style guide asks: `parser_for(file_type)`
finds it, `file_type_for(name)` maps a file name's extension to a type. A section is a piece of the document that
chunking never merges with another one (a PDF page, a Markdown heading's text, a CSV row, a JSON record); records
(CSV rows, JSON records) stay one chunk each unless they are longer than the chunk size.

Every failure is a `ParseError` whose message is shown on the document's row, so it says what is wrong with the
file and what to do, never a traceback.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import zipfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from django.utils.translation import gettext as _

from core.bounded import TooDeep
from core.conf import setting
from core.registry import Registry
from knowledge import images
from knowledge.ocr import read_image_text, read_pixels_text


def max_upload_bytes() -> int:
    """The largest file a knowledge base accepts (setting KNOWLEDGE_MAX_UPLOAD_BYTES, default 20 MB)."""
    return int(setting("KNOWLEDGE_MAX_UPLOAD_BYTES"))


class ParseError(Exception):
    """The file cannot be read; the message is shown on the document's row."""


class OverLimit(ParseError):
    """The document is over one of the operator's limits (pages, characters, unpacked bytes)."""


class NoText(ParseError):
    """The file was read and has no text (a PDF with no text layer and no text OCR could read)."""


@dataclass
class Section:
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # A record (a CSV row, a JSON record) is one chunk unless it is longer than the chunk size.
    record: bool = False


class Parser:
    """Turns a file's bytes into sections of text."""

    file_type: str
    extensions: tuple[str, ...]
    label: str

    def check(self, data: bytes) -> None:
        """Raise ParseError when the content is plainly not of this type (a .pdf that is not a PDF)."""

    def parse(self, data: bytes) -> list[Section]:
        """The document's sections, in order."""
        raise NotImplementedError


_parsers: Registry[Parser] = Registry("the document parsers (knowledge.parsing), by file type")


def register_parser(parser: Parser) -> Parser:
    return _parsers.register(parser.file_type, parser)


def parser_for(file_type: str) -> Parser:
    parser = _parsers.find(file_type)
    if parser is None:
        raise ParseError(
            _("Files of type “%(type)s” cannot be read. Upload one of: %(types)s.")
            % {"type": file_type, "types": supported_extensions_text()}
        )
    return parser


def supported_extensions() -> list[str]:
    return [ext for parser in _parsers for ext in parser.extensions]


def supported_extensions_text() -> str:
    return ", ".join(f".{ext}" for ext in supported_extensions())


def file_type_for(name: str) -> str:
    """The file type of a file name, from its extension; ParseError for an unsupported one."""
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    for parser in _parsers:
        if extension in parser.extensions:
            return parser.file_type
    raise ParseError(
        _("“%(name)s” is not a supported file type. Upload one of: %(types)s.")
        % {"name": name, "types": supported_extensions_text()}
    )


def parse_document(data: bytes, file_type: str) -> list[Section]:
    """Check and parse `data` as `file_type`; the sections that have text. ParseError when nothing can be read, or
    when the text is longer than KNOWLEDGE_MAX_CHARACTERS."""
    parser = parser_for(file_type)
    if not data:
        raise ParseError(_("The file is empty."))
    parser.check(data)
    sections = [s for s in parser.parse(data) if s.text.strip()]
    if not sections:
        raise NoText(_("No text was found in the file."))
    characters = sum(len(section.text) for section in sections)
    if characters > setting("KNOWLEDGE_MAX_CHARACTERS"):
        raise over_limit(_("%(count)s characters of text") % {"count": f"{characters:,}"}, "KNOWLEDGE_MAX_CHARACTERS")
    return sections


def over_limit(what: str, name: str) -> ParseError:
    """The error of a document over one of the operator's limits (`name`), saying what it had and what is allowed."""
    return OverLimit(
        _("The document has %(what)s; this platform takes at most %(limit)s (%(name)s). Split it into smaller files.")
        % {"what": what, "limit": f"{setting(name):,}", "name": name}
    )


# --- text ------------------------------------------------------------------------------------------------------


def decode_text(data: bytes) -> str:
    """Text files: UTF-8 (with or without a BOM), UTF-16 with a BOM, else GB18030 (Chinese files from Windows)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("gb18030")
    except UnicodeDecodeError:
        raise ParseError(_("The file is not UTF-8 or GB18030 text. Save it as UTF-8 and upload it again.")) from None


def _looks_binary(data: bytes) -> bool:
    head = data[:4096]
    return b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff"))


class TextParser(Parser):
    file_type = "txt"
    extensions = ("txt", "text")
    label = "Text"

    def check(self, data: bytes) -> None:
        if _looks_binary(data):
            raise ParseError(_("The file is not a text file (it contains binary data)."))

    def parse(self, data: bytes) -> list[Section]:
        return [Section(decode_text(data).replace("\r\n", "\n"))]


_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


class MarkdownParser(TextParser):
    """A section per heading; the heading path (e.g. "Setup › Panels") goes in the metadata."""

    file_type = "md"
    extensions = ("md", "markdown")
    label = "Markdown"

    def parse(self, data: bytes) -> list[Section]:
        text = decode_text(data).replace("\r\n", "\n")
        sections: list[Section] = []
        path: list[tuple[int, str]] = []
        lines: list[str] = []
        in_code = False

        def flush() -> None:
            body = "\n".join(lines).strip()
            if body:
                metadata = {"heading": " › ".join(title for _level, title in path)} if path else {}
                sections.append(Section(body, metadata))
            lines.clear()

        for line in text.split("\n"):
            if line.lstrip().startswith(("```", "~~~")):
                in_code = not in_code
            match = None if in_code else _HEADING.match(line)
            if match:
                flush()
                level = len(match.group(1))
                path = [(lvl, title) for lvl, title in path if lvl < level] + [(level, match.group(2))]
            lines.append(line)
        flush()
        return sections


# --- HTML ------------------------------------------------------------------------------------------------------

_SKIPPED_TAGS = {"script", "style", "noscript", "template", "svg", "head", "iframe", "object"}
_BLOCK_TAGS = {
    "p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header", "footer", "nav", "aside",
    "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "dd", "dt", "hr", "main", "figure", "figcaption",
}  # fmt: skip


class _HTMLText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in _SKIPPED_TAGS:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")
        elif tag in ("td", "th"):
            self.parts.append(" | ")

    def handle_startendtag(self, tag: str, attrs) -> None:
        if tag in ("br", "hr"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skip:
            self.parts.append(data)


def _html_charset(data: bytes) -> str | None:
    match = re.search(rb"""<meta[^>]+charset=["']?([A-Za-z0-9_-]+)""", data[:4096], re.IGNORECASE)
    return match.group(1).decode("ascii").lower() if match else None


class HTMLParserForKnowledge(Parser):
    """Visible text; scripts, styles and the head are dropped; the page title goes in the metadata."""

    file_type = "html"
    extensions = ("html", "htm")
    label = "HTML"

    def check(self, data: bytes) -> None:
        if _looks_binary(data):
            raise ParseError(_("The file is not an HTML page (it contains binary data)."))

    def parse(self, data: bytes) -> list[Section]:
        charset = _html_charset(data)
        text = None
        if charset and charset not in ("utf-8", "utf8"):
            try:
                text = data.decode("gb18030" if charset in ("gb2312", "gbk") else charset)
            except (LookupError, UnicodeDecodeError):
                text = None
        if text is None:
            text = decode_text(data)
        reader = _HTMLText()
        reader.feed(text)
        reader.close()
        lines = [re.sub(r"[ \t\u00a0]+", " ", line).strip(" |") for line in "".join(reader.parts).split("\n")]
        body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        title = " ".join("".join(reader.title).split())
        return [Section(body, {"title": title} if title else {})]


# --- PDF -------------------------------------------------------------------------------------------------------


# The pages of one PDF with no text layer that OCR reads (about a second a page on two cores); later ones stay empty.
MAX_OCR_PAGES = 50
# Images smaller than this on a page (bullets, logos' dots) are not worth an OCR pass.
MIN_OCR_SIDE = 24


class PDFParser(Parser):
    """A section per page (its number in the metadata), text extracted by pypdf. A page with no text layer (a
    scanned one) has its images read by OCR, up to `ocr_pages` pages (metadata "ocr": True)."""

    file_type = "pdf"
    extensions = ("pdf",)
    label = "PDF"

    def __init__(self, ocr_pages: int = MAX_OCR_PAGES) -> None:
        self.ocr_pages = ocr_pages

    def check(self, data: bytes) -> None:
        if b"%PDF-" not in data[:1024]:
            raise ParseError(_("The file is not a PDF (it lacks the PDF header). Check the file and upload it again."))

    def parse(self, data: bytes) -> list[Section]:
        # pypdf takes ~0.2 s to import: only a process that reads a PDF needs it
        from pypdf import PdfReader  # noqa: PLC0415
        from pypdf.errors import PdfReadError, PyPdfError  # noqa: PLC0415

        logging.getLogger("pypdf").setLevel(logging.ERROR)  # pypdf warns about every small repair it makes
        try:
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                raise ParseError(_("The PDF is protected by a password. Upload a copy without the password."))
            if len(reader.pages) > setting("KNOWLEDGE_MAX_PAGES"):
                raise over_limit(_("%(count)s pages") % {"count": f"{len(reader.pages):,}"}, "KNOWLEDGE_MAX_PAGES")
            sections = []
            ocr_left = self.ocr_pages
            for number, page in enumerate(reader.pages, start=1):
                text = (page.extract_text() or "").replace("\r\n", "\n")
                metadata: dict[str, Any] = {"page": number}
                if not text.strip() and ocr_left > 0:
                    text = _page_ocr_text(page)
                    ocr_left -= 1
                    metadata["ocr"] = True
                sections.append(Section(text, metadata))
        except ParseError:
            raise
        except (PdfReadError, PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
            raise ParseError(_("The PDF is damaged and cannot be read (%(reason)s).") % {"reason": exc}) from exc
        if not any(s.text.strip() for s in sections):
            if not self.ocr_pages:
                raise NoText(
                    _("The PDF has no text layer (a scanned document?). Run it through OCR and upload the result.")
                )
            raise NoText(
                _("The PDF has no text layer, and OCR found no text in its first %(count)s pages. Upload a PDF with "
                  "text, or a clearer scan.") % {"count": self.ocr_pages}
            )  # fmt: skip
        return sections


def _page_ocr_text(page: Any) -> str:
    """The text OCR reads in the images of a PDF page, in their order on the page; images over the pixel bound
    (knowledge.images.max_pixels, read from the PDF's dictionaries before decoding) are skipped."""
    limit = images.max_pixels()
    resources = page.get("/Resources") or {}
    xobjects = resources.get("/XObject") or {}
    for name in list(xobjects):
        xobject = xobjects[name].get_object()
        if (
            xobject.get("/Subtype") == "/Image"
            and int(xobject.get("/Width", 0)) * int(xobject.get("/Height", 0)) > limit
        ):
            return ""
    texts = []
    for image_file in page.images:
        image = image_file.image
        if image is None or min(image.size) < MIN_OCR_SIDE or image.width * image.height > limit:
            continue
        text = read_pixels_text(image).text
        if text.strip():
            texts.append(text)
    return "\n".join(texts)


# --- DOCX ------------------------------------------------------------------------------------------------------


class DocxParser(Parser):
    """Paragraphs and tables in document order; a section per heading (the heading path in the metadata)."""

    file_type = "docx"
    extensions = ("docx",)
    label = "Word (.docx)"

    def check(self, data: bytes) -> None:
        if not data.startswith(b"PK") or not zipfile.is_zipfile(io.BytesIO(data)):
            raise ParseError(_("The file is not a Word .docx document. Old .doc files must be saved as .docx first."))
        # A .docx is a zip: what it unpacks to is read from its directory before anything is unpacked.
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                unpacked = sum(member.file_size for member in archive.infolist())
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise ParseError(
                _("The Word document is damaged and cannot be read (%(reason)s).") % {"reason": exc}
            ) from exc
        if unpacked > setting("KNOWLEDGE_MAX_UNPACKED_BYTES"):
            raise over_limit(_("%(count)s bytes once unpacked") % {"count": f"{unpacked:,}"},
                             "KNOWLEDGE_MAX_UNPACKED_BYTES")  # fmt: skip

    def parse(self, data: bytes) -> list[Section]:
        # python-docx takes ~0.2 s to import: only a process that reads a Word file needs it
        import docx  # noqa: PLC0415 - python-docx only when a .docx is read
        from docx.table import Table  # noqa: PLC0415 - python-docx only when a .docx is read
        from docx.text.paragraph import Paragraph  # noqa: PLC0415 - python-docx only when a .docx is read

        try:
            document = docx.Document(io.BytesIO(data))
        except Exception as exc:  # python-docx raises many kinds (KeyError, BadZipFile, lxml errors)
            raise ParseError(
                _("The Word document is damaged and cannot be read (%(reason)s).") % {"reason": exc}
            ) from exc

        sections: list[Section] = []
        path: list[tuple[int, str]] = []
        lines: list[str] = []

        def flush() -> None:
            body = "\n".join(lines).strip()
            if body:
                sections.append(Section(body, {"heading": " › ".join(t for _lvl, t in path)} if path else {}))
            lines.clear()

        for block in document.iter_inner_content():
            if isinstance(block, Paragraph):
                text = block.text.strip()
                style = (block.style.name if block.style is not None else "") or ""
                level = _heading_level(style)
                if level and text:
                    flush()
                    path = [(lvl, t) for lvl, t in path if lvl < level] + [(level, text)]
                if text:
                    lines.append(text)
            elif isinstance(block, Table):
                lines.extend(_table_lines(block))
        flush()
        return sections


def _heading_level(style: str) -> int:
    if style == "Title":
        return 1
    match = re.match(r"Heading (\d)", style)
    return int(match.group(1)) if match else 0


def _table_lines(table) -> list[str]:
    lines = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if not cells or cells[-1] != text:  # merged cells repeat their text
                cells.append(text)
        if any(cells):
            lines.append(" | ".join(cells))
    return lines


# --- images ----------------------------------------------------------------------------------------------------


class ImageParser(Parser):
    """A photo or a scan of text (a menu, a notice, a receipt): one section of the text OCR reads in it, lines in
    reading order (metadata source "ocr"). Images over ATTACHMENT_MAX_PIXELS are refused before decoding."""

    file_type = "image"
    extensions = ("png", "jpg", "jpeg", "webp")
    label = "Image (OCR)"

    def check(self, data: bytes) -> None:
        try:
            images.open_bounded(data)
        except images.ImageRefused as refused:
            raise ParseError(refused.message) from None

    def parse(self, data: bytes) -> list[Section]:
        return [Section(read_image_text(data).text, {"source": "ocr"})]


# --- CSV -------------------------------------------------------------------------------------------------------


class CSVParser(Parser):
    """A record per row, written as "column: value" lines with the header's names; the row number and the row
    as a dict ("record") in the metadata."""

    file_type = "csv"
    extensions = ("csv", "tsv")
    label = "CSV"

    def check(self, data: bytes) -> None:
        if _looks_binary(data):
            raise ParseError(_("The file is not a CSV file (it contains binary data)."))

    def parse(self, data: bytes) -> list[Section]:
        text = decode_text(data)
        try:
            dialect = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
        try:
            rows = list(csv.reader(io.StringIO(text), dialect))
        except csv.Error as exc:
            raise ParseError(_("The CSV file cannot be read (%(reason)s).") % {"reason": exc}) from exc
        rows = [row for row in rows if any(cell.strip() for cell in row)]
        if not rows:
            return []
        header = [name.strip() or f"column {i + 1}" for i, name in enumerate(rows[0])]
        sections = []
        for number, row in enumerate(rows[1:], start=1):
            record: dict[str, str] = {}
            for i, value in enumerate(row):
                value = value.strip()
                if value:
                    record[header[i] if i < len(header) else f"column {i + 1}"] = value
            text = "\n".join(f"{name}: {value}" for name, value in record.items())
            metadata: dict[str, Any] = {"row": number}
            if len(text) <= MAX_RECORD_METADATA_CHARS:
                metadata["record"] = record
            sections.append(Section(text, metadata, record=True))
        return sections


# --- JSON ------------------------------------------------------------------------------------------------------


def _record_text(value: Any) -> str:
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if item is None or item == "":
                continue
            shown = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
            lines.append(f"{key}: {shown}")
        return "\n".join(lines)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


# A record's fields travel with its chunk (metadata "record") so tools can answer with them, up to this size.
MAX_RECORD_METADATA_CHARS = 8000


def _record_section(value: Any, metadata: dict[str, Any]) -> Section:
    if isinstance(value, dict) and len(json.dumps(value, ensure_ascii=False)) <= MAX_RECORD_METADATA_CHARS:
        metadata = {**metadata, "record": value}
    return Section(_record_text(value), metadata, record=True)


class JSONParser(Parser):
    """A record per chunk: the items of a list, or the values of an object of objects (seed 1's menu,
    `{"1": {"name": ..., "description": ...}}`); the index or key, and an object record's fields ("record"), go in
    the metadata. Any other object is one
    record. JSON Lines (one object per line) is read too."""

    file_type = "json"
    extensions = ("json", "jsonl")
    label = "JSON"

    def check(self, data: bytes) -> None:
        if _looks_binary(data):
            raise ParseError(_("The file is not a JSON file (it contains binary data)."))

    def parse(self, data: bytes) -> list[Section]:
        try:
            return self._sections(decode_text(data))
        except RecursionError:  # json's reader and writer recurse once per level (core.bounded)
            raise ParseError(str(TooDeep())) from None

    def _sections(self, text: str) -> list[Section]:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            value = self._json_lines(text)
            if value is None:
                raise ParseError(
                    _("The JSON is not valid: %(reason)s (line %(line)s, column %(column)s).")
                    % {"reason": exc.msg, "line": exc.lineno, "column": exc.colno}
                ) from exc
        if isinstance(value, list):
            return [_record_section(item, {"index": i}) for i, item in enumerate(value)]
        if isinstance(value, dict) and value and all(isinstance(item, dict | list) for item in value.values()):
            return [_record_section(item, {"key": key}) for key, item in value.items()]
        return [_record_section(value, {})]

    @staticmethod
    def _json_lines(text: str) -> list[Any] | None:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            return None
        try:
            return [json.loads(line) for line in lines]
        except json.JSONDecodeError:
            return None


for _parser in (TextParser(), MarkdownParser(), HTMLParserForKnowledge(), PDFParser(), DocxParser(), CSVParser(),
                JSONParser(), ImageParser()):  # fmt: skip
    register_parser(_parser)
