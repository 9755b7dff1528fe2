"""llm.http1, the model's streamed reply read without httpx: against real servers on 127.0.0.1 a chunked body arrives
whole however the network cuts it, connections are kept alive and dropped when they cannot be reused, a stalled read
times out, broken answers raise httpcore's errors, TLS checks the certificate, and a redirect reaches the user as a
clear error instead of a silent empty reply."""

from __future__ import annotations

import asyncio
import gzip
import json
import time

import httpcore2
import openai
import pytest

from llm import http1
from llm.aionet import HIGH_WATER
from llm.errors import PROVIDER_ERROR, LLMError
from llm.http1 import Framing, HTTP1Pool, Origin, Timeouts
from llm.transports import Connection, OpenAICompatibleTransport
from tests.llm.netservers import answering, certificate, request_head, tcp_server

TIMEOUTS = Timeouts(connect=2.0, read=2.0, write=2.0)
EVENTS = [f'data: {{"n": {n}}}\n\n'.encode() for n in range(5)]


def _origin(port: int, host: str = "127.0.0.1", scheme: str = "http") -> Origin:
    return Origin(scheme, host, port, "127.0.0.1")


async def _post(pool: HTTP1Pool, port: int, **overrides: object) -> tuple[http1.StreamedReply, bytes]:
    reply = await pool.post(
        overrides.get("origin") or _origin(port),  # type: ignore[arg-type]
        b"/v1/chat/completions?x=1",
        [("Authorization", "Bearer sk-test"), ("Accept", "text/event-stream")],
        b'{"stream": true}',
        overrides.get("timeouts") or TIMEOUTS,  # type: ignore[arg-type]
    )
    return reply, await reply.read()


def _chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"


async def _sse_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, heads: list | None = None) -> None:
    """Answers every request on the connection with a chunked SSE body, one event a write (the requests' heads kept
    in `heads`)."""
    while True:
        head = await request_head(reader)
        if heads is not None:
            heads.append(head)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in EVENTS:
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def test_a_streamed_body_arrives_whole_and_one_connection_serves_the_next_requests():
    heads: list[bytes] = []

    async def recorded(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _sse_answers(reader, writer, heads)

    pool = HTTP1Pool()
    async with tcp_server(recorded) as (port, seen):
        for _ in range(3):
            reply, body = await _post(pool, port)
            assert (reply.status, reply.header("content-type")) == (200, "text/event-stream")
            assert body == b"".join(EVENTS)
        assert len(seen) == 1 and pool.idle_count == 1
    lines = heads[0].decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions?x=1 HTTP/1.1"
    assert {f"Host: 127.0.0.1:{port}", "Authorization: Bearer sk-test", "Content-Length: 16"} <= set(lines)


@pytest.mark.parametrize("cut", [1, 3, 7])
async def test_a_chunked_body_cut_anywhere_by_the_network_arrives_whole(cut):
    """The body written a few bytes at a time, with a chunk extension and a trailer: every split of the size line,
    the data and their line ends is read the same."""
    wire = b"5;name=value\r\nhello\r\n" + _chunked([b" ", b"world" * 40])[:-5] + b"0\r\nX-Trailer: yes\r\n\r\n"

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for start in range(0, len(wire), cut):
            writer.write(wire[start : start + cut])
            await writer.drain()
            await asyncio.sleep(0)

    pool = HTTP1Pool()
    async with tcp_server(trickle) as (port, _seen):
        _reply, body = await _post(pool, port)
    assert body == b"hello " + b"world" * 40
    assert pool.idle_count == 1  # read to its end, trailer included: the connection is kept


async def test_a_length_body_is_kept_alive_and_a_body_ended_by_the_close_is_not():
    async def by_length(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await request_head(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
            await writer.drain()

    async def to_the_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    pool = HTTP1Pool()
    async with tcp_server(by_length) as (port, seen):
        assert [(await _post(pool, port))[1] for _ in range(2)] == [b"hello", b"hello"]
        assert len(seen) == 1
    async with tcp_server(to_the_close) as (port, seen):
        reply, body = await _post(pool, port)
        assert (body, reply._reader.framing) == (b"until the end", Framing.CLOSE)
        _reply, body = await _post(pool, port)
        assert body == b"until the end" and len(seen) == 2


async def test_a_kept_connection_the_server_closed_is_not_reused():
    async def one_reply_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.05)  # the client keeps the connection; the server then closes it

    pool = HTTP1Pool()
    async with tcp_server(one_reply_then_close) as (port, seen):
        first = (await _post(pool, port))[1]
        await asyncio.sleep(0.3)
        second = (await _post(pool, port))[1]
    assert (first, second) == (b"ok", b"ok") and len(seen) == 2


async def test_a_body_left_unread_closes_its_connection():
    pool = HTTP1Pool()
    async with tcp_server(_sse_answers) as (port, seen):
        reply = await pool.post(_origin(port), b"/", [], b"{}", TIMEOUTS)
        async for _part in reply.body():
            break  # the reader stops after the first event (a cancelled reply)
        await reply.aclose()
        assert pool.idle_count == 0
        assert (await _post(pool, port))[1] == b"".join(EVENTS)
        assert len(seen) == 2


async def test_a_stalled_read_times_out():
    async def headers_then_silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async with tcp_server(headers_then_silence) as (port, _seen):
        started = time.monotonic()
        with pytest.raises(httpcore2.ReadTimeout):
            await _post(HTTP1Pool(), port, timeouts=Timeouts(connect=2.0, read=0.3, write=2.0))
        assert 0.25 < time.monotonic() - started < 2


async def test_a_slow_steady_stream_outlasts_the_read_timeout_which_bounds_each_wait_not_the_body():
    async def steady(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in EVENTS:
            await asyncio.sleep(0.15)
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with tcp_server(steady) as (port, _seen):
        started = time.monotonic()
        _reply, body = await _post(HTTP1Pool(), port, timeouts=Timeouts(connect=2.0, read=0.3, write=2.0))
    assert body == b"".join(EVENTS) and time.monotonic() - started > 0.6


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part", httpcore2.RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", httpcore2.RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n", httpcore2.RemoteProtocolError),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n", httpcore2.RemoteProtocolError),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", httpcore2.RemoteProtocolError),
        (b"", httpcore2.RemoteProtocolError),
    ],
    ids=["cut-length", "cut-chunk", "bad-size", "chunk-too-long", "not-http", "no-answer"],
)
async def test_a_broken_answer_is_an_httpcore_error(answer, error):
    async with tcp_server(answering(answer)) as (port, _seen):
        with pytest.raises(error):
            await _post(HTTP1Pool(), port)


async def test_a_refused_connection_and_a_header_with_a_line_break_are_refused():
    async with tcp_server(_sse_answers) as (port, _seen):
        with pytest.raises(httpcore2.LocalProtocolError):
            await HTTP1Pool().post(_origin(port), b"/", [("X-Key", "a\r\nX-Injected: 1")], b"", TIMEOUTS)
    with pytest.raises(httpcore2.ConnectError):
        await _post(HTTP1Pool(), port)  # closed: nothing listens on the port any more


async def test_continue_is_skipped_and_a_gzip_body_is_undone():
    async def continued_gzip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        packed = gzip.compress(b"".join(EVENTS))
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(_chunked([packed[:10], packed[10:]]))
        await writer.drain()

    async with tcp_server(continued_gzip) as (port, _seen):
        reply, body = await _post(HTTP1Pool(), port)
    assert (reply.status, body) == (200, b"".join(EVENTS))


async def test_a_body_larger_than_the_read_buffer_arrives_whole_when_read_slowly():
    payload = bytes(range(256)) * (4 * HIGH_WATER // 256)

    big = answering(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)

    async with tcp_server(big) as (port, _seen):
        reply = await HTTP1Pool().post(_origin(port), b"/", [], b"", TIMEOUTS)
        received = bytearray()
        async for part in reply.body():
            received += part
            await asyncio.sleep(0.001)  # slower than the server: reading pauses and resumes
    assert received == payload


async def test_https_checks_the_servers_certificate_against_the_hosts_name(tmp_path):
    server_context, client_context = certificate(tmp_path)

    hello = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")

    async with tcp_server(hello, server_context) as (port, _seen):
        # Connected at 127.0.0.1 (a checked address), the certificate checked against the name `localhost`.
        reply, body = await _post(HTTP1Pool(client_context), port, origin=_origin(port, "localhost", "https"))
        assert (reply.status, body) == (200, b"hello")
        with pytest.raises(httpcore2.ConnectError):  # the system's roots: a self-signed certificate is refused
            await _post(HTTP1Pool(), port, origin=_origin(port, "localhost", "https"))
        with pytest.raises(httpcore2.ConnectError):  # trusted, but not for this name
            await _post(HTTP1Pool(client_context), port, origin=_origin(port, "models.example", "https"))


async def _transport_call(port: int) -> list[object]:
    transport = OpenAICompatibleTransport()
    connection = Connection(kind="openai", base_url=f"http://127.0.0.1:{port}/v1", private_allowed=True)
    params = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
    return [chunk async for chunk in transport.stream(connection, params)]


async def test_a_redirect_is_a_clear_error_naming_where_it_leads():
    where = b"https://models.example/v1/chat/completions"
    answer = b"HTTP/1.1 307 Temporary Redirect\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % where
    async with tcp_server(answering(answer)) as (port, _seen):
        with pytest.raises(LLMError) as error:
            await _transport_call(port)
    assert error.value.code == PROVIDER_ERROR
    assert f"redirects to {where.decode()}" in error.value.detail


async def test_an_error_status_is_the_sdks_error_with_the_servers_body():
    body = b'{"error": {"message": "slow down", "code": "rate_limit"}}'
    answer = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    async with tcp_server(answering(answer)) as (port, _seen):
        with pytest.raises(openai.RateLimitError) as error:
            await _transport_call(port)
    assert error.value.status_code == 429 and error.value.response.headers["retry-after"] == "7"
    assert "slow down" in str(error.value)


async def test_the_transport_sends_the_sdks_headers_and_asks_for_an_uncompressed_stream():
    seen: list[bytes] = []

    async def sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await request_head(reader)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        seen.extend([head, await reader.readexactly(length)])
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(_chunked([b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n', b"data: [DONE]\n\n"]))
        await writer.drain()

    async with tcp_server(sse) as (port, _seen):
        chunks = await _transport_call(port)
    assert [chunk.choices[0].delta.content for chunk in chunks] == ["hi"]
    lines = set(seen[0].decode().split("\r\n"))
    assert {f"Host: 127.0.0.1:{port}", "Accept: text/event-stream", "Accept-Encoding: identity"} <= lines
    assert {"Content-Type: application/json", "Authorization: Bearer not-needed"} <= lines
    assert any(line.startswith("User-Agent: AsyncOpenAI/Python") for line in lines)
    assert json.loads(seen[1])["stream"] is True
