"""Why an MCP server could not be used, or why its tool failed, in the reader's language.

The `mcp` client, httpx and anyio say what went wrong in their own English ("All connection attempts failed",
"Server returned an error response", "Connection closed"); an MCPServer tool that raised answers "Error executing
tool <name>: ...". Known kinds are said here as a translated sentence, with the library's words after it as
technical detail (core.errortext), never in their place.
"""

from __future__ import annotations

import re

import httpx2
from django.utils.translation import gettext as _
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, REQUEST_TIMEOUT

from core.errortext import with_detail

# What an MCPServer (the `mcp` package's server) writes before the error of a tool that raised.
_RAISED = re.compile(r"^Error executing tool [^\s:]+(?::\s*(?P<detail>.*))?$", re.DOTALL)


def _innermost(exc: BaseException) -> BaseException:
    """The first real error inside anyio's exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def mcp_error_sentence(code: int) -> str:
    """What an MCP error answer of `code` means, for the reader."""
    sentences = {
        CONNECTION_CLOSED: _("the server closed the connection."),
        INTERNAL_ERROR: _("the server answered with an error."),
        METHOD_NOT_FOUND: _("the server does not know this request: check that the URL is its MCP endpoint."),
        INVALID_REQUEST: _("the server refused the request or ended the session."),
        REQUEST_TIMEOUT: _("the server did not answer in time."),
    }
    return sentences.get(code, _("the server refused the request."))


def mcp_error_text(exc: MCPError) -> str:
    """An MCP error answer (`mcp` client's MCPError) as a sentence, with the server's or client's words after it."""
    return with_detail(mcp_error_sentence(exc.code), exc.error.message)


def _transport_sentence(exc: BaseException) -> str | None:
    if isinstance(exc, httpx2.HTTPStatusError):
        return _("the server answered HTTP %(status)s.") % {"status": exc.response.status_code}
    if isinstance(exc, httpx2.TimeoutException | TimeoutError):
        return _("the server did not answer in time.")
    if isinstance(exc, httpx2.ConnectError | ConnectionRefusedError):
        return _("the connection failed: check the URL and that the server is running.")
    if isinstance(exc, httpx2.RemoteProtocolError | httpx2.ReadError | httpx2.WriteError | ConnectionError | EOFError):
        return _("the connection broke off.")
    if isinstance(exc, httpx2.ProtocolError | httpx2.DecodingError):
        return _("the server's answer could not be read.")
    if isinstance(exc, OSError):
        return _("the connection failed: check the URL and that the server is running.")
    return None


def reason(exc: BaseException) -> str:
    """Why a server could not be used: a translated sentence for the kinds known, then the technical words."""
    exc = _innermost(exc)
    if isinstance(exc, MCPError):
        return mcp_error_text(exc)
    sentence = _transport_sentence(exc)
    if isinstance(exc, httpx2.HTTPStatusError):
        return sentence or ""
    words = str(exc)
    detail = f"{type(exc).__name__}: {words}" if words else type(exc).__name__
    if sentence is None:
        return with_detail(_("an unexpected error."), detail)
    return with_detail(sentence, words or type(exc).__name__)


def tool_error_text(text: str) -> str:
    """A tool's own error answer: an MCPServer tool that raised is said as such, its error after it; any other
    answer is the tool's own words."""
    match = _RAISED.match(text.strip())
    if match is None:
        return text
    return with_detail(_("the tool raised an error."), match.group("detail") or "")
