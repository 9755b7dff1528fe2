"""An MCP server's answers read within a byte bound of the platform's own (an httpx2 transport around the real one).

The `mcp` client reads a JSON answer whole, however long, and fails an SSE event over 1 MiB ("Server-sent event
exceeded the 1048576 byte limit"), so a long tool result was either held in memory whole or failed. Here each answer
(a JSON body, or one event of an SSE stream) is read up to a bound: within it, it passes unchanged; over it, nothing
more of it is kept (a JSON body is not read further) and what was read becomes a valid answer marked as cut
(`cut_at(result)`): a tool's result keeps its text so far, a tool list the tools it had in full. Any other answer over
the bound becomes a JSON-RPC error, and a notification over it is dropped.

A Budget is per answer (a tool call's session: MCP_RESULT_MAX_BYTES each) or shared by every answer of a session
(a tool list's: MCP_LIST_MAX_BYTES in all, its pages together).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pydantic_core
from django.utils.translation import gettext as _
from mcp_types import INTERNAL_ERROR

# The key of a cut answer's result `_meta`: the bound, in bytes, it was cut at.
CUT_KEY = "agentplat/cut-at-bytes"


class Budget:
    """Bytes a session may read: `limit` for each answer, or (shared) `limit` for all of them together."""

    def __init__(self, limit: int, *, shared: bool = False) -> None:
        self.limit = max(0, limit)
        self.shared = shared
        self.spent = 0

    def allowance(self) -> int:
        """Bytes the next answer (or SSE event) may have."""
        return max(0, self.limit - self.spent) if self.shared else self.limit

    def spend(self, size: int) -> None:
        self.spent += size


def cut_at(result: Any) -> int | None:
    """The bound a result (an `mcp_types` Result) was cut at, or None: it came whole."""
    meta = getattr(result, "meta", None) or {}
    value = meta.get(CUT_KEY) if isinstance(meta, dict) else None
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class _Request:
    """The JSON-RPC request an HTTP request carried (its answer is made from a cut body), if any."""

    method: str | None = None
    id: Any = None

    @classmethod
    def of(cls, request: httpx2.Request) -> _Request:
        try:
            message = json.loads(request.content or b"null")
        except (ValueError, httpx2.RequestNotRead):
            return cls()
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            return cls()  # a notification, a response of ours, a GET: nothing answers it with a result
        return cls(method=message["method"], id=message["id"])


def _cut_call_result(result: dict[str, Any]) -> dict[str, Any]:
    """A tools/call result from a cut one: its whole or partial text blocks (else its partial structured content).
    The block cut short may not have its type yet (servers write `text` first)."""
    blocks = result.get("content") if isinstance(result.get("content"), list) else []
    texts = [
        {"type": "text", "text": block["text"]}
        for block in blocks
        if isinstance(block, dict) and block.get("type", "text") == "text" and isinstance(block.get("text"), str)
    ]
    cut: dict[str, Any] = {"content": texts, "isError": result.get("isError") is True}
    if not texts and isinstance(result.get("structuredContent"), dict):
        cut["structuredContent"] = result["structuredContent"]
    return cut


def _cut_list_result(result: dict[str, Any]) -> dict[str, Any]:
    """A tools/list result from a cut one: the tools read in full (the last one read may be partial: left out)."""
    tools = result.get("tools") if isinstance(result.get("tools"), list) else []
    whole = [
        tool
        for tool in tools[:-1]
        if isinstance(tool, dict) and isinstance(tool.get("name"), str) and isinstance(tool.get("inputSchema"), dict)
    ]
    return {"tools": whole}


_CUTTERS = {"tools/call": _cut_call_result, "tools/list": _cut_list_result}


def repaired(prefix: bytes, request: _Request, limit: int) -> bytes | None:
    """The answer to `request` made of the first bytes of a longer one (None: drop it, a notification's)."""
    try:
        partial = pydantic_core.from_json(prefix, allow_partial="trailing-strings")
    except ValueError:
        partial = None
    if (isinstance(partial, dict) and "method" in partial) or request.id is None:
        return None
    result = partial.get("result") if isinstance(partial, dict) else None
    cutter = _CUTTERS.get(request.method or "")
    if cutter is not None and isinstance(result, dict):
        message = {"jsonrpc": "2.0", "id": request.id, "result": {**cutter(result), "_meta": {CUT_KEY: limit}}}
    else:
        words = _("The MCP server's answer was longer than %(bytes)s bytes; the platform reads no more.")
        error = {"code": INTERNAL_ERROR, "message": words % {"bytes": limit}}
        message = {"jsonrpc": "2.0", "id": request.id, "error": error}
    return json.dumps(message, ensure_ascii=False).encode()


class _WholeBody:
    """A JSON body: kept up to the allowance, then given whole, or cut and repaired (the rest is not read)."""

    def __init__(self, request: _Request, budget: Budget) -> None:
        self.request, self.budget = request, budget
        self.allowance = budget.allowance()
        self.body = bytearray()
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        room = self.allowance - len(self.body)
        self.body += chunk[:room]
        self.done = len(chunk) > room
        return b""

    def end(self) -> bytes:
        self.budget.spend(len(self.body))
        if not self.done:
            return bytes(self.body)
        return repaired(bytes(self.body), self.request, self.budget.limit) or b""


def _event_data(lines: bytes) -> bytes:
    """The data of an SSE event's lines (its `data:` fields joined by newlines)."""
    data = []
    for line in lines.split(b"\n"):
        name, _colon, value = line.rstrip(b"\r").partition(b":")
        if name == b"data":
            data.append(value.removeprefix(b" "))
    return b"\n".join(data)


class _Events:
    """An SSE stream: each event held up to the allowance, then passed on whole; an event over it is cut, repaired
    and ends the stream (an answer), or is skipped to its end (a notification). Lines end with LF or CRLF."""

    def __init__(self, request: _Request, budget: Budget) -> None:
        self.request, self.budget = request, budget
        self.event = bytearray()  # the current event's lines, as received
        self.line = bytearray()  # the current line, not ended yet
        self.skipping = False  # the current event was over the bound and dropped: skip to its end
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        out = bytearray()
        start = len(self.line)  # a newline can only be in the new bytes (a slow drip must not rescan a long line)
        self.line += chunk
        while not self.done and (end := self.line.find(b"\n", start)) >= 0:
            line = bytes(self.line[: end + 1])
            del self.line[: end + 1]
            start = 0
            out += self._take(line)
        if not self.done and len(self.event) + len(self.line) > self.budget.allowance():
            out += self._over(bytes(self.line))
            self.line.clear()
        return bytes(out)

    def _take(self, line: bytes) -> bytes:
        if line.strip(b"\r\n"):
            if self.skipping:
                return b""
            if len(self.event) + len(line) > self.budget.allowance():
                return self._over(line)
            self.event += line
            return b""
        event = bytes(self.event) + line  # a blank line: the event ends
        self.event.clear()
        if self.skipping:
            self.skipping = False
            return b""
        self.budget.spend(len(event))
        return event

    def _over(self, line: bytes) -> bytes:
        if self.skipping:
            return b""
        kept = bytes(self.event) + line[: max(0, self.budget.allowance() - len(self.event))]
        self.event.clear()
        self.budget.spend(len(kept))
        answer = repaired(_event_data(kept), self.request, self.budget.limit)
        if answer is None:
            self.skipping = True
            return b""
        self.done = True
        return b"data: " + answer + b"\n\n"

    def end(self) -> bytes:
        return b""


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, stream: httpx2.AsyncByteStream, reader: _WholeBody | _Events) -> None:
        self.stream, self.reader = stream, reader

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            if out := self.reader.feed(chunk):
                yield out
            if self.reader.done:
                break  # nothing more of it is read
        if tail := self.reader.end():
            yield tail

    async def aclose(self) -> None:
        await self.stream.aclose()


def _refusal(request: _Request, encoding: str) -> httpx2.Response:
    """The answer to `request` when its body came compressed: a JSON-RPC error."""
    words = _("The MCP server compressed its answer (%(encoding)s) though asked not to; the platform does not read it.")
    error = {"code": INTERNAL_ERROR, "message": words % {"encoding": encoding[:40]}}
    return httpx2.Response(200, json={"jsonrpc": "2.0", "id": request.id, "error": error})


class BoundedTransport(httpx2.AsyncBaseTransport):
    """`transport`, with every answer's body read within `budget` (see the module's docstring)."""

    def __init__(self, transport: httpx2.AsyncBaseTransport, budget: Budget) -> None:
        self.transport, self.budget = transport, budget

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.transport.handle_async_request(request)
        asked = _Request.of(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            # Bounded compressed, a body could still unpack to any size: the client asks for none (identity).
            await response.aclose()
            return _refusal(asked, encoding)
        kind = response.headers.get("content-type", "").lower()
        reader_class = _Events if kind.startswith("text/event-stream") else _WholeBody
        headers = [(name, value) for name, value in response.headers.raw if name.lower() != b"content-length"]
        stream = _Bounded(response.stream, reader_class(asked, self.budget))
        return httpx2.Response(response.status_code, headers=headers, stream=stream, extensions=response.extensions)

    async def aclose(self) -> None:
        await self.transport.aclose()
