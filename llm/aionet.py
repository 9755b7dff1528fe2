"""The model calls' network layer: httpcore's `network_backend` on asyncio's own transports instead of anyio.

Why: httpcore reaches the network through anyio by default, and anyio pays at every read of a streamed reply: a
cancel scope for the read timeout (which asks asyncio for the current task several times) and a paused transport
resumed (an epoll registration) per chunk. With replies streamed a token at a time that was a third of a busy
Daphne process's CPU (200 conversations streaming at once, docs/operations.md). Here a read returns what the
protocol has already buffered, and otherwise waits on one future with one timer. HTTP itself (h11), the pool, TLS
verification, httpx and the openai SDK's errors are unchanged: this is the seam httpcore documents for it
(`AsyncConnectionPool(network_backend=...)`), and failures raise httpcore's own errors, as its anyio backend does.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

# Reading from the socket pauses above this many buffered bytes (a reader slower than the server), resumes below
# the low mark.
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024


class Buffering(asyncio.Protocol):
    """Buffers what arrives and wakes the stream's one reader (a connection is read from one task at a time: httpcore's
    or llm.http1's) or its writer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.eof = False
        self.error: BaseException | None = None
        self.reader: asyncio.Future[None] | None = None
        self.writer: asyncio.Future[None] | None = None
        self.reading_paused = False
        self.writing_paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] (a stream transport: create_connection's)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        _wake(self.reader)

    def eof_received(self) -> bool:
        self.eof = True
        _wake(self.reader)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        _wake(self.reader)
        _wake(self.writer)

    def consumed(self) -> None:
        """The reader took bytes out of `buffer`: reading resumes once it is below the low mark."""
        if self.reading_paused and len(self.buffer) < LOW_WATER and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        _wake(self.writer)


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _expire(waiter: asyncio.Future[None], error: type[Exception], message: str) -> None:
    if not waiter.done():
        waiter.set_exception(error(message))


async def await_wake(
    protocol: Buffering, attribute: str, timeout: float | None, error: type[Exception], message: str
) -> None:
    """Wait until the protocol wakes `attribute`'s future, or raise `error(message)` after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    setattr(protocol, attribute, waiter)
    timer = loop.call_later(timeout, _expire, waiter, error, message) if timeout is not None else None
    try:
        await waiter
    finally:
        setattr(protocol, attribute, None)
        if timer is not None:
            timer.cancel()


class AsyncioStream(httpcore2.AsyncNetworkStream):
    """One connection: httpcore's reads and writes on an asyncio transport."""

    def __init__(self, transport: asyncio.Transport, protocol: Buffering) -> None:
        self.transport, self.protocol = transport, protocol

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self.protocol
        if not protocol.buffer and not protocol.eof:
            await await_wake(protocol, "reader", timeout, httpcore2.ReadTimeout, "timed out reading from the server")
        if protocol.buffer:
            data = bytes(protocol.buffer[:max_bytes])
            del protocol.buffer[:max_bytes]
            protocol.consumed()
            return data
        if protocol.error is not None:
            raise httpcore2.ReadError(str(protocol.error) or type(protocol.error).__name__) from protocol.error
        return b""  # the server closed the connection: httpcore reads that as a disconnect

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        protocol = self.protocol
        if protocol.error is not None or self.transport.is_closing():
            raise httpcore2.WriteError("the connection is closed")
        self.transport.write(buffer)
        if protocol.writing_paused:
            await await_wake(protocol, "writer", timeout, httpcore2.WriteTimeout, "timed out writing to the server")
            if protocol.error is not None:
                raise httpcore2.WriteError(str(protocol.error)) from protocol.error

    async def aclose(self) -> None:
        self.transport.close()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            secured = await asyncio.wait_for(
                loop.start_tls(self.transport, self.protocol, ssl_context, server_hostname=server_hostname), timeout
            )
        except TimeoutError:
            self.transport.close()
            raise httpcore2.ConnectTimeout("timed out in the TLS handshake") from None
        except (OSError, ssl.SSLError, ConnectionError) as exc:
            self.transport.close()
            raise httpcore2.ConnectError(str(exc)) from exc
        if secured is None:  # the connection closed during the handshake
            raise httpcore2.ConnectError("the server closed the connection during the TLS handshake")
        self.protocol.transport = secured
        return AsyncioStream(secured, self.protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle kept-alive connection with something to read was closed by the server
            return self.protocol.eof or bool(self.protocol.buffer)
        name = {"ssl_object": "ssl_object", "client_addr": "sockname", "server_addr": "peername", "socket": "socket"}
        return self.transport.get_extra_info(name[info]) if info in name else None


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's connections opened with asyncio's `create_connection` (TCP_NODELAY is asyncio's default)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[tuple[Any, ...]] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        opening = loop.create_connection(Buffering, host, port, local_addr=local, happy_eyeballs_delay=0.25)
        return await opened(opening, timeout, socket_options)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[tuple[Any, ...]] | None = None
    ) -> httpcore2.AsyncNetworkStream:
        opening = asyncio.get_running_loop().create_unix_connection(Buffering, path)
        return await opened(opening, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def opened(opening: Any, timeout: float | None, options: Iterable[tuple[Any, ...]] | None) -> AsyncioStream:
    """The connection `opening` (a `create_connection` call on `Buffering`) makes, within `timeout` seconds; failures
    are httpcore's connect errors."""
    try:
        transport, protocol = await asyncio.wait_for(opening, timeout)
    except TimeoutError:
        raise httpcore2.ConnectTimeout("timed out connecting to the server") from None
    except OSError as exc:
        raise httpcore2.ConnectError(str(exc) or type(exc).__name__) from exc
    raw: socket.socket | None = transport.get_extra_info("socket")
    for option in options or ():
        if raw is not None:
            raw.setsockopt(*option)
    return AsyncioStream(transport, protocol)


class AsyncioTransport(httpx2.AsyncHTTPTransport):
    """httpx's transport for the openai SDK's client, its pool connecting through `AsyncioBackend`."""

    def __init__(self, *, limits: httpx2.Limits) -> None:
        # The TLS context (loading the CA bundle is the dear part) made once, for httpx's pool and its replacement.
        ssl_context = httpx2.create_ssl_context()
        super().__init__(verify=ssl_context, limits=limits)
        # httpx's transport takes no network backend; its pool (httpcore's, public) does: the same pool, rebuilt.
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=AsyncioBackend(),
        )
