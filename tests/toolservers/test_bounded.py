"""An MCP server's answers read within a byte bound (toolservers.bounded), in any chunking: an answer within the bound
passes unchanged, one over it is cut into a valid answer marked as cut, a notification over it is dropped, and a
compressed answer is refused."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx2
import pytest

from toolservers.bounded import CUT_KEY, BoundedTransport, Budget

SSE = {"content-type": "text/event-stream"}
JSON = {"content-type": "application/json"}


class _Chunks(httpx2.AsyncByteStream):
    def __init__(self, body: bytes, size: int) -> None:
        self.body, self.size, self.read = body, size, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.body), self.size):
            self.read = start + self.size
            yield self.body[start : start + self.size]


def _exchange(
    body: bytes, headers: dict, *, limit: int, method: str = "tools/call", size: int = 1, shared: bool = False
) -> tuple[bytes, int]:
    """What a client reads of `body` sent in chunks of `size` bytes as the answer to a `method` request with id 7,
    and how many bytes of it were read."""
    stream = _Chunks(body, size)

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers=headers, stream=stream)

    async def read() -> bytes:
        transport = BoundedTransport(httpx2.MockTransport(answer), Budget(limit, shared=shared))
        async with httpx2.AsyncClient(transport=transport) as client:
            request = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {}}
            response = await client.post("http://mcp.test/mcp", json=request)
            return response.content

    return asyncio.run(read()), stream.read


def _event(message: dict, *, end: bytes = b"\r\n") -> bytes:
    return b"event: message" + end + b"data: " + json.dumps(message, ensure_ascii=False).encode() + end + end


@pytest.mark.parametrize("size", [1, 7, 4096])
def test_events_within_the_bound_pass_unchanged_in_any_chunking(size):
    body = (
        b": ping\r\n\r\n"
        + _event({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
        + _event({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "fine"}]}}, end=b"\n")
    )
    assert _exchange(body, SSE, limit=200, size=size)[0] == body


@pytest.mark.parametrize("size", [1, 1000])
def test_an_event_over_the_bound_is_cut_and_the_stream_read_no_further(size):
    noisy = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "n" * 5000}}
    result = {"content": [{"text": "字" * 10_000, "type": "text"}], "structuredContent": {"result": "字" * 10_000}}
    body = _event(noisy) + _event({"jsonrpc": "2.0", "id": 7, "result": result}) + b"data: never read\n\n" * 100
    read, bytes_read = _exchange(body, SSE, limit=3000, size=size)
    assert bytes_read < len(body) - 1000
    events = [block for block in read.split(b"\n\n") if block]
    assert len(events) == 1 and events[0].startswith(b"data: ")  # the notification over the bound is dropped
    message = json.loads(events[0].removeprefix(b"data: "))
    assert message["id"] == 7 and message["result"]["_meta"] == {CUT_KEY: 3000}
    text = message["result"]["content"][0]["text"]
    assert 900 < len(text) < 1000 and set(text) == {"字"}  # 3 bytes each
    assert "structuredContent" not in message["result"]  # the text is there: not its cut copy


def test_a_tool_list_over_the_bound_keeps_the_tools_read_in_full():
    tools = [{"name": f"t{n}", "inputSchema": {"type": "object"}, "description": "d" * 50} for n in range(100)]
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"tools": tools, "nextCursor": "2"}}).encode()
    read, bytes_read = _exchange(body, JSON, limit=1000, method="tools/list", size=100, shared=True)
    message = json.loads(read)
    assert bytes_read <= 1100
    kept = message["result"]["tools"]
    assert 6 <= len(kept) <= 9 and kept == tools[: len(kept)]  # about 110 bytes each, the last one read left out
    assert message["result"]["_meta"] == {CUT_KEY: 1000} and "nextCursor" not in message["result"]


def test_any_other_answer_over_the_bound_is_an_error_and_a_compressed_one_is_refused():
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"protocolVersion": "x" * 5000}}).encode()
    message = json.loads(_exchange(body, JSON, limit=1000, method="initialize", size=512)[0])
    assert message["id"] == 7 and "longer than 1000 bytes" in message["error"]["message"]
    message = json.loads(_exchange(b"\x1f\x8b...", {**JSON, "content-encoding": "gzip"}, limit=1000)[0])
    assert message["id"] == 7 and "compressed its answer (gzip)" in message["error"]["message"]
