"""The files of an OpenAI chat/completions message: its `image_url` and `file` content parts, read into what the
engine's admission takes (docs/attachments.md, docs/api.md).

As OpenAI defines them:
- `{"type": "image_url", "image_url": {"url": "data:image/png;base64,...", "detail": "auto"}}`: the bytes inline;
  an `http(s)://` URL is fetched later by the door, through the network guard (api.attachment_fetch);
- `{"type": "file", "file": {"file_data": "data:application/pdf;base64,...", "filename": "x.pdf"}}`: the bytes
  inline (bare base64 too, as some clients send it); `{"file": {"file_id": "42"}}` names a file uploaded before
  through POST /api/v1/attachments/ (this platform's ids stand for OpenAI's file ids).

Only the last user message's files are sent to the agent: an earlier message keeps a note of each of its files in
its text ("[Image]", "[File x.pdf]"), as the agent's own conversations keep what was shared, not the bytes. Nothing
here touches the network or the database: a wrong part is an ApiError naming it (`messages[i].content[j]`)."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import unquote, urlsplit

from django.utils.translation import gettext as _

from core.conf import setting

# A data URL as OpenAI's clients write it: data:<type>[;param]*;base64,<data>.
DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?:;[\w.+-]+=[\w.+-]+)*;base64,", re.IGNORECASE)
MAX_URL_CHARS = 2048
MAX_FILENAME_CHARS = 255


class PartType(StrEnum):
    """The content part types a user message may hold here."""

    TEXT = "text"
    IMAGE_URL = "image_url"
    FILE = "file"


class PartError(Exception):
    """A content part that cannot be taken: `code`, translated `message`, `param` (the part's path)."""

    def __init__(self, status: int, message: str, *, code: str, param: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


@dataclass(frozen=True)
class FilePart:
    """One file of the last user message: its bytes (`data`), an http(s) `url` to fetch, or an uploaded attachment's
    id (`attachment_id`); `where` names the part in errors."""

    where: str
    name: str
    data: bytes | None = None
    url: str | None = None
    attachment_id: int | None = None


@dataclass
class Content:
    """A message's content: its text parts joined, and its files."""

    text: str
    files: list[FilePart] = field(default_factory=list)


def _refuse(where: str, message: str, code: str, status: int = 400) -> PartError:
    return PartError(status, message, code=code, param=where)


def _decoded(encoded: str, where: str) -> bytes:
    """Base64 text as bytes, refused above ATTACHMENT_MAX_BYTES before it is decoded (its length tells the size)."""
    limit = int(setting("ATTACHMENT_MAX_BYTES"))
    if len(encoded) // 4 * 3 > limit + 3:
        raise _refuse(where, _("The file in %(part)s is larger than %(max)s MB: send a smaller one.")
                      % {"part": where, "max": limit // (1024 * 1024)}, "file_too_large")  # fmt: skip
    try:
        return base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise _refuse(where, _("The file in %(part)s is not valid base64.") % {"part": where},
                      "invalid_base64") from None  # fmt: skip


def _data_url(url: str, where: str) -> tuple[str, bytes]:
    """A data URL's content type and bytes."""
    match = DATA_URL.match(url)
    if match is None:
        raise _refuse(where, _("The data URL in %(part)s must be data:<type>;base64,<data>.") % {"part": where},
                      "invalid_data_url")  # fmt: skip
    return (match.group("type") or "").lower(), _decoded(url[match.end() :], where)


def _extension(content_type: str) -> str:
    """A name's extension for a content type ("image/png" -> ".png"); the stored type is sniffed from the bytes."""
    subtype = content_type.partition("/")[2].split("+")[0]
    return f".{subtype}" if subtype.isalnum() and len(subtype) <= 5 else ""


def _url_name(url: str) -> str:
    """The last segment of a URL's path, or "image"."""
    segment = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    return segment[:MAX_FILENAME_CHARS] if segment.strip() else "image"


def _image(part: dict[str, Any], where: str, number: int) -> FilePart:
    spec = part.get("image_url")
    url = spec.get("url") if isinstance(spec, dict) else spec
    detail = spec.get("detail", "auto") if isinstance(spec, dict) else "auto"
    if not isinstance(url, str) or not url or detail not in ("auto", "low", "high"):
        raise _refuse(where, _("%(part)s needs image_url.url (a data: URL or an http(s) URL) and an optional detail: "
                               "auto, low or high.") % {"part": where}, "invalid_image_url")  # fmt: skip
    if url[:5].lower() == "data:":
        content_type, data = _data_url(url, where)
        return FilePart(where=where, name=f"image-{number}{_extension(content_type)}", data=data)
    scheme = urlsplit(url).scheme.lower() if len(url) <= MAX_URL_CHARS else ""
    if scheme not in ("http", "https"):
        raise _refuse(where, _("The image URL in %(part)s must be a data: URL or an http(s) URL of at most "
                               "%(max)s characters.") % {"part": where, "max": MAX_URL_CHARS},
                      "invalid_image_url")  # fmt: skip
    return FilePart(where=where, name=_url_name(url), url=url)


def _attachment_id(value: Any) -> int | None:
    """An uploaded attachment's id given as `file_id` ("42", "file-42" or 42); None if it is not one."""
    text = str(value).removeprefix("file-") if isinstance(value, str | int) and not isinstance(value, bool) else ""
    return int(text) if text.isascii() and text.isdigit() and 0 < len(text) <= 18 else None


def _file(part: dict[str, Any], where: str, number: int) -> FilePart:
    spec = part.get("file")
    if not isinstance(spec, dict):
        raise _refuse(where, _("%(part)s needs a “file” object with file_data and filename, or a file_id.")
                      % {"part": where}, "invalid_file")  # fmt: skip
    name = spec.get("filename")
    if name is not None and (not isinstance(name, str) or len(name) > MAX_FILENAME_CHARS):
        raise _refuse(where, _("file.filename in %(part)s must be a name of at most %(max)s characters.")
                      % {"part": where, "max": MAX_FILENAME_CHARS}, "invalid_file")  # fmt: skip
    if spec.get("file_data") is None and spec.get("file_id") is not None:
        attachment_id = _attachment_id(spec["file_id"])
        if attachment_id is None:
            raise _refuse(where, _("file.file_id in %(part)s must be the id of a file uploaded through "
                                   "POST /api/v1/attachments/.") % {"part": where}, "invalid_file")  # fmt: skip
        return FilePart(where=where, name=name or "", attachment_id=attachment_id)
    data = spec.get("file_data")
    if not isinstance(data, str) or not data:
        raise _refuse(where, _("%(part)s needs a “file” object with file_data and filename, or a file_id.")
                      % {"part": where}, "invalid_file")  # fmt: skip
    if data[:5].lower() == "data:":
        content_type, decoded = _data_url(data, where)
    else:
        content_type, decoded = "", _decoded(data, where)
    return FilePart(where=where, name=name or f"file-{number}{_extension(content_type)}", data=decoded)


PART_NOTES = {PartType.IMAGE_URL: "[Image]", PartType.FILE: "[File %(name)s]"}


def _note(file: FilePart, kind: str) -> str:
    """What an earlier message's file leaves in its text."""
    return PART_NOTES[PartType(kind)] % {"name": file.name or "file"}


def read_content(content: Any, n: int, *, role: str, last_user: bool) -> Content:
    """messages[n].content: a string, or OpenAI's list of parts. Only user messages may hold image_url and file
    parts; the last user message's are its files, an earlier one's become notes in its text. The number of files
    is bounded here (ATTACHMENTS_PER_MESSAGE) before any is fetched or read."""
    if isinstance(content, str) or content is None:
        return Content(content or "")
    if not isinstance(content, list):
        raise _refuse(f"messages[{n}].content", _("messages[%(n)s].content must be a string or a list of parts.")
                      % {"n": n}, "invalid_type")  # fmt: skip
    texts: list[str] = []
    files: list[FilePart] = []
    for j, part in enumerate(content):
        where = f"messages[{n}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == PartType.TEXT and isinstance(part.get("text"), str):
            texts.append(part["text"])
            continue
        if kind not in (PartType.IMAGE_URL, PartType.FILE) or role != "user":
            raise _refuse(where, _("%(part)s is not a part this endpoint reads: a user message takes text, image_url "
                                   "and file parts; other messages take text.") % {"part": where},
                          "unsupported_content")  # fmt: skip
        read = _image if kind == PartType.IMAGE_URL else _file
        file = read(part, where, len(files) + 1)
        if not last_user:
            texts.append(_note(file, kind))
            continue
        files.append(file)
        if len(files) > int(setting("ATTACHMENTS_PER_MESSAGE")):
            raise _refuse(where, _("A message may carry at most %(max)s files.")
                          % {"max": setting("ATTACHMENTS_PER_MESSAGE")}, "too_many_attachments")  # fmt: skip
    return Content("\n".join(texts), files)
