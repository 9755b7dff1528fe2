"""The model's streamed reply over HTTP/1.1, read by the platform itself instead of through httpx, httpcore and h11.

Why: a model streams its reply a token or two per network read, and each read went through eight nested async
iterators (httpx's response, its transport's stream, httpcore's pool and connection streams, h11's events) before it
reached the SSE parser: about as much CPU again as the event loop's own wake-up for the read, and the largest share of a
busy Daphne process serving 200 streaming chats (docs/operations.md). Here one async generator takes the body out
of the connection's buffer by its framing (chunked, a length, or to the close) as it arrives.

What it does not do: proxies (the SDK's client, given its own transport, does not use them either), redirects (a 3xx
is handed back as it is), HTTP/2. Every other request to a model (embeddings, listing models) stays on the SDK's
client. Connections are asyncio's (llm.aionet.Buffering), kept alive per event loop and per address, at most
MAX_IDLE idle, each for KEEPALIVE_SECONDS; failures raise httpcore's errors, as llm.aionet's do, which the callers map
to the openai SDK's.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import httpcore2
import httpx2

from llm.aionet import AsyncioStream, Buffering, await_wake, opened

# Idle connections kept per event loop (the SDK keeps 100: a process streaming replies to a few hundred chats at
# once then reconnected for most of their next turns), and how long one is kept unused (httpx's default).
MAX_IDLE = 256
KEEPALIVE_SECONDS = 5.0
# A response head longer than this is refused (h11's bound).
MAX_HEAD_BYTES = 64 * 1024
# A chunk-size or trailer line longer than this is refused.
MAX_LINE_BYTES = 4096
READ_TIMEOUT_MESSAGE = "timed out reading from the server"


@dataclass(frozen=True)
class Origin:
    """Where a request goes: the URL's scheme, host and port, and the address connected to (the host itself, or the
    address llm.transports checked it at; TLS still checks the certificate against the host's name)."""

    scheme: str
    host: str
    port: int
    address: str

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


@dataclass(frozen=True)
class Timeouts:
    """Seconds allowed to connect, for each read and for each write (None: no bound)."""

    connect: float | None
    read: float | None
    write: float | None


class Framing(Enum):
    """How a response body's end is known."""

    CHUNKED = "chunked"
    LENGTH = "content-length"
    CLOSE = "connection close"


class _ChunkState(Enum):
    SIZE = "size line"
    DATA = "chunk data"
    DATA_END = "CRLF after the data"
    TRAILERS = "trailer lines"


@dataclass
class BodyReader:
    """Takes a body's bytes out of a connection's buffer by its framing, as much as has arrived (`take`)."""

    framing: Framing
    remaining: int = 0  # bytes left of the body (LENGTH) or of the current chunk (CHUNKED)
    done: bool = False
    state: _ChunkState = _ChunkState.SIZE

    def take(self, buffer: bytearray) -> bytes:
        """The body bytes now in `buffer` (removed from it), b"" if none yet; sets `done` at the body's end."""
        if self.framing is Framing.CHUNKED:
            return self._take_chunked(buffer)
        size = len(buffer) if self.framing is Framing.CLOSE else min(self.remaining, len(buffer))
        data = bytes(buffer[:size])
        del buffer[:size]
        if self.framing is Framing.LENGTH:
            self.remaining -= size
            self.done = self.remaining == 0
        return data

    def _take_chunked(self, buffer: bytearray) -> bytes:
        parts: list[bytearray] = []
        position, size = 0, len(buffer)
        while position < size and not self.done:
            if self.state is _ChunkState.DATA:
                end = min(position + self.remaining, size)
                parts.append(buffer[position:end])
                self.remaining -= end - position
                position = end
                if not self.remaining:
                    self.state = _ChunkState.DATA_END
                continue
            end = buffer.find(b"\r\n", position)
            if end < 0:
                if size - position > MAX_LINE_BYTES:
                    raise httpcore2.RemoteProtocolError(f"a chunked body's {self.state.value} is too long")
                break
            self._line(buffer[position:end])
            position = end + 2
        del buffer[:position]
        return b"".join(parts)

    def _line(self, line: bytearray) -> None:
        if self.state is _ChunkState.DATA_END:
            if line:
                raise httpcore2.RemoteProtocolError("a chunk's data is longer than its size")
            self.state = _ChunkState.SIZE
        elif self.state is _ChunkState.TRAILERS:
            self.done = not line
        else:
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise httpcore2.RemoteProtocolError(f"a chunk size that is no number: {bytes(line[:40])!r}") from None
            if size < 0:
                raise httpcore2.RemoteProtocolError(f"a negative chunk size: {bytes(line[:40])!r}")
            self.remaining = size
            self.state = _ChunkState.DATA if size else _ChunkState.TRAILERS


@dataclass
class _Connection:
    origin: Origin
    stream: AsyncioStream
    idle_since: float = 0.0

    @property
    def transport(self) -> asyncio.Transport:
        return self.stream.transport

    @property
    def protocol(self) -> Buffering:
        return self.stream.protocol

    def reusable(self, now: float) -> bool:
        """Still open, with nothing unread (a server that closed a kept connection sent its EOF), and not idle for too
        long."""
        return (
            not self.transport.is_closing()
            and not self.protocol.eof
            and not self.protocol.buffer
            and now - self.idle_since < KEEPALIVE_SECONDS
        )


@dataclass
class StreamedReply:
    """A response whose head has arrived; its body is read with `body()` (or `read()`) and it is closed with `aclose()`:
    a body read to its end returns the connection to the pool, anything else closes it."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    _connection: _Connection
    _pool: HTTP1Pool
    _reader: BodyReader
    _read_timeout: float | None
    _keep_alive: bool
    _decoder: Any = None  # a zlib decompressor for a gzip or deflate body
    _closed: bool = field(default=False)
    _deadline: float = 0.0  # when the current wait for bytes times out (loop time)
    _timer: asyncio.TimerHandle | None = None

    def header(self, name: str) -> str | None:
        """The first header called `name` (any case), or None."""
        name = name.lower()
        return next((value for key, value in self.headers if key.lower() == name), None)

    async def body(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (content-encoding undone)."""
        protocol, reader = self._connection.protocol, self._reader
        while not reader.done:
            data = reader.take(protocol.buffer)
            protocol.consumed()
            if data:
                yield self._decoder.decompress(data) if self._decoder is not None else data
            elif reader.done:
                break
            elif protocol.eof:
                if reader.framing is Framing.CLOSE:
                    reader.done = True
                    break
                if protocol.error is not None:
                    raise httpcore2.ReadError(str(protocol.error) or type(protocol.error).__name__)
                raise httpcore2.RemoteProtocolError("the server closed the connection before the body's end")
            else:
                await self._readable()
        if self._decoder is not None:
            rest = self._decoder.flush()
            if rest:
                yield rest
        await self.aclose()

    async def _readable(self) -> None:
        """Wait for the connection's next bytes, at most the read timeout.

        One timer serves all of a reply's waits instead of one made and cancelled per read (a tenth of the gateway's
        CPU for a reply streamed a token a read): each wait moves the deadline, and the timer, when it fires early,
        sets itself again for the deadline."""
        protocol = self._connection.protocol
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        protocol.reader = waiter
        if self._read_timeout is not None:
            self._deadline = loop.time() + self._read_timeout
            if self._timer is None:
                self._timer = loop.call_at(self._deadline, self._expire)
        try:
            await waiter
        finally:
            protocol.reader = None

    def _expire(self) -> None:
        self._timer = None
        waiter = self._connection.protocol.reader
        if waiter is None or waiter.done():
            return  # not waiting: the next wait sets the timer again
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._expire)
        else:
            waiter.set_exception(httpcore2.ReadTimeout(READ_TIMEOUT_MESSAGE))

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([part async for part in self.body()])

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._reader.done and self._keep_alive:
            self._pool.release(self._connection)
        else:
            self._connection.transport.close()


class HTTP1Pool:
    """HTTP/1.1 connections of one event loop, kept alive between requests."""

    def __init__(self, ssl_context: object | None = None) -> None:
        self.ssl_context = ssl_context  # made on first https use when None (loading the CA bundle is dear)
        self.idle: dict[Origin, list[_Connection]] = {}
        self.idle_count = 0

    async def post(
        self, origin: Origin, target: bytes, headers: list[tuple[str, str]], content: bytes, timeouts: Timeouts
    ) -> StreamedReply:
        """Send `content` with `headers` to `target` (path and query) at `origin` and wait for the response's head."""
        head = [b"POST %s HTTP/1.1" % target, b"Host: " + origin.host_header.encode("ascii")]
        for name, value in headers:
            if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
                raise httpcore2.LocalProtocolError(f"the header {name!r} holds a line break")
            head.append(f"{name}: {value}".encode("latin-1"))
        head.append(b"Content-Length: %d" % len(content))
        request = b"\r\n".join(head) + b"\r\n\r\n" + content
        connection = self._take(origin) or await self._connect(origin, timeouts.connect)
        try:
            await connection.stream.write(request, timeouts.write)
            return await self._response(connection, timeouts.read)
        except BaseException:
            connection.transport.close()
            raise

    def release(self, connection: _Connection) -> None:
        """Keep `connection` for the next request to its origin (closed instead when MAX_IDLE are kept)."""
        if self.idle_count >= MAX_IDLE or connection.transport.is_closing() or connection.protocol.buffer:
            connection.transport.close()
            return
        connection.idle_since = time.monotonic()
        self.idle.setdefault(connection.origin, []).append(connection)
        self.idle_count += 1

    def _take(self, origin: Origin) -> _Connection | None:
        kept = self.idle.get(origin)
        now = time.monotonic()
        while kept:
            connection = kept.pop()
            self.idle_count -= 1
            if connection.reusable(now):
                return connection
            connection.transport.close()
        return None

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: dict[str, object] = {}
        if origin.scheme == "https":
            if self.ssl_context is None:  # httpx's (certifi's roots, SSL_CERT_FILE honoured), as the SDK's client
                self.ssl_context = httpx2.create_ssl_context()
            tls = {"ssl": self.ssl_context, "server_hostname": origin.host}
        opening = loop.create_connection(Buffering, origin.address, origin.port, happy_eyeballs_delay=0.25, **tls)
        return _Connection(origin, await opened(opening, timeout, None))

    async def _response(self, connection: _Connection, timeout: float | None) -> StreamedReply:
        while True:  # informational answers (100 Continue) come before the response
            status, reason, headers, version = await _head(connection.protocol, timeout)
            if status >= 200:
                break
            if status == 101:
                raise httpcore2.RemoteProtocolError("the server switched protocols")
        fields = {name.lower(): value.lower() for name, value in headers}
        reader = _body_reader(status, fields)
        connection_header = fields.get("connection", "")
        kept = "close" not in connection_header if version == "HTTP/1.1" else "keep-alive" in connection_header
        keep_alive = kept and reader.framing is not Framing.CLOSE
        encoding = fields.get("content-encoding", "identity")
        decoder = None if encoding == "identity" else _decoder(encoding)
        return StreamedReply(status, reason, headers, connection, self, reader, timeout, keep_alive, decoder)


async def _head(protocol: Buffering, timeout: float | None) -> tuple[int, str, list[tuple[str, str]], str]:
    """The next response head on the connection: status, reason, headers and HTTP version."""
    while True:
        end = protocol.buffer.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(protocol.buffer) > MAX_HEAD_BYTES:
            raise httpcore2.RemoteProtocolError("the response's head is too long")
        if protocol.eof:
            raise httpcore2.RemoteProtocolError("the server disconnected without sending a response")
        await await_wake(protocol, "reader", timeout, httpcore2.ReadTimeout, READ_TIMEOUT_MESSAGE)
    lines = bytes(protocol.buffer[:end]).decode("latin-1").split("\r\n")
    del protocol.buffer[: end + 4]
    protocol.consumed()
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or not code.isdigit() or len(code) != 3:
        raise httpcore2.RemoteProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise httpcore2.RemoteProtocolError(f"a malformed header line: {line[:80]!r}")
        headers.append((name, value.strip()))
    return int(code), reason, headers, version


def _body_reader(status: int, fields: dict[str, str]) -> BodyReader:
    if status in (204, 304):
        return BodyReader(Framing.LENGTH, remaining=0, done=True)
    if "chunked" in fields.get("transfer-encoding", ""):
        return BodyReader(Framing.CHUNKED)
    length = fields.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise httpcore2.RemoteProtocolError(f"a content-length that is not a number: {length[:40]!r}")
        return BodyReader(Framing.LENGTH, remaining=int(length), done=int(length) == 0)
    return BodyReader(Framing.CLOSE)


def _decoder(encoding: str) -> Any:
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header, found from the first bytes
    raise httpcore2.RemoteProtocolError(f"a content-encoding that was not asked for: {encoding!r}")
