"""How a chat request reaches a model: one transport per provider kind, chosen from a registry.

A transport opens a streamed chat completion and yields its chunks as `Chunk`s (attribute access over the decoded
JSON, fields of OpenAI's `ChatCompletionChunk`); the gateway (llm.client) does the rest (retries, assembly, usage,
records) the same way for all of them.

Why not the SDK's `ChatCompletionChunk` objects: validating each token's chunk into pydantic models cost more CPU
than everything else a streamed token does in the platform (profiled under load, docs/operations.md). The request,
its errors and its HTTP client are still the openai SDK's; only the stream's lines are decoded here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpcore2
import httpx2
import openai

from core.loopscoped import LoopScoped
from core.netguard import Network, Resolver, UnresolvedHost, check_url
from llm.aionet import AsyncioTransport
from llm.demo import demo_engine
from llm.errors import (
    HOST_UNRESOLVED,
    PRIVATE_ADDRESS,
    PROVIDER_ERROR,
    PROVIDER_TIMEOUT,
    LLMError,
    code_for_status,
)
from llm.http1 import HTTP1Pool, Origin, StreamedReply, Timeouts
from llm.script import ErrorPlan, ScriptEngine, embed

# Ollama and vLLM accept any key; the SDK insists on one, so keyless providers send this placeholder.
KEYLESS_PLACEHOLDER = "not-needed"


class Chunk:
    """A decoded JSON object read by attribute, as the SDK's models are: a missing field is None, objects inside
    are Chunks, lists of objects lists of Chunks."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        value = self._data.get(name)
        if isinstance(value, dict):
            return Chunk(value)
        if isinstance(value, list):
            return [Chunk(item) if isinstance(item, dict) else item for item in value]
        return value

    def __repr__(self) -> str:
        return f"Chunk({self._data!r})"


# How long what follows a stream's `[DONE]` is read before the connection is given up (the openai SDK's bound).
DRAIN_SECONDS = 0.1


async def sse_data(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The `data` of each server-sent event (multi-line data joined with newlines), up to `[DONE]`, read from the
    body's bytes as they arrive: lines end with LF, CRLF or CR; fields other than `data` and comments are skipped.

    Bytes, not httpx's `aiter_lines`: its text and line layers (two more async generators a chunk, a decode and a
    copy) were a third of the stream's reading in a busy Daphne (docs/operations.md), and `json.loads` reads bytes.

    What follows `[DONE]` is read to the end of the body and dropped, as the openai SDK does on HTTP/1.1: a response
    left unread closes its connection instead of returning it to the pool, and every model call then opened a new
    one (a TCP connect, and a TLS handshake on a real provider). That read is bounded and never fails the reply."""
    data: list[bytes] = []
    pending = b""
    async for chunk in body:
        lines = _lines(pending + chunk)
        pending = lines.pop()
        for line in lines:
            if line:
                if line.startswith(b"data:"):
                    data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            elif data:
                payload = data[0] if len(data) == 1 else b"\n".join(data)
                data = []
                if payload == b"[DONE]":
                    await _drained(body)
                    return
                yield payload
    if pending.rstrip(b"\r").startswith(b"data:"):  # a last line without its line end
        line = pending.rstrip(b"\r")
        data.append(line[6:] if line.startswith(b"data: ") else line[5:])
    if data and b"\n".join(data) != b"[DONE]":
        yield b"\n".join(data)


def _lines(text: bytes) -> list[bytes]:
    """`text` split at its line ends (LF, CRLF, CR); the last item is what follows the last line end (a line still
    arriving). A CR at the very end stays there: it may be the first half of a CRLF."""
    if b"\r" not in text:
        return text.split(b"\n")
    held = b"\r" if text.endswith(b"\r") else b""
    lines = text[: len(text) - len(held)].replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    lines[-1] += held
    return lines


async def _drained(body: AsyncIterator[bytes]) -> None:
    """Read the rest of a finished stream for up to DRAIN_SECONDS; a failure there only costs the connection."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _chunk in body:
                pass


@dataclass(frozen=True)
class Connection:
    """Everything needed to reach a provider, resolved from a ModelProvider (llm.selectors.connection_for)."""

    kind: str
    base_url: str
    api_key: str = field(default="", repr=False)
    timeout: float = 60.0
    max_retries: int = 2
    provider_id: int | None = None
    # The operator allowed a private or loopback base URL (llm.services.base_url_refused).
    private_allowed: bool = False


class Transport:
    """Base class of transports: open one streamed chat completion."""

    kind: ClassVar[str]

    def stream(self, connection: Connection, params: dict[str, Any]) -> AsyncIterator[Chunk]:
        """Send the request and yield its chunks; raise the SDK's errors (or LLMError) when it fails."""
        raise NotImplementedError

    async def embed(
        self, connection: Connection, model: str, inputs: list[str]
    ) -> tuple[list[list[float]], int | None]:
        """Embeddings of `inputs` and the prompt tokens the provider reports (None if it does not)."""
        raise NotImplementedError


# How long a base URL's checked address is used before its name is resolved and checked again.
PUBLIC_RECHECK_SECONDS = 60.0
# The pool of the openai SDK's client (the SDK's own limits; its client is replaced to connect through llm.aionet, and
# at the checked address when connections are pinned). httpx2 is the SDK's HTTP library.
CONNECTION_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)


class PinnedTransport(AsyncioTransport):
    """Sends each request to the address its host was checked at (`pins`: host -> (address, when checked)), with the
    Host header and the TLS server name still the host's, so a name that resolves elsewhere after the check (DNS
    rebinding) cannot move the connection. A host without a pin (a redirect to another server) is not connected to."""

    def __init__(self, pins: dict[str, tuple[str, float]], *, limits: httpx2.Limits) -> None:
        super().__init__(limits=limits)
        self.pins = pins

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        host = request.url.host
        pin = self.pins.get(host)
        if pin is None:
            raise httpx2.ConnectError(f"{host} was not checked by the private-address guard", request=request)
        request.url = request.url.copy_with(host=pin[0])  # the Host header was set from the name already
        request.extensions = {**request.extensions, "sni_hostname": host}
        return await super().handle_async_request(request)


class OpenAICompatibleTransport(Transport):
    """Any server that speaks the OpenAI chat-completions protocol, through `openai.AsyncOpenAI`."""

    kind = "openai"
    # One AsyncOpenAI per (event loop, base URL, key, timeout): building one costs more than a request, and an
    # HTTP connection pool cannot be shared between event loops.
    _clients: ClassVar[LoopScoped[dict[tuple, openai.AsyncOpenAI]]] = LoopScoped(dict)
    # The streamed chat completions' own HTTP/1.1 connections (llm.http1), one pool per event loop.
    _pools: ClassVar[LoopScoped[HTTP1Pool]] = LoopScoped(HTTP1Pool)

    def __init__(self, *, resolver: Resolver | None = None, blocked: list[Network] | None = None) -> None:
        # How base URLs' names are resolved and which networks are refused (core.netguard's unless given).
        self.resolver, self.blocked = resolver, blocked
        # Host -> (the address it was checked at, when): guarded connections go there and nowhere else.
        self.pins: dict[str, tuple[str, float]] = {}

    def client(self, connection: Connection) -> openai.AsyncOpenAI:
        per_loop = self._clients.get()
        key = (connection.base_url, connection.api_key, connection.timeout, connection.private_allowed, id(self))
        client = per_loop.get(key)
        if client is None:
            client = openai.AsyncOpenAI(
                api_key=connection.api_key or KEYLESS_PLACEHOLDER,
                base_url=connection.base_url,
                timeout=openai.Timeout(connection.timeout, connect=min(connection.timeout, 10.0)),
                max_retries=0,  # the gateway retries itself, only before the first chunk (llm.client)
                # A server the operator allowed is reached as its name says; any other at its checked address.
                http_client=openai.DefaultAsyncHttpxClient(
                    transport=AsyncioTransport(limits=CONNECTION_LIMITS)
                    if connection.private_allowed
                    else PinnedTransport(self.pins, limits=CONNECTION_LIMITS)
                ),
            )
            per_loop[key] = client
        return client

    async def check_address(self, connection: Connection) -> None:
        """Resolve the base URL's host and refuse it when it does not resolve or any address is private or loopback,
        unless the operator allowed private servers; otherwise pin the host to the checked address, where the
        client connects. Checked when the request is made as well as when the provider is saved (a name can be
        pointed elsewhere later); a checked address is used for a minute before the name is checked again."""
        if connection.private_allowed:
            return
        now = time.monotonic()
        host = _host(connection.base_url)
        pin = self.pins.get(host)
        if pin is not None and now - pin[1] < PUBLIC_RECHECK_SECONDS:
            return
        try:
            checked = await asyncio.to_thread(check_url, connection.base_url, self.blocked, self.resolver)
        except UnresolvedHost:
            raise LLMError(HOST_UNRESOLVED, detail=f"{connection.base_url}: the host does not resolve") from None
        if checked.private:
            raise LLMError(PRIVATE_ADDRESS, detail=f"{connection.base_url} is a private address")
        self.pins[host] = (checked.address, now)

    async def stream(self, connection: Connection, params: dict[str, Any]) -> AsyncIterator[Chunk]:
        await self.check_address(connection)
        client = self.client(connection)
        # The request carries the SDK's headers, key and timeouts, and an error status or a failed connection raises
        # the SDK's own error; but the body is built here once, as the JSON it is (the SDK's pass over typed
        # parameters was 40 % of a turn's CPU in a busy Daphne process, its request building a further 1.7 ms per
        # model call), and the reply is read on llm.http1's connections rather than through httpx (its and
        # httpcore's layers cost as much again as the read itself for each streamed token: docs/operations.md).
        # `params` is already the wire format; `extra_body` merges as the SDK merges it.
        body = {"stream": True, "stream_options": {"include_usage": True}}
        body.update((key, value) for key, value in params.items() if key != "extra_body")
        body.update(params.get("extra_body") or {})
        content = json.dumps(body).encode()
        address = None if connection.private_allowed else self.pins[_target(client).host][0]
        async with _streamed(client, content, self._pools.get(), address) as reply:
            async for payload in sse_data(reply.body()):
                data = json.loads(payload)
                if isinstance(data, dict) and data.get("error"):  # an error sent inside the stream, as the SDK reads it
                    error = data["error"]
                    message = error.get("message") if isinstance(error, dict) else str(error)
                    request = _request(client, content)
                    raise openai.APIError(message or "An error occurred during streaming", request, body=error)
                yield Chunk(data)

    async def embed(
        self, connection: Connection, model: str, inputs: list[str]
    ) -> tuple[list[list[float]], int | None]:
        await self.check_address(connection)
        response = await self.client(connection).embeddings.create(model=model, input=inputs)
        usage = response.usage.prompt_tokens if response.usage else None
        return [item.embedding for item in sorted(response.data, key=lambda d: d.index)], usage


def _host(base_url: str) -> str:
    """The host of a base URL as the private-address guard pins it."""
    return (httpx2.URL(base_url).host or "").lower()


@dataclass(frozen=True)
class _Target:
    """Where a client's chat completions go and the headers the SDK sends with them (its defaults and the key),
    worked out once per client (joining the URL was as dear as building the request)."""

    url: httpx2.URL
    headers: dict[str, str]
    scheme: str
    host: str
    port: int
    path: bytes


def _target(client: openai.AsyncOpenAI) -> _Target:
    target = _targets.get(client)
    if target is None:
        headers = {name: value for name, value in client.default_headers.items() if isinstance(value, str)}
        headers["Authorization"] = f"Bearer {client.api_key}"
        headers["Accept"] = "text/event-stream"
        # Compression holds a stream's tokens back in the compressor's buffer (a proxy's gzip, say); llm.http1 still
        # undoes gzip and deflate from a server that compresses anyway.
        headers["Accept-Encoding"] = "identity"
        url = client.base_url.join("chat/completions")
        port = url.port or (443 if url.scheme == "https" else 80)
        target = _targets[client] = _Target(url, headers, url.scheme, url.host.lower(), port, url.raw_path)
    return target


_targets: weakref.WeakKeyDictionary[openai.AsyncOpenAI, _Target] = weakref.WeakKeyDictionary()


def _request(client: openai.AsyncOpenAI, content: bytes) -> httpx2.Request:
    """The request as httpx would have sent it, for the SDK's errors (built only when one is raised)."""
    target = _target(client)
    return httpx2.Request("POST", target.url, headers=target.headers, content=content)


@contextlib.asynccontextmanager
async def _streamed(
    client: openai.AsyncOpenAI, content: bytes, pool: HTTP1Pool, address: str | None
) -> AsyncIterator[StreamedReply]:
    """POST `content` to `client`'s chat completions, streamed, at `address` (the host's checked address, or the host
    itself when None); the SDK's errors for what fails before the body."""
    target = _target(client)
    origin = Origin(target.scheme, target.host, target.port, address or target.host)
    timeout = client.timeout if isinstance(client.timeout, httpx2.Timeout) else httpx2.Timeout(client.timeout)
    timeouts = Timeouts(timeout.connect, timeout.read, timeout.write)
    try:
        reply = await pool.post(origin, target.path, list(target.headers.items()), content, timeouts)
    except httpcore2.TimeoutException:
        raise openai.APITimeoutError(request=_request(client, content)) from None
    except httpcore2.NetworkError as exc:
        raise openai.APIConnectionError(request=_request(client, content)) from exc
    except httpcore2.ProtocolError as exc:
        raise openai.APIConnectionError(message=str(exc), request=_request(client, content)) from exc
    try:
        if reply.status >= 300:
            raise await _status_error(client, content, reply)
        yield reply
    finally:
        await reply.aclose()


async def _status_error(client: openai.AsyncOpenAI, content: bytes, reply: StreamedReply) -> Exception:
    """The SDK's error for an error status (its body read whole), or a plain one for a redirect, which is not
    followed: the provider's base URL should name where it leads."""
    if reply.status < 400:
        where = reply.header("location") or "another address"
        return LLMError(
            PROVIDER_ERROR,
            detail=f"HTTP {reply.status}: the base URL redirects to {where}; set the provider's base URL to that",
            status=reply.status,
        )
    body = await reply.read()
    response = httpx2.Response(reply.status, headers=reply.headers, content=body, request=_request(client, content))
    return client._make_status_error_from_response(response)


class ScriptedTransport(Transport):
    """The offline demo model: the script engine answers in-process, streamed like a server would."""

    kind = "demo"

    def __init__(self, engine: ScriptEngine | None = None) -> None:
        self._engine = engine

    @property
    def engine(self) -> ScriptEngine:
        if self._engine is None:
            self._engine = demo_engine()
        return self._engine

    async def stream(self, connection: Connection, params: dict[str, Any]) -> AsyncIterator[Chunk]:

        plan = self.engine.plan({**params, "stream": True, "stream_options": {"include_usage": True}})
        if isinstance(plan, ErrorPlan):
            error = plan.body["error"]
            retry_after = plan.headers.get("retry-after")
            raise LLMError(
                code_for_status(plan.status, error.get("code") or "", error.get("message") or ""),
                detail=str(error.get("message", "")),
                status=plan.status,
                retry_after=float(retry_after) if retry_after else None,
            )
        if plan.stall >= connection.timeout:
            # A stall longer than the timeout: wait the timeout out, as a client of a silent server would.
            await asyncio.sleep(connection.timeout)
            raise LLMError(PROVIDER_TIMEOUT, detail="scripted stall")
        async for chunk in plan.stream():
            yield Chunk(chunk)

    async def embed(
        self, connection: Connection, model: str, inputs: list[str]
    ) -> tuple[list[list[float]], int | None]:

        return [embed(text) for text in inputs], None


TRANSPORTS: dict[str, Transport] = {
    OpenAICompatibleTransport.kind: OpenAICompatibleTransport(),
    ScriptedTransport.kind: ScriptedTransport(),
}


def transport_for(kind: str) -> Transport:
    """The transport registered for a provider kind."""
    try:
        return TRANSPORTS[kind]
    except KeyError:
        raise ValueError(f"No transport for provider kind {kind!r}; known: {', '.join(sorted(TRANSPORTS))}.") from None
