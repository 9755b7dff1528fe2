"""Request bodies bounded while they are read, in Daphne (the probe's finding: an anonymous 200 MB POST to the login
page took Daphne from 300 MB to 2.7 GB, because Daphne reads a whole body and queues it for the application before
Django sees the request, so Django's own limits come too late).

`install()` (config/asgi.py, when Daphne serves) wraps Daphne's request so that a body announced or found larger than
the limit is answered 413 at once and the connection closed, before more of it is kept. Uploads to knowledge bases
and conversations' files (and /v1 requests, which carry files inline) get REQUEST_MAX_UPLOAD_BYTES; every other
request REQUEST_MAX_BYTES."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

# /v1/chat/completions carries files inline as base64 (api.openai_compat bounds it again by the ATTACHMENT_* settings).
UPLOAD_PATHS = re.compile(
    rb"^/(knowledge/\d+/upload/|api/v1/knowledge-bases/\d+/documents/|api/v1/attachments/$|chat/attachments/$"
    rb"|embed/[^/]+/attachments/$|v1/chat/completions$)"
)


def limit_for(path: bytes) -> int:
    if UPLOAD_PATHS.match(path or b""):
        return int(settings.REQUEST_MAX_UPLOAD_BYTES)
    return int(settings.REQUEST_MAX_BYTES)


class _Discard:
    """Stands in for the request's body file once the request is refused: what still arrives is dropped."""

    closed = False

    def write(self, data: bytes) -> None:
        pass

    def read(self, *args: Any) -> bytes:
        return b""

    def seek(self, *args: Any) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def _refuse(request: Any, limit: int) -> None:
    request._body_refused = True
    request.content = _Discard()
    megabytes = f"{limit / 1_000_000:g}"
    body = (
        f"The request body is larger than {megabytes} MB; nothing was kept.\n"
        f"请求体超过 {megabytes} MB，未做任何保存。\n"
    ).encode()
    head = (
        "HTTP/1.1 413 Payload Too Large\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    transport = request.channel.transport
    transport.write(head + body)
    transport.loseConnection()


def install() -> None:
    """Wrap Daphne's WebRequest once (idempotent)."""
    from daphne.http_protocol import WebRequest  # noqa: PLC0415 - Twisted's reactor must be installed by Daphne before daphne.http_protocol loads

    if getattr(WebRequest, "_body_limit_installed", False):
        return
    got_length = WebRequest.gotLength
    handle_chunk = WebRequest.handleContentChunk
    process = WebRequest.process

    def gotLength(self: Any, length: int | None) -> None:
        got_length(self, length)
        self._body_limit = limit_for(getattr(self.channel, "_path", b""))
        self._body_received = 0
        if length is not None and length > self._body_limit:
            _refuse(self, self._body_limit)

    def handleContentChunk(self: Any, data: bytes) -> None:
        if getattr(self, "_body_refused", False):
            return
        self._body_received = getattr(self, "_body_received", 0) + len(data)
        if self._body_received > getattr(self, "_body_limit", int(settings.REQUEST_MAX_BYTES)):
            _refuse(self, self._body_limit)
            return
        handle_chunk(self, data)

    def process_request(self: Any) -> None:
        if getattr(self, "_body_refused", False):
            return  # answered already; the application never sees it
        process(self)

    WebRequest.gotLength = gotLength
    WebRequest.handleContentChunk = handleContentChunk
    WebRequest.process = process_request
    WebRequest._body_limit_installed = True
