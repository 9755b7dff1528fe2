"""llm.aionet, the model calls' network layer (httpcore on asyncio's transports): against real servers on 127.0.0.1
it streams, keeps connections alive and notices one the server closed, bounds a stalled read, reports refused and
cut connections as httpx's errors, speaks TLS, and holds a large body without losing a byte."""

from __future__ import annotations

import asyncio
import ssl
import time

import httpcore2
import httpx2
import pytest

from llm.aionet import HIGH_WATER, AsyncioBackend, AsyncioTransport
from tests.llm.netservers import answering, certificate, request_head, tcp_server


def _client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=AsyncioTransport(limits=httpx2.Limits(max_connections=10)))


async def _keep_alive_sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request on the connection with a chunked SSE body, one event a write."""
    while True:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for n in range(5):
            event = f"data: {n}\n\n".encode()
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def test_a_streamed_body_arrives_whole_and_the_connection_is_kept_for_the_next_requests():
    async with tcp_server(_keep_alive_sse) as (port, seen), _client() as client:
        for _ in range(3):
            async with client.stream("POST", f"http://127.0.0.1:{port}/v1/chat/completions", content=b"{}") as reply:
                body = b"".join([part async for part in reply.aiter_bytes()])
            assert reply.status_code == 200
            assert body == b"".join(f"data: {n}\n\n".encode() for n in range(5))
        assert len(seen) == 1  # one connection for the three requests


async def test_a_kept_connection_the_server_closed_is_not_reused():
    async def one_reply_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await asyncio.sleep(0.05)  # the client keeps the connection; the server then closes it

    async with tcp_server(one_reply_then_close) as (port, seen), _client() as client:
        first = await client.get(f"http://127.0.0.1:{port}/")
        await asyncio.sleep(0.3)
        second = await client.get(f"http://127.0.0.1:{port}/")
    assert (first.text, second.text) == ("ok", "ok")
    assert len(seen) == 2


async def test_a_stalled_read_times_out_as_httpx_says():
    async def headers_then_silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)

    async with tcp_server(headers_then_silence) as (port, _seen), _client() as client:
        started = time.monotonic()
        with pytest.raises(httpx2.ReadTimeout):
            async with client.stream("GET", f"http://127.0.0.1:{port}/", timeout=0.3) as reply:
                await reply.aread()
        assert 0.25 < time.monotonic() - started < 2


async def test_a_refused_connection_and_a_body_cut_short_are_httpx_errors():
    async with tcp_server(_keep_alive_sse) as (port, _seen):
        pass  # closed: nothing listens on the port any more
    async with _client() as client:
        with pytest.raises(httpx2.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()

    async with tcp_server(cut) as (port, _seen), _client() as client:
        with pytest.raises(httpx2.RemoteProtocolError):
            await client.get(f"http://127.0.0.1:{port}/")


async def test_a_body_larger_than_the_read_buffer_arrives_whole_when_read_slowly():
    payload = bytes(range(256)) * (4 * HIGH_WATER // 256)

    big = answering(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)

    async with tcp_server(big) as (port, _seen), _client() as client:
        received = bytearray()
        async with client.stream("GET", f"http://127.0.0.1:{port}/") as reply:
            async for part in reply.aiter_raw():
                received += part
                await asyncio.sleep(0.001)  # slower than the server: reading pauses and resumes
    assert received == payload


async def test_https_through_the_pool_checks_the_servers_certificate(tmp_path):
    server_context, client_context = certificate(tmp_path)

    hello = answering(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")

    async with tcp_server(hello, server_context) as (port, _seen):
        async with httpcore2.AsyncConnectionPool(ssl_context=client_context, network_backend=AsyncioBackend()) as pool:
            reply = await pool.request("GET", f"https://localhost:{port}/")
            assert (reply.status, reply.content) == (200, b"hello")
        untrusting = ssl.create_default_context()  # the system's roots: a self-signed certificate is refused
        async with httpcore2.AsyncConnectionPool(ssl_context=untrusting, network_backend=AsyncioBackend()) as pool:
            with pytest.raises(httpcore2.ConnectError):
                await pool.request("GET", f"https://localhost:{port}/")
